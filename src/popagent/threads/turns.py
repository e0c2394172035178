"""What a chat turn needs of its session's history, for the agent layer above.

The agent reaches the database only through this layer: the turn lock, the
history window a turn starts from, rescrubbing a turn's messages and marking a
turn that ended without its answer. Each function runs on a connection of the
pool it is given (the turn's), exactly as the SQL of ``popagent.store.threads``
and ``popagent.store.locks`` says; nothing here checks IDs, since the turn did.
"""

from __future__ import annotations

from typing import Any

from ..models import Message, TurnStatus
from ..store import threads as sql
from ..store.database import Pool
from ..store.locks import session_turn_lock
from ..store.threads import MAX_TURN_DURATION

__all__ = [
    "MAX_TURN_DURATION",
    "end_turn",
    "recent_messages",
    "rewrite_messages",
    "session_turn_lock",
]


async def recent_messages(
    pool: Pool, resource_id: str, session_id: str, *, limit: int, before_id: int | None
) -> list[Message]:
    """The ``limit`` newest messages of the session older than ``before_id`` (all when
    ``None``), oldest first."""
    async with pool.connection() as conn:
        return await sql.recent_messages(
            conn, resource_id, session_id, limit=limit, before_id=before_id
        )


async def rewrite_messages(
    pool: Pool,
    resource_id: str,
    session_id: str,
    rewrites: list[tuple[int, str, list[dict[str, Any]]]],
) -> None:
    """Replace the content and parts of messages ``(id, content, parts)``, in one transaction."""
    async with pool.connection() as conn, conn.transaction():
        await sql.rewrite_messages(conn, resource_id, session_id, rewrites)


async def end_turn(
    pool: Pool, resource_id: str, session_id: str, turn_id: int, status: TurnStatus
) -> bool:
    """Mark a turn that ended without its final message ``failed`` or ``interrupted``
    (a completed turn stays completed); ``False`` when no turn was changed."""
    async with pool.connection() as conn:
        return await sql.end_turn(conn, resource_id, session_id, turn_id, status)
