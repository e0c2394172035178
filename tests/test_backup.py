"""``popagent backup`` and ``popagent restore`` through the real CLI, in subprocesses.

Each test starts its own disposable embedded cluster in a temporary folder
(the suite's shared cluster is never restored over). The round trip fills
every popagent table across two resources, takes a digest of every table's
rows, every sequence and the schema, and compares them after restoring into
a fresh cluster and into the same database after changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import popagent
from popagent.embed import LocalEmbedder
from popagent.observe.settings_store import MemorySettingsStore
from popagent.secrets import SecretCipher, SecretDecryptError, SecretStore
from popagent.store import audit as audit_sql
from popagent.store import observations as obs_sql
from popagent.store.backup import tool_path
from popagent.store.embedded import EmbeddedServer
from popagent.threads import ThreadStore
from tests.observe_support import insert_observed

REPO = Path(__file__).parents[1]

LIST_TABLES = r"""
SELECT tablename FROM pg_tables
WHERE schemaname = current_schema() AND tablename LIKE 'popagent\_%' ORDER BY tablename
"""
TABLE_DIGEST = (
    "SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')), count(*) FROM {} t"
)
SEQUENCES = r"""
SELECT sequencename, last_value FROM pg_sequences
WHERE schemaname = current_schema() AND sequencename LIKE 'popagent\_%' ORDER BY sequencename
"""
SCHEMA = r"""
SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename LIKE 'popagent\_%'
UNION ALL
SELECT 'trigger ' || tgname || ' on ' || tgrelid::regclass::text FROM pg_trigger WHERE NOT tgisinternal
UNION ALL
SELECT 'extension ' || extname || ' ' || extversion FROM pg_extension
UNION ALL
SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'popagent\_%'
ORDER BY 1
"""


@dataclass(frozen=True)
class Cluster:
    data_dir: Path
    url: str


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A disposable embedded cluster of this test alone (the CLI shares it by --data-dir)."""
    server = EmbeddedServer(tmp_path / "a", delete=True)
    try:
        yield Cluster(server.data_dir, server.url)
    finally:
        server.stop()


def cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``popagent ARGS`` in a subprocess, without the caller's POPAGENT_* database settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("POPAGENT_DATABASE_URL", "POPAGENT_DATA_DIR", "POPAGENT_EMBEDDER")
    }
    return subprocess.run(
        [sys.executable, "-m", "popagent.cli", *args],
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=180,
    )


def pg_tool(name: str, *args: str | Path) -> str:
    """Run the wheel's ``name`` (pg_dump, pg_restore) directly; its stdout."""
    return subprocess.run(
        [tool_path(name), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def assert_refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 1 with one line on stderr, no traceback, and every word in it."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    message = done.stderr.strip()
    assert "Traceback" not in done.stderr and "\n" not in message, done.stderr
    for word in words:
        assert word in message, message


async def digests(url: str) -> dict[str, tuple[str, int]]:
    """Per popagent table: the md5 of its rows in order, and their count; plus sequences, schema."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        tables = [str(r[0]) for r in await (await conn.execute(LIST_TABLES)).fetchall()]
        found: dict[str, tuple[str, int]] = {}
        for table in tables:
            query = sql.SQL(TABLE_DIGEST).format(sql.Identifier(table))
            row = await (await conn.execute(query)).fetchone()
            assert row is not None
            found[table] = (str(row[0]), int(row[1]))
        sequences = await (await conn.execute(SEQUENCES)).fetchall()
        found["(sequences)"] = (repr(sequences), len(sequences))
        schema = [str(r[0]) for r in await (await conn.execute(SCHEMA)).fetchall()]
        found["(schema)"] = ("\n".join(schema), len(schema))
    return found


async def fill(url: str, cipher: SecretCipher, resources: tuple[str, str]) -> None:
    """Write to every popagent table, for both resources, through popagent's own paths."""
    async with popagent.connect(url, embedder=LocalEmbedder(), max_size=4) as memory:
        threads = ThreadStore(memory.pool)
        settings = MemorySettingsStore(memory.pool)
        secrets = SecretStore(memory.pool, cipher)
        for n, resource in enumerate(resources):
            await memory.remember(resource, f"Prefers green tea over coffee ({n})", key="drink")
            # A changed value: the old one becomes a row of popagent_fact_versions.
            await memory.remember(resource, f"Prefers oolong tea now ({n})", key="drink")
            await memory.remember(resource, f"Lives in Lisbon near the river, resource {n}")
            await memory.retain_episode(
                resource, "s1", "What should I pack for Porto?", "An umbrella: it rains in May."
            )
            session = await threads.create_session(resource, "s1", title=f"Trip {n}")
            sid = session.session_id
            first = await threads.append_message(resource, sid, "user", "Hello", turn="start")
            last = await threads.append_message(
                resource,
                sid,
                "assistant",
                "Hi! — ünïcödé ✓ 'quotes' \\ tab\t",
                turn_id=first.turn_id,
                turn="complete",
            )
            await threads.append_message(resource, sid, "user", "A message outside any turn")
            async with memory.pool.connection() as conn, conn.transaction():
                await insert_observed(
                    conn,
                    resource,
                    "s1",
                    first.id,
                    last.id,
                    "* User plans a trip to Porto",
                    tokens=7,
                    message_tokens=12,
                )
                await obs_sql.record_actor(conn, resource, "s1", "observer-test")
                await audit_sql.insert_audit_rows(
                    conn,
                    [
                        {
                            "resource_id": resource,
                            "session_id": "s1",
                            "call_id": uuid.uuid4(),
                            "hook": "after_tool_call",
                            "tool": "remember",
                            "model": None,
                            "started_at": datetime.now(UTC),
                            "duration_ms": 1.5,
                            "outcome": "ok",
                            "error_type": None,
                            "input_chars": 10,
                            "output_chars": 20,
                            "message_count": 2,
                            "argument_names": ["content", "key"],
                        }
                    ],
                )
            await settings.update(resource, observation_threshold_tokens=20_000 + n)
            await secrets.set(resource, "api_token", f"tok-{n}-0123456789abcdef")


@pytest.fixture
def resources() -> tuple[str, str]:
    return (f"bk-{uuid.uuid4().hex[:10]}", f"bk-{uuid.uuid4().hex[:10]}")


async def test_round_trip_restores_every_row_byte_for_byte(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    cipher = SecretCipher(os.urandom(32))
    await fill(cluster.url, cipher, resources)
    before = await digests(cluster.url)
    empty = [t for t, (_d, n) in before.items() if n == 0]
    assert empty == [], f"the fill left tables empty: {empty}"
    assert len(before) >= 15  # 13 tables today, plus sequences and schema

    archive = tmp_path / "popagent.backup"
    done = cli("--data-dir", str(cluster.data_dir), "backup", str(archive))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {archive} (")
    rows = sum(n for t, (_d, n) in before.items() if t.startswith("popagent_"))
    assert f"{len(before) - 2} tables, {rows} rows" in done.stdout
    assert archive.stat().st_mode & 0o077 == 0  # private to its owner
    assert [name for name in listing(tmp_path) if name.endswith(".partial")] == []

    # Secrets are in the archive as ciphertext only.
    secret_rows = pg_tool(
        "pg_restore", "--data-only", "--table=popagent_secrets", "-f", "-", archive
    )
    assert "COPY public.popagent_secrets" in secret_rows
    assert "0123456789abcdef" not in secret_rows

    # (a) into a fresh second cluster, through its own embedded server.
    fresh = tmp_path / "b"
    done = cli("--data-dir", str(fresh), "restore", str(archive), "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"restored {archive} into the embedded database in {fresh}")
    second = EmbeddedServer(fresh, delete=True)
    try:
        assert await digests(second.url) == before
        async with popagent.connect(second.url, embedder=LocalEmbedder(), max_size=2) as memory:
            assert await SecretStore(memory.pool, cipher).reveal(resources[0], "api_token") == (
                "tok-0-0123456789abcdef"
            )
            with pytest.raises(SecretDecryptError):
                await SecretStore(memory.pool, SecretCipher(os.urandom(32))).reveal(
                    resources[1], "api_token"
                )
            # The restored indexes and extensions work: trigram, full text and vectors.
            for mode in ("lexical", "vector"):
                found = await memory.recall(resources[1], "Lisbon river", mode=mode)
                assert any("Lisbon" in r.memory.content for r in found), mode
            assert await memory.recall(resources[0], "Lisbn", mode="lexical")  # misspelled
    finally:
        second.stop()

    # (b) into the same database after a cleanup and other writes.
    async with popagent.connect(cluster.url, max_size=2) as memory:
        await memory.cleanup(resources[0], kind=None, older_than=None)
        await memory.remember(resources[1], "A fact written after the backup")
        await ThreadStore(memory.pool).delete_session(resources[1], "s1")
        await SecretStore(memory.pool, cipher).set(resources[0], "later", "value-after-backup")
        await MemorySettingsStore(memory.pool).update(resources[0], temporal_markers=True)
    changed = await digests(cluster.url)
    assert changed != before
    done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes")
    assert done.returncode == 0, done.stderr
    assert await digests(cluster.url) == before

    # The sequences came back too: new rows take new ids, and the store works on.
    async with popagent.connect(cluster.url, max_size=2) as memory:
        result = await memory.remember(resources[0], "A fact written after the restore")
        assert result.action == "created"
        assert await SecretStore(memory.pool, cipher).reveal(resources[1], "api_token") == (
            "tok-1-0123456789abcdef"
        )


async def test_restore_refuses_what_is_not_a_popagent_backup(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    async with popagent.connect(cluster.url, max_size=2) as memory:
        await memory.remember(resources[0], "Keeps this fact")
    before = await digests(cluster.url)

    text = tmp_path / "notes.txt"
    text.write_text("not an archive\n", encoding="utf-8")
    done = cli("--database-url", cluster.url, "restore", str(text), "--yes")
    assert_refused(done, "not a popagent backup", "pg_restore")

    # A real pg_dump archive, of a database without popagent's tables.
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        await conn.execute("CREATE DATABASE other_app")
    other_url = cluster.url.replace("/postgres?", "/other_app?")
    async with await psycopg.AsyncConnection.connect(other_url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE invoices (id int PRIMARY KEY, total numeric)")
        await conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    foreign = tmp_path / "other.dump"
    pg_tool("pg_dump", "-Fc", "-f", foreign, "-d", other_url)
    done = cli("--database-url", cluster.url, "restore", str(foreign), "--yes")
    assert_refused(done, "not a popagent backup", "popagent_schema_migrations")

    done = cli("--database-url", cluster.url, "restore", str(tmp_path / "missing"), "--yes")
    assert_refused(done, "does not exist")

    # Nor is a database without popagent's tables backed up.
    done = cli("--database-url", other_url, "backup", str(tmp_path / "x.backup"))
    assert_refused(done, "no popagent tables")
    assert not (tmp_path / "x.backup").exists()
    assert await digests(cluster.url) == before


async def test_backup_refuses_to_overwrite_without_force(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    async with popagent.connect(cluster.url, max_size=2) as memory:
        await memory.remember(resources[0], "First version of the data")
    archive = tmp_path / "kept.backup"
    archive.write_bytes(b"something precious")
    done = cli("--database-url", cluster.url, "backup", str(archive))
    assert_refused(done, "already exists", "--force")
    assert archive.read_bytes() == b"something precious"

    done = cli("--database-url", cluster.url, "backup", str(tmp_path / "no" / "such" / "f"))
    assert_refused(done, "does not exist")
    empty = tmp_path / "empty"
    done = cli("--data-dir", str(empty), "backup", str(tmp_path / "nothing.backup"))
    assert_refused(done, "no popagent database in")
    assert not empty.exists() and not (tmp_path / "nothing.backup").exists()

    done = cli("--database-url", cluster.url, "backup", str(archive), "--force")
    assert done.returncode == 0, done.stderr
    assert archive.read_bytes().startswith(b"PGDMP")  # the custom format's magic
    assert listing(tmp_path) == ["a", "kept.backup"]


async def test_restore_refuses_while_another_client_is_connected(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    async with popagent.connect(cluster.url, max_size=2) as memory:
        await memory.remember(resources[0], "Backed-up fact")
    archive = tmp_path / "p.backup"
    assert cli("--database-url", cluster.url, "backup", str(archive)).returncode == 0
    before = await digests(cluster.url)
    async with popagent.connect(cluster.url, min_size=2, max_size=2) as memory:
        await memory.remember(resources[0], "Written while a server runs")
        after_write = await digests(cluster.url)
        # The pool's two connections are the other clients (as `popagent serve`'s would be).
        done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes")
        assert_refused(done, "other client(s) are connected", "popagent serve", "--force")
        assert await digests(cluster.url) == after_write
        done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes", "--force")
        assert done.returncode == 0, done.stderr
    assert await digests(cluster.url) == before


async def test_restore_asks_first_and_changes_nothing_when_it_fails(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    async with popagent.connect(cluster.url, max_size=2) as memory:
        await memory.remember(resources[0], "Backed-up fact")
    archive = tmp_path / "p.backup"
    assert cli("--database-url", cluster.url, "backup", str(archive)).returncode == 0
    async with popagent.connect(cluster.url, max_size=2) as memory:
        await memory.remember(resources[1], "A fact the backup does not hold")
    changed = await digests(cluster.url)

    done = cli("--database-url", cluster.url, "restore", str(archive), input="n\n")
    assert done.returncode == 1 and "Replace everything in database 'postgres'" in done.stdout
    assert await digests(cluster.url) == changed

    # Another program's table uses the vector type: dropping the extension fails,
    # and the single transaction takes back every table it had dropped already.
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE other_program (v vector(3))")
    done = cli("--database-url", cluster.url, "restore", str(archive), "--yes")
    assert_refused(done, "pg_restore failed", "the database is unchanged", "vector")
    assert await digests(cluster.url) == changed

    # A database newer than the backup (a later popagent migrated it) is refused.
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        await conn.execute("DROP TABLE other_program")
        await conn.execute(
            "INSERT INTO popagent_schema_migrations (version, name) VALUES (9999, 'future')"
        )
    done = cli("--database-url", cluster.url, "restore", str(archive), "--yes")
    assert_refused(done, "schema version 9999, newer than the backup's")
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        await conn.execute("DELETE FROM popagent_schema_migrations WHERE version = 9999")
    assert await digests(cluster.url) == changed


def test_backup_and_restore_are_documented() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "backup.md").read_text(encoding="utf-8")
    assert "### Backup and restore" in readme and "docs/backup.md" in readme
    for phrase in ("pg_dump", "--single-transaction", "every resource", "--force", "--yes"):
        assert phrase in docs, phrase
