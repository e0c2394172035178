"""Hostile input over the API, the CLI and MCP (the corpus is ``tests/hostile_corpus``).

Over every transport: no 5xx, no traceback (in a response, an output or a
server's stderr and log), every refusal names its field, and a refused request
writes nothing (the row count of every popagent table and the target
resource's rows are unchanged; a bystander resource is unchanged by the whole
run). Each test collects every failing case before it fails, so one run lists
them all.

Also here: the stdio line screen (``popagent.mcp.lines``) answers every
malformed line with its JSON-RPC error and keeps serving; SIGTERM to
``popagent mcp`` stops the embedded PostgreSQL it started; ``sessions show
--after-id`` refuses a negative id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.rows import dict_row

import popagent
from popagent.cli import main
from popagent.mcp import memory_tools
from popagent.mcp.lines import MAX_LINE_BYTES
from popagent.mcp.shapes import StructuredSlot
from popagent.threads import ThreadStore
from popagent.web import ServerConfig
from tests.db_support import RESOURCE_DIGESTS
from tests.fault_support import pid_alive
from tests.hostile_corpus import (
    REFUSE,
    ApiCase,
    McpCase,
    Raw,
    api_cases,
    cli_cases,
    dumps,
    mcp_cases,
    mcp_line_cases,
)
from tests.mcp_support import cli_command, http_server, server_env
from tests.scripted_model import ScriptedModelServer
from tests.web_support import scripted_settings, uvicorn_server

TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "/')

_TABLES = """
SELECT table_name FROM information_schema.tables
 WHERE table_schema = current_schema() AND table_name LIKE 'popagent%%' ORDER BY table_name
"""


def snapshot(conn: psycopg.Connection[dict[str, Any]], *resources: str) -> dict[str, Any]:
    """The row count of every popagent table, and the rows of ``resources``."""
    tables = [r["table_name"] for r in conn.execute(_TABLES).fetchall()]
    count = sql.SQL("SELECT count(*) AS n FROM {}")
    counts = {t: conn.execute(count.format(sql.Identifier(t))).fetchone() for t in tables}
    state: dict[str, Any] = {t: row["n"] if row else None for t, row in counts.items()}
    for r in resources:
        state[f"rows of {r}"] = conn.execute(RESOURCE_DIGESTS, {"r": r}).fetchone()
    return state


#: Written in the background by the server's vector worker, for memories that earlier
#: (accepted) requests stored, whenever it gets to them: not a refused request's doing.
#: A refused request that stored a memory shows in ``popagent_memories`` itself.
BACKGROUND = ("popagent_memory_embeddings", "popagent_pending_vectors")


def changed(
    before: dict[str, Any], after: dict[str, Any], *, ignore: tuple[str, ...] = ()
) -> list[str]:
    skip = ignore + BACKGROUND
    return [k for k in before if k not in skip and before[k] != after.get(k)]


def has_traceback(text: str) -> bool:
    return any(marker in text for marker in TRACEBACK_MARKERS)


@pytest.fixture
def hostile_url(scratch_url: str) -> str:
    """A database of the test's own: each case counts every table's rows before and
    after, and on the suite's shared database that would count every other test's
    rows too (hundreds of cases, each a scan of all of them)."""
    return scratch_url


def sync_conn(url: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


async def seed(url: str, resource: str, bystander: str) -> tuple[int, str]:
    """A fact and a session with messages in ``resource`` (their id and session id),
    and memories, a session and settings in ``bystander``."""
    async with popagent.connect(url, max_size=2) as root:
        memory = root.memory
        threads = ThreadStore(memory.pool)
        for r in (bystander, resource):
            fact = (await memory.remember(r, "Keeps bees on the roof", key="hobby")).memory
            await threads.append_message(
                r, "hostile-session", "user", "Hello there", create_session=True
            )
        await memory.retain_episode(bystander, "hostile-session", "Any bees?", "Yes, on the roof.")
        await memory.remember(bystander, "Prefers tea", key="drink")
    assert fact.id is not None
    return fact.id, "hostile-session"


class Records(logging.Handler):
    """Every log record at WARNING or above, and any with a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bad: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.bad.append(f"{record.name} {record.levelname}: {record.getMessage()[:300]}")


@pytest.fixture
def log_records() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


# --- API --------------------------------------------------------------------------------------


def _request(case: ApiCase, fact_id: int, session_id: str) -> dict[str, Any]:
    path = case.path.replace("{fact}", str(fact_id)).replace("{session}", session_id)
    headers = {"content-type": "application/json", **case.headers}
    if isinstance(case.body, bytes):
        content: bytes | None = case.body
    elif case.body is None:
        content = None
        headers.pop("content-type")
    else:
        content = dumps(case.body).encode()
    return {"method": case.method, "url": path, "content": content, "headers": headers}


def _api_failures(case: ApiCase, response: httpx.Response, wrote: list[str]) -> list[str]:
    status = response.status_code
    problems = []
    if status >= 500:
        problems.append(f"status {status}")
    if has_traceback(response.text):
        problems.append("traceback in the response")
    if case.expect == REFUSE and not 400 <= status < 500:
        problems.append(f"accepted ({status}), must be refused")
    if status == 422:
        try:
            field = response.json().get("field")
        except ValueError:
            field = None
        if field is None:
            problems.append(f"422 with field null ({response.text[:160]})")
        elif case.field is not None and not (
            field == case.field or field.startswith(f"{case.field}.")
        ):
            problems.append(f"422 names field {field!r}, not {case.field!r}")
    if status >= 400 and wrote:
        problems.append(f"refused but wrote: {', '.join(wrote)}")
    return problems


async def test_hostile_requests_over_the_api_are_refused_cleanly(
    hostile_url: str, resource: str, scripted: ScriptedModelServer, log_records: Records
) -> None:
    bystander = f"bystander-{uuid.uuid4().hex[:12]}"
    fact_id, session_id = await seed(hostile_url, resource, bystander)
    cases = api_cases()
    assert len(cases) >= 300
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    failures: list[str] = []
    with (
        sync_conn(hostile_url) as conn,
        uvicorn_server(
            config, database_url=hostile_url, model_settings=scripted_settings(scripted)
        ) as base,
    ):
        start = snapshot(conn, bystander)
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            for case in cases:
                before = snapshot(conn, resource)
                response = await client.request(**_request(case, fact_id, session_id))
                wrote = changed(before, snapshot(conn, resource))
                failures += [f"{case.name}: {p}" for p in _api_failures(case, response, wrote)]
            alive = await client.get("/healthz")
        end = snapshot(conn, bystander)
    assert alive.status_code == 200
    assert [k for k in start if k.startswith("rows of") and start[k] != end[k]] == []
    failures += [f"server log: {line}" for line in log_records.bad]
    assert failures == [], f"{len(failures)} of {len(cases)} API cases failed:\n" + "\n".join(
        failures
    )


# --- CLI --------------------------------------------------------------------------------------


def test_hostile_arguments_to_the_cli_are_refused_cleanly(hostile_url: str, resource: str) -> None:
    bystander = f"bystander-{uuid.uuid4().hex[:12]}"
    fact_id, session_id = asyncio.run(seed(hostile_url, resource, bystander))
    cases = cli_cases()
    assert len(cases) >= 200
    runner = CliRunner()
    failures: list[str] = []
    with sync_conn(hostile_url) as conn:
        start = snapshot(conn, bystander)
        for case in cases:
            args = [
                a.replace("{fact}", str(fact_id)).replace("{session}", session_id)
                for a in case.args
            ]
            before = snapshot(conn, resource)
            result = runner.invoke(
                main, ["--database-url", hostile_url, "--resource-id", resource, *args]
            )
            wrote = changed(before, snapshot(conn, resource))
            output = result.output
            problems = []
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                problems.append(f"raised {type(result.exception).__name__}: {result.exception}")
            if has_traceback(output):
                problems.append("traceback in the output")
            if case.expect == REFUSE and result.exit_code != 2:
                problems.append(f"exit {result.exit_code}, must be 2 ({output.strip()[-160:]!r})")
            if result.exit_code == 2 and case.field.lower() not in output.lower():
                problems.append(f"exit 2 without naming {case.field!r}: {output.strip()[-160:]!r}")
            if result.exit_code != 0 and wrote:
                problems.append(f"refused but wrote: {', '.join(wrote)}")
            failures += [f"{case.name}: {p}" for p in problems]
        end = snapshot(conn, bystander)
    assert [k for k in start if k.startswith("rows of") and start[k] != end[k]] == []
    assert failures == [], f"{len(failures)} of {len(cases)} CLI cases failed:\n" + "\n".join(
        failures
    )


def test_hostile_arguments_to_the_cli_process_exit_2_naming_them(
    database_url: str, resource: str
) -> None:
    env = {**os.environ, **server_env(database_url, resource)}
    runs: list[tuple[list[str | bytes], str]] = [
        (["sessions", "show", "s1", "--after-id", "-5"], "--after-id"),
        (["sessions", "show", "s1", "--after-id", str(2**63)], "--after-id"),
        ([b"remember", b"caf\xff\xfe"], "content"),  # not UTF-8: a lone surrogate in Python
        (["recall", "q" * 100_000], "query"),
        (["remember", "\u200b\ufeff"], "content"),
        (["remember", "ok", "--importance", "nan"], "importance"),
    ]
    with sync_conn(database_url) as conn:
        before = snapshot(conn, resource)
        for args, field in runs:
            done = subprocess.run(
                [*cli_command(), *args], env=env, capture_output=True, timeout=120, check=False
            )
            err = done.stderr.decode(errors="replace")
            assert done.returncode == 2, (args[:3], done.returncode, err[-400:])
            assert field in err, (args[:3], err[-400:])
            assert not has_traceback(err + done.stdout.decode(errors="replace"))
        assert changed(before, snapshot(conn, resource)) == []


def test_sessions_show_refuses_a_negative_after_id(database_url: str) -> None:
    result = CliRunner().invoke(
        main, ["--database-url", database_url, "sessions", "show", "s1", "--after-id", "-5"]
    )
    assert result.exit_code == 2
    assert "--after-id" in result.output
    ok = CliRunner().invoke(
        main, ["--database-url", database_url, "sessions", "show", "nope", "--after-id", "0"]
    )
    assert ok.exit_code == 1 and "--after-id" not in ok.output  # not found, but the value is fine


# --- MCP over stdio ---------------------------------------------------------------------------


class StdioServer:
    """``popagent mcp`` over stdio, spoken to line by line."""

    def __init__(self, database_url: str, resource: str, stderr: Path) -> None:
        self._err = stderr.open("wb")
        self.process = subprocess.Popen(
            cli_command("mcp"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env={**os.environ, **server_env(database_url, resource)},
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def receive(self, timeout: float = 60) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout}s") from None
        answer: dict[str, Any] = json.loads(line)
        return answer

    def request(self, rid: Any, method: str, params: Any = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.send(dumps(message).encode())
        answer = self.receive()
        assert answer.get("id") == rid, answer
        return answer

    def initialize(self) -> None:
        answer = self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "hostile", "version": "1"},
            },
        )
        assert "result" in answer, answer
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._err.close()
        return code


def _tool_failures(case: McpCase, answer: dict[str, Any], wrote: list[str]) -> list[str]:
    problems: list[str] = []
    if has_traceback(json.dumps(answer)):
        problems.append("traceback in the answer")
    refused: bool
    if "error" in answer:
        refused = True
        error = answer["error"]
        unparsable = (
            isinstance(case.arguments.get(case.field), Raw)
            if isinstance(case.arguments, dict)
            else False
        )
        if error.get("code") == -32603:
            problems.append(f"internal error {error}")
        elif error.get("code") == -32700 and unparsable:
            pass  # nested or too long to parse: there is no argument to name yet
        elif case.field not in str(error.get("message", "")):
            problems.append(f"JSON-RPC error without naming {case.field!r}: {error}")
    else:
        result = answer.get("result", {})
        refused = bool(result.get("isError"))
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        if refused and case.field not in text:
            problems.append(f"tool error without naming {case.field!r}: {text[:200]!r}")
        if refused and ("Error:" in text and "no tool" not in text):
            problems.append(f"tool failed instead of refusing: {text[:200]!r}")
    if case.expect == REFUSE and not refused:
        problems.append("accepted, must be refused")
    if refused and wrote:
        problems.append(f"refused but wrote: {', '.join(wrote)}")
    return problems


def test_hostile_tool_calls_over_stdio_are_refused_cleanly(
    hostile_url: str, resource: str, tmp_path: Path
) -> None:
    bystander = f"bystander-{uuid.uuid4().hex[:12]}"
    asyncio.run(seed(hostile_url, resource, bystander))
    cases = mcp_cases()
    assert len(cases) >= 300
    server = StdioServer(hostile_url, resource, tmp_path / "stderr.log")
    failures: list[str] = []
    try:
        server.initialize()
        with sync_conn(hostile_url) as conn:
            start = snapshot(conn, bystander)
            for i, case in enumerate(cases, start=1):
                before = snapshot(conn, resource)
                params = {"name": case.tool, "arguments": case.arguments}
                message = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}
                server.send(dumps(message).encode())
                answer = server.receive()
                # Only an unparsable line may be answered without its id (JSON-RPC: null).
                if answer.get("id") != i and (
                    answer.get("id") is not None or "error" not in answer
                ):
                    failures.append(f"{case.name}: answered for id {answer.get('id')!r}")
                # Every call leaves its audit row (refused ones too), without content.
                wrote = changed(before, snapshot(conn, resource), ignore=("popagent_audit",))
                failures += [f"{case.name}: {p}" for p in _tool_failures(case, answer, wrote)]
            end = snapshot(conn, bystander)
        assert "result" in server.request("last", "tools/list")
    finally:
        code = server.close()
    assert code == 0
    stderr = (tmp_path / "stderr.log").read_text(errors="replace")
    assert not has_traceback(stderr), stderr[-3000:]
    assert [k for k in start if k.startswith("rows of") and start[k] != end[k]] == []
    assert failures == [], f"{len(failures)} of {len(cases)} stdio cases failed:\n" + "\n".join(
        failures
    )


def test_every_malformed_stdio_line_gets_its_json_rpc_error_and_serving_goes_on(
    database_url: str, resource: str, tmp_path: Path
) -> None:
    server = StdioServer(database_url, resource, tmp_path / "stderr.log")
    failures: list[str] = []
    try:
        server.initialize()
        for i, case in enumerate(mcp_line_cases()):
            server.send(case.line)
            if case.code is None:
                # No answer to a blank line: the next answer is the ping's.
                answer = server.request(f"ping-{i}", "ping")
                continue
            answer = server.receive(timeout=30)
            error = answer.get("error") or {}
            if (
                error.get("code") != case.code
                or answer.get("id") != case.answer_id
                or "id" not in answer
            ):
                failures.append(f"{case.name}: {answer}")
            elif case.names is not None and case.names not in error.get("message", ""):
                failures.append(f"{case.name}: does not name {case.names!r}: {error}")
            # Still serving after each one.
            assert "result" in server.request(f"after-{i}", "ping"), case.name
        listed = server.request("tools", "tools/list")
        assert len(listed["result"]["tools"]) == len(memory_tools(StructuredSlot()))
    finally:
        code = server.close()
    assert code == 0
    assert not has_traceback((tmp_path / "stderr.log").read_text(errors="replace"))
    assert failures == [], "\n".join(failures)


# --- MCP over streamable HTTP -----------------------------------------------------------------

_MODERN = "2026-07-28"
_META = {
    "io.modelcontextprotocol/protocolVersion": _MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def test_hostile_tool_calls_over_http_are_refused_cleanly(
    hostile_url: str, resource: str, tmp_path: Path
) -> None:
    bystander = f"bystander-{uuid.uuid4().hex[:12]}"
    asyncio.run(seed(hostile_url, resource, bystander))
    cases = mcp_cases()
    log = tmp_path / "http.log"
    failures: list[str] = []
    with (
        http_server(hostile_url, resource, log) as url,
        httpx.Client(timeout=60) as http,
        sync_conn(hostile_url) as conn,
    ):
        start = snapshot(conn, bystander)
        for i, case in enumerate(cases, start=1):
            body = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"_meta": _META, "name": case.tool, "arguments": case.arguments},
            }
            headers = {
                "accept": "application/json, text/event-stream",
                "content-type": "application/json",
                "mcp-protocol-version": _MODERN,
                "mcp-method": "tools/call",
                "mcp-name": case.tool,
            }
            before = snapshot(conn, resource)
            response = http.post(url, content=dumps(body).encode(), headers=headers)
            wrote = changed(before, snapshot(conn, resource), ignore=("popagent_audit",))
            problems = []
            if response.status_code == 413 and len(response.request.content) > 8 * 1024 * 1024:
                continue  # the transport's body limit: refused before any argument is read
            if response.status_code >= 500:
                problems.append(f"status {response.status_code}")
            try:
                answer = response.json()
            except ValueError:
                problems.append(f"not JSON: {response.text[:200]!r}")
            else:
                if answer.get("id") not in (i, None):
                    problems.append(f"answer for id {answer.get('id')!r}")
                problems += _tool_failures(case, answer, wrote)
            failures += [f"{case.name}: {p}" for p in problems]
        end = snapshot(conn, bystander)
    stderr = log.read_text(errors="replace")
    assert not has_traceback(stderr), stderr[-3000:]
    assert [k for k in start if k.startswith("rows of") and start[k] != end[k]] == []
    assert failures == [], f"{len(failures)} of {len(cases)} HTTP cases failed:\n" + "\n".join(
        failures
    )


# --- SIGTERM stops the embedded PostgreSQL ----------------------------------------------------


def _pid_files(data_dir: Path) -> list[Path]:
    """Where the embedded cluster's ``postmaster.pid`` may be: ``data_dir/pgdata``, or
    ``data_dir`` itself for a layout that keeps the cluster at the top."""
    return [
        p
        for p in (data_dir / "pgdata" / "postmaster.pid", data_dir / "postmaster.pid")
        if p.exists()
    ]


def _alive(pid: int) -> bool:
    if not pid_alive(pid):
        return False
    # A zombie child of nobody we know still answers kill(0); ask /proc.
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_sigterm_to_popagent_mcp_stops_its_embedded_postgres(
    transport: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    log = tmp_path / "stderr.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("POPAGENT_DATABASE_URL", "POPAGENT_TOKEN", "POPAGENT_TOKEN_FILE")
    }
    env.update({"POPAGENT_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"})
    extra = ["--transport", "http", "--port", "0"] if transport == "http" else []
    with log.open("wb") as err:
        process = subprocess.Popen(
            cli_command("mcp", *extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
        try:
            deadline = time.monotonic() + 120
            while "popagent mcp: serving" not in log.read_text(errors="replace"):
                assert process.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(0.1)
            pid_files = _pid_files(data_dir)
            assert len(pid_files) == 1, list(data_dir.rglob("postmaster.pid"))
            postmaster = int(pid_files[0].read_text().split("\n", 1)[0])
            assert _alive(postmaster)
            process.send_signal(signal.SIGTERM)  # stdin stays open: the client did not go away
            code = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
    stderr = log.read_text(errors="replace")
    assert code == 0, stderr
    assert not has_traceback(stderr), stderr
    assert _pid_files(data_dir) == []
    deadline = time.monotonic() + 10
    while _alive(postmaster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(postmaster)


def test_the_stdio_reader_gives_up_an_overlong_line_and_reads_on(
    database_url: str, resource: str, tmp_path: Path
) -> None:
    # A 40 MiB line is over the reader's limit (32 MiB).
    assert MAX_LINE_BYTES < 40 * 1024 * 1024
    server = StdioServer(database_url, resource, tmp_path / "stderr.log")
    try:
        server.initialize()
        server.send(
            b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "'
            + b"p" * (40 * 1024 * 1024)
            + b'"}}'
        )
        answer = server.receive(timeout=120)
        assert answer["id"] is None and answer["error"]["code"] == -32700, answer
        assert "longer than" in answer["error"]["message"]
        assert "result" in server.request(2, "ping")
    finally:
        assert server.close() == 0
