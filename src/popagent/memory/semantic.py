"""Embedding memories for semantic recall: chunking, batching, backfill.

The vector worker (``memory.vector_worker``) and ``popagent embed`` (``backfill``)
call these. Invariants:

* a memory's vectors are made from its stored content, chunk by chunk
  (``popagent.embed.chunking``), each recorded with the content's hash;
* ``write_pending`` is the one way vectors are written: inside the caller's
  transaction it claims pending rows (``store.pending``, ``SKIP LOCKED``),
  embeds them, writes their vectors and deletes the rows, so that workers and
  backfills in any number of processes never embed a memory twice and a
  rollback leaves every claimed row pending;
* backfill first queues the memories with no vector of the embedder's model
  (after a model switch, or a lost row), then writes them one committed batch
  at a time: rerunning it after an interruption continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..embed.chunking import chunk_text
from ..embed.protocol import Embedder
from ..models import Vectors
from ..store import pending as pending_sql
from ..store import vectors as vector_store
from ..store.database import Conn, Pool
from ..store.pending import PendingMemory
from ..store.vectors import VectorRow

__all__ = ["BackfillReport", "backfill", "embed_contents", "vector_rows", "write_pending"]


async def embed_contents(embedder: Embedder, contents: Sequence[str]) -> list[list[Vectors]]:
    """The chunk vectors of each content, in one batched ``embed`` call."""
    chunks = [chunk_text(c) or [c] for c in contents]
    flat = [piece for pieces in chunks for piece in pieces]
    vectors = await embedder.embed(flat, kind="document")
    out: list[list[Vectors]] = []
    start = 0
    for pieces in chunks:
        out.append([vectors[start + i] for i in range(len(pieces))])
        start += len(pieces)
    return out


def vector_rows(memory_id: int, sha: str, chunks: Sequence[Vectors]) -> list[VectorRow]:
    return [VectorRow(memory_id, i, sha, v) for i, v in enumerate(chunks)]


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """What one ``backfill`` run did."""

    model: str
    resources: int
    embedded: int
    remaining: int
    pruned: int = 0


async def write_pending(
    conn: Conn, embedder: Embedder, resource_id: str, limit: int
) -> list[PendingMemory]:
    """Claim up to ``limit`` pending memories of the resource, embed them, write their
    vectors and delete their pending rows, on ``conn`` inside the caller's transaction;
    the memories written (none: nothing was pending, or another worker holds it all).

    Raises ``EmbeddingError`` when the model fails: the caller's rollback leaves the
    rows pending.
    """
    claimed = await pending_sql.claim(conn, resource_id, limit)
    if not claimed:
        return []
    chunked = await embed_contents(embedder, [c.content for c in claimed])
    rows: list[VectorRow] = []
    for memory, chunks in zip(claimed, chunked, strict=True):
        rows.extend(vector_rows(memory.id, memory.content_sha256, chunks))
    await vector_store.write_vectors(conn, resource_id, embedder.model, embedder.dimensions, rows)
    await pending_sql.delete_claimed(conn, resource_id, [c.id for c in claimed])
    return claimed


async def backfill(
    pool: Pool,
    embedder: Embedder,
    resources: Sequence[str] | None,
    *,
    batch_size: int = 64,
    max_memories: int | None = None,
    prune: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> BackfillReport:
    """Embed the memories of ``resources`` (``None``: every resource) that lack a vector.

    ``on_start`` gets how many are missing, ``on_batch`` how many a committed
    batch embedded; ``max_memories`` stops early (a later run resumes);
    ``prune`` first deletes those resources' vectors of every other model.
    Memories another process's worker holds meanwhile are left to it.
    """
    async with pool.connection() as conn:
        targets = (
            list(resources) if resources is not None else await vector_store.all_resources(conn)
        )
        pruned = (
            await vector_store.delete_other_models(conn, targets, embedder.model) if prune else 0
        )
        missing = 0
        for resource_id in targets:
            await pending_sql.enqueue_missing(conn, resource_id, embedder.model)
            missing += await pending_sql.count_pending(conn, resource_id)
    if on_start is not None:
        on_start(missing if max_memories is None else min(missing, max_memories))
    done = 0
    for resource_id in targets:
        while max_memories is None or done < max_memories:
            take = batch_size if max_memories is None else min(batch_size, max_memories - done)
            async with pool.connection() as conn, conn.transaction():
                written = await write_pending(conn, embedder, resource_id, take)
            if not written:
                break
            done += len(written)
            if on_batch is not None:
                on_batch(len(written))
    return BackfillReport(
        model=embedder.model,
        resources=len(targets),
        embedded=done,
        remaining=max(0, missing - done),
        pruned=pruned,
    )
