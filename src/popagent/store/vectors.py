"""SQL over ``popagent_memory_embeddings``: writing vectors and finding the nearest.

Invariants:

* every function takes the caller's connection and never commits; every
  statement names ``resource_id`` first, and vectors are joined to memories by
  ``(resource_id, memory_id)``, so no statement reads another resource's rows;
* every read names one ``model``: vectors of two models never meet in a ranking;
* nearest-neighbour search keeps the resource and model filter inside the
  index scan: the HNSW path runs with ``hnsw.iterative_scan``, which keeps
  walking the graph until ``limit`` rows pass the filter, and when it still
  returns fewer than asked (pgvector stops after ``hnsw.max_scan_tuples``), the
  exact path answers instead. The exact path (a scan of the resource's own
  vectors through ``(resource_id, model)``) serves small resources directly,
  where it is both faster and exact. Either way a search returns
  ``min(limit, memories with a vector)`` memories;
* a memory is scored by its best chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.rows import tuple_row

from ..models import Candidate, Vectors
from .citus import distributed
from .database import HNSW_EF_SEARCH, Conn
from .memories import MEMORY_COLUMNS, MEMORY_WIDTH, tuple_to_memory
from .recall import term_frequencies

__all__ = [
    "BACKGROUND_SAMPLE",
    "DELETE_MEMORY_VECTORS",
    "EXACT_SEARCH_MAX",
    "HNSW_DIMENSIONS",
    "HNSW_EF_SEARCH",
    "INSERT_VECTORS",
    "INSERT_VECTORS_BY_HASH",
    "VectorRow",
    "background",
    "count_missing",
    "delete_other_models",
    "embedded_hashes",
    "missing_vectors",
    "nearest",
    "vector_literal",
    "write_vectors",
    "write_vectors_by_hash",
]

#: Dimensions that migration 0009 gave an HNSW index; other sizes are searched exactly.
HNSW_DIMENSIONS = frozenset({384, 768, 1024, 1536})
#: Resources with at most this many memories are searched exactly: cheaper than the
#: graph up to about here (measured: exact 3.0 / HNSW 3.6 ms p50 at 2,000 vectors,
#: 6.0 / 3.3 ms at 4,000), and exact.
EXACT_SEARCH_MAX = 2_500


@dataclass(frozen=True, slots=True)
class VectorRow:
    """One chunk's vector of one memory."""

    memory_id: int
    chunk: int
    content_sha256: str
    vector: Vectors  # shape (dimensions,)


def vector_literal(vector: Vectors) -> str:
    """pgvector's text form of one vector, ``[x1,x2,...]``."""
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vector, dtype=np.float32).tolist()) + "]"


# --- writing ------------------------------------------------------------------------------

DELETE_MEMORY_VECTORS = """
DELETE FROM popagent_memory_embeddings
WHERE resource_id = %(resource_id)s AND memory_id = ANY(%(ids)s::bigint[]) AND model = %(model)s
"""

INSERT_VECTORS = """
INSERT INTO popagent_memory_embeddings
    (resource_id, memory_id, model, chunk, dimensions, content_sha256, embedding)
SELECT %(resource_id)s, t.memory_id, %(model)s, t.chunk, %(dimensions)s, t.sha, t.embedding::vector
FROM unnest(%(ids)s::bigint[], %(chunks)s::smallint[], %(shas)s::text[], %(vectors)s::text[])
     AS t(memory_id, chunk, sha, embedding)
-- Only memories that still hold the content the vector was made from.
JOIN popagent_memories m
  ON m.resource_id = %(resource_id)s AND m.id = t.memory_id AND m.content_sha256 = t.sha
-- EXCLUDED.created_at: the column's default, now(); no function in DO UPDATE (Citus).
ON CONFLICT (resource_id, memory_id, model, chunk) DO UPDATE
SET dimensions = EXCLUDED.dimensions, content_sha256 = EXCLUDED.content_sha256,
    embedding = EXCLUDED.embedding, created_at = EXCLUDED.created_at
"""

# For a bulk retain, whose insert reports no ids: keyless memories of one kind by hash.
INSERT_VECTORS_BY_HASH = """
INSERT INTO popagent_memory_embeddings
    (resource_id, memory_id, model, chunk, dimensions, content_sha256, embedding)
SELECT %(resource_id)s, m.id, %(model)s, t.chunk, %(dimensions)s, t.sha, t.embedding::vector
FROM unnest(%(chunks)s::smallint[], %(shas)s::text[], %(vectors)s::text[])
     AS t(chunk, sha, embedding)
JOIN popagent_memories m
  ON m.resource_id = %(resource_id)s AND m.kind = %(kind)s AND m.key IS NULL
 AND m.content_sha256 = t.sha
ON CONFLICT (resource_id, memory_id, model, chunk) DO NOTHING
"""

EMBEDDED_HASHES = """
SELECT DISTINCT m.content_sha256
FROM popagent_memories m
JOIN popagent_memory_embeddings e
  ON e.resource_id = m.resource_id AND e.memory_id = m.id AND e.model = %(model)s AND e.chunk = 0
WHERE m.resource_id = %(resource_id)s AND m.kind = %(kind)s AND m.key IS NULL
  AND m.content_sha256 = ANY(%(shas)s::text[])
"""


def _columns(rows: Sequence[VectorRow]) -> dict[str, list[Any]]:
    return {
        "ids": [r.memory_id for r in rows],
        "chunks": [r.chunk for r in rows],
        "shas": [r.content_sha256 for r in rows],
        "vectors": [vector_literal(r.vector) for r in rows],
    }


async def write_vectors(
    conn: Conn, resource_id: str, model: str, dimensions: int, rows: Sequence[VectorRow]
) -> int:
    """Replace the ``model`` vectors of the memories in ``rows`` with ``rows``; rows written.

    A row whose memory is gone or whose hash no longer matches the memory's
    content is skipped (it was made from text that is not there any more).
    """
    if not rows:
        return 0
    ids = sorted({r.memory_id for r in rows})
    base = {"resource_id": resource_id, "model": model}
    await conn.execute(DELETE_MEMORY_VECTORS, {**base, "ids": ids})
    cur = await conn.execute(INSERT_VECTORS, {**base, "dimensions": dimensions, **_columns(rows)})
    return cur.rowcount


async def write_vectors_by_hash(
    conn: Conn,
    resource_id: str,
    model: str,
    dimensions: int,
    kind: str,
    rows: Sequence[tuple[str, int, Vectors]],
) -> int:
    """Vectors ``(sha, chunk, vector)`` for the keyless memories of ``kind`` with that hash.

    Memories that already have a vector of ``model`` for a chunk keep it.
    """
    if not rows:
        return 0
    cur = await conn.execute(
        INSERT_VECTORS_BY_HASH,
        {
            "resource_id": resource_id,
            "model": model,
            "dimensions": dimensions,
            "kind": kind,
            "chunks": [chunk for _sha, chunk, _v in rows],
            "shas": [sha for sha, _chunk, _v in rows],
            "vectors": [vector_literal(v) for _sha, _chunk, v in rows],
        },
    )
    return cur.rowcount


async def embedded_hashes(
    conn: Conn, resource_id: str, model: str, kind: str, shas: Sequence[str]
) -> set[str]:
    """Which of ``shas`` (keyless memories of ``kind``) already have a ``model`` vector."""
    if not shas:
        return set()
    cur = await conn.execute(
        EMBEDDED_HASHES,
        {"resource_id": resource_id, "model": model, "kind": kind, "shas": list(shas)},
    )
    return {row["content_sha256"] for row in await cur.fetchall()}


# --- backfill -----------------------------------------------------------------------------

# Memories without a vector of the model, oldest id first: a rerun resumes where
# the last one stopped, because what it finished is no longer missing.
MISSING_VECTORS = """
SELECT m.id, m.resource_id, m.content, m.content_sha256
FROM popagent_memories m
WHERE m.resource_id = ANY(%(resources)s::text[]) AND m.id > %(after)s
  AND NOT EXISTS (SELECT 1 FROM popagent_memory_embeddings e
                  WHERE e.resource_id = m.resource_id AND e.memory_id = m.id
                    AND e.model = %(model)s)
ORDER BY m.id
LIMIT %(limit)s
"""

COUNT_MISSING = """
SELECT count(*) AS missing
FROM popagent_memories m
WHERE m.resource_id = ANY(%(resources)s::text[])
  AND NOT EXISTS (SELECT 1 FROM popagent_memory_embeddings e
                  WHERE e.resource_id = m.resource_id AND e.memory_id = m.id
                    AND e.model = %(model)s)
"""

ALL_RESOURCES = "SELECT DISTINCT resource_id FROM popagent_memories ORDER BY resource_id"

# The vectors callers made with their own models (``store.caller_vectors``) stay:
# popagent cannot remake them.
DELETE_OTHER_MODELS = """
DELETE FROM popagent_memory_embeddings
WHERE resource_id = ANY(%(resources)s::text[]) AND model <> %(model)s
  AND model NOT LIKE 'caller:%%'
"""


async def all_resources(conn: Conn) -> list[str]:
    cur = await conn.execute(ALL_RESOURCES)
    return [row["resource_id"] for row in await cur.fetchall()]


async def count_missing(conn: Conn, resources: Sequence[str], model: str) -> int:
    """How many memories of ``resources`` have no ``model`` vector."""
    cur = await conn.execute(COUNT_MISSING, {"resources": list(resources), "model": model})
    row = await cur.fetchone()
    assert row is not None
    return int(row["missing"])


async def missing_vectors(
    conn: Conn, resources: Sequence[str], model: str, *, after: int, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` memories (``id``, ``resource_id``, ``content``, ``content_sha256``)
    of ``resources`` with id above ``after`` and no ``model`` vector, by id."""
    cur = await conn.execute(
        MISSING_VECTORS,
        {"resources": list(resources), "model": model, "after": after, "limit": limit},
    )
    return list(await cur.fetchall())


async def delete_other_models(conn: Conn, resources: Sequence[str], model: str) -> int:
    """Delete the vectors of every model but ``model`` in ``resources``; rows deleted."""
    cur = await conn.execute(DELETE_OTHER_MODELS, {"resources": list(resources), "model": model})
    return cur.rowcount


# --- nearest neighbours -------------------------------------------------------------------

# Term frequencies of the memory's lexemes among %(lexemes)s (as recall.py's).
_TERM_FREQUENCIES = """
ARRAY(SELECT u.lexeme || ':' || coalesce(cardinality(u.positions), 1)
      FROM unnest(m.search_vector) AS u
      WHERE u.lexeme = ANY(%(lexemes)s::text[]))
"""

_CANDIDATE_ROWS = f"""
SELECT {", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))},
       length(m.search_vector) AS length,
       {_TERM_FREQUENCIES} AS tf,
       best.similarity
FROM best JOIN popagent_memories m ON m.resource_id = %(resource_id)s AND m.id = best.memory_id
WHERE m.expires_at IS NULL OR m.expires_at > now()  -- an expired fact is never recalled
"""

# The resource's own vectors, exactly: no HNSW index matches the uncast expression.
EXACT_NEAREST = f"""
WITH best AS MATERIALIZED (
    SELECT e.memory_id, max(1 - (e.embedding <=> %(query)s::vector)) AS similarity
    FROM popagent_memory_embeddings e
    WHERE e.resource_id = %(resource_id)s AND e.model = %(model)s
    GROUP BY e.memory_id
    ORDER BY similarity DESC, e.memory_id DESC
    LIMIT %(limit)s
)
{_CANDIDATE_ROWS}
"""

# The graph search: the expression and the dimensions predicate match the partial
# index of that size; {{dims}} is filled in with a literal (an integer).
HNSW_NEAREST = f"""
WITH hits AS MATERIALIZED (
    SELECT e.memory_id, 1 - (e.embedding::vector({{dims}}) <=> %(query)s::vector({{dims}})) AS similarity
    FROM popagent_memory_embeddings e
    WHERE e.dimensions = {{dims}} AND e.resource_id = %(resource_id)s AND e.model = %(model)s
    ORDER BY e.embedding::vector({{dims}}) <=> %(query)s::vector({{dims}})
    LIMIT %(rows)s
), best AS (
    SELECT memory_id, max(similarity) AS similarity FROM hits
    GROUP BY memory_id ORDER BY similarity DESC, memory_id DESC LIMIT %(limit)s
)
{_CANDIDATE_ROWS}
"""

HNSW_SETTINGS = """
SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('hnsw.ef_search', %(ef_search)s, true)
"""


def _for_plan_cache(text: str, limit: int, distributed: bool) -> str:
    """``text`` with its ``LIMIT``s written in as numbers and, on plain PostgreSQL, the
    resource id read through ``(SELECT ...)``: as lexical recall's statements
    (``store.ranked.statement``), so that PostgreSQL keeps one generic plan. With
    either as a parameter it planned every search afresh (measured: a custom plan
    on each of 200 recalls, and on every one when a small and a large resource
    alternate); recall's limits are few, so a statement per limit stays within
    psycopg's cache of prepared statements. Citus must see the id to route the
    statement to the resource's shard.
    """
    if type(limit) is not int or limit < 1:  # written into the statement: no bools, no text
        raise ValueError("limit must be a positive integer")
    if not distributed:
        text = text.replace("%(resource_id)s", "(SELECT %(resource_id)s::text)")
    # Chunks of one memory may fill several rows: the graph search asks for some spare.
    return text.replace("%(rows)s", str(limit * 2)).replace("%(limit)s", str(limit))


@lru_cache(maxsize=64)
def _exact_statement(limit: int, distributed: bool) -> str:
    return _for_plan_cache(EXACT_NEAREST, limit, distributed)


@lru_cache(maxsize=64)
def _hnsw_statement(dimensions: int, limit: int, distributed: bool) -> sql.Composed:
    text = _for_plan_cache(HNSW_NEAREST, limit, distributed)
    return sql.SQL(text).format(dims=sql.Literal(dimensions))


async def nearest(
    conn: Conn,
    resource_id: str,
    *,
    model: str,
    query: Vectors,
    limit: int,
    lexemes: Sequence[str],
    resource_size: int,
) -> list[Candidate]:
    """The ``limit`` memories of the resource whose ``model`` vectors are nearest ``query``.

    Each candidate carries its cosine ``similarity`` (best chunk) and its term
    frequencies for ``lexemes`` (the query's, for the lexical signals).
    ``resource_size`` (memories in the resource) chooses exact search or HNSW.
    """
    params: dict[str, Any] = {
        "resource_id": resource_id,
        "model": model,
        "query": vector_literal(query),
        "lexemes": list(lexemes),
    }
    citus = await distributed(conn)
    dimensions = int(query.shape[0])
    if resource_size > EXACT_SEARCH_MAX and dimensions in HNSW_DIMENSIONS:
        # Chunks of one memory may fill several rows: the statement asks for some spare.
        ef_search = max(HNSW_EF_SEARCH, limit * 2)
        statement = _hnsw_statement(dimensions, limit, citus)
        if citus or ef_search != HNSW_EF_SEARCH:
            # Citus runs the search on a worker, which sees the settings only as SET
            # LOCAL in the search's transaction (as does a larger ef_search here).
            # Pipelined: BEGIN, the settings and the search go in one round trip
            # (then the COMMIT), not four.
            async with conn.pipeline(), conn.transaction():
                await conn.execute(HNSW_SETTINGS, {"ef_search": str(ef_search)})
                async with conn.cursor(row_factory=tuple_row) as cur:
                    await cur.execute(statement, params)
                    rows = await cur.fetchall()
        else:
            # The pool's session settings (``store.database.SESSION_SETTINGS``) hold.
            # A connection without them searches less far and may come back short:
            # the exact search below then answers, so the result is the same.
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(statement, params)
                rows = await cur.fetchall()
        if len(rows) >= limit:
            return _ordered(rows)
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(_exact_statement(limit, citus), params)
        return _ordered(await cur.fetchall())


#: How many of the resource's newest memories ``background`` compares with a query.
BACKGROUND_SAMPLE = 64

# The newest memories' first chunks, through the primary key (resource_id, memory_id,
# model, chunk) read backwards: a bounded scan whatever the resource's size. Which
# memories come back has nothing to do with the query, so for a specific question
# most of them are unrelated to it: their cosines say what "unrelated" scores here.
BACKGROUND = """
SELECT 1 - (e.embedding <=> %(query)s::vector)
FROM popagent_memory_embeddings e
WHERE e.resource_id = %(resource_id)s AND e.model = %(model)s AND e.chunk = 0
ORDER BY e.memory_id DESC
LIMIT %(sample)s
"""


async def background(
    conn: Conn, resource_id: str, *, model: str, query: Vectors, sample: int = BACKGROUND_SAMPLE
) -> list[float]:
    """The cosine similarity of ``query`` to each of the resource's newest ``sample``
    memories (their first chunk's ``model`` vector): the resource's own background,
    against which semantic recall judges whether a similarity is evidence
    (``memory.ranking.Background``)."""
    params = {
        "resource_id": resource_id,
        "model": model,
        "query": vector_literal(query),
        "sample": sample,
    }
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(BACKGROUND, params)
        return [float(row[0]) for row in await cur.fetchall()]


def _ordered(rows: list[tuple[Any, ...]]) -> list[Candidate]:
    out = [
        Candidate(
            memory=tuple_to_memory(row),
            term_frequency=term_frequencies(row[MEMORY_WIDTH + 1]),
            length=row[MEMORY_WIDTH],
            similarity=float(row[MEMORY_WIDTH + 2]),
        )
        for row in rows
    ]
    out.sort(key=lambda c: (c.similarity or 0.0, c.memory.id), reverse=True)
    return out
