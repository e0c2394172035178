"""The server's edges against a real uvicorn on 127.0.0.1 (``popagent serve``'s settings,
``web.edge.uvicorn_options``) and real PostgreSQL: a huge header, slow-header clients,
too many headers, a burst past the admission bound, while ``/healthz`` answers the
truth, in time.

In time: the target (``/healthz`` under 100 ms p99 during the attacks) is shown by
``bench/edges.py`` against ``popagent serve`` in a process of its own. Here the server
shares the test's process and a loaded machine, so each test probes the idle server
first and bounds the probe's p99 during the attack by ``_bound_ms``: 100 ms plus
``ROOM`` times the idle p99, room enough for a busy machine and far below what an
attack that holds the event loop costs (a 100 MB header held it 34 s).
"""

from __future__ import annotations

import asyncio
import gc
import json
import select
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import uvicorn

from popagent.web import ServerConfig, create_app
from popagent.web.edge import (
    HEAD_TIMEOUT_S,
    MAX_HEAD_BYTES,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    GuardedHttpTools,
    uvicorn_options,
)
from tests.web_support import free_port, uvicorn_server

#: Generous bounds: each is many times what the step takes on an idle machine.
SLOW_CLIENTS = 300
PATIENCE_S = HEAD_TIMEOUT_S * 6
#: The probe's p99 during an attack may be this many times its idle p99 (plus 100 ms).
ROOM = 10
#: Probes of the idle server, the reference.
IDLE_PROBES = 30


@contextmanager
def served(database_url: str, resource: str, **config: object) -> Iterator[tuple[str, int]]:
    settings = ServerConfig(resource_id=resource, maintenance_interval_s=None, **config)  # type: ignore[arg-type]
    with uvicorn_server(
        settings, database_url=database_url, model_from_env=False, embedder=None, pool_size=4
    ) as base:
        port = urlsplit(base).port
        assert port is not None
        # As ``popagent serve`` does before it serves (``freeze_startup_heap``): a full
        # collection of the test process's heap (pytest's, every module's) would hold
        # the server's thread as long as the attack does.
        gc.collect()
        gc.freeze()
        try:
            yield base, port
        finally:
            gc.unfreeze()


def _p99(latencies_ms: list[float]) -> float:
    return statistics.quantiles(latencies_ms, n=100, method="inclusive")[98]


async def _idle_p99(base: str) -> float:
    """The p99 (ms) of ``IDLE_PROBES`` probes of the idle server, each on a connection
    of its own (the first through the route; the rest answered at the edge)."""
    latencies = []
    for _ in range(IDLE_PROBES):
        async with httpx.AsyncClient(base_url=base, timeout=PATIENCE_S) as client:
            asked = time.perf_counter()
            answer = await client.get("/healthz")
            latencies.append((time.perf_counter() - asked) * 1000)
        assert answer.json() == {"status": "ok", "database": "ok"}
    return _p99(latencies)


def _bound_ms(idle_p99_ms: float) -> float:
    return 100 + ROOM * idle_p99_ms


def _status_and_rest(sock: socket.socket) -> tuple[int, bytes]:
    """Read until the server closes: the status and the whole response."""
    data = b""
    sock.settimeout(PATIENCE_S)
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), data


async def _health_while(
    base: str, running: asyncio.Future[Any]
) -> tuple[list[httpx.Response], list[float]]:
    """``/healthz`` asked again and again (one at a time, each on a connection of its
    own, as an orchestrator's probe does) until ``running`` is done, for at most
    ``PATIENCE_S``: the answers and their latencies (ms)."""
    answers = []
    latencies = []
    deadline = time.monotonic() + PATIENCE_S
    while not running.done() and time.monotonic() < deadline:
        async with httpx.AsyncClient(base_url=base, timeout=PATIENCE_S) as client:
            asked = time.perf_counter()
            answers.append(await client.get("/healthz"))
            latencies.append((time.perf_counter() - asked) * 1000)
        await asyncio.sleep(0.05)
    return answers, latencies


def _send_huge_header(port: int, size: int) -> tuple[int, bytes, int]:
    """Send one request whose header value is ``size`` bytes, stopping when the server
    answers; the status, the response and how many bytes were sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)
    sent = 0
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: ")
        chunk = b"a" * (1 << 20)
        while sent < size:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:  # the server answered: stop sending
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        return (*_status_and_rest(sock), sent)
    finally:
        sock.close()


def _send_huge_headers(port: int, size: int, seconds: float) -> list[tuple[int, bytes, int]]:
    """``_send_huge_header`` one after another for ``seconds``."""
    ends = time.monotonic() + seconds
    refusals = [_send_huge_header(port, size)]
    while time.monotonic() < ends:
        refusals.append(_send_huge_header(port, size))
    return refusals


async def test_a_100_mb_header_is_refused_at_once_and_healthz_stays_true(
    database_url: str, resource: str
) -> None:
    """Such requests one after another for 3 s (one alone is refused too soon to be
    probed)."""
    with served(database_url, resource) as (base, port):
        idle_p99 = await _idle_p99(base)
        attack = asyncio.ensure_future(asyncio.to_thread(_send_huge_headers, port, 100 << 20, 3.0))
        health, latencies = await _health_while(base, attack)
        refusals = await attack
    for status, response, sent in refusals:
        assert status == 431, response[:300]
        body = json.loads(response.split(b"\r\n\r\n", 1)[1])
        assert body["error"] == "headers_too_large"
        # Refused at the bound on one line of the head, before the parser saw more.
        assert f"{MAX_HEADER_BYTES:,}" in body["message"]
        assert b"connection: close" in response.lower()
        # The server refused it long before 100 MB (the socket buffers hold a few MB).
        assert sent < 100 << 20
    assert len(health) >= 5, "healthz was hardly asked"
    assert all(r.status_code == 200 for r in health), [r.text for r in health]
    assert all(r.json() == {"status": "ok", "database": "ok"} for r in health)
    assert _p99(latencies) < _bound_ms(idle_p99), (idle_p99, sorted(latencies)[-5:])


def _send_without_reading(port: int, size: int) -> tuple[int, bytes, int]:
    """Send one request with a ``size`` byte header value, reading nothing until the
    sending fails: the status, the response and how many bytes were sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S) as sock:
        sent = 0
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: ")
            while sent < size:
                sock.sendall(b"a" * (1 << 20))
                sent += 1 << 20
        except (BrokenPipeError, ConnectionResetError):
            pass
        return (*_status_and_rest(sock), sent)


async def test_a_client_that_sends_on_is_held_then_reads_the_refusal(
    database_url: str, resource: str
) -> None:
    """Past ``LINGER_BYTES`` dropped, the server reads no more: the client's sending
    blocks until the close (costing the server nothing), and the refusal waits in
    its socket to be read."""
    with served(database_url, resource) as (_, port):
        status, response, sent = await asyncio.to_thread(_send_without_reading, port, 100 << 20)
    assert status == 431, response[:300]
    # What the socket buffers hold, the head's first 16 KiB and LINGER_BYTES: a few MB.
    assert sent < 100 << 20
    assert b"headers_too_large" in response


async def test_too_many_or_too_large_headers_get_431_and_a_large_body_does_not(
    database_url: str, resource: str
) -> None:
    many = "".join(f"X-H{i}: v\r\n" for i in range(MAX_HEADERS + 1))
    one_large = "X-Large: " + "b" * (20 * 1024) + "\r\n"
    # Each line under the line's bound, together over the head's.
    long_head = "".join(f"X-L{i}: {'c' * 15_000}\r\n" for i in range(5))
    body = json.dumps({"content": "x" * 150_000}).encode()
    with served(database_url, resource) as (_, port):
        for extra, bound in (
            (many, f"over {MAX_HEADERS} headers"),
            (one_large, f"{MAX_HEADER_BYTES:,} bytes"),
            (long_head, f"{MAX_HEAD_BYTES:,} bytes"),
        ):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
                status, response = _status_and_rest(sock)
            assert status == 431, response[:300]
            assert bound in json.loads(response.split(b"\r\n\r\n", 1)[1])["message"]
        # Head and a body larger than the head's bound in one write: the head is
        # measured, not the body (which the route refuses for its own reason).
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"POST /api/facts HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            status, response = _status_and_rest(sock)
        assert status == 422, response[:300]


async def test_a_head_sent_in_pieces_is_parsed_whole(database_url: str, resource: str) -> None:
    """The edge gives the parser whole lines of the head (``_feed_lines``): a request
    whose head and body arrive a few bytes at a time, a header value in 1 KiB pieces,
    and a second request sent with the first's end, are each served as sent."""
    body = json.dumps({"content": "Likes green tea"}).encode()
    first = (
        b"POST /api/facts HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"X-Long: {'d' * 10_000}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    second = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    with (
        served(database_url, resource) as (_, port),
        socket.create_connection(("127.0.0.1", port)) as sock,
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = 0
        while sent < len(first) - 40:  # the head and most of the body, in pieces
            size = 1024 if b"dddd" in first[sent : sent + 8] else 7
            sock.sendall(first[sent : sent + size])
            sent += size
            await asyncio.sleep(0.001)
        sock.sendall(first[sent:] + second)  # the body's end and the next request
        _, response = _status_and_rest(sock)
    answers = response.split(b"HTTP/1.1 ")[1:]
    assert [a.split(b" ", 1)[0] for a in answers] == [b"201", b"200"], response[:600]
    assert json.loads(answers[0].split(b"\r\n\r\n", 1)[1])["content"] == "Likes green tea"


async def _slow_client(port: int, stop: asyncio.Event) -> bytes:
    """Send a head one line at a time, a line a second, until the server answers (and
    closes): what it answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # One read to the end, never cancelled: a cancelled ``read()`` loses what it read.
    answer = asyncio.ensure_future(reader.read())
    try:
        writer.write(b"GET /api/facts HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await writer.drain()
        line = 0
        while not stop.is_set():
            await asyncio.wait({answer}, timeout=1.0)
            if answer.done():
                return answer.result()
            line += 1
            writer.write(f"X-Slow-{line}: a\r\n".encode())
            await writer.drain()
        return b""
    except (ConnectionResetError, BrokenPipeError):
        return b"reset"
    finally:
        answer.cancel()
        writer.close()


async def test_slow_header_clients_get_408_and_healthz_stays_true(
    database_url: str, resource: str
) -> None:
    with served(database_url, resource) as (base, port):
        idle_p99 = await _idle_p99(base)
        stop = asyncio.Event()
        clients = asyncio.gather(*(_slow_client(port, stop) for _ in range(SLOW_CLIENTS)))
        began = time.monotonic()
        try:
            health, latencies = await _health_while(base, clients)
            answers = await asyncio.wait_for(clients, PATIENCE_S)
        finally:
            stop.set()
        took = time.monotonic() - began
    assert len(answers) == SLOW_CLIENTS
    statuses = [a.split(b" ", 2)[1] if a.startswith(b"HTTP/1.1") else a for a in answers]
    assert statuses == [b"408"] * SLOW_CLIENTS, set(statuses)
    assert all(b"request_timeout" in a for a in answers)
    # Each was held no longer than the head's deadline (plus the machine's delays),
    # not forever: the test would otherwise end at PATIENCE_S with other answers.
    assert took < PATIENCE_S
    assert health and all(r.json() == {"status": "ok", "database": "ok"} for r in health), [
        r.text for r in health
    ]
    assert _p99(latencies) < _bound_ms(idle_p99), (idle_p99, sorted(latencies)[-5:])


async def test_past_the_queue_bound_requests_get_database_busy_and_healthz_stays_true(
    database_url: str, resource: str
) -> None:
    """Writes blocked in PostgreSQL hold the server's 4 connections; 8 more may wait;
    the rest of a burst of 40 get 503 ``database_busy`` with ``Retry-After`` at once."""
    burst = 40
    with (
        served(database_url, resource, queue_limit=8) as (base, _),
        psycopg.connect(database_url, autocommit=True) as holder,
    ):
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE popagent_memories IN EXCLUSIVE MODE")
        async with httpx.AsyncClient(base_url=base, timeout=PATIENCE_S) as client:
            creates = [
                asyncio.ensure_future(client.post("/api/facts", json={"content": f"Fact {i}"}))
                for i in range(burst)
            ]
            refused: list[httpx.Response] = []
            deadline = time.monotonic() + PATIENCE_S
            while len(refused) < burst - 12 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                refused = [c.result() for c in creates if c.done()]
            health = await client.get("/healthz")
            holder.execute("COMMIT")
            answers = await asyncio.gather(*creates)
    assert health.status_code == 200 and health.json() == {"status": "ok", "database": "ok"}
    statuses = [a.status_code for a in answers]
    busy = [a for a in answers if a.status_code == 503]
    assert set(statuses) <= {201, 503}, statuses
    assert 1 <= statuses.count(201) <= 12 and len(busy) >= burst - 12, statuses
    for answer in busy:
        assert answer.json()["error"] == "database_busy"
        assert answer.headers["retry-after"] == "1"


async def test_healthz_is_answered_at_the_edge_under_the_host_rule(
    database_url: str, resource: str
) -> None:
    with served(database_url, resource) as (base, _):
        async with httpx.AsyncClient(base_url=base) as client:
            first = await client.get("/healthz")  # through the route: the first probe
            again = await client.get("/healthz")  # from that probe, before any app code
            elsewhere = await client.get("/healthz", headers={"host": "rebound.example"})
    assert first.json() == again.json() == {"status": "ok", "database": "ok"}
    assert "content-security-policy" in first.headers  # the app's middleware ran
    assert "content-security-policy" not in again.headers  # the protocol answered
    assert again.headers["connection"] == "close" and again.headers["cache-control"] == "no-store"
    assert elsewhere.status_code == 421


class _FewConnections(GuardedHttpTools):
    max_connections = 3


async def test_connections_past_the_bound_are_refused_before_anything_is_read(
    database_url: str, resource: str
) -> None:
    port = free_port()
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    app = create_app(config, database_url=database_url, model_from_env=False, embedder=None)
    options = {**uvicorn_options(config), "http": _FewConnections}
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_config=None, access_log=False, **options
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            await asyncio.sleep(0.02)
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            with socket.create_connection(("127.0.0.1", port)) as extra:
                status, response = _status_and_rest(extra)
            assert status == 503, response[:300]
            assert b"too_many_connections" in response and b"retry-after: 1" in response
        finally:
            for sock in held:
                sock.close()
        # Once they are gone, a new connection is served.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            deadline = time.monotonic() + PATIENCE_S
            while (answer := await client.get("/healthz")).status_code != 200:
                assert time.monotonic() < deadline, answer.text
                await asyncio.sleep(0.1)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
