"""Opening the database: embedded server, migrations under a lock, the environment URL."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

import popagent
from popagent.store.database import DATABASE_URL_ENV, DEFAULT_CHECKOUT_TIMEOUT, resolve_url
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


async def test_fresh_database_migrates_concurrently(database_url: str) -> None:
    name = "popagent_migrate_race"
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.execute(f"CREATE DATABASE {name}")
    target = psycopg.conninfo.make_conninfo(database_url, dbname=name)
    try:

        async def run() -> list[int]:
            async with await psycopg.AsyncConnection.connect(target) as conn:
                return await apply_migrations(conn)

        results = await asyncio.gather(*(run() for _ in range(4)))
        assert sorted(len(r) for r in results) == [0, 0, 0, len(load_migrations())]
    finally:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_connect_without_url_starts_and_stops_an_embedded_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    data_dir = tmp_path / "data"
    cluster = data_dir / "pgdata"
    async with popagent.connect(data_dir=data_dir) as memory:
        await memory.remember("popagent-user", "Persisted across restarts")
        assert (cluster / "PG_VERSION").exists()
        assert (cluster / "postmaster.pid").exists()
    assert not (cluster / "postmaster.pid").exists()  # stopped cleanly
    async with popagent.connect(data_dir=data_dir) as memory:
        facts = await memory.list_facts("popagent-user")
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


async def test_a_caller_waits_at_most_the_checkout_timeout(database_url: str) -> None:
    async with popagent.connect(database_url, max_size=1, checkout_timeout=0.5) as memory:
        async with memory.pool.connection():
            began = time.monotonic()
            with pytest.raises(popagent.DatabaseError, match="did not answer in time"):
                async with memory.pool.connection():
                    pass
            assert time.monotonic() - began < 5
        assert memory.pool.timeout == 0.5
    async with popagent.connect(database_url) as memory:
        assert memory.pool.timeout == DEFAULT_CHECKOUT_TIMEOUT == 2.0


async def test_cancellation_is_never_translated(database_url: str) -> None:
    async with popagent.connect(database_url, max_size=1) as memory:
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
