"""SQL over ``popagent_observation_logs`` and ``popagent_observation_groups``.

Invariants: functions take the caller's connection and never open a
transaction; every statement filters on ``resource_id`` first; nothing here
reads or writes ``popagent_memories``. Generations are only ever inserted
(a reflection adds one); the head is the row with the greatest generation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.rows import class_row

from ..models import Message, ObservationGroup, ObservationLog
from .database import Conn
from .threads import row_to_message

__all__ = [
    "activate_groups",
    "advance_log",
    "buffered_groups",
    "buffered_reflection",
    "delete_overtaken_buffered",
    "get_actor",
    "get_group",
    "groups_of_log",
    "head_log",
    "insert_group",
    "insert_log",
    "list_logs",
    "lock_log",
    "messages_in_range",
    "record_actor",
    "set_next_reflection",
]

LOG_COLUMNS = (
    "id, resource_id, session_id, generation, origin, observations, observation_tokens, "
    "last_observed_message_id, covered_group_ids, next_reflection_tokens, created_at, updated_at"
)
GROUP_COLUMNS = (
    "id, resource_id, session_id, log_id, kind, status, first_message_id, last_message_id, "
    "observations, observation_tokens, message_tokens, created_at"
)

SELECT_HEAD = f"""
SELECT {LOG_COLUMNS} FROM popagent_observation_logs
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
ORDER BY generation DESC
LIMIT 1
"""

LIST_LOGS = f"""
SELECT {LOG_COLUMNS} FROM popagent_observation_logs
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
ORDER BY generation
"""

INSERT_LOG = f"""
INSERT INTO popagent_observation_logs (
    resource_id, session_id, generation, origin, observations, observation_tokens,
    last_observed_message_id, covered_group_ids, next_reflection_tokens
) VALUES (
    %(resource_id)s, %(session_id)s, %(generation)s, %(origin)s, %(observations)s,
    %(observation_tokens)s, %(last_observed_message_id)s, %(covered_group_ids)s,
    %(next_reflection_tokens)s
)
RETURNING {LOG_COLUMNS}
"""

# Appends an observation to the head only if the cursor is still where the
# caller read it: a second writer that got there first makes this a no-op.
ADVANCE_LOG = f"""
UPDATE popagent_observation_logs
SET observations = %(observations)s, observation_tokens = %(observation_tokens)s,
    last_observed_message_id = %(last_observed_message_id)s, updated_at = now()
WHERE resource_id = %(resource_id)s AND id = %(id)s
  AND last_observed_message_id IS NOT DISTINCT FROM %(expected_cursor)s
RETURNING {LOG_COLUMNS}
"""

LOCK_LOG = f"""
SELECT {LOG_COLUMNS} FROM popagent_observation_logs
WHERE resource_id = %(resource_id)s AND id = %(id)s
FOR UPDATE
"""

SET_NEXT_REFLECTION = """
UPDATE popagent_observation_logs
SET next_reflection_tokens = %(next_reflection_tokens)s, updated_at = now()
WHERE resource_id = %(resource_id)s AND id = %(id)s
"""

INSERT_GROUP = f"""
INSERT INTO popagent_observation_groups (
    resource_id, session_id, log_id, kind, status, first_message_id, last_message_id,
    observations, observation_tokens, message_tokens
) VALUES (
    %(resource_id)s, %(session_id)s, %(log_id)s, %(kind)s, %(status)s, %(first_message_id)s,
    %(last_message_id)s, %(observations)s, %(observation_tokens)s, %(message_tokens)s
)
RETURNING {GROUP_COLUMNS}
"""

GROUPS_OF_LOG = f"""
SELECT {GROUP_COLUMNS} FROM popagent_observation_groups
WHERE resource_id = %(resource_id)s AND log_id = %(log_id)s AND status = 'active'
ORDER BY id
"""

BUFFERED_GROUPS = f"""
SELECT {GROUP_COLUMNS} FROM popagent_observation_groups
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s AND status = 'buffered'
  AND first_message_id > coalesce(%(after_id)s::bigint, 0)
ORDER BY first_message_id, id
"""

# Only groups still buffered move: a concurrent activation makes this a partial no-op,
# which the caller detects from the row count.
ACTIVATE_GROUPS = """
UPDATE popagent_observation_groups
SET status = 'active', log_id = %(log_id)s
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND status = 'buffered' AND id = ANY(%(ids)s)
"""

DELETE_OVERTAKEN = """
DELETE FROM popagent_observation_groups
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND status = 'buffered' AND first_message_id <= %(cursor)s
"""

BUFFERED_REFLECTION = f"""
SELECT {GROUP_COLUMNS} FROM popagent_observation_groups
WHERE resource_id = %(resource_id)s AND log_id = %(log_id)s
  AND kind = 'reflection' AND status = 'buffered'
ORDER BY id DESC
LIMIT 1
"""

SELECT_ACTOR = """
SELECT actor FROM popagent_observation_actors
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
"""

# Recorded only for a stored session (the first turn's history loads before it exists).
# ``EXCLUDED.recorded_at`` is the column's default, ``now()`` (no function in ``DO UPDATE``:
# a distributed table refuses it).
RECORD_ACTOR = """
INSERT INTO popagent_observation_actors (resource_id, session_id, actor)
SELECT %(resource_id)s, %(session_id)s, %(actor)s
WHERE EXISTS (
    SELECT 1 FROM popagent_sessions
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
)
ON CONFLICT (resource_id, session_id)
DO UPDATE SET actor = EXCLUDED.actor, recorded_at = EXCLUDED.recorded_at
"""

SELECT_GROUP = f"""
SELECT {GROUP_COLUMNS} FROM popagent_observation_groups
WHERE resource_id = %(resource_id)s AND id = %(id)s
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
"""

MESSAGES_IN_RANGE = """
SELECT id, resource_id, session_id, role, content, parts, created_at FROM popagent_messages
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND id BETWEEN %(first_id)s AND %(last_id)s
ORDER BY id
LIMIT %(limit)s OFFSET %(offset)s
"""

COUNT_IN_RANGE = """
SELECT count(*) AS n FROM popagent_messages
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND id BETWEEN %(first_id)s AND %(last_id)s
"""


def _log(row: dict[str, Any]) -> ObservationLog:
    return ObservationLog(**{**row, "covered_group_ids": tuple(row["covered_group_ids"])})


# A group row's columns (``GROUP_COLUMNS``) are ``ObservationGroup``'s fields, one to one.
_GROUP_ROW = class_row(ObservationGroup)


async def _group(conn: Conn, query: str, params: dict[str, Any]) -> ObservationGroup | None:
    async with conn.cursor(row_factory=_GROUP_ROW) as cur:
        await cur.execute(query, params)
        return await cur.fetchone()


async def _groups(conn: Conn, query: str, params: dict[str, Any]) -> list[ObservationGroup]:
    async with conn.cursor(row_factory=_GROUP_ROW) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def head_log(conn: Conn, resource_id: str, session_id: str) -> ObservationLog | None:
    """The active (newest) generation of the session's log, if it has one."""
    cur = await conn.execute(SELECT_HEAD, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    return _log(row) if row else None


async def list_logs(conn: Conn, resource_id: str, session_id: str) -> list[ObservationLog]:
    """Every stored generation of the session's log, oldest first."""
    cur = await conn.execute(LIST_LOGS, {"resource_id": resource_id, "session_id": session_id})
    return [_log(r) for r in await cur.fetchall()]


async def insert_log(
    conn: Conn,
    resource_id: str,
    session_id: str,
    *,
    generation: int,
    origin: str,
    observations: str,
    observation_tokens: int,
    last_observed_message_id: int | None,
    covered_group_ids: Sequence[int] = (),
    next_reflection_tokens: int = 0,
) -> ObservationLog:
    """Insert a generation; raises ``UniqueViolation`` when it exists already."""
    cur = await conn.execute(
        INSERT_LOG,
        {
            "resource_id": resource_id,
            "session_id": session_id,
            "generation": generation,
            "origin": origin,
            "observations": observations,
            "observation_tokens": observation_tokens,
            "last_observed_message_id": last_observed_message_id,
            "covered_group_ids": list(covered_group_ids),
            "next_reflection_tokens": next_reflection_tokens,
        },
    )
    row = await cur.fetchone()
    assert row is not None
    return _log(row)


async def advance_log(
    conn: Conn,
    log: ObservationLog,
    *,
    observations: str,
    observation_tokens: int,
    last_observed_message_id: int,
) -> ObservationLog | None:
    """Replace the head's text and move its cursor; ``None`` if the cursor moved meanwhile."""
    cur = await conn.execute(
        ADVANCE_LOG,
        {
            "resource_id": log.resource_id,
            "id": log.id,
            "observations": observations,
            "observation_tokens": observation_tokens,
            "last_observed_message_id": last_observed_message_id,
            "expected_cursor": log.last_observed_message_id,
        },
    )
    row = await cur.fetchone()
    return _log(row) if row else None


async def lock_log(conn: Conn, log: ObservationLog) -> ObservationLog | None:
    """Re-read ``log`` and lock its row until the caller's transaction ends."""
    cur = await conn.execute(LOCK_LOG, {"resource_id": log.resource_id, "id": log.id})
    row = await cur.fetchone()
    return _log(row) if row else None


async def set_next_reflection(conn: Conn, log: ObservationLog, tokens: int) -> None:
    await conn.execute(
        SET_NEXT_REFLECTION,
        {"resource_id": log.resource_id, "id": log.id, "next_reflection_tokens": tokens},
    )


async def insert_group(
    conn: Conn,
    log: ObservationLog,
    *,
    kind: str,
    first_message_id: int,
    last_message_id: int,
    observations: str,
    observation_tokens: int,
    message_tokens: int,
    status: str = "active",
) -> ObservationGroup:
    """Insert a group into ``log``: ``active``, or ``buffered`` (a chunk awaiting activation)."""
    group = await _group(
        conn,
        INSERT_GROUP,
        {
            "resource_id": log.resource_id,
            "session_id": log.session_id,
            "log_id": log.id,
            "kind": kind,
            "status": status,
            "first_message_id": first_message_id,
            "last_message_id": last_message_id,
            "observations": observations,
            "observation_tokens": observation_tokens,
            "message_tokens": message_tokens,
        },
    )
    assert group is not None
    return group


async def groups_of_log(conn: Conn, log: ObservationLog) -> list[ObservationGroup]:
    """The active groups written into this generation, in order."""
    return await _groups(conn, GROUPS_OF_LOG, {"resource_id": log.resource_id, "log_id": log.id})


async def buffered_groups(
    conn: Conn, resource_id: str, session_id: str, *, after_id: int | None
) -> list[ObservationGroup]:
    """The session's buffered chunks starting after message ``after_id``, in message order."""
    return await _groups(
        conn,
        BUFFERED_GROUPS,
        {"resource_id": resource_id, "session_id": session_id, "after_id": after_id},
    )


async def buffered_reflection(conn: Conn, log: ObservationLog) -> ObservationGroup | None:
    """The buffered reflection written for this generation, if any (the newest)."""
    return await _group(
        conn, BUFFERED_REFLECTION, {"resource_id": log.resource_id, "log_id": log.id}
    )


async def activate_groups(conn: Conn, log: ObservationLog, group_ids: Sequence[int]) -> int:
    """Make these buffered groups active members of ``log``; how many were still buffered."""
    cur = await conn.execute(
        ACTIVATE_GROUPS,
        {
            "resource_id": log.resource_id,
            "session_id": log.session_id,
            "log_id": log.id,
            "ids": list(group_ids),
        },
    )
    return cur.rowcount


async def delete_overtaken_buffered(
    conn: Conn, resource_id: str, session_id: str, cursor: int
) -> None:
    """Delete buffered chunks that start at or before ``cursor`` (already observed)."""
    await conn.execute(
        DELETE_OVERTAKEN, {"resource_id": resource_id, "session_id": session_id, "cursor": cursor}
    )


async def get_actor(conn: Conn, resource_id: str, session_id: str) -> str | None:
    """The ``provider/model`` recorded for the session's latest assistant step."""
    cur = await conn.execute(SELECT_ACTOR, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    return None if row is None else str(row["actor"])


async def record_actor(conn: Conn, resource_id: str, session_id: str, actor: str) -> None:
    """Record ``provider/model`` as the session's actor (no-op before the session exists)."""
    await conn.execute(
        RECORD_ACTOR, {"resource_id": resource_id, "session_id": session_id, "actor": actor}
    )


async def get_group(
    conn: Conn, resource_id: str, group_id: int, *, session_id: str | None
) -> ObservationGroup | None:
    """A group of this resource (of any generation); only of ``session_id`` when given."""
    return await _group(
        conn, SELECT_GROUP, {"resource_id": resource_id, "id": group_id, "session_id": session_id}
    )


async def messages_in_range(
    conn: Conn,
    resource_id: str,
    session_id: str,
    first_id: int,
    last_id: int,
    *,
    limit: int,
    offset: int,
) -> tuple[list[Message], int]:
    """A page of the session's messages with ids in ``[first_id, last_id]``, and their total."""
    params = {
        "resource_id": resource_id,
        "session_id": session_id,
        "first_id": first_id,
        "last_id": last_id,
    }
    cur = await conn.execute(MESSAGES_IN_RANGE, {**params, "limit": limit, "offset": offset})
    rows = await cur.fetchall()
    cur = await conn.execute(COUNT_IN_RANGE, params)
    total = await cur.fetchone()
    assert total is not None
    return [row_to_message(r) for r in rows], int(total["n"])
