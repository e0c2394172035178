"""The server's edges against a real uvicorn on 127.0.0.1 (``popagent serve``'s settings,
``web.edge.uvicorn_options``) and real PostgreSQL: a huge header, slow-header clients,
too many headers, a burst past the admission bound, while ``/healthz`` answers the
truth. No test here measures a latency: the numbers are ``bench/load.py --edges``'s.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
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
    MAX_HEADERS,
    GuardedHttpTools,
    uvicorn_options,
)
from tests.web_support import free_port, uvicorn_server

#: Generous bounds: each is many times what the step takes on an idle machine.
SLOW_CLIENTS = 300
PATIENCE_S = HEAD_TIMEOUT_S * 6


@contextmanager
def served(database_url: str, resource: str, **config: object) -> Iterator[tuple[str, int]]:
    settings = ServerConfig(resource_id=resource, maintenance_interval_s=None, **config)  # type: ignore[arg-type]
    with uvicorn_server(
        settings, database_url=database_url, model_from_env=False, embedder=None, pool_size=4
    ) as base:
        port = urlsplit(base).port
        assert port is not None
        yield base, port


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


async def _health_while(base: str, running: asyncio.Future[Any]) -> list[httpx.Response]:
    """``/healthz`` asked again and again (one at a time) until ``running`` is done, for
    at most ``PATIENCE_S``."""
    answers = []
    deadline = time.monotonic() + PATIENCE_S
    async with httpx.AsyncClient(base_url=base, timeout=PATIENCE_S) as client:
        while not running.done() and time.monotonic() < deadline:
            answers.append(await client.get("/healthz"))
            await asyncio.sleep(0.05)
    return answers


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


async def test_a_100_mb_header_is_refused_at_once_and_healthz_stays_true(
    database_url: str, resource: str
) -> None:
    with served(database_url, resource) as (base, port):
        attack = asyncio.ensure_future(asyncio.to_thread(_send_huge_header, port, 100 << 20))
        health = await _health_while(base, attack)
        status, response, sent = await attack
    assert status == 431, response[:300]
    body = json.loads(response.split(b"\r\n\r\n", 1)[1])
    assert body["error"] == "headers_too_large" and f"{MAX_HEAD_BYTES:,}" in body["message"]
    assert b"connection: close" in response.lower()
    # The server refused it long before 100 MB (the socket buffers hold a few MB at most).
    assert sent < 100 << 20
    assert health, "healthz was never asked"
    assert all(r.status_code == 200 for r in health), [r.text for r in health]
    assert all(r.json() == {"status": "ok", "database": "ok"} for r in health)


async def test_too_many_or_too_large_headers_get_431_and_a_large_body_does_not(
    database_url: str, resource: str
) -> None:
    many = "".join(f"X-H{i}: v\r\n" for i in range(MAX_HEADERS + 1))
    one_large = "X-Large: " + "b" * (20 * 1024) + "\r\n"
    body = json.dumps({"content": "x" * 150_000}).encode()
    with served(database_url, resource) as (_, port):
        for extra in (many, one_large):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
                status, response = _status_and_rest(sock)
            assert status == 431, response[:300]
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


async def _slow_client(port: int, stop: asyncio.Event) -> bytes:
    """Send a head one line at a time, a line a second, until the server answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /api/facts HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await writer.drain()
        line = 0
        while not stop.is_set():
            try:
                return await asyncio.wait_for(reader.read(), timeout=1.0)
            except TimeoutError:
                line += 1
                writer.write(f"X-Slow-{line}: a\r\n".encode())
                await writer.drain()
        return b""
    except (ConnectionResetError, BrokenPipeError):
        return b"reset"
    finally:
        writer.close()


async def test_slow_header_clients_get_408_and_healthz_stays_true(
    database_url: str, resource: str
) -> None:
    with served(database_url, resource) as (base, port):
        stop = asyncio.Event()
        clients = asyncio.gather(*(_slow_client(port, stop) for _ in range(SLOW_CLIENTS)))
        began = time.monotonic()
        try:
            health = await _health_while(base, clients)
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
