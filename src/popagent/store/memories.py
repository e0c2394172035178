"""SQL over ``popagent_memories``: named statements and the functions that run them.

Invariants:
- Every function takes the caller's connection and never opens a transaction
  or commits: the service layer owns transactions.
- Every statement filters on ``resource_id`` first; no statement can read,
  change or conflict with another resource's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from ..errors import ConflictError
from ..models import Kind, Memory
from .database import Conn

__all__ = [
    "MEMORY_COLUMNS",
    "cleanup",
    "delete_expired_episodes",
    "delete_memory",
    "delete_over_cap_episodes",
    "get_fact_by_key",
    "get_memory",
    "insert_episode",
    "insert_episodes",
    "insert_fact",
    "like_pattern",
    "list_memories",
    "lock_maintenance",
    "row_to_memory",
    "touch_accessed",
    "update_fact",
    "upsert_fact_by_hash",
    "upsert_fact_by_key",
]

MEMORY_COLUMNS = (
    "id, resource_id, session_id, kind, key, content, content_sha256, importance, "
    "created_at, updated_at, accessed_at, access_count"
)
_COLUMNS_M = ", ".join(f"m.{c.strip()}" for c in MEMORY_COLUMNS.split(","))


def row_to_memory(row: dict[str, Any]) -> Memory:
    return Memory(
        id=row["id"],
        resource_id=row["resource_id"],
        session_id=row["session_id"],
        kind=row["kind"],
        key=row["key"],
        content=row["content"],
        content_sha256=row["content_sha256"],
        importance=float(row["importance"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        accessed_at=row["accessed_at"],
        access_count=row["access_count"],
    )


# --- episodes -------------------------------------------------------------------------------

INSERT_EPISODE = f"""
INSERT INTO popagent_memories
    (resource_id, session_id, kind, content, content_sha256, importance, created_at, updated_at)
VALUES (%(resource_id)s, %(session_id)s, 'episode', %(content)s, %(sha)s, %(importance)s,
        coalesce(%(created_at)s, now()), coalesce(%(created_at)s, now()))
ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
RETURNING {MEMORY_COLUMNS}
"""

SELECT_BY_HASH = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = %(kind)s AND key IS NULL
  AND content_sha256 = %(sha)s
"""

INSERT_EPISODES = """
INSERT INTO popagent_memories
    (resource_id, session_id, kind, content, content_sha256, importance, created_at, updated_at)
SELECT %(resource_id)s, t.session_id, 'episode', t.content, t.sha, %(importance)s,
       coalesce(t.created_at, now()), coalesce(t.created_at, now())
FROM unnest(%(session_ids)s::text[], %(contents)s::text[], %(shas)s::text[],
            %(created)s::timestamptz[]) AS t(session_id, content, sha, created_at)
ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
"""


async def insert_episode(
    conn: Conn,
    *,
    resource_id: str,
    session_id: str,
    content: str,
    sha: str,
    importance: float,
    created_at: datetime | None,
) -> tuple[Memory, bool]:
    """Insert one episode or find its identical twin; ``(memory, inserted)``."""
    params = {
        "resource_id": resource_id,
        "session_id": session_id,
        "content": content,
        "sha": sha,
        "importance": importance,
        "created_at": created_at,
    }
    cur = await conn.execute(INSERT_EPISODE, params)
    row = await cur.fetchone()
    if row is not None:
        return row_to_memory(row), True
    cur = await conn.execute(
        SELECT_BY_HASH, {"resource_id": resource_id, "kind": "episode", "sha": sha}
    )
    row = await cur.fetchone()
    assert row is not None, "a conflicting episode must exist"
    return row_to_memory(row), False


async def insert_episodes(
    conn: Conn,
    *,
    resource_id: str,
    importance: float,
    rows: Sequence[tuple[str, str, str, datetime | None]],
) -> int:
    """Bulk insert ``(session_id, content, sha, created_at)`` rows; return how many were new."""
    if not rows:
        return 0
    session_ids, contents, shas, created = (list(col) for col in zip(*rows, strict=True))
    cur = await conn.execute(
        INSERT_EPISODES,
        {
            "resource_id": resource_id,
            "importance": importance,
            "session_ids": session_ids,
            "contents": contents,
            "shas": shas,
            "created": created,
        },
    )
    return cur.rowcount


# --- facts ----------------------------------------------------------------------------------

UPSERT_FACT_BY_KEY = f"""
INSERT INTO popagent_memories
    (resource_id, session_id, kind, key, content, content_sha256, importance)
VALUES (%(resource_id)s, %(session_id)s, 'fact', %(key)s, %(content)s, %(sha)s, %(importance)s)
ON CONFLICT (resource_id, key) WHERE kind = 'fact' AND key IS NOT NULL DO UPDATE
SET content = EXCLUDED.content,
    content_sha256 = EXCLUDED.content_sha256,
    importance = EXCLUDED.importance,
    session_id = coalesce(EXCLUDED.session_id, popagent_memories.session_id),
    updated_at = now()
WHERE (popagent_memories.content, popagent_memories.importance)
      IS DISTINCT FROM (EXCLUDED.content, EXCLUDED.importance)
RETURNING {MEMORY_COLUMNS}, (xmax = 0) AS inserted
"""

SELECT_FACT_BY_KEY = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'fact' AND key = %(key)s
"""

UPSERT_FACT_BY_HASH = f"""
INSERT INTO popagent_memories
    (resource_id, session_id, kind, key, content, content_sha256, importance)
VALUES (%(resource_id)s, %(session_id)s, 'fact', NULL, %(content)s, %(sha)s, %(importance)s)
ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO UPDATE
SET importance = EXCLUDED.importance, updated_at = now()
WHERE popagent_memories.importance < EXCLUDED.importance
RETURNING {MEMORY_COLUMNS}, (xmax = 0) AS inserted
"""

INSERT_FACT = f"""
INSERT INTO popagent_memories
    (resource_id, session_id, kind, key, content, content_sha256, importance)
VALUES (%(resource_id)s, %(session_id)s, 'fact', %(key)s, %(content)s, %(sha)s, %(importance)s)
RETURNING {MEMORY_COLUMNS}
"""

UPDATE_FACT = f"""
UPDATE popagent_memories
SET content = %(content)s, content_sha256 = %(sha)s, key = %(key)s,
    importance = %(importance)s, updated_at = now()
WHERE resource_id = %(resource_id)s AND id = %(id)s AND kind = 'fact'
RETURNING {MEMORY_COLUMNS}
"""


async def get_fact_by_key(conn: Conn, resource_id: str, key: str) -> Memory | None:
    cur = await conn.execute(SELECT_FACT_BY_KEY, {"resource_id": resource_id, "key": key})
    row = await cur.fetchone()
    return row_to_memory(row) if row else None


async def upsert_fact_by_key(conn: Conn, **params: Any) -> tuple[Memory, str] | None:
    """Create or replace the fact of ``key``; ``None`` if it vanished mid-way (caller retries)."""
    cur = await conn.execute(UPSERT_FACT_BY_KEY, params)
    row = await cur.fetchone()
    if row is not None:
        return row_to_memory(row), "created" if row["inserted"] else "updated"
    existing = await get_fact_by_key(conn, params["resource_id"], params["key"])
    return (existing, "unchanged") if existing else None


async def upsert_fact_by_hash(conn: Conn, **params: Any) -> tuple[Memory, str] | None:
    """Create a keyless fact or find its identical twin (raising its importance if lower)."""
    cur = await conn.execute(UPSERT_FACT_BY_HASH, params)
    row = await cur.fetchone()
    if row is not None:
        return row_to_memory(row), "created" if row["inserted"] else "updated"
    cur = await conn.execute(
        SELECT_BY_HASH,
        {"resource_id": params["resource_id"], "kind": "fact", "sha": params["sha"]},
    )
    found = await cur.fetchone()
    return (row_to_memory(found), "unchanged") if found else None


def _conflict(exc: psycopg.errors.UniqueViolation) -> ConflictError:
    constraint = exc.diag.constraint_name or ""
    if "fact_key" in constraint:
        return ConflictError("a fact with this key already exists in this resource")
    return ConflictError("an identical fact without a key already exists in this resource")


async def insert_fact(conn: Conn, **params: Any) -> Memory:
    """Strict create: a taken key or an identical keyless fact is a ``ConflictError``."""
    try:
        async with conn.transaction():  # a savepoint when the caller holds a transaction
            cur = await conn.execute(INSERT_FACT, params)
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation as exc:
        raise _conflict(exc) from exc
    assert row is not None
    return row_to_memory(row)


async def update_fact(conn: Conn, **params: Any) -> Memory | None:
    """Replace content, key and importance of fact ``id``; ``None`` if no such fact."""
    try:
        async with conn.transaction():
            cur = await conn.execute(UPDATE_FACT, params)
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation as exc:
        raise _conflict(exc) from exc
    return row_to_memory(row) if row else None


# --- reads and deletes ----------------------------------------------------------------------

SELECT_MEMORY = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND id = %(id)s AND (%(kind)s::text IS NULL OR kind = %(kind)s)
"""

DELETE_MEMORY = """
DELETE FROM popagent_memories
WHERE resource_id = %(resource_id)s AND id = %(id)s AND kind = %(kind)s
"""

LIST_MEMORIES = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(key)s::text IS NULL OR key = %(key)s)
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
  AND (%(pattern)s::text IS NULL OR content ILIKE %(pattern)s)
  AND (%(created_after)s::timestamptz IS NULL OR created_at >= %(created_after)s)
  AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s OFFSET %(offset)s
"""

CLEANUP = """
DELETE FROM popagent_memories
WHERE resource_id = %(resource_id)s
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(older_than)s::timestamptz IS NULL OR created_at < %(older_than)s)
"""


async def get_memory(
    conn: Conn, resource_id: str, id: int, kind: Kind | None = None
) -> Memory | None:
    cur = await conn.execute(SELECT_MEMORY, {"resource_id": resource_id, "id": id, "kind": kind})
    row = await cur.fetchone()
    return row_to_memory(row) if row else None


async def delete_memory(conn: Conn, resource_id: str, id: int, kind: Kind) -> bool:
    cur = await conn.execute(DELETE_MEMORY, {"resource_id": resource_id, "id": id, "kind": kind})
    return cur.rowcount > 0


def like_pattern(text: str) -> str:
    """A case-insensitive substring pattern with LIKE's wildcards escaped."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def list_memories(
    conn: Conn,
    resource_id: str,
    *,
    kind: Kind | None,
    key: str | None = None,
    session_id: str | None = None,
    text: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Memory]:
    cur = await conn.execute(
        LIST_MEMORIES,
        {
            "resource_id": resource_id,
            "kind": kind,
            "key": key,
            "session_id": session_id,
            "pattern": like_pattern(text) if text else None,
            "created_after": created_after,
            "created_before": created_before,
            "limit": limit,
            "offset": offset,
        },
    )
    return [row_to_memory(r) for r in await cur.fetchall()]


async def cleanup(
    conn: Conn, resource_id: str, *, kind: Kind | None, older_than: datetime | None
) -> int:
    cur = await conn.execute(
        CLEANUP, {"resource_id": resource_id, "kind": kind, "older_than": older_than}
    )
    return cur.rowcount


# --- access bookkeeping ---------------------------------------------------------------------

# SKIP LOCKED: recall never waits for (or deadlocks with) maintenance or a writer
# holding a row; access statistics are best effort by design. Synchronous commit
# is off for this statement's own transaction alone (set_config's is_local), so a
# recall never waits for a WAL flush: a crash may lose the last few access
# counts, never a memory.
TOUCH_ACCESSED = """
UPDATE popagent_memories m
SET accessed_at = now(), access_count = m.access_count + 1
FROM (
    SELECT id FROM popagent_memories
    WHERE resource_id = %(resource_id)s AND id = ANY(%(ids)s)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
) touched,
(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE m.id = touched.id
RETURNING m.id, m.accessed_at, m.access_count
"""


async def touch_accessed(
    conn: Conn, resource_id: str, ids: Sequence[int]
) -> dict[int, tuple[datetime, int]]:
    """Record a recall of ``ids``; return each touched id's new access time and count.

    One statement, to be run outside a transaction (in autocommit), so that it
    is its own transaction and the synchronous-commit setting covers it alone.
    """
    cur = await conn.execute(TOUCH_ACCESSED, {"resource_id": resource_id, "ids": list(ids)})
    return {r["id"]: (r["accessed_at"], r["access_count"]) for r in await cur.fetchall()}


# --- maintenance ----------------------------------------------------------------------------

MAINTENANCE_LOCK_ID = 7_312_104_118_002

DELETE_EXPIRED_EPISODES = """
DELETE FROM popagent_memories WHERE kind = 'episode' AND created_at < %(cutoff)s
"""

# Per resource, keep the ``cap`` newest episodes (newest by created_at, then id).
DELETE_OVER_CAP_EPISODES = """
DELETE FROM popagent_memories m
USING (
    SELECT id FROM (
        SELECT id, row_number() OVER (
            PARTITION BY resource_id ORDER BY created_at DESC, id DESC) AS position
        FROM popagent_memories
        WHERE kind = 'episode'
          AND resource_id IN (
              SELECT resource_id FROM popagent_memories WHERE kind = 'episode'
              GROUP BY resource_id HAVING count(*) > %(cap)s)
    ) ranked
    WHERE position > %(cap)s
) doomed
WHERE m.id = doomed.id
"""

# The same two rules for one resource (the management API's "run maintenance now").
DELETE_EXPIRED_EPISODES_OF = """
DELETE FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'episode' AND created_at < %(cutoff)s
"""

DELETE_OVER_CAP_EPISODES_OF = """
DELETE FROM popagent_memories m
USING (
    SELECT id FROM popagent_memories
    WHERE resource_id = %(resource_id)s AND kind = 'episode'
    ORDER BY created_at DESC, id DESC
    OFFSET %(cap)s
) doomed
WHERE m.resource_id = %(resource_id)s AND m.id = doomed.id
"""


async def lock_maintenance(conn: Conn) -> None:
    """Serialize maintenance across processes until the caller's transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MAINTENANCE_LOCK_ID,))


async def delete_expired_episodes(
    conn: Conn, cutoff: datetime, resource_id: str | None = None
) -> int:
    """Episodes created before ``cutoff``: of every resource, or of ``resource_id`` only."""
    if resource_id is None:
        cur = await conn.execute(DELETE_EXPIRED_EPISODES, {"cutoff": cutoff})
    else:
        cur = await conn.execute(
            DELETE_EXPIRED_EPISODES_OF, {"cutoff": cutoff, "resource_id": resource_id}
        )
    return cur.rowcount


async def delete_over_cap_episodes(conn: Conn, cap: int, resource_id: str | None = None) -> int:
    """Episodes beyond each resource's ``cap`` newest: every resource, or ``resource_id`` only."""
    if resource_id is None:
        cur = await conn.execute(DELETE_OVER_CAP_EPISODES, {"cap": cap})
    else:
        cur = await conn.execute(
            DELETE_OVER_CAP_EPISODES_OF, {"cap": cap, "resource_id": resource_id}
        )
    return cur.rowcount
