"""Numbered SQL migrations, applied in order under an advisory lock.

Invariants:
- Files in ``migrations/`` are named ``NNNN_name.sql`` and never edited after
  they land; each is applied once, in its own transaction, and recorded in
  ``popagent_schema_migrations``.
- The whole run holds a session-level advisory lock, so two processes that
  start at once apply each migration exactly once: the second waits, then
  finds nothing left to do.
- Nothing is applied on a server older than ``MINIMUM_SERVER_VERSION``: the
  run stops with ``DatabaseError`` before its first statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from ..errors import DatabaseError

__all__ = [
    "MIGRATION_LOCK_ID",
    "MINIMUM_SERVER_VERSION",
    "Migration",
    "apply_migrations",
    "check_server_version",
    "load_migrations",
]

#: The oldest PostgreSQL popagent runs on (``server_version_num``): migration 0010
#: changes a generated column's expression (``ALTER COLUMN ... SET EXPRESSION``),
#: which PostgreSQL has since version 17.
MINIMUM_SERVER_VERSION = 170000

# An arbitrary, fixed 64-bit key shared by every popagent process.
MIGRATION_LOCK_ID = 7_312_104_118_001

_NAME_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS popagent_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
SELECT_APPLIED = "SELECT version FROM popagent_schema_migrations"
INSERT_APPLIED = "INSERT INTO popagent_schema_migrations (version, name) VALUES (%s, %s)"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """The packaged migrations, sorted by version; duplicate versions are an error."""
    found: dict[int, Migration] = {}
    for entry in resources.files("popagent.store").joinpath("migrations").iterdir():
        match = _NAME_RE.match(entry.name)
        if not match:
            continue
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(f"two migrations share version {version}")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def check_server_version(conn: psycopg.AsyncConnection[object]) -> None:
    """``DatabaseError`` when ``conn``'s server is older than ``MINIMUM_SERVER_VERSION``.

    The version is the one the server announced when the connection opened: no query.
    """
    found = conn.info.server_version
    if found < MINIMUM_SERVER_VERSION:
        raise DatabaseError(
            f"popagent needs PostgreSQL {MINIMUM_SERVER_VERSION // 10000} or later; this "
            f"server runs PostgreSQL {_version_text(found)}: upgrade it, or leave the "
            "database URL unset to use the embedded server"
        )


def _version_text(number: int) -> str:
    """``server_version_num`` as people write it: 160004 is 16.4 (9.6.24 before 10)."""
    if number >= 100000:
        return f"{number // 10000}.{number % 10000}"
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


async def apply_migrations(conn: psycopg.AsyncConnection[object]) -> list[int]:
    """Apply the pending migrations on ``conn`` (autocommit); return the versions applied.

    ``DatabaseError`` first when the server is too old (``check_server_version``).
    """
    check_server_version(conn)
    applied_now: list[int] = []
    await conn.set_autocommit(True)
    await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
    try:
        await conn.execute(CREATE_MIGRATIONS_TABLE)
        cur = await conn.execute(SELECT_APPLIED)
        done = {row[0] for row in await cur.fetchall()}  # type: ignore[index]
        for migration in load_migrations():
            if migration.version in done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql.encode())
                await conn.execute(INSERT_APPLIED, (migration.version, migration.name))
            applied_now.append(migration.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    return applied_now
