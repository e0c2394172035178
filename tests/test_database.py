"""Opening the database: embedded server, migrations under a lock, the environment URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

import popagent
from popagent.store.database import DATABASE_URL_ENV, resolve_url
from popagent.store.migrate import MIGRATION_LOCK_ID, apply_migrations, load_migrations


def test_migrations_are_numbered_in_order() -> None:
    migrations = load_migrations()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    assert "CREATE EXTENSION IF NOT EXISTS pg_trgm" in migrations[0].sql


async def test_concurrent_migration_runs_apply_once(database_url: str) -> None:
    async def run() -> list[int]:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            return await apply_migrations(conn)

    results = await asyncio.gather(*(run() for _ in range(5)))
    assert all(r == [] for r in results)  # the fixture's connect already applied them
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
    data_dir = tmp_path / "pgdata"
    async with popagent.connect(data_dir=data_dir) as memory:
        await memory.remember("popagent-user", "Persisted across restarts")
        assert (data_dir / "PG_VERSION").exists()
        assert (data_dir / "postmaster.pid").exists()
    assert not (data_dir / "postmaster.pid").exists()  # stopped cleanly
    async with popagent.connect(data_dir=data_dir) as memory:
        facts = await memory.list_facts("popagent-user")
        assert [f.content for f in facts] == ["Persisted across restarts"]
    assert not (data_dir / "postmaster.pid").exists()


def test_environment_url_wins_over_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, "postgresql://example/db")
    assert resolve_url(None) == "postgresql://example/db"
    assert resolve_url("postgresql://explicit/db") == "postgresql://explicit/db"
    monkeypatch.delenv(DATABASE_URL_ENV)
    assert resolve_url(None) is None


async def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(popagent.DatabaseError, match="could not connect"):
        async with popagent.connect(f"postgresql:///nodb?host={tmp_path}&connect_timeout=2"):
            pass
