"""Numbered SQL migrations, applied in order under an advisory lock.

Invariants:
- Files in ``migrations/`` are named ``NNNN_name.sql`` and never edited after
  they land; each is applied once, in its own transaction, and recorded in
  ``popagent_schema_migrations``.
- The whole run holds a session-level advisory lock, so two processes that
  start at once apply each migration exactly once: the second waits, then
  finds nothing left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

__all__ = ["MIGRATION_LOCK_ID", "Migration", "apply_migrations", "load_migrations"]

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


async def apply_migrations(conn: psycopg.AsyncConnection[object]) -> list[int]:
    """Apply the pending migrations on ``conn`` (autocommit); return the versions applied."""
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
