"""``popagent serve --workers N``: several processes, one socket, one cluster, one turn at a time.

Real ``popagent serve`` subprocesses on fresh embedded data dirs, and the
session turn lock on two pools of the suite's database (two pools hold two
connections, as two processes would).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

import popagent
from popagent.store.database import open_pool
from popagent.store.embedded import EmbeddedServer
from popagent.store.locks import session_turn_lock, turn_lock_held
from tests.fault_support import ServeProcess, clean_env, pid_alive, postmaster_pid, wait_for
from tests.scripted_model import Hang, Reply, Respond, ScriptedModelServer, Step


def _workers(serve: ServeProcess) -> list[psutil.Process]:
    assert serve.process is not None
    # uvicorn's workers are multiprocessing "spawn" children (not its resource tracker).
    found = []
    for p in psutil.Process(serve.process.pid).children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and any("spawn_main" in c for c in p.cmdline()):
                found.append(p)
        except psutil.Error:  # gone meanwhile
            continue
    return found


def _postgres_pids() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"}


@pytest.fixture
def scripted_echo() -> Iterator[ScriptedModelServer]:
    """A model that takes a moment and answers with the last user message, so an
    interleaved turn would show as a reply to the wrong message."""
    with ScriptedModelServer() as server:
        yield server


def _echo(body: dict[str, Any]) -> Step:
    last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return Hang(0.2, then=Reply(f"echo: {last}"))


def test_two_workers_share_one_cluster_and_stop_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = ServeProcess(data, tmp_path, args=["--workers", "2"])
    serve.start()
    try:
        wait_for(lambda: len(_workers(serve)) >= 2, 30, "two workers")
        postmaster = postmaster_pid(data)
        assert postmaster is not None and pid_alive(postmaster)
        # One cluster: a single postmaster serves this data dir, and no worker runs one.
        pgdata = str(data / "pgdata")
        postmasters = [
            p
            for p in psutil.process_iter(["cmdline"])
            if pgdata in (p.info["cmdline"] or []) and p.ppid() not in _postgres_pids()
        ]
        assert [p.pid for p in postmasters] == [postmaster]
        with httpx.Client(base_url=serve.base_url, timeout=10) as client:
            ids = set()
            for n in range(40):
                answer = client.post("/api/facts", json={"content": f"Fact number {n} of forty"})
                assert answer.status_code == 201, answer.text
                ids.add(answer.json()["id"])
            listed = client.get("/api/facts", params={"limit": 200}).json()["items"]
            assert {m["id"] for m in listed} >= ids
        assert serve.stop() == 0
        wait_for(lambda: not pid_alive(postmaster), 30, "the cluster stopped")
    finally:
        serve.stop()


def test_a_killed_worker_is_replaced_and_a_killed_parent_takes_its_workers(
    tmp_path: Path,
) -> None:
    serve = ServeProcess(tmp_path / "data", tmp_path, args=["--workers", "2"])
    serve.start()
    try:
        wait_for(lambda: len(_workers(serve)) >= 2, 30, "two workers")
        victim = _workers(serve)[0]
        victim.send_signal(signal.SIGKILL)
        wait_for(
            lambda: len([w for w in _workers(serve) if w.pid != victim.pid]) >= 2,
            60,
            "a replacement worker",
        )
        assert httpx.get(f"{serve.base_url}/healthz", timeout=10).status_code == 200
        workers = _workers(serve)
        serve.kill()  # the parent, SIGKILL: its workers must not outlive it
        wait_for(lambda: not any(pid_alive(w.pid) for w in workers), 30, "workers gone")
        # The port is free again: a new server binds it.
        again = ServeProcess(serve.data_dir, tmp_path, port=serve.port, args=["--workers", "2"])
        again.start()
        again.stop()
    finally:
        serve.stop()


def test_a_worker_started_during_an_outage_waits_for_the_database(tmp_path: Path) -> None:
    """A replacement worker that starts while the database is away comes up (uvicorn
    would stop the whole server if its startup failed), and every worker serves
    again once the database is back, /healthz included."""
    database = EmbeddedServer(tmp_path / "db", delete=True)
    env = {**clean_env(tmp_path), "POPAGENT_DATABASE_URL": database.url}
    serve = ServeProcess(tmp_path / "data", tmp_path, env=env, args=["--workers", "2"])
    try:
        serve.start()
        wait_for(lambda: len(_workers(serve)) >= 2, 30, "two workers")
        pid = database.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), 10, "the postmaster dying")
        victim = _workers(serve)[0]
        victim.send_signal(signal.SIGKILL)
        wait_for(
            lambda: len([w for w in _workers(serve) if w.pid != victim.pid]) >= 2,
            60,
            "a replacement worker",
        )
        time.sleep(1.0)  # the replacement's startup, which used to fail and stop everything
        assert serve.process is not None and serve.process.poll() is None
        assert httpx.get(f"{serve.base_url}/healthz", timeout=10).status_code == 503
        assert database.restart_if_down()

        def all_healthy() -> bool:
            # A new connection each time: the kernel hands it to either worker.
            return all(
                httpx.get(f"{serve.base_url}/healthz", timeout=10).status_code == 200
                for _ in range(12)
            )

        wait_for(all_healthy, 30, "every worker healthy again")
        created = httpx.post(f"{serve.base_url}/api/facts", json={"content": "Back again"})
        assert created.status_code == 201, created.text
    finally:
        serve.stop()
        database.stop()


def test_turns_of_one_session_never_interleave_across_workers(
    tmp_path: Path, scripted_echo: ScriptedModelServer
) -> None:
    scripted_echo.script(*[Respond(_echo) for _ in range(8)])
    env = clean_env(
        tmp_path,
        POPAGENT_MODEL_BASE_URL=scripted_echo.base_url,
        POPAGENT_MODEL="scripted-1",
        POPAGENT_MODEL_API_KEY="test-key",
        POPAGENT_MODEL_MAX_RETRIES="0",
    )
    serve = ServeProcess(tmp_path / "data", tmp_path, env=env, args=["--workers", "2"])
    serve.start()
    try:
        wait_for(lambda: len(_workers(serve)) >= 2, 30, "two workers")

        async def send_all() -> list[httpx.Response]:
            # Separate connections, so the kernel spreads them over both workers.
            async def one(n: int) -> httpx.Response:
                async with httpx.AsyncClient(base_url=serve.base_url, timeout=60) as client:
                    return await client.post(
                        "/api/sessions/shared/chat", json={"message": f"message {n}"}
                    )

            return await asyncio.gather(*(one(n) for n in range(8)))

        answers = asyncio.run(send_all())
        assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
        history = httpx.get(
            f"{serve.base_url}/api/sessions/shared/messages", params={"limit": 100}, timeout=10
        ).json()["items"]
        chat = [m for m in history if m["role"] in ("user", "assistant")]
        assert len(chat) == 16
        for user, assistant in zip(chat[::2], chat[1::2], strict=True):
            assert user["role"] == "user" and assistant["role"] == "assistant"
            assert assistant["content"] == f"echo: {user['content']}"
    finally:
        serve.stop()


async def test_the_turn_lock_spans_connections(database_url: str, resource: str) -> None:
    """Two pools (as two processes): the second waits until the first lets go."""
    async with (
        popagent.connect(database_url),
        open_pool(database_url, max_size=2) as first,
        open_pool(database_url, max_size=2) as second,
    ):
        order: list[str] = []
        async with session_turn_lock(first, resource, "s1"):
            async with first.connection() as conn:
                assert await turn_lock_held(conn, resource, "s1")
                assert not await turn_lock_held(conn, resource, "s2")

            async def contender() -> None:
                async with session_turn_lock(second, resource, "s1"):
                    order.append("second")

            task = asyncio.create_task(contender())
            await asyncio.sleep(0.3)
            assert not task.done()
            # Another session is not held up.
            async with session_turn_lock(second, resource, "s2"):
                order.append("other session")
            order.append("first done")
        await asyncio.wait_for(task, 60)
        assert order == ["other session", "first done", "second"]
        async with first.connection() as conn:
            assert not await turn_lock_held(conn, resource, "s1")


async def test_a_cancelled_waiter_leaves_no_lock_behind(database_url: str, resource: str) -> None:
    async with (
        popagent.connect(database_url),
        open_pool(database_url, max_size=1) as first,
        open_pool(database_url, max_size=1) as second,
    ):
        async with session_turn_lock(first, resource, "s"):
            waiter = asyncio.create_task(_hold(second, resource))
            await asyncio.sleep(0.2)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        # The one connection of ``second`` went back holding nothing: the lock is free.
        began = time.monotonic()
        async with session_turn_lock(second, resource, "s"):
            pass
        assert time.monotonic() - began < 30
        async with second.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                (conn.info.backend_pid,),
            )
            row = await cur.fetchone()
            assert row is not None and row["n"] == 0


async def _hold(pool: Any, resource: str) -> None:
    async with session_turn_lock(pool, resource, "s"):
        await asyncio.sleep(30)


def test_workers_default_to_one_per_core() -> None:
    from popagent.cli.workers import default_workers

    assert default_workers() == len(os.sched_getaffinity(0))
