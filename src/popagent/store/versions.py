"""SQL over ``popagent_fact_versions``: a fact's earlier values, restore and revert.

Invariants:
- Versions are written by migration 0012's trigger (a changed value) and by
  the delete and expiry statements of ``store/memories.py``; this module reads
  them, restores one, and deletes them only when asked to purge.
- Every statement filters on ``resource_id``; the caller owns the transaction.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..models import FactVersion, Memory
from ._rows import column_list, from_row
from .database import Conn
from .memories import (
    EVENT_COLUMNS,
    MEMORY_COLUMNS,
    conflict_error,
    converted_columns,
    row_to_memory,
)
from .recall_stats import counted

__all__ = [
    "VERSION_COLUMNS",
    "get_version",
    "list_session_facts",
    "list_versions",
    "reinsert_fact",
    "row_to_version",
    "versions_ended_by_session",
]

VERSION_COLUMNS = column_list(FactVersion)


def row_to_version(row: dict[str, Any]) -> FactVersion:
    return from_row(FactVersion, row, **converted_columns(row))


LIST_VERSIONS = f"""
SELECT {VERSION_COLUMNS} FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s AND fact_id = %(fact_id)s
ORDER BY version DESC
"""

GET_VERSION = f"""
SELECT {VERSION_COLUMNS} FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s AND fact_id = %(fact_id)s AND version = %(version)s
"""

# A deleted fact comes back under its own id, as the version after its last, with
# the event clock the caller gives (``memory.history``: the version's own); it is
# counted in recall's statistics (``store.recall_stats``).
REINSERT_FACT = f"""
WITH written AS (
INSERT INTO popagent_memories
    (id, resource_id, session_id, kind, key, content, content_sha256, importance, expires_at,
     origin, turn_id, message_ids, tool_call_id, {", ".join(EVENT_COLUMNS)}, version, created_at)
OVERRIDING SYSTEM VALUE
SELECT %(fact_id)s, %(resource_id)s, %(session_id)s, 'fact', v.key, v.content, v.content_sha256,
       v.importance, %(expires_at)s, %(origin)s, %(turn_id)s, %(message_ids)s, %(tool_call_id)s,
       {", ".join(f"%({c})s" for c in EVENT_COLUMNS)},
       (SELECT max(version) + 1 FROM popagent_fact_versions
        WHERE resource_id = %(resource_id)s AND fact_id = %(fact_id)s),
       (SELECT min(valid_from) FROM popagent_fact_versions
        WHERE resource_id = %(resource_id)s AND fact_id = %(fact_id)s)
FROM popagent_fact_versions v
WHERE v.resource_id = %(resource_id)s AND v.fact_id = %(fact_id)s AND v.version = %(version)s
RETURNING {MEMORY_COLUMNS}, search_vector
), {counted("written", 1)}
SELECT {MEMORY_COLUMNS} FROM written
"""

# The current facts and episodes a session wrote (its value is the current one).
LIST_SESSION_MEMORIES = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
ORDER BY updated_at DESC, id DESC
LIMIT %(limit)s
"""

# Versions a session ended: values it replaced or facts it deleted.
VERSIONS_ENDED_BY_SESSION = f"""
SELECT {VERSION_COLUMNS} FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s AND ended_session_id = %(session_id)s
ORDER BY valid_to DESC, fact_id DESC
LIMIT %(limit)s
"""


async def list_versions(conn: Conn, resource_id: str, fact_id: int) -> list[FactVersion]:
    """The earlier values of fact ``fact_id``, newest first (the current one is not here)."""
    cur = await conn.execute(LIST_VERSIONS, {"resource_id": resource_id, "fact_id": fact_id})
    return [row_to_version(r) for r in await cur.fetchall()]


async def get_version(
    conn: Conn, resource_id: str, fact_id: int, version: int
) -> FactVersion | None:
    cur = await conn.execute(
        GET_VERSION, {"resource_id": resource_id, "fact_id": fact_id, "version": version}
    )
    row = await cur.fetchone()
    return row_to_version(row) if row else None


async def reinsert_fact(conn: Conn, **params: Any) -> Memory | None:
    """Bring a deleted fact back with version ``version``'s value; ``None`` if no such version.

    A key or content now taken by another fact is a ``ConflictError``.
    """
    try:
        async with conn.transaction():
            cur = await conn.execute(REINSERT_FACT, params)
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation as exc:
        # The savepoint is gone: the transaction reads on. The version says what collided.
        old = await get_version(conn, params["resource_id"], params["fact_id"], params["version"])
        raise conflict_error(old.key if old else None) from exc
    return row_to_memory(row) if row else None


async def _session_rows(
    conn: Conn, query: str, resource_id: str, session_id: str, limit: int
) -> list[dict[str, Any]]:
    """The rows of one of the per-session queries above, at most ``limit``."""
    params = {"resource_id": resource_id, "session_id": session_id, "limit": limit}
    cur = await conn.execute(query, params)
    return await cur.fetchall()


async def list_session_facts(
    conn: Conn, resource_id: str, session_id: str, limit: int
) -> list[Memory]:
    rows = await _session_rows(conn, LIST_SESSION_MEMORIES, resource_id, session_id, limit)
    return [row_to_memory(r) for r in rows]


async def versions_ended_by_session(
    conn: Conn, resource_id: str, session_id: str, limit: int
) -> list[FactVersion]:
    rows = await _session_rows(conn, VERSIONS_ENDED_BY_SESSION, resource_id, session_id, limit)
    return [row_to_version(r) for r in rows]
