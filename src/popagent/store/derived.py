"""SQL of derived memories (migration 0022): their sources, and their stale marks.

Invariants:
- Marks are set by migration 0022's triggers only (a source changed or went);
  this module reads sources and marks, and clears a mark when asked.
- Every statement filters on ``resource_id``; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.types.json import Jsonb

from ..models import Memory
from .database import Conn
from .memories import MEMORY_COLUMNS, row_to_memory

__all__ = [
    "DERIVED_COLUMNS",
    "SOURCES",
    "based_on_param",
    "clear_stale",
    "list_stale",
    "sources",
]

#: A derived memory's columns (migration 0022), the ``Memory`` fields of the same
#: names: its sources and its stale mark. Export and import carry them.
DERIVED_COLUMNS = ("based_on", "stale_since", "stale_source")

# The memories a list of sources names: ids of any kind, keys of facts.
SOURCES = """
SELECT id, key, based_on FROM popagent_memories
WHERE resource_id = %(resource_id)s
  AND (id = ANY(%(ids)s::bigint[]) OR (kind = 'fact' AND key = ANY(%(keys)s::text[])))
"""

LIST_STALE = f"""
SELECT {MEMORY_COLUMNS} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND stale_since IS NOT NULL
ORDER BY stale_since DESC, id DESC
LIMIT %(limit)s
"""

CLEAR_STALE = f"""
UPDATE popagent_memories SET stale_since = NULL, stale_source = NULL
WHERE resource_id = %(resource_id)s AND id = %(id)s
RETURNING {MEMORY_COLUMNS}
"""


def based_on_param(value: Sequence[str | int] | None) -> Jsonb | None:
    """The ``based_on`` column's value for checked sources (``None``: none)."""
    return Jsonb(list(value)) if value else None


async def sources(
    conn: Conn, resource_id: str, ids: Sequence[int], keys: Sequence[str]
) -> list[tuple[int, str | None, tuple[str | int, ...]]]:
    """``(id, key, based_on)`` of the memories named by ``ids`` and fact ``keys``."""
    cur = await conn.execute(
        SOURCES, {"resource_id": resource_id, "ids": list(ids), "keys": list(keys)}
    )
    return [(r["id"], r["key"], tuple(r["based_on"] or ())) for r in await cur.fetchall()]


async def list_stale(conn: Conn, resource_id: str, limit: int) -> list[Memory]:
    """The resource's memories marked stale, most recently marked first."""
    cur = await conn.execute(LIST_STALE, {"resource_id": resource_id, "limit": limit})
    return [row_to_memory(r) for r in await cur.fetchall()]


async def clear_stale(conn: Conn, resource_id: str, id: int) -> Memory | None:
    """Clear memory ``id``'s mark (confirmed as still true); ``None`` if no such memory."""
    cur = await conn.execute(CLEAR_STALE, {"resource_id": resource_id, "id": id})
    row = await cur.fetchone()
    return row_to_memory(row) if row else None
