"""The server for real: uvicorn on 127.0.0.1, chat over HTTP and SSE, the token rule,
scheduled maintenance under its lock, and ``popagent serve`` itself."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

import popagent
from popagent import Popagent
from popagent.cli import main
from popagent.client.errors import error_from_body
from popagent.errors import DatabaseBusyError, ServerBusyError
from popagent.models import MemoryFilter
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from popagent.web.health import HealthProbe
from popagent.web.scheduler import SCHEDULE_LOCK_ID, MaintenanceScheduler
from tests.scripted_model import Fail, Reply, ScriptedModelServer
from tests.web_support import (
    api_client,
    cli_command,
    free_port,
    in_process,
    scripted_settings,
    uvicorn_server,
    wait_healthy,
)

TOKEN = "t0ken-for-tests-0123456789"


def sse_events(text: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def test_chat_turn_over_http_whole_and_streamed(
    database_url: str, scripted: ScriptedModelServer, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Prefers green tea", key="drink")
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    with uvicorn_server(
        config, database_url=database_url, model_settings=scripted_settings(scripted)
    ) as base:
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            scripted.script(Reply("Green tea, as you like it."))
            whole = await client.post(
                "/api/sessions/chat-a/chat", json={"message": "What tea do I like?"}
            )
            assert whole.status_code == 200, whole.text
            body = whole.json()
            assert body["reply"] == "Green tea, as you like it."
            assert body["recalled"][0]["memory"]["content"] == "Prefers green tea"
            assert body["memory_block"].startswith(popagent.HEADER)
            assert body["episode_id"] is not None

            scripted.script(Reply("Streaming this reply word by word."))
            async with client.stream(
                "POST",
                "/api/sessions/chat-a/chat",
                json={"message": "Say something"},
                headers={"accept": "text/event-stream"},
            ) as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                raw = "".join([chunk async for chunk in stream.aiter_text()])
            events = sse_events(raw)
            deltas = [data["text"] for name, data in events if name == "delta"]
            assert len(deltas) > 1
            assert "".join(deltas) == "Streaming this reply word by word."  # type: ignore[arg-type]
            assert events[-1][0] == "done"
            assert events[-1][1]["reply"] == "Streaming this reply word by word."

            scripted.script(Fail(500), Fail(500), Fail(500))
            failed = await client.post(
                "/api/sessions/chat-a/chat?stream=true", json={"message": "again"}
            )
            name, data = sse_events(failed.text)[-1]
            assert name == "error" and data["error"] == "model_failed"

    stored = await ThreadStore(memory.pool).list_messages(resource, "chat-a")
    assert [m.role for m in stored][:4] == ["user", "assistant", "user", "assistant"]
    assert stored[-1].content == "again"  # the failed turn's message stays; no episode for it
    episodes = await memory.list(resource, MemoryFilter(kind="episode", session_id="chat-a"))
    assert len(episodes) == 2


async def test_turns_of_one_session_take_turns(
    root: Popagent,
    memory: popagent.LongTermMemory,
    chat_model: popagent.llm.OpenAIChatModel,
    scripted: ScriptedModelServer,
    resource: str,
) -> None:
    scripted.script(*[Reply(f"reply {i}") for i in range(4)])
    async with api_client(root, resource, chat_model) as client:
        replies = await asyncio.gather(
            *[
                client.post("/api/sessions/busy/chat", json={"message": f"message {i}"})
                for i in range(4)
            ]
        )
    assert all(r.status_code == 200 for r in replies)
    stored = await ThreadStore(memory.pool).list_messages(resource, "busy")
    # Serialized: every user message is followed directly by its reply.
    assert [m.role for m in stored] == ["user", "assistant"] * 4


async def test_token_required_off_loopback_and_checked_everywhere(
    database_url: str, resource: str
) -> None:
    result = CliRunner().invoke(
        main,
        ["--database-url", database_url, "serve", "--host", "0.0.0.0"],
        env={"POPAGENT_TOKEN": ""},
    )
    assert result.exit_code == 2
    assert "needs a bearer token" in result.output

    config = ServerConfig(resource_id=resource, token=TOKEN, maintenance_interval_s=None)
    with uvicorn_server(config, database_url=database_url, model_from_env=False) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/healthz")).status_code == 200
            for path in ("/api/facts", "/api/sessions", "/openapi.json", "/api/settings"):
                refused = await client.get(path)
                assert refused.status_code == 401, path
                assert refused.headers["www-authenticate"] == "Bearer"
            wrong = await client.get(
                "/api/facts", headers={"authorization": "Bearer nope-nope-nope-nope"}
            )
            assert wrong.status_code == 401
            write = await client.post("/api/facts", json={"content": "x"})
            assert write.status_code == 401
            ok = await client.get("/api/facts", headers={"authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200
            # The token as a cookie (what the login cookie once held) lets nobody in.
            for name in ("popagent_token", "popagent_login"):
                cookie = await client.get("/api/facts", headers={"cookie": f"{name}={TOKEN}"})
                assert cookie.status_code == 401, name
            page = await client.get("/", follow_redirects=False)
            assert page.status_code == 303 and page.headers["location"].startswith("/login")


async def test_access_log_holds_no_content(
    root: Popagent, resource: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(
        ServerConfig(resource_id=resource, maintenance_interval_s=None),
        root=root,
        model_from_env=False,
    )
    secret_text = "zebra-crossing-in-kathmandu"
    with caplog.at_level("INFO", logger="popagent.access"):
        async with in_process(app) as client:
            await client.post("/api/facts", json={"content": f"Saw a {secret_text}"})
            await client.get("/api/memories", params={"text": secret_text})
            await client.post("/api/recall", json={"query": secret_text})
    records = [r for r in caplog.records if r.name == "popagent.access"]
    assert len(records) == 3
    assert [r.__dict__["status"] for r in records] == [201, 200, 200]
    assert all(secret_text not in json.dumps(vars(r), default=str) for r in records)


async def test_scheduled_maintenance_runs_and_never_twice_at_once(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.retain_episode(
        resource, "s1", "old", "turn", created_at=datetime.now(UTC) - timedelta(days=200)
    )
    first = MaintenanceScheduler(memory.pool, memory, 3600, delay_s=0)
    second = MaintenanceScheduler(memory.pool, memory, 3600, delay_s=0)
    # Another process holds the schedule lock: this run is skipped, not queued.
    async with memory.pool.connection() as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (SCHEDULE_LOCK_ID,))
        assert await second.run_once() is None
        assert str(second.state().last_outcome).startswith("skipped")
        await holder.execute("SELECT pg_advisory_unlock(%s)", (SCHEDULE_LOCK_ID,))
    assert len(await memory.list(resource, MemoryFilter(kind="episode"))) == 1

    first.start()
    for _ in range(500):  # the first run is due at once; allow it 10 s
        if first.state().last_run_at is not None:
            break
        await asyncio.sleep(0.02)
    await first.aclose()
    state = first.state()
    assert state.last_outcome == "ran" and state.last_report is not None
    assert state.last_report.expired_episodes >= 1
    assert await memory.list(resource, MemoryFilter(kind="episode")) == []

    # Two schedulers at once: the lock lets exactly one of them run.
    reports = await asyncio.gather(
        first.run_once(), second.run_once(), MaintenanceScheduler(memory.pool, memory, 1).run_once()
    )
    assert sum(r is not None for r in reports) >= 1


def test_popagent_serve_from_the_command_line(tmp_path: Path) -> None:
    """``popagent serve`` on its own embedded PostgreSQL: starts, answers, logs JSON
    without content, and on SIGTERM shuts down gracefully, stopping PostgreSQL cleanly."""
    port = free_port()
    data_dir = tmp_path / "data"
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    for name in (
        "POPAGENT_DATABASE_URL",
        "POPAGENT_MODEL",
        "POPAGENT_TOKEN",
        "POPAGENT_TOKEN_FILE",
    ):
        env.pop(name, None)
    process = subprocess.Popen(
        cli_command(
            "--resource-id", "serve-test", "--data-dir", str(data_dir), "serve", "--port", str(port)
        ),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, process)
        created = httpx.post(f"{base}/api/facts", json={"content": "Plays the oboe on Sundays"})
        assert created.status_code == 201
        assert created.json()["resource_id"] == "serve-test"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    # uvicorn re-raises the signal it handled once shutdown is complete.
    assert process.returncode in (0, -15), stderr
    assert "Application shutdown complete" in stderr
    assert not (data_dir / "pgdata" / "postmaster.pid").exists(), "PostgreSQL was not stopped"
    assert "oboe" not in stderr
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    access = [line for line in lines if line["logger"] == "popagent.access"]
    assert any(line["path"] == "/api/facts" and line["status"] == 201 for line in access)


async def test_healthz_reports_an_unreachable_database(database_url: str, resource: str) -> None:
    async with popagent.connect(database_url, max_size=2) as root:
        memory = root.memory
        app = create_app(
            ServerConfig(resource_id=resource, maintenance_interval_s=None),
            root=root,
            model_from_env=False,
        )
        async with in_process(app) as client:
            assert (await client.get("/healthz")).status_code == 200
            await memory.pool.close()
            down = await client.get("/healthz")
    assert down.status_code == 503
    assert down.json()["status"] == "unavailable"


async def test_healthz_alone_sees_the_database_come_back(database_url: str, resource: str) -> None:
    """A process that only answers /healthz (one worker of several) must not report
    the database down forever after one lost connection: nothing else uses its pool."""
    async with popagent.connect(database_url, min_size=1, max_size=1) as root:
        memory = root.memory
        app = create_app(
            ServerConfig(resource_id=resource, maintenance_interval_s=None),
            root=root,
            model_from_env=False,
        )
        async with in_process(app) as client:
            with pytest.raises(popagent.DatabaseError):
                async with memory.pool.connection() as conn:
                    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            assert memory.pool.down_since is not None
            assert (await client.get("/healthz")).status_code == 503
            statuses = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                statuses.append((await client.get("/healthz")).status_code)
                if statuses[-1] == 200:
                    break
                await asyncio.sleep(0.05)
    assert statuses[-1] == 200, statuses
    assert memory.pool.down_since is None


# --- a busy database is not an outage -------------------------------------------------------


async def test_a_busy_database_is_a_503_that_says_retry(database_url: str, resource: str) -> None:
    async with popagent.connect(database_url, max_size=1, queue_timeout=0.3) as root:
        memory = root.memory
        app = create_app(
            ServerConfig(resource_id=resource, maintenance_interval_s=None),
            root=root,
            model_from_env=False,
        )
        async with in_process(app) as client, memory.pool.connection():
            busy = await client.post("/api/facts", json={"content": "Waits in line"})
    assert busy.status_code == 503
    assert busy.headers["retry-after"] == "1"
    body = busy.json()
    assert body["error"] == "database_busy" and "retry" in body["message"]
    assert "PostgreSQL" not in body["message"]
    assert memory.pool.down_since is None
    # The HTTP client raises it as a busy error, also a DatabaseError.
    raised = error_from_body(503, body, "POST /api/facts")
    assert isinstance(raised, ServerBusyError) and isinstance(raised, DatabaseBusyError)
    assert isinstance(raised, popagent.DatabaseUnavailableError)


async def test_healthz_waits_in_no_queue_behind_a_burst(database_url: str, resource: str) -> None:
    async with popagent.connect(database_url, max_size=1) as root:
        memory = root.memory
        app = create_app(
            ServerConfig(resource_id=resource, maintenance_interval_s=None),
            root=root,
            model_from_env=False,
        )

        async def hold() -> None:
            async with memory.pool.connection() as conn:
                await conn.execute("SELECT pg_sleep(0.02)")

        async with in_process(app) as client:
            burst = asyncio.gather(*(hold() for _ in range(200)))  # about 4 s of queue
            await asyncio.sleep(0.1)
            health = await client.get("/healthz")
            waiting = memory.pool.waiting
            await burst
    assert health.status_code == 200, health.text
    assert health.json() == {"status": "ok", "database": "ok"}
    # It was answered while the burst still waited in line: on its own connection.
    assert waiting > 0


async def test_a_blocked_event_loop_is_not_a_database_down(database_url: str) -> None:
    """The loop blocked (a request's CPU work, a parser) for longer than the probe's
    timeout while it waited: the database answered meanwhile, and health says so."""
    async with popagent.connect(database_url, max_size=1) as root:
        probe = HealthProbe(root.pool, timeout_s=0.3)
        try:
            checking = asyncio.ensure_future(probe.check())
            await asyncio.sleep(0)  # the probe starts: its connection, then SELECT 1
            await asyncio.sleep(0)
            time.sleep(1.0)  # noqa: ASYNC251 (on purpose: the loop stops, the probe's timer overdue)
            assert await checking == (200, {"status": "ok", "database": "ok"})
        finally:
            await probe.aclose()
