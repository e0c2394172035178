"""SQL over ``popagent_messages.item``: a framework session's items as messages.

Invariants: functions take the caller's connection and never open a
transaction (``clear_session`` runs two statements, so its caller opens one);
every statement filters on ``resource_id`` first; nothing here reads or writes
``popagent_memories``. Items are stored in the order given, one message each,
by one statement, so a batch is written whole or not at all.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from .database import Conn
from .recall_stats import MESSAGE_BYTES, thread_counted
from .threads import SESSION_CTE, empty_session

__all__ = ["ItemRow", "append_items", "clear_session", "latest_items", "list_items", "pop_item"]

#: ``(id, role, content, item)``: ``item`` is ``None`` for a message popagent wrote itself.
ItemRow = tuple[int, str, str, dict[str, Any] | None]

ITEM_COLUMNS = "id, role, content, item"
_BYTES = MESSAGE_BYTES.format(m="popagent_messages")

# The session is created when missing (an SDK session starts by adding items);
# rows are inserted in array order, so the identity keeps the items' order.
# ``EXCLUDED.updated_at`` is ``now()``, the column's default (a distributed table
# refuses functions in ``DO UPDATE``: store/threads.py).
# Their bytes are counted in the resource's thread_bytes (the storage quota).
APPEND_ITEMS = f"""
{SESSION_CTE}, written AS (
    INSERT INTO popagent_messages (resource_id, session_id, role, content, parts, item)
    SELECT session.resource_id, session.session_id, e.row->>'role', e.row->>'content',
           e.row->'parts', e.row->'item'
    FROM session, jsonb_array_elements(%(rows)s) WITH ORDINALITY AS e(row, n)
    ORDER BY e.n
    RETURNING {ITEM_COLUMNS}, resource_id, {_BYTES} AS bytes
), {thread_counted("written")}
SELECT {ITEM_COLUMNS} FROM written ORDER BY id
"""

LIST_ITEMS = f"""
SELECT {ITEM_COLUMNS} FROM popagent_messages
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
  AND (%(after_id)s::bigint IS NULL OR id > %(after_id)s)
ORDER BY id
LIMIT %(limit)s
"""

LATEST_ITEMS = f"""
SELECT * FROM (
    SELECT {ITEM_COLUMNS} FROM popagent_messages
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
    ORDER BY id DESC
    LIMIT %(limit)s
) latest ORDER BY id
"""

# The newest message goes; a concurrent pop that lost the race finds no row.
POP_ITEM = f"""
WITH popped AS (
    DELETE FROM popagent_messages
    WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
      AND id = (
        SELECT id FROM popagent_messages
        WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
        ORDER BY id DESC LIMIT 1
      )
    RETURNING {ITEM_COLUMNS}, resource_id, -{_BYTES} AS bytes
), {thread_counted("popped")}
SELECT {ITEM_COLUMNS} FROM popped
"""

# Clearing deletes the session's messages (counted: ``threads.empty_session``), then
# the session row, so every other thread-scoped table (turns, observations, and
# whatever later migrations add) is emptied by its cascade, then puts the row back
# as it was: same title, metadata and creation time.
CLEAR_DELETE = """
DELETE FROM popagent_sessions
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s
RETURNING title, metadata, created_at
"""

CLEAR_RESTORE = """
INSERT INTO popagent_sessions (resource_id, session_id, title, metadata, created_at)
VALUES (%(resource_id)s, %(session_id)s, %(title)s, %(metadata)s, %(created_at)s)
"""


def _row(row: dict[str, Any]) -> ItemRow:
    return (row["id"], row["role"], row["content"], row["item"])


async def append_items(
    conn: Conn, resource_id: str, session_id: str, rows: list[dict[str, Any]]
) -> list[ItemRow]:
    """Insert ``rows`` (``role``, ``content``, ``parts``, ``item``), oldest first."""
    cur = await conn.execute(
        APPEND_ITEMS, {"resource_id": resource_id, "session_id": session_id, "rows": Jsonb(rows)}
    )
    return [_row(r) for r in await cur.fetchall()]


async def list_items(
    conn: Conn, resource_id: str, session_id: str, *, after_id: int | None, limit: int
) -> list[ItemRow]:
    cur = await conn.execute(
        LIST_ITEMS,
        {
            "resource_id": resource_id,
            "session_id": session_id,
            "after_id": after_id,
            "limit": limit,
        },
    )
    return [_row(r) for r in await cur.fetchall()]


async def latest_items(
    conn: Conn, resource_id: str, session_id: str, *, limit: int
) -> list[ItemRow]:
    """The ``limit`` newest, oldest first."""
    cur = await conn.execute(
        LATEST_ITEMS, {"resource_id": resource_id, "session_id": session_id, "limit": limit}
    )
    return [_row(r) for r in await cur.fetchall()]


async def pop_item(conn: Conn, resource_id: str, session_id: str) -> ItemRow | None:
    cur = await conn.execute(POP_ITEM, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    return _row(row) if row else None


async def clear_session(conn: Conn, resource_id: str, session_id: str) -> bool:
    """Empty the session, keeping its row; ``False`` when there is no such session.

    Several statements: run it inside the caller's transaction."""
    if not await empty_session(conn, resource_id, session_id):
        return False
    keys = {"resource_id": resource_id, "session_id": session_id}
    cur = await conn.execute(CLEAR_DELETE, keys)
    row = await cur.fetchone()
    if row is None:
        return False
    await conn.execute(CLEAR_RESTORE, {**keys, **row, "metadata": Jsonb(row["metadata"])})
    return True
