"""Opening the database: embedded server, migrations under a lock, the environment URL."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import psycopg
import pytest

import popagent
from popagent import errors
from popagent.models import MemoryFilter
from popagent.store.database import (
    DATABASE_URL_ENV,
    DEFAULT_CHECKOUT_TIMEOUT,
    DEFAULT_QUEUE_LIMIT,
    DEFAULT_QUEUE_TIMEOUT,
    Pool,
    open_pool,
    resolve_url,
)
from popagent.store.migrate import MIGRATION_LOCK_ID, apply_migrations, load_migrations


def test_migrations_are_numbered_in_order() -> None:
    migrations = load_migrations()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert "CREATE EXTENSION IF NOT EXISTS pg_trgm" in migrations[0].sql


async def test_concurrent_migration_runs_apply_once(
    database_url: str,
    memory: popagent.LongTermMemory,  # its connect applied the migrations
) -> None:
    async def run() -> list[int]:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            return await apply_migrations(conn)

    results = await asyncio.gather(*(run() for _ in range(5)))
    assert all(r == [] for r in results)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute("SELECT version FROM popagent_schema_migrations ORDER BY version")
        assert [r[0] for r in await cur.fetchall()] == [m.version for m in load_migrations()]
        cur = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE objid = %s", (MIGRATION_LOCK_ID % 2**32,)
        )
        row = await cur.fetchone()
        assert row is not None and row[0] == 0


async def test_fresh_database_migrates_concurrently(scratch_url: str) -> None:
    async def run() -> list[int]:
        async with await psycopg.AsyncConnection.connect(scratch_url) as conn:
            return await apply_migrations(conn)

    results = await asyncio.gather(*(run() for _ in range(4)))
    assert sorted(len(r) for r in results) == [0, 0, 0, len(load_migrations())]


async def test_connect_without_url_starts_and_stops_an_embedded_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    data_dir = tmp_path / "data"
    cluster = data_dir / "pgdata"
    async with popagent.connect(data_dir=data_dir) as root:
        memory = root.memory
        await memory.remember("popagent-user", "Persisted across restarts")
        assert (cluster / "PG_VERSION").exists()
        assert (cluster / "postmaster.pid").exists()
    assert not (cluster / "postmaster.pid").exists()  # stopped cleanly
    async with popagent.connect(data_dir=data_dir) as root:
        memory = root.memory
        facts = await memory.list("popagent-user", MemoryFilter(kind="fact"))
        assert [f.content for f in facts] == ["Persisted across restarts"]
    assert not (cluster / "postmaster.pid").exists()


def test_environment_url_wins_over_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql://example/db")
    assert resolve_url(None) == "postgresql://example/db"
    assert resolve_url("postgresql://explicit/db") == "postgresql://explicit/db"
    monkeypatch.delenv(DATABASE_URL_ENV)
    assert resolve_url(None) is None


async def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(popagent.DatabaseError, match="could not connect") as caught:
        async with popagent.connect(f"postgresql:///nodb?host={tmp_path}&connect_timeout=2"):
            pass
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("url", ["garbage://", "postgresql://u:hunter2@h:5432/db?nope=1"])
async def test_an_unparsable_url_is_a_database_error_that_hides_the_url(url: str) -> None:
    with pytest.raises(popagent.DatabaseError, match="not a valid PostgreSQL") as caught:
        async with popagent.connect(url):
            pass
    assert "hunter2" not in str(caught.value) and "garbage" not in str(caught.value)


# --- the pool: failures become DatabaseError, nothing else changes -------------------------


def _raise_sql(errcode: str) -> str:
    """A statement the server fails with SQLSTATE ``errcode`` (a real server error)."""
    return f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{errcode}', MESSAGE = 'raised'; END $$"


async def test_a_lost_connection_is_a_database_error_and_the_pool_recovers(
    memory: popagent.LongTermMemory,
) -> None:
    with pytest.raises(popagent.DatabaseError, match="connection to PostgreSQL was lost") as caught:
        async with memory.pool.connection() as conn:
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    assert isinstance(caught.value.__cause__, psycopg.errors.AdminShutdown)
    async with memory.pool.connection() as conn:
        cur = await conn.execute("SELECT 1 AS one")
        assert await cur.fetchone() == {"one": 1}


async def test_disk_full_says_so(memory: popagent.LongTermMemory) -> None:
    with pytest.raises(popagent.DatabaseError, match="out of disk space") as caught:
        async with memory.pool.connection() as conn, conn.transaction():
            await conn.execute(_raise_sql("disk_full"))
    assert isinstance(caught.value.__cause__, psycopg.errors.DiskFull)


@pytest.mark.parametrize(
    ("errcode", "kind"),
    [
        ("unique_violation", psycopg.errors.UniqueViolation),
        ("foreign_key_violation", psycopg.errors.ForeignKeyViolation),
        ("check_violation", psycopg.errors.CheckViolation),
        ("invalid_text_representation", psycopg.errors.InvalidTextRepresentation),
    ],
)
async def test_other_errors_pass_unchanged(
    memory: popagent.LongTermMemory, errcode: str, kind: type[psycopg.Error]
) -> None:
    with pytest.raises(kind):
        async with memory.pool.connection() as conn:
            await conn.execute(_raise_sql(errcode))


# --- the pool's queue: waiting in line is not an outage ------------------------------------


async def _use(pool: Pool, seconds: float = 0.0) -> None:
    async with pool.connection() as conn:
        await conn.execute("SELECT pg_sleep(%s)", (seconds,))


async def test_a_burst_larger_than_the_pool_waits_in_line(database_url: str) -> None:
    # 100 callers on 2 connections, each holding one 20 ms: the last waits about 1 s,
    # twice the checkout timeout, which now bounds only waits for a server known away.
    async with popagent.connect(database_url, max_size=2, checkout_timeout=0.5) as root:
        memory = root.memory
        outcomes = await asyncio.gather(
            *(_use(memory.pool, 0.02) for _ in range(100)), return_exceptions=True
        )
        assert [o for o in outcomes if o is not None] == []
        assert memory.pool.down_since is None
        assert (memory.pool.timeout, memory.pool.queue_timeout) == (
            DEFAULT_QUEUE_TIMEOUT + 0.5,
            DEFAULT_QUEUE_TIMEOUT,
        )
    async with popagent.connect(database_url) as root:
        memory = root.memory
        pool = memory.pool
        assert (pool.checkout_timeout, pool.queue_timeout, pool.queue_limit) == (
            DEFAULT_CHECKOUT_TIMEOUT,
            DEFAULT_QUEUE_TIMEOUT,
            DEFAULT_QUEUE_LIMIT,
        )
        assert (DEFAULT_CHECKOUT_TIMEOUT, DEFAULT_QUEUE_TIMEOUT, DEFAULT_QUEUE_LIMIT) == (
            2.0,
            30.0,
            10_000,
        )


async def test_past_the_queue_limits_a_caller_gets_a_busy_error(database_url: str) -> None:
    async with (
        # A queue timeout that a busy machine cannot outrun: the waiter below must
        # still be waiting when the next caller comes.
        popagent.connect(database_url, max_size=1, queue_timeout=5, queue_limit=1) as root,
        root.pool.connection(),
    ):
        memory = root.memory
        began = time.monotonic()
        with pytest.raises(errors.DatabaseBusyError, match="stayed in use") as waited:
            await _use(memory.pool)
        assert 4.9 < time.monotonic() - began < 60
        # One caller already waits: the next is refused at once, not queued (queued,
        # it would wait out the queue timeout and be told "stayed in use").
        waiter = asyncio.ensure_future(_use(memory.pool))
        await asyncio.sleep(0.05)
        began = time.monotonic()
        with pytest.raises(errors.DatabaseBusyError, match="queue for one is full") as full:
            await _use(memory.pool)
        assert time.monotonic() - began < 4
        with pytest.raises(errors.DatabaseBusyError):
            await waiter
    for caught in (waited, full):
        assert isinstance(caught.value, popagent.DatabaseError)  # a DatabaseError subclass
        assert "PostgreSQL" not in str(caught.value)  # not an outage report
    assert memory.pool.down_since is None


async def test_a_server_known_away_ends_the_wait_within_the_checkout_timeout(
    database_url: str,
) -> None:
    async with popagent.connect(database_url, max_size=1, checkout_timeout=0.5) as root:
        memory = root.memory
        pool = memory.pool
        async with pool.connection():
            waiter = asyncio.ensure_future(_use(pool))
            await asyncio.sleep(0.3)  # in line, well within the queue timeout
            marked = time.monotonic()
            pool.down_since = marked  # as the supervisor or a lost connection marks it
            with pytest.raises(popagent.DatabaseError, match="does not answer") as caught:
                await waiter
            assert 0.4 < time.monotonic() - marked < 15  # not the 30 s queue timeout
            assert not isinstance(caught.value, errors.DatabaseBusyError)
            # A caller arriving while it is away waits the checkout timeout, no longer.
            began = time.monotonic()
            with pytest.raises(popagent.DatabaseError, match="does not answer"):
                await _use(pool)
            assert 0.4 < time.monotonic() - began < 15
        await _use(pool)  # the next connection used clears the mark
        assert pool.down_since is None


class _SilentServer:
    """A TCP listener on 127.0.0.1 that accepts connections and never answers."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)

        self.server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"postgresql://nobody@127.0.0.1:{port}/nodb?connect_timeout=30"

    async def __aexit__(self, *exc: object) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()


async def test_a_silent_server_is_found_away_by_the_probe() -> None:
    # Connections hang rather than fail, so nothing is "lost": the probe tells a silent
    # server from a busy one, and the callers get the outage, not "busy" after 30 s.
    async with (
        _SilentServer() as url,
        open_pool(url, migrated=True, checkout_timeout=0.5, min_size=0, max_size=2) as pool,
    ):
        began = time.monotonic()
        with pytest.raises(popagent.DatabaseError, match="does not answer") as caught:
            await _use(pool)
        assert time.monotonic() - began < 15  # not "busy" after the 30 s queue timeout
        assert not isinstance(caught.value, errors.DatabaseBusyError)
        assert pool.down_since is not None
        await pool.close(timeout=0.1)


async def test_a_busy_pool_is_not_probed_away(database_url: str) -> None:
    # Callers wait far longer than the checkout timeout, yet connections keep coming
    # back: busy, never marked away.
    async with popagent.connect(database_url, max_size=1, checkout_timeout=0.2) as root:
        memory = root.memory
        outcomes = await asyncio.gather(
            *(_use(memory.pool, 0.05) for _ in range(20)), return_exceptions=True
        )
        assert [o for o in outcomes if o is not None] == []
        assert memory.pool.down_since is None


def _blocked_owner_run(pool: Pool, threads: int) -> list[object]:
    """Each of ``threads`` threads runs a loop of its own that uses ``pool`` while the
    caller (the pool's loop) waits for them, blocked; what each got (or raised)."""
    results: list[object] = []

    def work(n: int) -> None:
        async def use() -> object:
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT %s::int AS n", (n,))
                return await cur.fetchone()

        try:
            results.append(asyncio.run(use()))
        except BaseException as exc:
            results.append(exc)

    workers = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=20)
    return results


async def test_callers_on_other_event_loops_get_connections_of_their_own(
    database_url: str,
) -> None:
    async with popagent.connect(database_url, max_size=2) as root:
        memory = root.memory
        got = _blocked_owner_run(memory.pool, 6)  # blocks this loop, the pool's
        assert sorted(got, key=str) == [{"n": n} for n in range(6)]
        await _use(memory.pool)  # the pool itself is untouched
    # Nothing was left open on the threads' closed loops: the pool closed cleanly.


async def test_cancellation_is_never_translated(database_url: str) -> None:
    async with popagent.connect(database_url, max_size=1) as root:
        memory = root.memory
        entered = asyncio.Event()

        async def hold() -> None:
            async with memory.pool.connection() as conn:
                entered.set()
                await conn.execute("SELECT pg_sleep(30)")

        holder = asyncio.create_task(hold())
        await entered.wait()
        waiter = asyncio.create_task(memory.pool.connection().__aenter__())
        await asyncio.sleep(0.1)
        for task in (waiter, holder):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        async with memory.pool.connection() as conn:  # the pool is whole afterwards
            await conn.execute("SELECT 1")
