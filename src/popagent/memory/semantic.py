"""Embedding memories for semantic recall: chunking, batching, backfill.

The service (``LongTermMemory``) calls these; they own no transaction except
``backfill``, which commits one batch at a time so that it can stop and resume
anywhere. Invariants:

* a memory's vectors are made from its stored content, chunk by chunk
  (``popagent.embed.chunking``), each recorded with the content's hash;
* an embedding failure never loses a write: ``embed_or_none`` logs it and the
  memory is stored without vectors, for ``popagent embed`` to fill in later;
* backfill embeds only memories with no vector of the embedder's model, in id
  order, one committed batch at a time: rerunning it after an interruption
  continues where it stopped and never embeds a memory twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..embed.chunking import chunk_text
from ..embed.protocol import Embedder
from ..errors import EmbeddingError
from ..models import Vectors
from ..store import vectors as vector_store
from ..store.database import Pool
from ..store.vectors import VectorRow

__all__ = ["BackfillReport", "backfill", "embed_contents", "embed_or_none", "vector_rows"]

log = logging.getLogger(__name__)


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


async def embed_or_none(embedder: Embedder, contents: Sequence[str]) -> list[list[Vectors]] | None:
    """``embed_contents``, or ``None`` (logged) when the model fails: the write goes on."""
    try:
        return await embed_contents(embedder, contents)
    except EmbeddingError as exc:
        log.warning("storing %d memories without vectors: %s", len(contents), exc)
        return None


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
    """
    async with pool.connection() as conn:
        targets = (
            list(resources) if resources is not None else await vector_store.all_resources(conn)
        )
        pruned = (
            await vector_store.delete_other_models(conn, targets, embedder.model) if prune else 0
        )
        missing = await vector_store.count_missing(conn, targets, embedder.model)
    if on_start is not None:
        on_start(missing if max_memories is None else min(missing, max_memories))
    done, after = 0, 0
    while max_memories is None or done < max_memories:
        take = batch_size if max_memories is None else min(batch_size, max_memories - done)
        async with pool.connection() as conn:
            batch = await vector_store.missing_vectors(
                conn, targets, embedder.model, after=after, limit=take
            )
        if not batch:
            break
        after = batch[-1]["id"]
        chunked = await embed_contents(embedder, [row["content"] for row in batch])
        by_resource: dict[str, list[VectorRow]] = {}
        for row, chunks in zip(batch, chunked, strict=True):
            by_resource.setdefault(row["resource_id"], []).extend(
                vector_rows(row["id"], row["content_sha256"], chunks)
            )
        async with pool.connection() as conn, conn.transaction():
            for resource_id, rows in by_resource.items():
                await vector_store.write_vectors(
                    conn, resource_id, embedder.model, embedder.dimensions, rows
                )
        done += len(batch)
        if on_batch is not None:
            on_batch(len(batch))
    return BackfillReport(
        model=embedder.model,
        resources=len(targets),
        embedded=done,
        remaining=max(0, missing - done),
        pruned=pruned,
    )
