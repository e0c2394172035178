"""SQL over the vectors a caller made with its own embedding model, and fact expiry
that a read extends.

A framework store that embeds its items with the caller's model (LangGraph's
``index=`` config) keeps those vectors in ``popagent_memory_embeddings`` beside
popagent's own, under a model name that starts with ``CALLER_MODEL_PREFIX``. So
they belong to their memory (deleted with it, and with its old content when the
content changes: migration 0009's trigger), a purge removes them, a backup and
an export carry them (``popagent export`` writes them as ``caller_vector`` records:
``store.portable``), and recall never ranks them: recall reads only its own model's rows. Nothing in
popagent remakes them (popagent has not got the caller's model), so the vector
worker's ``prune`` of other models' vectors leaves them alone
(``store.vectors.DELETE_OTHER_MODELS``).

Invariants:

* every function takes the caller's connection and never commits; every
  statement names ``resource_id`` first;
* a vector is written only while its memory still holds the content it was
  made from (``content_sha256``), as ``store.vectors.write_vectors`` does;
* a score reads one model's rows of the same dimensions as the query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from .citus import distributed
from .database import Conn
from .vectors import DELETE_MEMORY_VECTORS

__all__ = [
    "CALLER_MODEL_PREFIX",
    "DISTANCES",
    "Distance",
    "caller_literal",
    "extend_expiry",
    "replace_caller_vectors",
    "vector_scores",
]

#: Model names of the vectors callers made: never popagent's embedder's, never pruned.
CALLER_MODEL_PREFIX = "caller:"

Distance = Literal["cosine", "inner_product", "l2"]

#: Each distance as a similarity, higher is nearer (LangGraph's ``PostgresStore``
#: reports the same: cosine similarity, the inner product, the negative L2 distance).
DISTANCES: dict[str, str] = {
    "cosine": "1 - (e.embedding <=> %(query)s::vector)",
    "inner_product": "-(e.embedding <#> %(query)s::vector)",
    "l2": "-(e.embedding <-> %(query)s::vector)",
}

INSERT_CALLER_VECTORS = """
INSERT INTO popagent_memory_embeddings
    (resource_id, memory_id, model, chunk, dimensions, content_sha256, embedding)
SELECT %(resource_id)s, m.id, %(model)s, t.chunk, %(dimensions)s, m.content_sha256,
       t.embedding::vector
FROM unnest(%(chunks)s::smallint[], %(vectors)s::text[]) AS t(chunk, embedding)
JOIN popagent_memories m
  ON m.resource_id = %(resource_id)s AND m.id = %(memory_id)s AND m.content_sha256 = %(sha)s
"""

# Per memory, its best vector's similarity (an item is as near as its nearest field).
_SCORES = """
SELECT e.memory_id, max({similarity}) AS score
FROM popagent_memory_embeddings e
WHERE e.resource_id = %(resource_id)s AND e.model = %(model)s
  AND e.dimensions = %(dimensions)s AND e.memory_id = ANY(%(ids)s::bigint[])
GROUP BY e.memory_id
"""

# Marks the transaction so that migration 0023's trigger keeps no version of a fact
# whose expiry alone this transaction moves. A SET LOCAL, not set_config(): on Citus
# the trigger fires on the worker that holds the shard, and Citus passes a SET LOCAL
# (never a function's setting) on to the nodes of the transaction once
# ``PROPAGATE_SET_LOCAL`` is in force (docs/scaling.md).
MARK_EXTENDING = "SET LOCAL popagent.extending_expiry = 'on'"
PROPAGATE_SET_LOCAL = "SET LOCAL citus.propagate_set_commands = 'local'"

# Only facts still live and with an expiry: a refresh never revives an expired fact
# nor gives one that never expires an end. No version is written: the value is the same.
# The new expiry is counted in seconds since the epoch: Citus refuses a stable function
# given a column in an UPDATE ("STABLE functions used in UPDATE queries cannot be called
# with column references"), and ``timestamptz + interval`` is one (docs/scaling.md);
# ``extract`` reads ``now()`` alone, which Citus evaluates once, on the coordinator.
EXTEND_EXPIRY = """
UPDATE popagent_memories m
SET expires_at = to_timestamp(extract(epoch FROM now())::float8 + t.minutes * 60)
FROM unnest(%(ids)s::bigint[], %(minutes)s::float8[]) AS t(id, minutes)
WHERE m.resource_id = %(resource_id)s AND m.id = t.id AND m.kind = 'fact'
  AND m.expires_at > now()
"""


def caller_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a list of floats: each rounded to float32 here (as
    pgvector keeps it; the caller has checked that it fits), then written with the 9
    significant digits that bring a float32 back exactly."""
    rounded = np.asarray(vector, dtype=np.float32).tolist()
    return "[" + ",".join(format(x, ".9g") for x in rounded) + "]"


async def replace_caller_vectors(
    conn: Conn,
    resource_id: str,
    memory_id: int,
    content_sha256: str,
    model: str,
    vectors: Sequence[Sequence[float]],
) -> int:
    """Make ``vectors`` (chunks 0, 1, ...) the ``model`` vectors of the memory; none
    deletes them. Rows written: 0 when the memory is gone or holds other content."""
    base = {"resource_id": resource_id, "model": model}
    await conn.execute(DELETE_MEMORY_VECTORS, {**base, "ids": [memory_id]})
    if not vectors:
        return 0
    cur = await conn.execute(
        INSERT_CALLER_VECTORS,
        {
            **base,
            "memory_id": memory_id,
            "sha": content_sha256,
            "dimensions": len(vectors[0]),
            "chunks": list(range(len(vectors))),
            "vectors": [caller_literal(v) for v in vectors],
        },
    )
    return cur.rowcount


async def vector_scores(
    conn: Conn,
    resource_id: str,
    model: str,
    query: Sequence[float],
    distance: Distance,
    ids: Sequence[int],
) -> dict[int, float]:
    """The similarity to ``query`` of each of the memories ``ids`` that has ``model``
    vectors (its best chunk's); memories without one are absent."""
    if not ids:
        return {}
    cur = await conn.execute(
        _SCORES.format(similarity=DISTANCES[distance]),  # one of three literals
        {
            "resource_id": resource_id,
            "model": model,
            "dimensions": len(query),
            "query": caller_literal(query),
            "ids": list(ids),
        },
    )
    return {int(row["memory_id"]): float(row["score"]) for row in await cur.fetchall()}


async def extend_expiry(conn: Conn, resource_id: str, minutes: Mapping[int, float]) -> int:
    """Set each live, expiring fact's ``expires_at`` to now plus its minutes; how many.
    The caller's transaction is marked as one that extends expiry (no fact versions)."""
    if not minutes:
        return 0
    if await distributed(conn):
        await conn.execute(PROPAGATE_SET_LOCAL)
    await conn.execute(MARK_EXTENDING)
    cur = await conn.execute(
        EXTEND_EXPIRY,
        {"resource_id": resource_id, "ids": list(minutes), "minutes": list(minutes.values())},
    )
    return cur.rowcount
