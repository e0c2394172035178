"""SQL over ``popagent_pending_vectors``: the memories whose vectors are still to be written.

Migration 0016's triggers add a row for every memory inserted or whose content
changes; the vector worker (``memory.vector_worker``) claims rows, writes the
vectors (``store.vectors.write_vectors``) and deletes the rows it claimed, all
in one transaction. Invariants:

* every function takes the caller's connection and never commits; every
  statement names one ``resource_id`` in every table it reads;
* ``claim`` locks the rows it returns (``FOR UPDATE SKIP LOCKED``), so workers
  in any number of processes never claim the same row, and a worker that
  dies releases its rows with its connection. It also takes ``FOR KEY SHARE``
  on the memories: a delete of a claimed memory waits for the worker's commit
  instead of meeting it half-way (the vectors' foreign key check);
* a pending row names a memory, not a model: ``enqueue_missing`` adds those
  memories that lack a vector of the given model (after a model switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg.rows import tuple_row

from .database import Conn

__all__ = [
    "CLAIM_PENDING",
    "COUNT_PENDING",
    "DELETE_PENDING",
    "ENQUEUE_MISSING",
    "PendingMemory",
    "claim",
    "count_pending",
    "delete_claimed",
    "enqueue_missing",
]

# Newest first: while an old backlog is worked off, a memory written now is
# embedded in the next batch, not after the backlog.
CLAIM_PENDING = """
SELECT p.memory_id, m.content, m.content_sha256
FROM popagent_pending_vectors p
JOIN popagent_memories m ON m.resource_id = %(resource_id)s AND m.id = p.memory_id
WHERE p.resource_id = %(resource_id)s
ORDER BY p.memory_id DESC
LIMIT %(limit)s
FOR UPDATE OF p SKIP LOCKED
FOR KEY SHARE OF m SKIP LOCKED
"""

DELETE_PENDING = """
DELETE FROM popagent_pending_vectors
WHERE resource_id = %(resource_id)s AND memory_id = ANY(%(ids)s::bigint[])
"""

# Counting stops at %(cap)s: a backlog of a million costs no more than one of ``cap``.
COUNT_PENDING = """
SELECT count(*) FROM (
    SELECT 1 FROM popagent_pending_vectors WHERE resource_id = %(resource_id)s LIMIT %(cap)s
) AS t
"""

# The memories with no vector of %(model)s for their current content. Each is
# key-share locked as it is read, and one being deleted meanwhile (maintenance,
# cleanup) is skipped: without the lock, a memory deleted after this statement's
# snapshot failed the foreign key at the end, and the whole statement with it.
ENQUEUE_MISSING = """
INSERT INTO popagent_pending_vectors (resource_id, memory_id, content_sha256)
SELECT m.resource_id, m.id, m.content_sha256
FROM popagent_memories m
WHERE m.resource_id = %(resource_id)s
  AND NOT EXISTS (SELECT 1 FROM popagent_memory_embeddings e
                  WHERE e.resource_id = %(resource_id)s AND e.memory_id = m.id
                    AND e.model = %(model)s AND e.content_sha256 = m.content_sha256)
FOR KEY SHARE OF m SKIP LOCKED
ON CONFLICT (resource_id, memory_id) DO NOTHING
"""


@dataclass(frozen=True, slots=True)
class PendingMemory:
    """A claimed memory: its id and the content to embed."""

    id: int
    content: str
    content_sha256: str


async def claim(conn: Conn, resource_id: str, limit: int) -> list[PendingMemory]:
    """Lock and return up to ``limit`` of the resource's pending memories, newest first.

    Call it inside a transaction: the rows stay claimed until it ends. Rows
    another transaction holds are skipped, never waited for.
    """
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(CLAIM_PENDING, {"resource_id": resource_id, "limit": limit})
        return [PendingMemory(int(r[0]), r[1], r[2]) for r in await cur.fetchall()]


async def delete_claimed(conn: Conn, resource_id: str, ids: Sequence[int]) -> int:
    """Delete the pending rows of ``ids`` (claimed by this transaction); rows deleted."""
    if not ids:
        return 0
    cur = await conn.execute(DELETE_PENDING, {"resource_id": resource_id, "ids": list(ids)})
    return cur.rowcount


async def count_pending(conn: Conn, resource_id: str, *, cap: int = 1_000_000) -> int:
    """How many of the resource's memories wait for vectors, counted up to ``cap``."""
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(COUNT_PENDING, {"resource_id": resource_id, "cap": cap})
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def enqueue_missing(conn: Conn, resource_id: str, model: str) -> int:
    """Add the resource's memories that have no ``model`` vector of their current content
    to the pending rows; how many were added."""
    cur = await conn.execute(ENQUEUE_MISSING, {"resource_id": resource_id, "model": model})
    return cur.rowcount
