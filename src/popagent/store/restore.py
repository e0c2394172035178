"""Restoring a popagent backup: the schema from popagent's migrations, only the rows from the file.

``pg_restore`` would run whatever SQL an archive holds, and a backup file can
be edited; so a restore never lets it. ``check_restorable`` and
``restore_database`` do this, in this order:

1. ``inspect_archive`` (``store.backup``) has read the archive without running
   it: every entry of ``pg_restore --list`` is one of the kinds a popagent
   backup holds, and every line of its data script is a row, a sequence
   position or one of the harmless lines ``pg_dump`` writes around them.
2. ``check_restorable`` builds the schema of the archive's migrations in a
   scratch schema of the target, inside a transaction it rolls back, and
   compares every entry with the objects found there (tables and their data,
   sequences, indexes, constraints, triggers, functions, the extensions the
   migrations create); anything else is refused, naming the entry, before
   anything is changed.
3. ``restore_database``, in one transaction: drops popagent's tables and
   functions, runs the archive's migrations (popagent's own SQL, the same
   files), checks the entries again against what they made, and loads the
   rows with ``COPY ... FROM STDIN`` statements built from the checked names,
   table after table in foreign-key order, and sets the sequences. The
   archive's definitions (``CREATE TABLE``, function bodies, triggers, its
   ``COPY`` lines) are never run; an edited definition changes nothing.
4. The rows are loaded by a role that can neither run programs on the server
   nor read or write its files: the connecting user itself when it has none
   of those rights, else (a superuser, as with the embedded server) a role
   made for the restore inside its transaction (``NOLOGIN``, no superuser, no
   membership in ``pg_execute_server_program``, ``pg_read_server_files`` or
   ``pg_write_server_files``), granted only what loading needs, dropped again
   before the commit. A non-superuser that has those rights is refused: it
   cannot switch to a smaller role.

On any error the transaction rolls back and the database is as it was.
This module opens its own connections (the CLI's edge) and never touches the pool.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterable

import psycopg
from psycopg import sql

from ..errors import BackupError, DatabaseError
from .archive import CopyRows, CopyStart, Event, Expected, SequenceSet, check_toc
from .backup import (
    MARKER_TABLE,
    RESTORE_LOCK_TIMEOUT,
    ArchiveInfo,
    RestoreReport,
    _connect,
    _one_line,
    data_events,
    schema_version,
    table_counts,
)
from .migrate import (
    CREATE_MIGRATIONS_TABLE,
    MIGRATION_LOCK_ID,
    Migration,
    check_server_version,
    load_migrations,
)

__all__ = ["check_restorable", "restore_database"]

Conn = psycopg.AsyncConnection[tuple[object, ...]]

_OURS = r"popagent\_%"

# Every object of popagent's in one schema, as pg_restore --list names it (kind, tag).
# pg_dump writes a function's tag with its argument types formatted under an empty
# search path, hence the SET LOCAL search_path before this query.
EXPECTED_OBJECTS = r"""
WITH ns AS (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = %(schema)s),
rel AS (
    SELECT c.oid, c.relname::text AS name, c.relkind, c.relrowsecurity FROM pg_catalog.pg_class c
    WHERE c.relnamespace = (SELECT oid FROM ns) AND c.relname LIKE 'popagent\_%%'
)
SELECT k.kind, rel.name FROM rel
CROSS JOIN (VALUES ('TABLE'), ('TABLE DATA')) AS k (kind) WHERE rel.relkind IN ('r', 'p')
UNION ALL
SELECT k.kind, rel.name FROM rel
CROSS JOIN (VALUES ('SEQUENCE'), ('SEQUENCE SET'), ('SEQUENCE OWNED BY')) AS k (kind)
WHERE rel.relkind = 'S'
UNION ALL
SELECT 'INDEX', i.relname::text FROM pg_catalog.pg_index x
JOIN rel ON rel.oid = x.indrelid JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
UNION ALL
SELECT CASE con.contype WHEN 'f' THEN 'FK CONSTRAINT' WHEN 'c' THEN 'CHECK CONSTRAINT'
            ELSE 'CONSTRAINT' END,
       rel.name || ' ' || con.conname
FROM pg_catalog.pg_constraint con JOIN rel ON rel.oid = con.conrelid
UNION ALL
SELECT 'TRIGGER', rel.name || ' ' || t.tgname FROM pg_catalog.pg_trigger t
JOIN rel ON rel.oid = t.tgrelid WHERE NOT t.tgisinternal
UNION ALL
SELECT 'DEFAULT', rel.name || ' ' || a.attname FROM pg_catalog.pg_attrdef d
JOIN rel ON rel.oid = d.adrelid
JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
UNION ALL
SELECT 'ROW SECURITY', rel.name FROM rel WHERE rel.relrowsecurity
UNION ALL
SELECT 'POLICY', rel.name || ' ' || pol.polname FROM pg_catalog.pg_policy pol
JOIN rel ON rel.oid = pol.polrelid
UNION ALL
SELECT 'FUNCTION', p.proname || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')'
FROM pg_catalog.pg_proc p
WHERE p.pronamespace = (SELECT oid FROM ns) AND p.proname LIKE 'popagent\_%%'
"""

# The columns a table's rows fill: generated columns are computed, never copied.
DATA_COLUMNS = r"""
SELECT c.relname::text, a.attname::text FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
WHERE c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = %(schema)s)
  AND c.relkind IN ('r', 'p') AND c.relname LIKE 'popagent\_%%'
  AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY c.relname, a.attnum
"""

# Which popagent table references which: rows are loaded parents first.
FOREIGN_KEYS = r"""
SELECT c.relname::text AS child, p.relname::text AS parent
FROM pg_catalog.pg_constraint con
JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
JOIN pg_catalog.pg_class p ON p.oid = con.confrelid
WHERE con.contype = 'f' AND c.relname LIKE 'popagent\_%%'
  AND c.relnamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = %(schema)s)
"""

OUR_TABLES = r"""
SELECT c.relname::text FROM pg_catalog.pg_class c
WHERE c.relnamespace = pg_catalog.current_schema()::regnamespace
  AND c.relkind IN ('r', 'p') AND c.relname LIKE 'popagent\_%'
ORDER BY 1
"""
OUR_SEQUENCES = r"""
SELECT c.relname::text FROM pg_catalog.pg_class c
WHERE c.relnamespace = pg_catalog.current_schema()::regnamespace
  AND c.relkind = 'S' AND c.relname LIKE 'popagent\_%'
ORDER BY 1
"""
OUR_FUNCTIONS = r"""
SELECT DISTINCT p.proname::text FROM pg_catalog.pg_proc p
WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace
  AND p.proname LIKE 'popagent\_%'
ORDER BY 1
"""
CURRENT_SCHEMA = "SELECT pg_catalog.current_schema()"
SEARCH_PATH = "SELECT pg_catalog.current_setting('search_path')"

# What the connecting user may do that a restore must not: run programs, read or write
# the server's files (superusers may do all three).
USER_RIGHTS = """
SELECT r.rolsuper,
       pg_catalog.pg_has_role(r.oid, 'pg_execute_server_program', 'MEMBER') AS programs,
       pg_catalog.pg_has_role(r.oid, 'pg_read_server_files', 'MEMBER') AS reads,
       pg_catalog.pg_has_role(r.oid, 'pg_write_server_files', 'MEMBER') AS writes
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""
SET_SEQUENCE = "SELECT pg_catalog.setval(pg_catalog.quote_ident(%s)::regclass, %s, %s)"

_EXTENSION_RE = re.compile(r"CREATE EXTENSION IF NOT EXISTS ([a-z0-9_]+)", re.IGNORECASE)


def _migrations_of(archive: ArchiveInfo) -> list[Migration]:
    """popagent's own migrations for the archive's versions; refuse versions it does not know."""
    known = {m.version: m for m in load_migrations()}
    wanted: list[Migration] = []
    for version, name in sorted(archive.migrations):
        mine = known.get(version)
        if mine is None:
            latest = max(known, default=0)
            raise BackupError(
                f"the backup was made by a newer popagent: it holds migration {version} "
                f"({name}), and this popagent knows migrations up to {latest}; "
                "restore it with that popagent or a later one"
            )
        if mine.name != name:
            raise BackupError(
                f"the backup's migration {version} is {name!r}, this popagent's is "
                f"{mine.name!r}: it was made by another build of popagent; nothing was restored"
            )
        wanted.append(mine)
    if not wanted:
        raise BackupError(f"the backup's {MARKER_TABLE} is empty; nothing was restored")
    # Migrations apply in order, each on what the ones before made: a backup that
    # lists one as missing (removed, with what it created) is not a schema any
    # popagent made, and rebuilding it without that one would report the newest.
    listed = {m.version for m in wanted}
    for version in sorted(v for v in known if v < wanted[-1].version and v not in listed):
        raise BackupError(
            f"the backup's {MARKER_TABLE} lacks migration {version} "
            f"({known[version].name}), which comes before its newest, {wanted[-1].version}: "
            "the backup is incomplete or was altered; nothing was restored"
        )
    return wanted


async def _build_schema(conn: Conn, migrations: Iterable[Migration]) -> None:
    """Run popagent's own migration SQL in the current transaction (its rows come later)."""
    await conn.execute(CREATE_MIGRATIONS_TABLE)
    for migration in migrations:
        await conn.execute(migration.sql.encode())


async def _expected(conn: Conn, schema: str, migrations: Iterable[Migration]) -> Expected:
    """The objects the migrations made in ``schema``, as ``pg_restore --list`` names them."""
    path = str((await (await conn.execute(SEARCH_PATH)).fetchone() or [""])[0])
    await conn.execute("SET LOCAL search_path TO pg_catalog")
    try:
        cur = await conn.execute(EXPECTED_OBJECTS, {"schema": schema})
        tags: dict[str, set[str]] = {}
        for kind, tag in await cur.fetchall():
            tags.setdefault(str(kind), set()).add(str(tag))
        cur = await conn.execute(DATA_COLUMNS, {"schema": schema})
        columns: dict[str, list[str]] = {}
        for table, column in await cur.fetchall():
            columns.setdefault(str(table), []).append(str(column))
    finally:
        await conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", [path])
    extensions = {name.lower() for m in migrations for name in _EXTENSION_RE.findall(m.sql)}
    return Expected(
        tags={kind: frozenset(found) for kind, found in tags.items()},
        columns={table: tuple(cols) for table, cols in columns.items()},
        extensions=frozenset(extensions),
        sequences=frozenset(tags.get("SEQUENCE", ())),
    )


def _check_rows(archive: ArchiveInfo, expected: Expected) -> None:
    """Every table the archive has rows for is popagent's, with columns it has."""
    for table, columns in archive.copies.items():
        have = expected.columns.get(table)
        if have is None:
            raise BackupError(
                f"the backup holds rows for the table {table!r}, which popagent's "
                "migrations do not create; nothing was restored"
            )
        unknown = [c for c in columns if c not in have]
        if unknown or len(set(columns)) != len(columns):
            raise BackupError(
                f"the backup's rows of {table} name the column(s) {', '.join(unknown) or columns!r}, "
                f"which popagent's {table} does not have; nothing was restored"
            )
    for sequence in archive.sequences:
        if sequence not in expected.sequences:
            raise BackupError(
                f"the backup sets the sequence {sequence!r}, which popagent's migrations do "
                "not create; nothing was restored"
            )


async def _check_rights(conn: Conn) -> bool:
    """Whether the connecting user is a superuser (it then loads through a smaller role).

    A non-superuser that may run programs or read or write the server's files
    is refused: it could not switch to a role without those rights.
    """
    cur = await conn.execute(USER_RIGHTS)
    row = await cur.fetchone()
    assert row is not None
    superuser, programs, reads, writes = (bool(v) for v in row)
    if superuser:
        return True
    rights = [
        name
        for name, has in (
            ("pg_execute_server_program", programs),
            ("pg_read_server_files", reads),
            ("pg_write_server_files", writes),
        )
        if has
    ]
    if rights:
        raise BackupError(
            f"the database user {conn.info.user!r} is a member of {', '.join(rights)}: "
            "a restore runs as a user that cannot run programs on the server or read or "
            "write its files; connect as a user without those roles (or as a superuser, "
            "for which popagent makes such a role for the restore)"
        )
    return False


async def check_restorable(url: str, archive: ArchiveInfo) -> int | None:
    """Refuse what ``restore_database`` would refuse, changing nothing; the target's version.

    Refuses a target newer than the archive, an archive of migrations this
    popagent does not know, a user with the rights a restore must not have,
    and any archive entry (naming it) or rows that are not popagent's: the
    archive's migrations are built in a scratch schema inside a transaction
    that is rolled back, and its entries compared with what they made.
    """
    migrations = _migrations_of(archive)
    conn = await _connect(url)
    async with conn:
        check_server_version(conn)
        current = await schema_version(conn)
        if current is not None and current > archive.schema_version:
            raise BackupError(
                f"this database is at schema version {current}, newer than the backup's "
                f"{archive.schema_version}: restore into an empty database (a new --data-dir, "
                "or a new database for --database-url); popagent upgrades it when it next "
                "opens it"
            )
        await _check_rights(conn)
        scratch = f"popagent_restore_check_{uuid.uuid4().hex[:12]}"
        try:
            async with conn.transaction(force_rollback=True):
                path = str((await (await conn.execute(SEARCH_PATH)).fetchone() or [""])[0])
                await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
                # The scratch schema first: the migrations create there; extensions
                # already installed (in the schemas of the path) are found, not made.
                await conn.execute(
                    "SELECT pg_catalog.set_config('search_path', %s, true)",
                    [f'"{scratch}", {path}' if path else f'"{scratch}"'],
                )
                await _build_schema(conn, migrations)
                expected = await _expected(conn, scratch, migrations)
        except psycopg.Error as exc:
            raise BackupError(
                "could not check the backup against popagent's migrations in a scratch schema "
                f"(nothing was changed): {_one_line(str(exc))}"
            ) from exc
    check_toc(archive.entries, expected, archive.schema)
    _check_rows(archive, expected)
    return current


def _load_order(tables: Iterable[str], references: Iterable[tuple[str, str]]) -> list[str]:
    """``tables`` with every table after the tables it references (then by name)."""
    remaining = sorted(set(tables))
    parents: dict[str, set[str]] = {t: set() for t in remaining}
    for child, parent in references:
        if child in parents and parent in parents and child != parent:
            parents[child].add(parent)
    ordered: list[str] = []
    while remaining:
        ready = [t for t in remaining if not parents[t] - set(ordered)] or remaining[:1]
        ordered.append(ready[0])
        remaining.remove(ready[0])
    return ordered


async def _names(conn: Conn, query: str) -> list[str]:
    cur = await conn.execute(query)
    return [str(row[0]) for row in await cur.fetchall()]


def _idents(names: Iterable[str]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


async def _drop_ours(conn: Conn) -> None:
    """Drop popagent's tables (their indexes, triggers and sequences with them) and functions.

    No CASCADE: another program's object that depends on one of them (a
    foreign key to popagent_sessions, say) fails the restore instead of
    being dropped with it.
    """
    tables = await _names(conn, OUR_TABLES)
    if tables:
        await conn.execute(sql.SQL("DROP TABLE {}").format(_idents(tables)))
    sequences = await _names(conn, OUR_SEQUENCES)
    if sequences:
        await conn.execute(sql.SQL("DROP SEQUENCE {}").format(_idents(sequences)))
    for function in await _names(conn, OUR_FUNCTIONS):
        await conn.execute(sql.SQL("DROP FUNCTION {}").format(sql.Identifier(function)))


async def _loading_role(conn: Conn, tables: list[str], sequences: list[str]) -> str | None:
    """For a superuser: a role of this transaction that may only insert popagent's rows.

    ``None`` when the connecting user already lacks the dangerous rights.
    """
    if not await _check_rights(conn):
        return None
    role = f"popagent_restore_{uuid.uuid4().hex[:12]}"
    ident = sql.Identifier(role)
    # BYPASSRLS: a restore loads every resource's rows, as the owner would; row-level
    # security (migration 0018) is for one resource's requests (store.tenant), and the
    # right adds nothing a crafted archive could use (no programs, no server files).
    await conn.execute(
        sql.SQL(
            "CREATE ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT "
            "NOREPLICATION BYPASSRLS"
        ).format(ident)
    )
    schema = str((await (await conn.execute(CURRENT_SCHEMA)).fetchone() or [""])[0])
    await conn.execute(
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), ident)
    )
    await conn.execute(sql.SQL("GRANT INSERT ON TABLE {} TO {}").format(_idents(tables), ident))
    if sequences:
        await conn.execute(
            sql.SQL("GRANT SELECT, UPDATE ON SEQUENCE {} TO {}").format(_idents(sequences), ident)
        )
    return role


async def _load(conn: Conn, archive: ArchiveInfo, expected: Expected, order: list[str]) -> None:
    """Stream the archive's rows into popagent's tables and set its sequences."""
    ids = {e.tag: e.dump_id for e in archive.data_entries}
    listed = [ids[t] for t in order if t in ids] + [
        e.dump_id for e in archive.entries if e.kind == "SEQUENCE SET"
    ]
    events: AsyncIterator[Event] = data_events(archive.path, listed)
    seen: set[str] = set()
    async with conn.cursor() as cur:
        async for event in events:
            if isinstance(event, CopyStart):
                columns = expected.columns.get(event.table, ())
                if (
                    event.table in seen
                    or event.schema != archive.schema
                    or not set(event.columns) <= set(columns)
                    or len(set(event.columns)) != len(event.columns)
                ):
                    raise BackupError(
                        f"the backup's rows of {event.schema}.{event.table} do not match "
                        "popagent's table of that name; nothing was restored"
                    )
                seen.add(event.table)
                statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                    sql.Identifier(event.table), _idents(event.columns)
                )
                async with cur.copy(statement) as copy:
                    async for rows in events:
                        if not isinstance(rows, CopyRows):
                            break  # CopyEnd: DataScript yields nothing else inside rows
                        await copy.write(rows.data)
            elif isinstance(event, SequenceSet):
                if event.sequence not in expected.sequences or event.schema != archive.schema:
                    raise BackupError(
                        f"the backup sets the sequence {event.schema}.{event.sequence}, "
                        "which popagent's migrations do not create; nothing was restored"
                    )
                await cur.execute(SET_SEQUENCE, [event.sequence, event.value, event.called])


async def restore_database(url: str, archive: ArchiveInfo) -> RestoreReport:
    """Replace popagent's objects in the database at ``url`` with the archive's, in one transaction.

    The schema is rebuilt from popagent's migrations (the archive's versions);
    only the archive's rows and sequence positions are taken from it (see the
    module docstring). The caller has checked the archive (``inspect_archive``,
    ``check_restorable``) and the other clients; the checks that keep anything
    but rows from running are made here again. On any error, ``BackupError``
    with PostgreSQL's message, and the database is as it was.
    """
    migrations = _migrations_of(archive)
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {_one_line(str(exc))}") from exc
    async with conn:
        check_server_version(conn)
        try:
            async with conn.transaction():
                await conn.execute(
                    sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(RESTORE_LOCK_TIMEOUT))
                )
                # No popagent process migrates this database meanwhile.
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK_ID])
                await _drop_ours(conn)
                await _build_schema(conn, migrations)
                schema = str((await (await conn.execute(CURRENT_SCHEMA)).fetchone() or [""])[0])
                expected = await _expected(conn, schema, migrations)
                check_toc(archive.entries, expected, archive.schema)
                _check_rows(archive, expected)
                tables = sorted(expected.columns)
                sequences = sorted(expected.sequences)
                cur = await conn.execute(FOREIGN_KEYS, {"schema": schema})
                references = [(str(c), str(p)) for c, p in await cur.fetchall()]
                await conn.execute(sql.SQL("TRUNCATE {}").format(_idents(tables)))
                # Rows are loaded as they were; the triggers that keep derived rows
                # (statistics, pending vectors, versions) would add them twice.
                for table in tables:
                    await conn.execute(
                        sql.SQL("ALTER TABLE {} DISABLE TRIGGER USER").format(sql.Identifier(table))
                    )
                role = await _loading_role(conn, tables, sequences)
                if role is not None:
                    await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
                await _load(conn, archive, expected, _load_order(tables, references))
                if role is not None:
                    await conn.execute("RESET ROLE")
                    await conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
                for table in tables:
                    await conn.execute(
                        sql.SQL("ALTER TABLE {} ENABLE TRIGGER USER").format(sql.Identifier(table))
                    )
        except psycopg.Error as exc:
            raise BackupError(
                f"the restore failed; the database is unchanged: {_one_line(str(exc))}"
            ) from exc
        await conn.set_autocommit(True)
        version = await schema_version(conn)
        tables_now = await table_counts(conn)
    return RestoreReport(tables_now, version or 0)
