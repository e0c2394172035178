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
from ..models import Kind, Memory, MemoryFilter, Provenance
from ._rows import column_list, from_row
from .database import Conn
from .recall_stats import counted

__all__ = [
    "EVENT_COLUMNS",
    "MEMORY_COLUMNS",
    "MEMORY_WIDTH",
    "NO_EVENT",
    "EpisodeRow",
    "cleanup",
    "conflict_error",
    "converted_columns",
    "delete_expired_episodes",
    "delete_memory",
    "delete_over_cap_episodes",
    "expire_facts",
    "get_fact_by_key",
    "get_memory",
    "insert_episode",
    "insert_episodes",
    "insert_fact",
    "like_pattern",
    "list_memories",
    "lock_maintenance",
    "provenance_params",
    "row_to_memory",
    "touch_accessed",
    "touch_statement",
    "tuple_to_memory",
    "update_fact",
    "upsert_fact_by_hash",
    "upsert_fact_by_key",
]

#: ``Memory``'s fields, in order: ``tuple_to_memory`` depends on the order.
MEMORY_COLUMNS = column_list(Memory)


def converted_columns(row: dict[str, Any]) -> dict[str, Any]:
    """The columns of a fact's value (current or earlier) that its dataclass holds
    converted: ``importance`` a float, ``message_ids`` a tuple (empty for NULL)."""
    return {"importance": float(row["importance"]), "message_ids": tuple(row["message_ids"] or ())}


def row_to_memory(row: dict[str, Any]) -> Memory:
    return from_row(Memory, row, **converted_columns(row), based_on=tuple(row["based_on"] or ()))


#: How many leading columns of a row are ``MEMORY_COLUMNS``.
MEMORY_WIDTH = len(MEMORY_COLUMNS.split(","))


def tuple_to_memory(row: Sequence[Any]) -> Memory:
    """``row_to_memory`` for a tuple row starting with ``MEMORY_COLUMNS``, in order.

    Recall decodes every candidate it ranks, so this skips the dict row and its
    lookups (the columns and the dataclass fields share one order).
    """
    return Memory(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9],
        row[10], row[11], row[12], row[13], tuple(row[14] or ()), row[15], row[16], row[17],
        tuple(row[18] or ()), row[19], row[20], row[21], row[22], row[23], row[24],
    )  # fmt: skip


#: The event clock's columns (migration 0021), the ``Memory`` fields of the same names.
EVENT_COLUMNS = ("happened_start", "happened_end", "happened_precision", "happened_phrase")
#: The parameters of a write whose event clock is unknown.
NO_EVENT: dict[str, Any] = dict.fromkeys(EVENT_COLUMNS)


def provenance_params(provenance: Provenance | None) -> dict[str, Any]:
    """The ``origin``/``turn_id``/``message_ids``/``tool_call_id`` parameters of a write."""
    p = provenance or Provenance()
    return {
        "origin": p.origin,
        "turn_id": p.turn_id,
        "message_ids": list(p.message_ids) or None,
        "tool_call_id": p.tool_call_id,
    }


# --- episodes -------------------------------------------------------------------------------

#: One episode of a bulk insert: session_id, content, its SHA-256, created_at (``None``:
#: now), then its event clock's columns (``EVENT_COLUMNS``, all ``None``: unknown).
EpisodeRow = tuple[
    str, str, str, datetime | None, datetime | None, datetime | None, str | None, str | None
]

# Every statement that inserts or deletes memories counts them in recall's
# statistics itself (``store.recall_stats``: no trigger does since migration 0015).
INSERT_EPISODE = f"""
WITH written AS (
    INSERT INTO popagent_memories
        (resource_id, session_id, kind, content, content_sha256, importance, created_at,
         updated_at, origin, turn_id, message_ids, tool_call_id, {", ".join(EVENT_COLUMNS)})
    VALUES (%(resource_id)s, %(session_id)s, 'episode', %(content)s, %(sha)s, %(importance)s,
            coalesce(%(created_at)s, now()), coalesce(%(created_at)s, now()),
            %(origin)s, %(turn_id)s, %(message_ids)s, %(tool_call_id)s,
            %(happened_start)s, %(happened_end)s, %(happened_precision)s, %(happened_phrase)s)
    ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
    RETURNING {MEMORY_COLUMNS}, search_vector
), {counted("written", 1)}
SELECT {MEMORY_COLUMNS} FROM written
"""

SELECT_BY_HASH = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = %(kind)s AND key IS NULL
  AND content_sha256 = %(sha)s
"""

INSERT_EPISODES = f"""
WITH written AS (
    INSERT INTO popagent_memories
        (resource_id, session_id, kind, content, content_sha256, importance, created_at,
         updated_at, origin, {", ".join(EVENT_COLUMNS)})
    SELECT %(resource_id)s, t.session_id, 'episode', t.content, t.sha, %(importance)s,
           coalesce(t.created_at, now()), coalesce(t.created_at, now()), %(origin)s,
           t.happened_start, t.happened_end, t.happened_precision, t.happened_phrase
    FROM unnest(%(session_ids)s::text[], %(contents)s::text[], %(shas)s::text[],
                %(created)s::timestamptz[], %(starts)s::timestamptz[], %(ends)s::timestamptz[],
                %(precisions)s::text[], %(phrases)s::text[])
         AS t(session_id, content, sha, created_at,
              happened_start, happened_end, happened_precision, happened_phrase)
    ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
    RETURNING resource_id, search_vector, content
), {counted("written", 1)}
SELECT count(*) AS inserted FROM written
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
    provenance: Provenance | None = None,
    event: dict[str, Any] | None = None,
) -> tuple[Memory, bool]:
    """Insert one episode or find its identical twin; ``(memory, inserted)``.
    ``event``: its event clock's columns (``EVENT_COLUMNS``; ``None``: unknown)."""
    params = {
        **(event or NO_EVENT),
        "resource_id": resource_id,
        "session_id": session_id,
        "content": content,
        "sha": sha,
        "importance": importance,
        "created_at": created_at,
        **provenance_params(provenance),
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
    rows: Sequence[EpisodeRow],
    origin: str = "library",
) -> int:
    """Bulk insert ``EpisodeRow``s; return how many were new."""
    if not rows:
        return 0
    columns = [list(col) for col in zip(*rows, strict=True)]
    session_ids, contents, shas, created, starts, ends, precisions, phrases = columns
    cur = await conn.execute(
        INSERT_EPISODES,
        {
            "resource_id": resource_id,
            "importance": importance,
            "origin": origin,
            "session_ids": session_ids,
            "contents": contents,
            "shas": shas,
            "created": created,
            "starts": starts,
            "ends": ends,
            "precisions": precisions,
            "phrases": phrases,
        },
    )
    row = await cur.fetchone()
    return int(row["inserted"]) if row else 0


# --- facts ----------------------------------------------------------------------------------

_FACT_COLUMNS = """
    (resource_id, session_id, kind, key, content, content_sha256, importance, expires_at,
     origin, turn_id, message_ids, tool_call_id, based_on,
     happened_start, happened_end, happened_precision, happened_phrase)"""
_FACT_VALUES = """
VALUES (%(resource_id)s, %(session_id)s, 'fact', %(key)s, %(content)s, %(sha)s, %(importance)s,
        %(expires_at)s, %(origin)s, %(turn_id)s, %(message_ids)s, %(tool_call_id)s,
        %(based_on)s,
        %(happened_start)s, %(happened_end)s, %(happened_precision)s, %(happened_phrase)s)"""
# A new value of a fact (its content, importance or expiry changed) takes the event
# clock written with it; an unchanged one keeps the clock it was first told with.
_NEW_EVENT = ", ".join(f"{c} = EXCLUDED.{c}" for c in EVENT_COLUMNS)
# A changed value is the fact's next version and records who changed it: the
# provenance (and session) is always the current value's writer's. The trigger
# of migration 0012 keeps the replaced value as a version. (The statement, not a
# BEFORE trigger, bumps the number: a BEFORE ROW UPDATE trigger, even one limited
# to these columns, makes every other update of the table, such as recall's
# access bookkeeping, re-fetch and re-lock each row first.) ``EXCLUDED.updated_at``
# is the proposed row's default, ``now()``: a distributed table (Citus) refuses any
# function that is not immutable in ``DO UPDATE``.
_NEW_PROVENANCE = """
    version = popagent_memories.version + 1,
    session_id = EXCLUDED.session_id,
    origin = EXCLUDED.origin,
    turn_id = EXCLUDED.turn_id,
    message_ids = EXCLUDED.message_ids,
    tool_call_id = EXCLUDED.tool_call_id,
    based_on = EXCLUDED.based_on,
    stale_since = NULL,
    stale_source = NULL,
    updated_at = EXCLUDED.updated_at"""

# A new fact is counted in the statistics; a changed one by the update trigger.
UPSERT_FACT_BY_KEY = f"""
WITH written AS (
INSERT INTO popagent_memories {_FACT_COLUMNS} {_FACT_VALUES}
ON CONFLICT (resource_id, key) WHERE kind = 'fact' AND key IS NOT NULL DO UPDATE
SET content = EXCLUDED.content,
    content_sha256 = EXCLUDED.content_sha256,
    importance = EXCLUDED.importance,
    expires_at = EXCLUDED.expires_at, {_NEW_EVENT}, {_NEW_PROVENANCE}
WHERE (popagent_memories.content, popagent_memories.importance, popagent_memories.expires_at,
       popagent_memories.based_on)
      IS DISTINCT FROM (EXCLUDED.content, EXCLUDED.importance, EXCLUDED.expires_at,
                        EXCLUDED.based_on)
RETURNING {MEMORY_COLUMNS}, search_vector, (xmax = 0) AS inserted
), {counted("written", 1, where="r.inserted")}
SELECT {MEMORY_COLUMNS}, inserted FROM written
"""

SELECT_FACT_BY_KEY = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'fact' AND key = %(key)s
"""

# An identical keyless fact raises its importance (never lowers it) and takes
# the new expiry; anything else about it is already equal.
UPSERT_FACT_BY_HASH = f"""
WITH written AS (
INSERT INTO popagent_memories {_FACT_COLUMNS} {_FACT_VALUES}
ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO UPDATE
SET importance = greatest(popagent_memories.importance, EXCLUDED.importance),
    expires_at = EXCLUDED.expires_at, {_NEW_PROVENANCE}
WHERE popagent_memories.importance < EXCLUDED.importance
   OR popagent_memories.expires_at IS DISTINCT FROM EXCLUDED.expires_at
   OR popagent_memories.based_on IS DISTINCT FROM EXCLUDED.based_on
RETURNING {MEMORY_COLUMNS}, search_vector, (xmax = 0) AS inserted
), {counted("written", 1, where="r.inserted")}
SELECT {MEMORY_COLUMNS}, inserted FROM written
"""

INSERT_FACT = f"""
WITH written AS (
INSERT INTO popagent_memories {_FACT_COLUMNS} {_FACT_VALUES}
RETURNING {MEMORY_COLUMNS}, search_vector
), {counted("written", 1)}
SELECT {MEMORY_COLUMNS} FROM written
"""

# Only a real change touches the row; only a change of the value (content, key,
# importance, expiry, sources) makes a version and a new version number, so that a new event
# clock alone (happened_at) is written in place.
_VALUE_CHANGED = """(content, key, importance, expires_at, based_on)
      IS DISTINCT FROM (%(content)s, %(key)s, %(importance)s::float8, %(expires_at)s::timestamptz,
                        %(based_on)s::jsonb)"""
UPDATE_FACT = f"""
UPDATE popagent_memories
SET content = %(content)s, content_sha256 = %(sha)s, key = %(key)s,
    importance = %(importance)s, expires_at = %(expires_at)s,
    session_id = %(session_id)s, origin = %(origin)s, turn_id = %(turn_id)s,
    message_ids = %(message_ids)s, tool_call_id = %(tool_call_id)s, updated_at = now(),
    based_on = %(based_on)s,
    stale_since = CASE WHEN {_VALUE_CHANGED} THEN NULL ELSE stale_since END,
    stale_source = CASE WHEN {_VALUE_CHANGED} THEN NULL ELSE stale_source END,
    version = version + CASE WHEN {_VALUE_CHANGED} THEN 1 ELSE 0 END,
    happened_start = %(happened_start)s, happened_end = %(happened_end)s,
    happened_precision = %(happened_precision)s, happened_phrase = %(happened_phrase)s
WHERE resource_id = %(resource_id)s AND id = %(id)s AND kind = 'fact'
  AND ({_VALUE_CHANGED}
       OR (happened_start, happened_end, happened_precision, happened_phrase)
          IS DISTINCT FROM (%(happened_start)s::timestamptz, %(happened_end)s::timestamptz,
                            %(happened_precision)s::text, %(happened_phrase)s::text))
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


def conflict_error(key: str | None) -> ConflictError:
    """The conflict of writing a fact with ``key`` (``None``: keyless) that met a unique key.

    Told by what was written, not by the violated constraint's name: a fact with a
    key conflicts on its key alone (the content index covers keyless rows only), a
    keyless one on its content alone, and a distributed table (Citus) reports no
    constraint name.
    """
    if key is not None:
        return ConflictError("a fact with this key already exists in this resource")
    return ConflictError("an identical fact without a key already exists in this resource")


async def insert_fact(conn: Conn, **params: Any) -> Memory:
    """Strict create: a taken key or an identical keyless fact is a ``ConflictError``."""
    try:
        async with conn.transaction():  # a savepoint when the caller holds a transaction
            cur = await conn.execute(INSERT_FACT, params)
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation as exc:
        raise conflict_error(params.get("key")) from exc
    assert row is not None
    return row_to_memory(row)


async def update_fact(conn: Conn, **params: Any) -> Memory | None:
    """Replace content, key and importance of fact ``id``; ``None`` if no such fact."""
    try:
        async with conn.transaction():
            cur = await conn.execute(UPDATE_FACT, params)
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation as exc:
        raise conflict_error(params.get("key")) from exc
    return row_to_memory(row) if row else None


# --- reads and deletes ----------------------------------------------------------------------

SELECT_MEMORY = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND id = %(id)s AND (%(kind)s::text IS NULL OR kind = %(kind)s)
"""

# The facts of ``gone`` (a data-modifying CTE returning whole memory rows) as
# versions that ended now, unless %(purge)s; with %(ended)s, %(ended_origin)s
# and %(ended_session_id)s saying how and by whom.
KEEP_GONE_FACTS = f"""
    INSERT INTO popagent_fact_versions
        (resource_id, fact_id, version, key, content, content_sha256, importance, expires_at,
         session_id, origin, turn_id, message_ids, tool_call_id, valid_from, valid_to,
         ended, ended_origin, ended_session_id, {", ".join(EVENT_COLUMNS)})
    SELECT g.resource_id, g.id, g.version, g.key, g.content, g.content_sha256, g.importance,
           g.expires_at, g.session_id, g.origin, g.turn_id, g.message_ids, g.tool_call_id,
           g.updated_at, greatest(now(), g.updated_at),
           %(ended)s, %(ended_origin)s, %(ended_session_id)s,
           {", ".join("g." + c for c in EVENT_COLUMNS)}
    FROM gone g WHERE g.kind = 'fact' AND NOT %(purge)s
"""

PURGE_VERSIONS_OF_FACTS = """
DELETE FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s AND fact_id = ANY(%(fact_ids)s::bigint[])
"""


# A deleted fact's last value is kept as a version (its history stays readable
# and restorable) unless the caller purges it; an episode just goes.
DELETE_MEMORY = f"""
WITH gone AS (
    DELETE FROM popagent_memories
    WHERE resource_id = %(resource_id)s AND id = %(id)s AND kind = %(kind)s
    RETURNING *
), kept AS ({KEEP_GONE_FACTS} RETURNING 1), {counted("gone", -1)}
SELECT count(*) AS deleted FROM gone
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

# Cleanup removes: the facts it deletes take their versions with them, and a
# cleanup of every fact also removes the history of facts deleted earlier.
CLEANUP = f"""
WITH gone AS (
    DELETE FROM popagent_memories
    WHERE resource_id = %(resource_id)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s)
      AND (%(older_than)s::timestamptz IS NULL OR created_at < %(older_than)s)
    RETURNING resource_id, id, kind, search_vector, content
), {counted("gone", -1)}, history AS (
    DELETE FROM popagent_fact_versions v
    WHERE v.resource_id = %(resource_id)s
      AND (v.fact_id IN (SELECT id FROM gone WHERE kind = 'fact')
           OR (coalesce(%(kind)s::text, 'fact') = 'fact' AND %(older_than)s::timestamptz IS NULL))
)
SELECT count(*) AS deleted FROM gone
"""


async def get_memory(
    conn: Conn, resource_id: str, id: int, kind: Kind | None = None
) -> Memory | None:
    cur = await conn.execute(SELECT_MEMORY, {"resource_id": resource_id, "id": id, "kind": kind})
    row = await cur.fetchone()
    return row_to_memory(row) if row else None


async def delete_memory(
    conn: Conn,
    resource_id: str,
    id: int,
    kind: Kind,
    *,
    purge: bool = False,
    ended_origin: str = "library",
    ended_session_id: str | None = None,
) -> bool:
    """Delete memory ``id``; a fact's last value stays as a version unless ``purge``,
    which also deletes every earlier version (of a fact deleted before, too).
    ``False`` if there was nothing to delete."""
    cur = await conn.execute(
        DELETE_MEMORY,
        {
            "resource_id": resource_id,
            "id": id,
            "kind": kind,
            "purge": purge,
            "ended": "deleted",
            "ended_origin": ended_origin,
            "ended_session_id": ended_session_id,
        },
    )
    row = await cur.fetchone()
    deleted = row is not None and row["deleted"] > 0
    if kind == "fact" and purge:
        # A fact deleted earlier has only its history left: purging that counts.
        cur = await conn.execute(
            PURGE_VERSIONS_OF_FACTS, {"resource_id": resource_id, "fact_ids": [id]}
        )
        deleted = deleted or cur.rowcount > 0
    return deleted


def like_pattern(text: str) -> str:
    """A case-insensitive substring pattern with LIKE's wildcards escaped."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def list_memories(conn: Conn, resource_id: str, where: MemoryFilter) -> list[Memory]:
    """The memories of ``resource_id`` that ``where`` (already checked: ``check_filter``)
    selects, newest first."""
    cur = await conn.execute(
        LIST_MEMORIES,
        {
            "resource_id": resource_id,
            "kind": where.kind,
            "key": where.key,
            "session_id": where.session_id,
            "pattern": like_pattern(where.text) if where.text else None,
            "created_after": where.created_after,
            "created_before": where.created_before,
            "limit": where.limit,
            "offset": where.offset,
        },
    )
    return [row_to_memory(r) for r in await cur.fetchall()]


async def cleanup(
    conn: Conn, resource_id: str, *, kind: Kind | None, older_than: datetime | None
) -> int:
    params = {"resource_id": resource_id, "kind": kind, "older_than": older_than}
    return await _deleted(conn, CLEANUP, params)


async def _deleted(conn: Conn, query: str, params: dict[str, Any]) -> int:
    """Run a deleting statement that counts its rows as ``deleted``; return the count."""
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    return int(row["deleted"]) if row else 0


# --- access bookkeeping ---------------------------------------------------------------------


# SKIP LOCKED: recall never waits for (or deadlocks with) maintenance or a writer
# holding a row; access statistics are best effort by design. NO KEY UPDATE (what
# the UPDATE itself takes) rather than UPDATE: a vector worker's KEY SHARE lock on
# the memories it embeds (store.pending) does not make recall skip them. Synchronous commit
# is off for this statement's own transaction alone (set_config's is_local), so a
# recall never waits for a WAL flush: a crash may lose the last few access
# counts, never a memory.
def touch_statement(ids: str) -> str:
    """The access bookkeeping of the memories ``ids`` (an SQL condition on ``id``) selects.

    Shared by ``TOUCH_ACCESSED`` and lexical recall's one statement (``store.ranked``).
    """
    return f"""
UPDATE popagent_memories m
SET accessed_at = now(), access_count = m.access_count + 1
FROM (
    SELECT id FROM popagent_memories
    WHERE resource_id = %(resource_id)s AND id {ids}
    ORDER BY id
    FOR NO KEY UPDATE SKIP LOCKED
) touched,
(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE m.resource_id = %(resource_id)s AND m.id = touched.id
RETURNING m.resource_id, m.id, m.accessed_at, m.access_count
"""


TOUCH_ACCESSED = touch_statement("= ANY(%(ids)s)")


async def touch_accessed(
    conn: Conn, resource_id: str, ids: Sequence[int]
) -> dict[int, tuple[datetime, int]]:
    """Record a recall of ``ids``; return each touched id's new access time and count.

    One statement, to be run outside a transaction (in autocommit), so that it
    is its own transaction and the synchronous-commit setting covers it alone.
    """
    try:
        cur = await conn.execute(TOUCH_ACCESSED, {"resource_id": resource_id, "ids": list(ids)})
    except psycopg.errors.DeadlockDetected:
        # This bookkeeping and a concurrent write (maintenance deleting, the vector
        # worker's key checks) waited on each other, and PostgreSQL ended this one.
        # Access counts are best effort, as rows locked elsewhere are skipped: the
        # recall stands, its memories untouched.
        return {}
    return {r["id"]: (r["accessed_at"], r["access_count"]) for r in await cur.fetchall()}


# --- maintenance ----------------------------------------------------------------------------

MAINTENANCE_LOCK_ID = 7_312_104_118_002

# Each counts what it deleted in recall's statistics (``store.recall_stats``).
_GONE_COUNTED = f"""
    RETURNING m.resource_id, m.search_vector, m.content
), {counted("gone", -1)}
SELECT count(*) AS deleted FROM gone
"""

DELETE_EXPIRED_EPISODES = f"""
WITH gone AS (
    DELETE FROM popagent_memories m WHERE m.kind = 'episode' AND m.created_at < %(cutoff)s
{_GONE_COUNTED}"""

# Per resource, keep the ``cap`` newest episodes (newest by created_at, then id).
DELETE_OVER_CAP_EPISODES = f"""
WITH gone AS (
    DELETE FROM popagent_memories m
    USING (
        SELECT resource_id, id FROM (
            SELECT resource_id, id, row_number() OVER (
                PARTITION BY resource_id ORDER BY created_at DESC, id DESC) AS position
            FROM popagent_memories
            WHERE kind = 'episode'
              AND resource_id IN (
                  SELECT resource_id FROM popagent_memories WHERE kind = 'episode'
                  GROUP BY resource_id HAVING count(*) > %(cap)s)
        ) ranked
        WHERE position > %(cap)s
    ) doomed
    WHERE m.resource_id = doomed.resource_id AND m.id = doomed.id
{_GONE_COUNTED}"""

# The same two rules for one resource (the management API's "run maintenance now").
DELETE_EXPIRED_EPISODES_OF = f"""
WITH gone AS (
    DELETE FROM popagent_memories m
    WHERE m.resource_id = %(resource_id)s AND m.kind = 'episode' AND m.created_at < %(cutoff)s
{_GONE_COUNTED}"""

DELETE_OVER_CAP_EPISODES_OF = f"""
WITH gone AS (
    DELETE FROM popagent_memories m
    USING (
        SELECT id FROM popagent_memories
        WHERE resource_id = %(resource_id)s AND kind = 'episode'
        ORDER BY created_at DESC, id DESC
        OFFSET %(cap)s
    ) doomed
    WHERE m.resource_id = %(resource_id)s AND m.id = doomed.id
{_GONE_COUNTED}"""


# Facts past their expiry: gone from popagent_memories, last value kept as a version.
EXPIRE_FACTS = f"""
WITH gone AS (
    DELETE FROM popagent_memories
    WHERE kind = 'fact' AND expires_at <= %(now)s
      AND (%(resource_id)s::text IS NULL OR resource_id = %(resource_id)s)
    RETURNING *
), kept AS ({KEEP_GONE_FACTS} RETURNING 1), {counted("gone", -1)}
SELECT count(*) AS deleted FROM gone
"""


async def expire_facts(conn: Conn, now: datetime, resource_id: str | None = None) -> int:
    """Remove facts whose ``expires_at`` is at or before ``now``; return how many."""
    return await _deleted(
        conn,
        EXPIRE_FACTS,
        {
            "now": now,
            "resource_id": resource_id,
            "purge": False,
            "ended": "expired",
            "ended_origin": "maintenance",
            "ended_session_id": None,
        },
    )


async def lock_maintenance(conn: Conn) -> None:
    """Serialize maintenance across processes until the caller's transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MAINTENANCE_LOCK_ID,))


async def delete_expired_episodes(
    conn: Conn, cutoff: datetime, resource_id: str | None = None
) -> int:
    """Episodes created before ``cutoff``: of every resource, or of ``resource_id`` only."""
    if resource_id is None:
        return await _deleted(conn, DELETE_EXPIRED_EPISODES, {"cutoff": cutoff})
    params = {"cutoff": cutoff, "resource_id": resource_id}
    return await _deleted(conn, DELETE_EXPIRED_EPISODES_OF, params)


async def delete_over_cap_episodes(conn: Conn, cap: int, resource_id: str | None = None) -> int:
    """Episodes beyond each resource's ``cap`` newest: every resource, or ``resource_id`` only."""
    if resource_id is None:
        return await _deleted(conn, DELETE_OVER_CAP_EPISODES, {"cap": cap})
    params = {"cap": cap, "resource_id": resource_id}
    return await _deleted(conn, DELETE_OVER_CAP_EPISODES_OF, params)
