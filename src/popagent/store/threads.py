"""SQL over ``popagent_sessions`` and ``popagent_messages`` (thread memory).

Invariants: functions take the caller's connection and never open a
transaction; every statement filters on ``resource_id`` first; nothing here
reads or writes ``popagent_memories``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..models import Message, Session
from .database import Conn

__all__ = [
    "append_message",
    "create_session",
    "delete_session",
    "ensure_session",
    "get_session",
    "list_messages",
    "list_sessions",
    "recent_messages",
    "rename_session",
    "rewrite_messages",
]

SESSION_COLUMNS = "resource_id, session_id, title, metadata, created_at, updated_at"
MESSAGE_COLUMNS = "id, resource_id, session_id, role, content, parts, created_at"

INSERT_SESSION = f"""
INSERT INTO popagent_sessions (resource_id, session_id, title, metadata)
VALUES (%(resource_id)s, %(session_id)s, %(title)s, %(metadata)s)
RETURNING {SESSION_COLUMNS}
"""

ENSURE_SESSION = f"""
INSERT INTO popagent_sessions (resource_id, session_id)
VALUES (%(resource_id)s, %(session_id)s)
ON CONFLICT (resource_id, session_id) DO UPDATE SET updated_at = now()
RETURNING {SESSION_COLUMNS}
"""

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

INSERT_MESSAGE = f"""
WITH touched AS (
    UPDATE popagent_sessions SET updated_at = now()
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
)
INSERT INTO popagent_messages (resource_id, session_id, role, content, parts)
VALUES (%(resource_id)s, %(session_id)s, %(role)s, %(content)s, %(parts)s)
RETURNING {MESSAGE_COLUMNS}
"""

# The same, creating the session when it is missing: one statement, one commit, for
# a turn's first write. The foreign key is checked at the end of the statement,
# when the session row the CTE wrote is there.
INSERT_MESSAGE_ENSURING_SESSION = f"""
WITH session AS (
    INSERT INTO popagent_sessions (resource_id, session_id)
    VALUES (%(resource_id)s, %(session_id)s)
    ON CONFLICT (resource_id, session_id) DO UPDATE SET updated_at = now()
    RETURNING resource_id, session_id
)
INSERT INTO popagent_messages (resource_id, session_id, role, content, parts)
SELECT session.resource_id, session.session_id, %(role)s, %(content)s, %(parts)s
FROM session
RETURNING {MESSAGE_COLUMNS}
"""

LIST_MESSAGES = f"""
SELECT {MESSAGE_COLUMNS} FROM popagent_messages
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s)
ORDER BY id
LIMIT %(limit)s
"""

RECENT_MESSAGES = f"""
SELECT * FROM (
    SELECT {MESSAGE_COLUMNS} FROM popagent_messages
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
      AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s)
    ORDER BY id DESC
    LIMIT %(limit)s
) recent ORDER BY id
"""


# Only for scrubbing secret values out of messages already written (the turn that
# learns a secret rewrites its own messages); history is otherwise append-only.
REWRITE_MESSAGE = """
UPDATE popagent_messages SET content = %(content)s, parts = %(parts)s
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s AND id = %(id)s
"""


def row_to_session(row: dict[str, Any]) -> Session:
    return Session(**row)


def row_to_message(row: dict[str, Any]) -> Message:
    return Message(
        id=row["id"],
        resource_id=row["resource_id"],
        session_id=row["session_id"],
        role=row["role"],
        content=row["content"],
        parts=tuple(row["parts"]),
        created_at=row["created_at"],
    )


async def create_session(
    conn: Conn, resource_id: str, session_id: str, title: str | None, metadata: dict[str, Any]
) -> Session | None:
    """Create a session; ``None`` if the ID is taken in this resource."""
    try:
        async with conn.transaction():
            cur = await conn.execute(
                INSERT_SESSION,
                {
                    "resource_id": resource_id,
                    "session_id": session_id,
                    "title": title,
                    "metadata": Jsonb(metadata),
                },
            )
            row = await cur.fetchone()
    except psycopg.errors.UniqueViolation:
        return None
    assert row is not None
    return row_to_session(row)


async def ensure_session(conn: Conn, resource_id: str, session_id: str) -> Session:
    cur = await conn.execute(ENSURE_SESSION, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    assert row is not None
    return row_to_session(row)


async def get_session(conn: Conn, resource_id: str, session_id: str) -> Session | None:
    cur = await conn.execute(SELECT_SESSION, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    return row_to_session(row) if row else None


async def list_sessions(conn: Conn, resource_id: str, limit: int, offset: int) -> list[Session]:
    cur = await conn.execute(
        LIST_SESSIONS, {"resource_id": resource_id, "limit": limit, "offset": offset}
    )
    return [row_to_session(r) for r in await cur.fetchall()]


async def rename_session(
    conn: Conn, resource_id: str, session_id: str, title: str | None
) -> Session | None:
    cur = await conn.execute(
        RENAME_SESSION, {"resource_id": resource_id, "session_id": session_id, "title": title}
    )
    row = await cur.fetchone()
    return row_to_session(row) if row else None


async def delete_session(conn: Conn, resource_id: str, session_id: str) -> bool:
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
) -> Message | None:
    """Append a message; ``None`` when the session does not exist (the foreign key says so).

    With ``ensure_session`` a missing session is created by the same statement.
    """
    try:
        cur = await conn.execute(
            INSERT_MESSAGE_ENSURING_SESSION if ensure_session else INSERT_MESSAGE,
            {
                "resource_id": resource_id,
                "session_id": session_id,
                "role": role,
                "content": content,
                "parts": Jsonb(parts),
            },
        )
        row = await cur.fetchone()
    except psycopg.errors.ForeignKeyViolation:
        return None
    assert row is not None
    return row_to_message(row)


async def list_messages(
    conn: Conn, resource_id: str, session_id: str, *, after_id: int | None, limit: int
) -> list[Message]:
    cur = await conn.execute(
        LIST_MESSAGES,
        {
            "resource_id": resource_id,
            "session_id": session_id,
            "after_id": after_id,
            "limit": limit,
        },
    )
    return [row_to_message(r) for r in await cur.fetchall()]


async def recent_messages(
    conn: Conn, resource_id: str, session_id: str, *, limit: int, before_id: int | None = None
) -> list[Message]:
    """The ``limit`` newest messages (before ``before_id``), oldest first."""
    cur = await conn.execute(
        RECENT_MESSAGES,
        {
            "resource_id": resource_id,
            "session_id": session_id,
            "limit": limit,
            "before_id": before_id,
        },
    )
    return [row_to_message(r) for r in await cur.fetchall()]


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
