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
from popagent.models import MemoryFilter
from popagent.observe.settings_store import MemorySettingsStore
from popagent.secrets import SecretCipher, SecretDecryptError, SecretStore
from popagent.store import audit as audit_sql
from popagent.store import observations as obs_sql
from popagent.store.backup import tool_path
from popagent.store.embedded import EmbeddedServer
from popagent.threads import ThreadStore
from tests.observe_support import insert_observed

REPO = Path(__file__).parents[1]
CALLER_MODEL = "caller:backup-test:3"
CALLER = [0.5, -1.25, 3.0]

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


def pg_list(archive: Path) -> subprocess.CompletedProcess[bytes]:
    """``pg_restore --list ARCHIVE`` of the wheel, however it ends."""
    return subprocess.run([tool_path("pg_restore"), "--list", archive], capture_output=True)


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
    async with popagent.connect(url, embedder=LocalEmbedder(), max_size=4) as root:
        memory = root.memory
        threads = ThreadStore(memory.pool)
        settings = MemorySettingsStore(memory.pool)
        secrets = SecretStore(memory.pool, cipher)
        for n, resource in enumerate(resources):
            # With an event clock, which the value's version keeps (migration 0025).
            await memory.remember(
                resource, f"Prefers green tea over coffee ({n})", key="drink", happened_at="2019"
            )
            # A derived fact (migration 0022): its sources, and the stale mark it gets
            # when the value below changes.
            await memory.remember(
                resource, f"Brews tea at 80 degrees ({n})", key="brewing", based_on=["drink"]
            )
            # A changed value: the old one becomes a row of popagent_fact_versions.
            await memory.remember(resource, f"Prefers oolong tea now ({n})", key="drink")
            # Both clocks: each of these has an event clock as well as its record times.
            lives = await memory.remember(
                resource, f"Lives in Lisbon near the river, resource {n}", happened_at="2019"
            )
            trip = await memory.retain_episode(
                resource,
                "s1",
                "What should I pack for Porto next week?",
                "An umbrella: it rains in May.",
            )
            assert lives.memory.happened_start and trip and trip.happened_start
            # A vector a caller made with its own model (LangGraph's ``index=``).
            await memory.write_caller_vectors(
                resource, lives.memory.id, lives.memory.content_sha256, CALLER_MODEL, [CALLER]
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
        for resource in resources:
            assert await memory.wait_for_vectors(resource) == 0
        # The credential tables (migration 0017): a key, a login, a failed login, audit rows.
        from popagent.keys import KeyStore
        from popagent.web.logins import LoginStore

        keys = KeyStore(memory.pool)
        await keys.create(resources[0], "backup-test", "write")
        logins = LoginStore(memory.pool)
        principal = await keys.authenticate((await keys.create(resources[1], "b", "read"))[1])
        assert principal is not None
        await logins.open(principal)
        await logins.failed("192.0.2.7", "a-wrong-credential")
    # A process without a model leaves its memory's vectors pending (for the next worker).
    async with popagent.connect(url, embedder=None, max_size=1) as lexical_root:
        lexical = lexical_root.memory
        await lexical.remember(resources[0], "Noted by a process without a model")


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
        async with popagent.connect(second.url, embedder=LocalEmbedder(), max_size=2) as root:
            memory = root.memory
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
            # The vectors a caller made came back with them (popagent cannot remake them).
            facts = await memory.list(resources[1], MemoryFilter(kind="fact"))
            scores = await memory.caller_vector_scores(
                resources[1], CALLER_MODEL, CALLER, ids=[f.id for f in facts]
            )
            assert list(scores.values()) == [pytest.approx(1.0)]
            # A derived fact's sources and stale mark came back with its row.
            (brewing,) = await memory.list(resources[1], MemoryFilter(key="brewing"))
            assert brewing.based_on == ("drink",) and brewing.stale_source == "drink"
            assert brewing.stale_since is not None
            # An earlier value's event clock came back with its version.
            (drink,) = await memory.list(resources[1], MemoryFilter(key="drink"))
            (earlier,) = await memory.fact_history(resources[1], drink.id)
            assert earlier.happened_precision == "year" and earlier.happened_start is not None
    finally:
        second.stop()

    # (b) into the same database after a cleanup and other writes.
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
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
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
        result = await memory.remember(resources[0], "A fact written after the restore")
        assert result.action == "created"
        assert await SecretStore(memory.pool, cipher).reveal(resources[1], "api_token") == (
            "tok-1-0123456789abcdef"
        )


async def test_restore_refuses_what_is_not_a_popagent_backup(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
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

    # A damaged table of contents (an entry without a kind) crashes pg_restore --list
    # itself, which then prints nothing: the refusal still says what happened.
    from tests import pg_archive

    good = tmp_path / "good.backup"
    assert cli("--database-url", cluster.url, "backup", str(good)).returncode == 0
    archive = pg_archive.read(good.read_bytes())
    archive.entry("EXTENSION").kind = None
    damaged = tmp_path / "damaged.backup"
    damaged.write_bytes(pg_archive.write(archive))
    raw = pg_list(damaged)
    assert raw.returncode < 0 and raw.stderr == b"", raw  # the control: a silent crash
    done = cli("--database-url", cluster.url, "restore", str(damaged), "--yes")
    assert_refused(done, "pg_restore cannot read it: it crashed (signal", "the file is damaged")

    # Nor is a database without popagent's tables backed up.
    done = cli("--database-url", other_url, "backup", str(tmp_path / "x.backup"))
    assert_refused(done, "no popagent tables")
    assert not (tmp_path / "x.backup").exists()
    assert await digests(cluster.url) == before


async def test_backup_refuses_to_overwrite_without_force(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
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
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
        await memory.remember(resources[0], "Backed-up fact")
    archive = tmp_path / "p.backup"
    assert cli("--database-url", cluster.url, "backup", str(archive)).returncode == 0
    before = await digests(cluster.url)
    async with popagent.connect(cluster.url, min_size=2, max_size=2) as root:
        memory = root.memory
        await memory.remember(resources[0], "Written while a server runs")
        assert await memory.wait_for_vectors(resources[0]) == 0
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
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
        await memory.remember(resources[0], "Backed-up fact")
    archive = tmp_path / "p.backup"
    assert cli("--database-url", cluster.url, "backup", str(archive)).returncode == 0
    async with popagent.connect(cluster.url, max_size=2) as root:
        memory = root.memory
        await memory.remember(resources[1], "A fact the backup does not hold")
    changed = await digests(cluster.url)

    done = cli("--database-url", cluster.url, "restore", str(archive), input="n\n")
    assert done.returncode == 1 and "Replace everything in database 'postgres'" in done.stdout
    assert await digests(cluster.url) == changed

    # Another program's table references popagent_sessions: dropping it fails (no
    # CASCADE), and the single transaction takes back everything it had done already.
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE other_program (r text, s text, "
            "FOREIGN KEY (r, s) REFERENCES popagent_sessions (resource_id, session_id))"
        )
    done = cli("--database-url", cluster.url, "restore", str(archive), "--yes")
    assert_refused(done, "the restore failed", "the database is unchanged", "depend")
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
    for phrase in ("pg_dump", "one transaction", "every resource", "--force", "--yes"):
        assert phrase in docs, phrase


# --- a restore runs only data ------------------------------------------------------------------


def database_url(cluster: Cluster, name: str, user: str = "postgres") -> str:
    return cluster.url.replace("postgres:@/postgres?", f"{user}:@/{name}?")


async def admin(url: str, *statements: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement.encode())


async def popagent_database(cluster: Cluster, name: str, resource: str) -> str:
    """A new database of the cluster, migrated, with a fact and a session; its URL."""
    await admin(cluster.url, f"CREATE DATABASE {name}")
    url = database_url(cluster, name)
    async with popagent.connect(url, embedder=None, max_size=1) as root:
        memory = root.memory
        await memory.remember(resource, f"Keeps notes in {name}")
        await ThreadStore(memory.pool).create_session(resource, "s1", title="A session")
    return url


def raw_restore(url: str, archive: Path) -> None:
    """``pg_restore`` itself, as popagent ran it before (errors ignored: the control)."""
    subprocess.run(
        [tool_path("pg_restore"), "--no-owner", "-d", url, archive], capture_output=True, timeout=60
    )


def restore_refused(cluster: Cluster, archive: Path, *words: str) -> None:
    done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes")
    assert_refused(done, "nothing was restored", *words)


async def test_restore_refuses_objects_popagent_does_not_create(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    """Backups of a popagent database to which something was added are refused, naming it."""
    async with popagent.connect(cluster.url, embedder=None, max_size=1) as root:
        memory = root.memory
        await memory.remember(resources[0], "The target's own fact")
    before = await digests(cluster.url)
    source = await popagent_database(cluster, "crafted", resources[1])
    cases = {
        "a function": (
            "CREATE FUNCTION popagent_note() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "DROP FUNCTION popagent_note()",
            "FUNCTION public popagent_note() postgres",
        ),
        "a trigger": (
            "CREATE TRIGGER popagent_sessions_copy AFTER INSERT ON popagent_sessions "
            "FOR EACH ROW EXECUTE FUNCTION popagent_memories_queue_vectors()",
            "DROP TRIGGER popagent_sessions_copy ON popagent_sessions",
            "TRIGGER public popagent_sessions popagent_sessions_copy postgres",
        ),
        "an extension": ("CREATE EXTENSION hstore", "DROP EXTENSION hstore", "EXTENSION - hstore"),
        "another program's table": (
            "CREATE TABLE invoices (id int PRIMARY KEY); INSERT INTO invoices VALUES (1)",
            "DROP TABLE invoices",
            "TABLE public invoices postgres",
        ),
        "an index": (
            "CREATE INDEX popagent_sessions_title_idx ON popagent_sessions (title)",
            "DROP INDEX popagent_sessions_title_idx",
            "INDEX public popagent_sessions_title_idx postgres",
        ),
        "a view": (
            "CREATE VIEW popagent_all AS SELECT * FROM popagent_memories",
            "DROP VIEW popagent_all",
            "VIEW public popagent_all postgres",
        ),
    }
    for case, (add, undo, entry) in cases.items():
        await admin(source, add)
        archive = tmp_path / f"{case.replace(' ', '-')}.backup"
        pg_tool("pg_dump", "-Fc", "-f", archive, "-d", source)
        await admin(source, undo)
        assert entry in pg_tool("pg_restore", "--list", archive), case
        restore_refused(cluster, archive, entry, "popagent's migrations do not create")
        assert await digests(cluster.url) == before, case

    # Rows for a column popagent's table does not have (an operator's ALTER TABLE).
    await admin(source, "ALTER TABLE popagent_sessions ADD COLUMN owner_note text")
    archive = tmp_path / "column.backup"
    pg_tool("pg_dump", "-Fc", "-f", archive, "-d", source)
    restore_refused(cluster, archive, "owner_note", "popagent_sessions")
    await admin(source, "ALTER TABLE popagent_sessions DROP COLUMN owner_note")

    # A backup of a newer popagent: a migration this one does not know.
    await admin(
        source, "INSERT INTO popagent_schema_migrations (version, name) VALUES (9998, 'future')"
    )
    archive = tmp_path / "newer.backup"
    pg_tool("pg_dump", "-Fc", "-f", archive, "-d", source)
    done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes")
    assert_refused(done, "made by a newer popagent", "migration 9998 (future)")
    assert await digests(cluster.url) == before
    # A gap in the applied migrations: one removed with what it created. Rebuilt
    # from the others it would restore, reporting the newest version: refused.
    await admin(
        source,
        "DELETE FROM popagent_schema_migrations WHERE version IN (19, 9998)",
        "ALTER TABLE popagent_resource_stats DROP COLUMN content_bytes",
    )
    archive = tmp_path / "gap.backup"
    pg_tool("pg_dump", "-Fc", "-f", archive, "-d", source)
    done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes")
    assert_refused(done, "lacks migration 19 (content_bytes)", "nothing was restored")
    assert await digests(cluster.url) == before
    # Nothing was left behind: no scratch schema, no restore role.
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        left = await conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'popagent\\_%' "
            # (popagent_tenant is migration 0018's role, for row-level security: it stays.)
            "UNION ALL SELECT rolname FROM pg_roles WHERE rolname LIKE 'popagent\\_restore\\_%'"
        )
        assert await left.fetchall() == []


async def test_an_edited_backup_runs_nothing(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    """Statements an attacker adds to a backup never run: refused before anything runs, or
    (in a definition popagent never reads) ignored; raw pg_restore would have run each."""
    from tests import pg_archive

    async with popagent.connect(cluster.url, embedder=None, max_size=1) as root:
        memory = root.memory
        await memory.remember(resources[0], "The target's own fact")
    before = await digests(cluster.url)
    source = await popagent_database(cluster, "edited", resources[1])
    original = tmp_path / "original.backup"
    pg_tool("pg_dump", "-Fc", "-f", original, "-d", source)
    source_digests = await digests(source)

    def crafted(name: str, edit: object) -> tuple[Path, Path]:
        """The backup with ``edit`` applied; the file the added program would create."""
        # In the cluster's folder: the server's OS user may write there (as root, the
        # wheel runs PostgreSQL as a user of its own, who cannot write to tmp_path).
        marker = cluster.data_dir / "pgdata" / f"ran-{name}"
        archive = pg_archive.read(original.read_bytes())
        program = f"COPY (SELECT 1) TO PROGRAM 'touch {marker}';"
        assert callable(edit)
        edit(archive, program)
        path = tmp_path / f"{name}.backup"
        path.write_bytes(pg_archive.write(archive))
        return path, marker

    def added_entry(a: pg_archive.Archive, program: str) -> None:
        pg_archive.add_entry(a, "TABLE", "popagent_notes", program + "\n", schema="public")

    def in_copy_line(a: pg_archive.Archive, program: str) -> None:
        entry = a.entry("TABLE DATA", "popagent_sessions")
        entry.copy = program + "\n" + (entry.copy or "")

    def in_search_path(a: pg_archive.Archive, program: str) -> None:
        entry = a.entry("SEARCHPATH")
        entry.definition = (entry.definition or "") + program + "\n"

    def in_definition(a: pg_archive.Archive, program: str) -> None:
        entry = a.entry("TABLE", "popagent_sessions")
        entry.definition = (entry.definition or "") + "\n" + program + "\n"

    refusals = {
        "added-entry": (added_entry, "TABLE public popagent_notes"),
        "copy-line": (in_copy_line, "TO PROGRAM"),
        "search-path": (in_search_path, "TO PROGRAM"),
    }
    for n, (name, (edit, words)) in enumerate(refusals.items()):
        archive, marker = crafted(name, edit)
        restore_refused(cluster, archive, words)
        assert not marker.exists(), name
        assert await digests(cluster.url) == before, name
        # The control: pg_restore itself runs the added program (as the superuser).
        await admin(cluster.url, f"CREATE DATABASE control_{n}")
        raw_restore(database_url(cluster, f"control_{n}"), archive)
        assert marker.exists(), f"the crafted {name} backup did not run its program"

    # In a definition (of popagent_sessions): the schema comes from popagent's own
    # migrations, so the definition is never run; the rows are restored as they were.
    archive, marker = crafted("definition", in_definition)
    done = cli("--data-dir", str(cluster.data_dir), "restore", str(archive), "--yes")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert await digests(cluster.url) == source_digests
    await admin(cluster.url, "CREATE DATABASE control_definition")
    raw_restore(database_url(cluster, "control_definition"), archive)
    assert marker.exists()


async def test_the_rows_are_loaded_by_a_role_that_cannot_run_programs(
    cluster: Cluster, tmp_path: Path, resources: tuple[str, str]
) -> None:
    from popagent.store.restore import _loading_role

    # The role a superuser's restore loads through: it may insert popagent's rows, and
    # can neither run a program nor read or write the server's files.
    marker = cluster.data_dir / "pgdata" / "ran"  # writable by the server's OS user
    async with popagent.connect(cluster.url, embedder=None, max_size=1) as root:
        memory = root.memory
        await memory.remember(resources[0], "A fact")
    async with await psycopg.AsyncConnection.connect(cluster.url) as conn:
        role = await _loading_role(conn, ["popagent_sessions"], ["popagent_messages_id_seq"])
        assert role is not None and role.startswith("popagent_restore_")
        await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        await conn.execute(
            "INSERT INTO popagent_sessions (resource_id, session_id) VALUES ('r', 's')"
        )
        for attempt in (
            f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'",
            "SELECT pg_read_file('PG_VERSION')",
            "COPY popagent_sessions FROM '/etc/hostname'",
            f"COPY (SELECT 1) TO '{marker}'",
            "SELECT * FROM popagent_memories",  # nothing but inserts
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                async with conn.transaction():
                    await conn.execute(attempt.encode())
        await conn.rollback()
    assert not marker.exists()

    # A non-superuser owner of its database restores as itself; one that may read the
    # server's files is refused.
    archive = tmp_path / "p.backup"
    assert cli("--database-url", cluster.url, "backup", str(archive)).returncode == 0
    before = await digests(cluster.url)
    await admin(
        cluster.url,
        "CREATE ROLE app_owner LOGIN",
        "CREATE DATABASE owned OWNER app_owner",
    )
    # Extensions that need a superuser (vector) are installed once by one, as for popagent.
    await admin(
        database_url(cluster, "owned"),
        "CREATE EXTENSION vector",
        "CREATE EXTENSION pg_trgm",
        "CREATE EXTENSION btree_gin",
    )
    owned = database_url(cluster, "owned", user="app_owner")
    done = cli("--database-url", owned, "restore", str(archive), "--yes")
    assert done.returncode == 0, done.stderr
    assert await digests(owned) == before
    await admin(cluster.url, "GRANT pg_read_server_files TO app_owner")
    done = cli("--database-url", owned, "restore", str(archive), "--yes")
    assert_refused(done, "is a member of pg_read_server_files", "cannot run programs")
    assert await digests(owned) == before
    async with await psycopg.AsyncConnection.connect(cluster.url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'popagent\\_restore\\_%'"
        )
        assert await cur.fetchall() == []


def test_restore_help_says_what_is_checked() -> None:
    done = cli("restore", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for phrase in ("trusted place", "popagent's own migrations", "never runs", "programs"):
        assert phrase in text, phrase
    docs = " ".join((REPO / "docs" / "backup.md").read_text(encoding="utf-8").split())
    for phrase in ("trusted place", "pg_restore --list", "TO PROGRAM", "never run"):
        assert phrase in docs, phrase
