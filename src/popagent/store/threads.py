"""SQL over ``popagent_sessions``, ``popagent_messages`` and ``popagent_turns`` (thread memory).

Invariants: functions take the caller's connection and never open a
transaction; every statement filters on ``resource_id`` first; nothing here
reads or writes ``popagent_memories``. Every statement that writes, rewrites or
deletes messages counts their bytes in the resource's ``thread_bytes``
(``recall_stats.thread_counted``, migration 0020: the storage quota), locking the
session's row before the resource's statistics row; a session is deleted by
``empty_session`` first, which locks its row so that no message is added
uncounted meanwhile.

Turns: a chat turn's user message and its ``running`` turn row are written by
one statement (``start_turn``), which also marks any earlier turn of the
session still ``running`` as ``interrupted`` (turns of one session run one at
a time, so such a turn is one whose process died). ``complete_turn`` writes
the final assistant message and marks the turn ``completed`` in one statement,
meant to run in the caller's transaction beside the episode. Messages read
back carry their turn's status as a reader should see it: a turn still
``running`` whose session's turn lock no process holds (its process died), or
after ``STALE_TURN_AFTER``, reads ``interrupted``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from ..models import Message, Session, TurnStatus
from .database import Conn
from .locks import turn_lock_held_sql
from .recall_stats import MESSAGE_BYTES, thread_counted

__all__ = [
    "MAX_TURN_DURATION",
    "STALE_TURN_AFTER",
    "append_message",
    "complete_turn",
    "create_session",
    "delete_session",
    "empty_session",
    "end_turn",
    "ensure_session",
    "get_session",
    "list_messages",
    "list_sessions",
    "recent_messages",
    "rename_session",
    "rewrite_messages",
    "start_turn",
]

#: The longest a turn may run: ``Agent.run_turn`` stops its model and tool calls
#: when it is reached (``TurnFailedError``). With the default model settings a
#: model call that times out on every attempt takes about 4.5 minutes (4
#: attempts of 60 s plus backoff), so 8 tool rounds fit in about 36 minutes.
MAX_TURN_DURATION = timedelta(hours=1)
#: A turn still ``running`` this long after its start reads as ``interrupted``:
#: no live turn can be that old (the margin covers the final write and clock steps).
STALE_TURN_AFTER = MAX_TURN_DURATION + timedelta(minutes=5)

SESSION_COLUMNS = "resource_id, session_id, title, metadata, created_at, updated_at"
MESSAGE_COLUMNS = "id, resource_id, session_id, turn_id, role, content, parts, created_at"
# The same, qualified, with the turn's status as readers see it (see the module doc).
# A running turn is live only while some process holds its session's turn lock
# (``store.locks``: taken before the turn row is written, released after it
# ends), so one whose process died reads ``interrupted`` at once; the age rule
# stays for turns that ran without the lock.
MESSAGE_READ_COLUMNS = f"""m.id, m.resource_id, m.session_id, m.turn_id, m.role, m.content,
    m.parts, m.created_at,
    CASE WHEN t.status = 'running'
              AND (t.started_at < now() - %(stale_after)s::interval
                   OR NOT {turn_lock_held_sql("t.resource_id", "t.session_id")})
         THEN 'interrupted' ELSE t.status END AS turn_status"""
MESSAGE_TURN_JOIN = """popagent_messages m
    LEFT JOIN popagent_turns t
      ON t.resource_id = m.resource_id AND t.session_id = m.session_id AND t.turn_id = m.turn_id"""

INSERT_SESSION = f"""
INSERT INTO popagent_sessions (resource_id, session_id, title, metadata)
VALUES (%(resource_id)s, %(session_id)s, %(title)s, %(metadata)s)
RETURNING {SESSION_COLUMNS}
"""

# Timestamps a distributed table (Citus) accepts: in ``ON CONFLICT ... DO UPDATE`` no
# function that is not immutable, hence ``EXCLUDED.updated_at`` (the proposed row's
# default, ``now()``); in an ``UPDATE`` no volatile one, hence a turn ends at
# ``statement_timestamp()`` (stable: the time its statement began), not ``clock_timestamp()``.
_UPSERT_SESSION = """INSERT INTO popagent_sessions (resource_id, session_id)
    VALUES (%(resource_id)s, %(session_id)s)
    ON CONFLICT (resource_id, session_id) DO UPDATE SET updated_at = EXCLUDED.updated_at"""

ENSURE_SESSION = f"""
{_UPSERT_SESSION}
RETURNING {SESSION_COLUMNS}
"""

#: The leading CTE of a statement that creates its session when it is missing (one
#: statement, one commit): ``session`` is that row's key. The foreign keys are
#: checked at the end of the statement, when the session row the CTE wrote is there.
SESSION_CTE = f"""WITH session AS (
    {_UPSERT_SESSION}
    RETURNING resource_id, session_id
)"""

# Marks the session as written to (its ``updated_at``): a CTE of each message insert,
# which reads it, so that the session's row is locked before the resource's
# statistics row (``recall_stats.thread_counted``).
_TOUCH_SESSION = """touched AS (
    UPDATE popagent_sessions SET updated_at = now()
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
    RETURNING resource_id, session_id
)"""

# A message's size in the storage quota, in a write's RETURNING.
_BYTES = MESSAGE_BYTES.format(m="popagent_messages")


def _insert_message_from(source: str, turn_id: str) -> str:
    """The end of a message write: ``written``, one message into ``source``'s session
    (a CTE with ``resource_id`` and ``session_id``, which locks the session's row)
    and turn ``turn_id``, its bytes counted in the resource's ``thread_bytes``
    (``recall_stats.thread_counted``), and the final ``SELECT`` of the message."""
    return f"""written AS (
    INSERT INTO popagent_messages (resource_id, session_id, turn_id, role, content, parts)
    SELECT {source}.resource_id, {source}.session_id, {turn_id}, %(role)s, %(content)s, %(parts)s
    FROM {source}
    RETURNING {MESSAGE_COLUMNS}, {_BYTES} AS bytes
), {thread_counted("written")}
SELECT {MESSAGE_COLUMNS} FROM written"""


SELECT_SESSION = f"""
SELECT {SESSION_COLUMNS} FROM popagent_sessions
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
"""

LIST_SESSIONS = f"""
SELECT {SESSION_COLUMNS} FROM popagent_sessions
WHERE resource_id = %(resource_id)s
ORDER BY updated_at DESC, session_id
LIMIT %(limit)s OFFSET %(offset)s
"""

RENAME_SESSION = f"""
UPDATE popagent_sessions SET title = %(title)s, updated_at = now()
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
RETURNING {SESSION_COLUMNS}
"""

DELETE_SESSION = """
DELETE FROM popagent_sessions WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
"""

# The first of ``empty_session``'s statements: no message can be added to the
# session until the transaction ends (an insert takes a key-share lock on it).
LOCK_SESSION = """
SELECT 1 FROM popagent_sessions
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
FOR UPDATE
"""

# Then its messages go, counted out of the resource's thread_bytes: each one that
# this statement deleted (a concurrent pop deletes a row once, and only that
# statement counts it).
DELETE_MESSAGES = f"""
WITH gone AS (
    DELETE FROM popagent_messages
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
    RETURNING resource_id, -{_BYTES} AS bytes
), {thread_counted("gone")}
SELECT count(*) AS n FROM gone
"""

# No row when the session does not exist.
INSERT_MESSAGE = f"""
WITH {_TOUCH_SESSION},
{_insert_message_from("touched", "%(turn_id)s")}
"""

# The same, creating the session when it is missing, for a turn's first write.
INSERT_MESSAGE_ENSURING_SESSION = f"""
{SESSION_CTE},
{_insert_message_from("session", "%(turn_id)s")}
"""

# A turn's first write: the session (created when missing), the end of any turn
# of the session still running (it can only be a dead one), the new running
# turn and its user message, in one statement. Data-modifying CTEs all see the
# snapshot from before the statement, so the UPDATE never touches the new turn;
# the foreign keys are checked at the end of the statement, when the rows are there.
START_TURN = f"""
{SESSION_CTE}, interrupted AS (
    UPDATE popagent_turns SET status = 'interrupted', ended_at = statement_timestamp()
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s AND status = 'running'
), turn AS (
    INSERT INTO popagent_turns (resource_id, session_id)
    SELECT resource_id, session_id FROM session
    RETURNING resource_id, session_id, turn_id
),
{_insert_message_from("turn", "turn.turn_id")}
"""

# A turn's last write: its final message and its end as completed, in one
# statement (no row when the turn, or its session, is gone). A turn that a later
# one marked interrupted while it was still alive (two turns of one session at
# once) is completed all the same: it did finish.
COMPLETE_TURN = f"""
WITH turn AS (
    UPDATE popagent_turns SET status = 'completed', ended_at = statement_timestamp()
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
      AND turn_id = %(turn_id)s AND status <> 'completed'
    RETURNING resource_id, session_id, turn_id
), {_TOUCH_SESSION}, ended AS (
    SELECT turn.resource_id, turn.session_id, turn.turn_id
    FROM turn JOIN touched USING (resource_id, session_id)
),
{_insert_message_from("ended", "ended.turn_id")}
"""

# A turn that ended without its final message: failed or interrupted.
END_TURN = """
UPDATE popagent_turns SET status = %(status)s, ended_at = statement_timestamp()
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND turn_id = %(turn_id)s AND status <> 'completed'
"""

LIST_MESSAGES = f"""
SELECT {MESSAGE_READ_COLUMNS} FROM {MESSAGE_TURN_JOIN}
WHERE m.resource_id = %(resource_id)s AND m.session_id = %(session_id)s
  AND (%(after_id)s::bigint IS NULL OR m.id > %(after_id)s)
ORDER BY m.id
LIMIT %(limit)s
"""

RECENT_MESSAGES = f"""
SELECT * FROM (
    SELECT {MESSAGE_READ_COLUMNS} FROM {MESSAGE_TURN_JOIN}
    WHERE m.resource_id = %(resource_id)s AND m.session_id = %(session_id)s
      AND (%(before_id)s::bigint IS NULL OR m.id < %(before_id)s)
    ORDER BY m.id DESC
    LIMIT %(limit)s
) recent ORDER BY id
"""


# Only for scrubbing secret values out of messages already written (the turn that
# learns a secret rewrites its own messages); history is otherwise append-only.
# ``was`` is the row before the statement (a self-join): the difference of the sizes
# is counted in the resource's thread_bytes.
REWRITE_MESSAGE = f"""
WITH changed AS (
    UPDATE popagent_messages m SET content = %(content)s, parts = %(parts)s
    FROM popagent_messages was
    WHERE m.resource_id = %(resource_id)s AND m.session_id = %(session_id)s AND m.id = %(id)s
      AND was.resource_id = %(resource_id)s AND was.session_id = %(session_id)s
      AND was.id = m.id
    RETURNING m.resource_id,
              {MESSAGE_BYTES.format(m="m")} - {MESSAGE_BYTES.format(m="was")} AS bytes
), {thread_counted("changed")}
SELECT count(*) AS n FROM changed
"""


# A session row's columns are ``Session``'s fields, one to one.
_SESSION_ROW = class_row(Session)


async def _session(conn: Conn, query: str, params: dict[str, Any]) -> Session | None:
    async with conn.cursor(row_factory=_SESSION_ROW) as cur:
        await cur.execute(query, params)
        return await cur.fetchone()


def row_to_message(row: dict[str, Any], turn_status: TurnStatus | None = None) -> Message:
    """A message row; ``turn_status`` stands in when the row has none (a write's RETURNING)."""
    turn_id = row.get("turn_id")
    # Spelled out, not ``_rows.from_row``: every turn reads its history through here.
    return Message(
        id=row["id"],
        resource_id=row["resource_id"],
        session_id=row["session_id"],
        role=row["role"],
        content=row["content"],
        parts=tuple(row["parts"]),
        created_at=row["created_at"],
        turn_id=turn_id,
        turn_status=row.get("turn_status") or (turn_status if turn_id is not None else None),
    )


def _message_params(
    resource_id: str,
    session_id: str,
    turn_id: int | None,
    role: str,
    content: str,
    parts: list[dict[str, Any]],
) -> dict[str, Any]:
    """The parameters of every statement that writes one message (``turn_id`` is
    unused by ``START_TURN``, whose turn is new)."""
    return {
        "resource_id": resource_id,
        "session_id": session_id,
        "turn_id": turn_id,
        "role": role,
        "content": content,
        "parts": Jsonb(parts),
    }


async def _write_message(
    conn: Conn, query: str, params: dict[str, Any], turn_status: TurnStatus
) -> Message | None:
    """The message a write statement returns (``None``: it wrote none), with the
    status its turn has after the statement."""
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    return row_to_message(row, turn_status) if row else None


async def _read_messages(
    conn: Conn, query: str, resource_id: str, session_id: str, **bounds: Any
) -> list[Message]:
    """The messages a read statement (``LIST_MESSAGES``, ``RECENT_MESSAGES``) gives,
    with their turns' status; ``bounds`` are its other parameters."""
    params = {"resource_id": resource_id, "session_id": session_id, **bounds}
    cur = await conn.execute(query, params | {"stale_after": STALE_TURN_AFTER})
    return [row_to_message(r) for r in await cur.fetchall()]


async def create_session(
    conn: Conn, resource_id: str, session_id: str, title: str | None, metadata: dict[str, Any]
) -> Session | None:
    """Create a session; ``None`` if the ID is taken in this resource."""
    try:
        async with conn.transaction():
            created = await _session(
                conn,
                INSERT_SESSION,
                {
                    "resource_id": resource_id,
                    "session_id": session_id,
                    "title": title,
                    "metadata": Jsonb(metadata),
                },
            )
    except psycopg.errors.UniqueViolation:
        return None
    assert created is not None
    return created


async def ensure_session(conn: Conn, resource_id: str, session_id: str) -> Session:
    ensured = await _session(
        conn, ENSURE_SESSION, {"resource_id": resource_id, "session_id": session_id}
    )
    assert ensured is not None
    return ensured


async def get_session(conn: Conn, resource_id: str, session_id: str) -> Session | None:
    return await _session(
        conn, SELECT_SESSION, {"resource_id": resource_id, "session_id": session_id}
    )


async def list_sessions(conn: Conn, resource_id: str, limit: int, offset: int) -> list[Session]:
    async with conn.cursor(row_factory=_SESSION_ROW) as cur:
        await cur.execute(
            LIST_SESSIONS, {"resource_id": resource_id, "limit": limit, "offset": offset}
        )
        return await cur.fetchall()


async def rename_session(
    conn: Conn, resource_id: str, session_id: str, title: str | None
) -> Session | None:
    return await _session(
        conn, RENAME_SESSION, {"resource_id": resource_id, "session_id": session_id, "title": title}
    )


async def empty_session(conn: Conn, resource_id: str, session_id: str) -> bool:
    """Delete the session's messages, counted out of the resource's ``thread_bytes``;
    ``False`` when there is no such session. The session's row stays locked until
    the transaction ends, so no message is added meanwhile: run it inside the
    caller's transaction, before deleting or recreating the session's row."""
    keys = {"resource_id": resource_id, "session_id": session_id}
    cur = await conn.execute(LOCK_SESSION, keys)
    if await cur.fetchone() is None:
        return False
    await conn.execute(DELETE_MESSAGES, keys)
    return True


async def delete_session(conn: Conn, resource_id: str, session_id: str) -> bool:
    """Delete the session and everything of it (``empty_session``, then the row, whose
    cascade takes the other thread-scoped tables). Run it inside the caller's
    transaction."""
    if not await empty_session(conn, resource_id, session_id):
        return False
    cur = await conn.execute(DELETE_SESSION, {"resource_id": resource_id, "session_id": session_id})
    return cur.rowcount > 0


async def append_message(
    conn: Conn,
    resource_id: str,
    session_id: str,
    role: str,
    content: str,
    parts: list[dict[str, Any]],
    *,
    ensure_session: bool = False,
    turn_id: int | None = None,
) -> Message | None:
    """Append a message; ``None`` when the session (or the turn ``turn_id``) does not
    exist (the foreign key says so).

    With ``ensure_session`` a missing session is created by the same statement.
    ``turn_id`` names the running turn the message belongs to.
    """
    query = INSERT_MESSAGE_ENSURING_SESSION if ensure_session else INSERT_MESSAGE
    params = _message_params(resource_id, session_id, turn_id, role, content, parts)
    try:
        return await _write_message(conn, query, params, "running")
    except psycopg.errors.ForeignKeyViolation:
        return None


async def start_turn(
    conn: Conn,
    resource_id: str,
    session_id: str,
    role: str,
    content: str,
    parts: list[dict[str, Any]],
) -> Message:
    """Start a turn with its first message, creating the session when missing (one
    statement; see ``START_TURN``). The message's ``turn_id`` names the new turn."""
    params = _message_params(resource_id, session_id, None, role, content, parts)
    written = await _write_message(conn, START_TURN, params, "running")
    assert written is not None
    return written


async def complete_turn(
    conn: Conn,
    resource_id: str,
    session_id: str,
    turn_id: int,
    role: str,
    content: str,
    parts: list[dict[str, Any]],
) -> Message | None:
    """Store the turn's final message and mark it completed (one statement); ``None``
    when the turn is gone (its session was deleted) or already completed."""
    params = _message_params(resource_id, session_id, turn_id, role, content, parts)
    return await _write_message(conn, COMPLETE_TURN, params, "completed")


async def end_turn(
    conn: Conn, resource_id: str, session_id: str, turn_id: int, status: TurnStatus
) -> bool:
    """Mark a turn that ended without its final message (``failed``, ``interrupted``);
    a completed turn stays completed. ``False`` when no turn was changed."""
    if status not in ("failed", "interrupted"):
        raise ValueError(f"a turn ends failed or interrupted, not {status!r}")
    cur = await conn.execute(
        END_TURN,
        {
            "resource_id": resource_id,
            "session_id": session_id,
            "turn_id": turn_id,
            "status": status,
        },
    )
    return cur.rowcount > 0


async def list_messages(
    conn: Conn, resource_id: str, session_id: str, *, after_id: int | None, limit: int
) -> list[Message]:
    return await _read_messages(
        conn, LIST_MESSAGES, resource_id, session_id, after_id=after_id, limit=limit
    )


async def recent_messages(
    conn: Conn, resource_id: str, session_id: str, *, limit: int, before_id: int | None = None
) -> list[Message]:
    """The ``limit`` newest messages (before ``before_id``), oldest first."""
    return await _read_messages(
        conn, RECENT_MESSAGES, resource_id, session_id, limit=limit, before_id=before_id
    )


async def rewrite_messages(
    conn: Conn,
    resource_id: str,
    session_id: str,
    rewrites: list[tuple[int, str, list[dict[str, Any]]]],
) -> None:
    """Replace the content and parts of messages ``(id, content, parts)`` of this session.

    For scrubbing only: the role, order and timestamps of a message never change.
    """
    if not rewrites:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            REWRITE_MESSAGE,
            [
                {
                    "resource_id": resource_id,
                    "session_id": session_id,
                    "id": id,
                    "content": content,
                    "parts": Jsonb(parts),
                }
                for id, content, parts in rewrites
            ],
        )
