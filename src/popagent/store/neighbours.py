"""SQL that finds the episode after a recalled one: the next turn of its conversation.

Semantic recall returns it beside its best episode (``memory.recall``): an
answer is often in the reply that follows the turn a question matches.
Invariants: the caller's connection, no commit; every reference names
``resource_id``, so no row of another resource is read; an expired memory is
never returned; an episode is followed by the next episode of the same session
in ``(created_at, id)`` order (the order ``retain_episodes`` stores a
conversation in), found through ``popagent_memories_session_idx``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.rows import tuple_row

from ..models import Memory
from .database import Conn
from .memories import MEMORY_COLUMNS, tuple_to_memory

__all__ = ["NEXT_EPISODES", "next_episodes"]

NEXT_EPISODES = f"""
SELECT {", ".join("n." + c.strip() for c in MEMORY_COLUMNS.split(","))}, h.id AS after
FROM unnest(%(ids)s::bigint[]) AS h(id)
JOIN popagent_memories hit ON hit.resource_id = %(resource_id)s AND hit.id = h.id
CROSS JOIN LATERAL (
    SELECT n.*
    FROM popagent_memories n
    WHERE n.resource_id = %(resource_id)s AND n.session_id = hit.session_id
      AND n.kind = 'episode' AND (n.created_at, n.id) > (hit.created_at, hit.id)
      AND (n.expires_at IS NULL OR n.expires_at > now())
    ORDER BY n.created_at, n.id
    LIMIT 1
) n
WHERE hit.kind = 'episode'
"""


async def next_episodes(conn: Conn, resource_id: str, ids: Sequence[int]) -> dict[int, Memory]:
    """For each episode of ``ids`` that has one, the next episode of its session."""
    if not ids:
        return {}
    params: dict[str, Any] = {"resource_id": resource_id, "ids": list(ids)}
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(NEXT_EPISODES, params)
        return {int(row[-1]): tuple_to_memory(row) for row in await cur.fetchall()}
