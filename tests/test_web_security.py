"""The server as a hostile client and a failing database see it (issue 18).

DNS rebinding (the Host rule, and Origin compared with the allowed hosts), strict
booleans, a database outage (503 with the error body, JSON logs), error fields
that name the API's own fields, undecodable paths, slow bodies and clean startup
failures. Where the transport matters the server is a real uvicorn on 127.0.0.1,
spoken to with raw sockets or ``popagent serve`` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

import popagent
from popagent import Popagent
from popagent.access import AllowedHosts, parse_allowed_hosts, split_host
from popagent.errors import ValidationError
from popagent.models import MemoryFilter
from popagent.store.embedded import EmbeddedServer
from popagent.threads import ThreadStore
from popagent.web import ServerConfig
from tests.db_support import scratch_database
from tests.scripted_model import ScriptedModelServer
from tests.web_support import (
    api_client,
    cli_command,
    count_rows,
    free_port,
    scripted_settings,
    uvicorn_server,
    wait_healthy,
)

ERROR_KEYS = {"error", "message", "field"}


def port_of(base: str) -> int:
    port = urlsplit(base).port
    assert port is not None
    return port


@contextmanager
def serving(resource: str, database_url: str, **config: Any) -> Iterator[tuple[str, int]]:
    """A real uvicorn for ``resource`` on ``database_url``; yields its base URL and port."""
    settings = ServerConfig(resource_id=resource, maintenance_interval_s=None, **config)
    with uvicorn_server(settings, database_url=database_url, model_from_env=False) as base:
        yield base, port_of(base)


def raw_http(port: int, request: bytes, *, timeout: float = 15.0) -> tuple[int, bytes, bytes]:
    """Send ``request`` as is and read the response: status, raw headers, body.

    Reads until the declared Content-Length is in or the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    status = int(head.split(b" ", 2)[1])
    return status, head, body


def request_bytes(method: str, path: str, host: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    if body or method in ("POST", "PATCH", "PUT"):
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def assert_error_body(response: httpx.Response, error: str, field: str | None) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == ERROR_KEYS, body
    assert body["error"] == error, body
    assert body["field"] == field, body
    return body


# --- 1. DNS rebinding: the Host rule and Origin ---------------------------------------------


def test_host_rule_parsing() -> None:
    assert split_host("LOCALHOST:8787") == ("localhost", 8787)
    assert split_host("[0:0::1]:80") == ("[::1]", 80)
    assert split_host("127.0.0.1") == ("127.0.0.1", None)
    for bad in ("", "evil.example:", "a b", "x:99999", "[::1", "user@host", "h/p"):
        assert split_host(bad) is None, bad
    assert parse_allowed_hosts(["Memory.Example, tunnel:9000", "memory.example"]) == (
        "memory.example",
        "tunnel:9000",
    )
    with pytest.raises(ValidationError) as refused:
        parse_allowed_hosts(["http://memory.example/"])
    assert refused.value.field == "allowed_host"

    loopback = AllowedHosts.for_bind("127.0.0.1", ["memory.example", "tunnel:9000"])
    assert loopback.host_ok("localhost:8787", 8787)
    assert loopback.host_ok("[::1]", 8787)
    assert not loopback.host_ok("localhost:8788", 8787)
    assert not loopback.host_ok("evil.example:8787", 8787)
    assert not loopback.host_ok(None, 8787)
    assert loopback.host_ok("memory.example:443", 8787)
    assert loopback.host_ok("tunnel:9000", 8787) and not loopback.host_ok("tunnel:9001", 8787)
    assert loopback.origin_ok("http://127.0.0.1:8787", 8787)
    assert loopback.origin_ok("https://memory.example", 8787)
    assert not loopback.origin_ok("http://127.0.0.1:3000", 8787)  # another local service
    assert not loopback.origin_ok("ftp://127.0.0.1:8787", 8787)
    assert not loopback.origin_ok("null", 8787)

    remote = AllowedHosts.for_bind("192.168.1.5")
    assert remote.host_ok("192.168.1.5:8787", 8787)
    assert not remote.host_ok("localhost:8787", 8787)
    assert AllowedHosts.for_bind("0.0.0.0").host_ok("localhost:8787", 8787)


async def test_dns_rebinding_is_refused_with_421_and_writes_nothing(
    database_url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    """The issue's curl: Host evil.example:PORT with the matching Origin."""
    kept = await memory.remember(resource, "Keeps bees", key="hobby")
    with serving(resource, database_url) as (base, port):
        evil = {"host": f"evil.example:{port}", "origin": f"http://evil.example:{port}"}
        async with httpx.AsyncClient(base_url=base, headers=evil, timeout=10) as client:
            attempts = [
                await client.post("/api/facts", json={"content": "planted", "key": "ui.theme"}),
                await client.get("/api/memories"),
                await client.post("/api/cleanup", json={"confirm": True}),
                await client.get("/healthz"),
                await client.get("/"),
            ]
            no_origin = await client.get("/api/facts", headers={"origin": ""})
        for response in [*attempts, no_origin]:
            assert response.status_code == 421, response.text
            body = assert_error_body(response, "misdirected_request", "host")
            assert "evil.example" in body["message"]
            assert "Keeps bees" not in response.text
        # HTTP/1.0 allows a request without Host; it names no server, so it is refused.
        status, _, raw = raw_http(port, b"GET /api/memories HTTP/1.0\r\n\r\n")
        assert status == 421 and json.loads(raw)["field"] == "host"
    assert await count_rows(memory, resource) == 1
    assert (await memory.get(resource, kept.memory.id)).content == "Keeps bees"


async def test_loopback_names_and_allowed_hosts_are_served(
    database_url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    with serving(resource, database_url, allowed_hosts=("memory.example", "tunnel:9000")) as (
        base,
        port,
    ):
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            for host in (
                f"127.0.0.1:{port}",
                f"localhost:{port}",
                f"LocalHost:{port}",
                f"[::1]:{port}",
                "localhost",
                "memory.example",
                "Memory.Example:443",
                "tunnel:9000",
            ):
                response = await client.get("/api/facts", headers={"host": host})
                assert response.status_code == 200, (host, response.text)
            for host in (f"localhost:{port + 1}", "tunnel:9001", f"127.0.0.2:{port}"):
                response = await client.get("/api/facts", headers={"host": host})
                assert response.status_code == 421, host

            # Origin is compared with the allowed hosts, not with the Host header.
            same_server = await client.post(
                "/api/facts",
                json={"content": "From the localhost tab"},
                headers={"origin": f"http://localhost:{port}"},
            )
            assert same_server.status_code == 201, same_server.text
            proxied = await client.post(
                "/api/facts",
                json={"content": "Through the proxy"},
                headers={"host": "memory.example", "origin": "https://memory.example"},
            )
            assert proxied.status_code == 201, proxied.text
            for origin in (
                "http://evil.example",
                f"http://evil.example:{port}",
                f"http://127.0.0.1:{port + 1}",
                f"file://127.0.0.1:{port}",
                "null",
            ):
                refused = await client.post(
                    "/api/facts", json={"content": "planted"}, headers={"origin": origin}
                )
                assert refused.status_code == 403, origin
                assert_error_body(refused, "forbidden", None)
    contents = sorted(m.content for m in await memory.list(resource, MemoryFilter(kind="fact")))
    assert contents == ["From the localhost tab", "Through the proxy"]


# --- 2. strict booleans -----------------------------------------------------------------------


async def test_cleanup_confirm_takes_the_json_boolean_only(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Grows tomatoes")
    async with api_client(root, resource) as client:
        for confirm in (1, 1.0, "true", 0, None, [True]):
            response = await client.post("/api/cleanup", json={"confirm": confirm})
            assert response.status_code == 422, (confirm, response.text)
            assert_error_body(response, "validation_error", "confirm")
        assert await count_rows(memory, resource) == 1
        done = await client.post("/api/cleanup", json={"confirm": True})
        assert done.status_code == 200 and done.json() == {"deleted": 1}


# --- 3. database outage, JSON logs ------------------------------------------------------------


def _serve_env(tmp_path: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
    }
    for name in (
        "POPAGENT_DATABASE_URL",
        "POPAGENT_DATA_DIR",
        "POPAGENT_MODEL",
        "POPAGENT_TOKEN",
        "POPAGENT_TOKEN_FILE",
        "POPAGENT_ALLOWED_HOSTS",
    ):
        env.pop(name, None)
    return env


def _json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line as JSON; fails on the first that is not an object."""
    lines = []
    for line in stderr.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"a stderr line is not JSON: {line[:300]!r}\n---\n{stderr[-3000:]}")
        assert isinstance(entry, dict), line
        lines.append(entry)
    return lines


def test_database_outage_answers_503_quickly_and_logs_only_json(tmp_path: Path) -> None:
    """Kill -9 the postmaster under a running ``popagent serve``: every route answers
    503 with the error body (the GUI an HTML page) well within 5 s, /healthz 503, and
    every line on stderr is JSON, one short warning per failed request."""
    database = EmbeddedServer(tmp_path / "db", delete=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        cli_command(
            "--database-url",
            database.url,
            "--resource-id",
            "outage-test",
            "serve",
            "--port",
            str(port),
            "--maintenance-interval",
            "0",
            "--allowed-host",
            "memory.example",
        ),
        env=_serve_env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    )
    outage: list[httpx.Response] = []
    try:
        wait_healthy(base, process)
        with httpx.Client(base_url=base, timeout=60) as client:
            created = client.post("/api/facts", json={"content": "Sings in a choir"})
            assert created.status_code == 201, created.text
            # --allowed-host reaches the running server; other names still do not.
            assert client.get("/api/facts", headers={"host": "memory.example"}).status_code == 200
            assert client.get("/api/facts", headers={"host": "evil.example"}).status_code == 421

            pid = database.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
            for method, path in (
                ("GET", "/api/memories"),
                ("POST", "/api/facts"),
                ("GET", "/api/memories"),
                ("GET", "/"),
            ):
                began = time.monotonic()
                body = {"content": "During the outage"} if method == "POST" else None
                response = client.request(method, path, json=body)
                elapsed = time.monotonic() - began
                assert response.status_code == 503, (path, response.text)
                # Fast: well below the 30 s a wait for a pool connection would take.
                assert elapsed < 15, f"{method} {path} took {elapsed:.1f} s"
                outage.append(response)
            began = time.monotonic()
            health = client.get("/healthz")
            assert health.status_code == 503
            assert health.json()["status"] == "unavailable"
            assert time.monotonic() - began < 15
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
        with contextlib.suppress(Exception):  # its postmaster is dead: stop() cleans up
            database.stop()
    for response in outage[:3]:
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert set(body) == ERROR_KEYS and body["error"] == "database_unavailable", body
    page = outage[3]
    assert page.headers["content-type"].startswith("text/html")
    assert "Database unavailable" in page.text
    assert "Traceback" not in "".join(r.text for r in outage)

    lines = _json_lines(stderr)
    assert any("GUI and API at" in line["message"] for line in lines)
    warnings = [
        line
        for line in lines
        if line["logger"] == "popagent.web" and line["message"].startswith("database unavailable")
    ]
    assert len(warnings) == 4, warnings  # one per failed request (/healthz logs none)
    assert all(w["level"] == "warning" and "exception" not in w for w in warnings)
    assert "Traceback" not in stderr
    assert "Sings in a choir" not in stderr


async def test_an_unexpected_error_is_a_json_500(database_url: str, resource: str) -> None:
    """A broken schema (a table renamed away) is no outage: 500 with the error body."""
    with scratch_database(database_url) as url:
        async with popagent.connect(url, max_size=2) as root:
            memory = root.memory
            await memory.remember(resource, "Reads maps")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE popagent_memories RENAME TO popagent_memories_away")
        with serving(resource, url) as (base, _):
            async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                response = await client.get("/api/memories")
    assert response.status_code == 500
    body = assert_error_body(response, "internal_error", None)
    assert "Traceback" not in body["message"] and "popagent_memories" not in body["message"]


# --- 4, 5. error fields -----------------------------------------------------------------------


async def test_over_long_recall_query_names_the_query_field(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    async with api_client(root, resource) as client:
        response = await client.post("/api/recall", json={"query": "x" * 100_000})
        assert response.status_code == 422
        assert_error_body(response, "validation_error", "query")
        wrong = await client.post("/api/recall", json={"query": "tea", "limit": "3"})
        assert_error_body(wrong, "validation_error", "limit")


async def test_nul_in_a_chat_message_names_the_message_field(
    root: Popagent,
    memory: popagent.LongTermMemory,
    chat_model: popagent.llm.OpenAIChatModel,
    scripted: ScriptedModelServer,
    resource: str,
) -> None:
    async with api_client(root, resource, chat_model) as client:
        for message in ("before\x00after", "\x00"):
            response = await client.post("/api/sessions/nul/chat", json={"message": message})
            assert response.status_code == 422, response.text
            assert_error_body(response, "validation_error", "message")
    assert await ThreadStore(memory.pool).list_sessions(resource) == []
    assert scripted.requests == []


# --- 6, 7. the transport: undecodable paths, slow bodies --------------------------------------


async def test_a_path_that_is_not_utf8_is_refused_and_creates_nothing(
    database_url: str,
    memory: popagent.LongTermMemory,
    scripted: ScriptedModelServer,
    resource: str,
) -> None:
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    with uvicorn_server(
        config, database_url=database_url, model_settings=scripted_settings(scripted)
    ) as base:
        port = port_of(base)
        host = f"127.0.0.1:{port}"
        chat = b'{"message": "hello"}'
        for method, path, body, field in (
            ("POST", "/api/sessions/%FF/chat", chat, "session_id"),
            ("POST", "/api/sessions/ok%C3%28/chat", chat, "session_id"),
            ("PATCH", "/api/sessions/%ED%A0%80", b'{"title": "t"}', "session_id"),
            ("GET", "/api/sessions/%FF/messages", b"", "session_id"),
            ("GET", "/sessions/%FF", b"", "session_id"),
            ("GET", "/api/memories/%FF", b"", "path"),
        ):
            status, _, raw = raw_http(port, request_bytes(method, path, host, body))
            assert status == 422, (path, raw)
            error = json.loads(raw)
            assert set(error) == ERROR_KEYS and error["field"] == field, (path, error)
    assert await ThreadStore(memory.pool).list_sessions(resource) == []
    assert scripted.requests == []


async def test_a_body_shorter_than_its_length_gets_408_quickly(
    database_url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    with serving(resource, database_url, body_timeout_s=1.0) as (_, port):
        partial = b'{"content": "half a'
        request = (
            f"POST /api/facts HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        ).encode() + partial
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            began = time.monotonic()
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):  # the server closes the connection after
                data += chunk
            elapsed = time.monotonic() - began
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), data
        error = json.loads(body)
        assert set(error) == ERROR_KEYS and error["error"] == "request_timeout"
        assert elapsed < 12, f"{elapsed:.1f} s"  # the 1 s bound, not the socket's 15 s
        # A complete body on a fresh connection is served as usual.
        whole = b'{"content": "Whole body"}'
        status, _, _ = raw_http(
            port, request_bytes("POST", "/api/facts", f"127.0.0.1:{port}", whole)
        )
        assert status == 201
    assert [m.content for m in await memory.list(resource, MemoryFilter(kind="fact"))] == [
        "Whole body"
    ]


# --- 8. startup failures ----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["garbage-url", "data-dir-is-a-file"])
def test_a_failed_start_is_one_clean_line(tmp_path: Path, case: str) -> None:
    if case == "garbage-url":
        where = ["--database-url", "garbage://"]
    else:
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("a file where the data dir should be\n")
        where = ["--data-dir", str(blocker)]
    result = subprocess.run(
        [sys.executable, "-m", "popagent.cli", *where, "serve", "--port", str(free_port())],
        env=_serve_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = _json_lines(result.stderr)
    failures = [line for line in lines if line["message"].startswith("startup failed:")]
    assert len(failures) == 1, result.stderr
    assert "\n" not in failures[0]["message"] and "exception" not in failures[0]
    expected = "PostgreSQL" if case == "garbage-url" else "not-a-folder"
    assert expected in failures[0]["message"], failures[0]
