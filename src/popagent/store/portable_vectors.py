"""SQL of ``popagent import`` for ``caller_vector`` records: the vectors callers made
with their own models (``store.caller_vectors``), written to the memories their
``fact`` and ``episode`` records became.

They are staged and checked with the other records (``store.portable_import``:
``import_caller_vector``); these statements run after the facts and episodes are
written, in the same transaction, in this order: ``MATCH_EPISODES``,
``TARGET_FACT_VECTORS``, ``TARGET_EPISODE_VECTORS``, ``HELD_VECTORS``,
``INSERT_CALLER_VECTORS``, ``SAME_VECTORS``, then ``SAME_VECTORS_COUNT``.

Invariants:
- Every statement that reads or writes a popagent table filters it on
  ``resource_id``; the joins with popagent's tables are ``UPDATE`` of a staging
  table ``FROM`` one of them, the shape a distributed table takes (docs/scaling.md).
- A memory's vectors of one model are written whole or not at all, only where the
  memory holds the content they were made from, and never beside vectors of the
  same model that the target's memory has already.
"""

from __future__ import annotations

__all__ = [
    "HELD_VECTORS",
    "INSERT_CALLER_VECTORS",
    "MATCH_EPISODES",
    "SAME_VECTORS",
    "SAME_VECTORS_COUNT",
    "TARGET_EPISODE_VECTORS",
    "TARGET_FACT_VECTORS",
]

# Each episode of the file is in the target now (added, or there already): by its hash.
MATCH_EPISODES = """
UPDATE import_episode e SET target_id = m.id
FROM popagent_memories m
WHERE m.resource_id = %(resource_id)s AND m.kind = 'episode' AND m.key IS NULL
  AND m.content_sha256 = e.sha
"""

# A vector's memory in the target, and the content hash it holds there: a fact's
# (added, or matched with the same value) or an episode's.
TARGET_FACT_VECTORS = """
UPDATE import_caller_vector v SET target_id = coalesce(f.new_id, f.target_id), memory_sha = f.sha
FROM import_fact f WHERE f.id = v.memory_id
"""
TARGET_EPISODE_VECTORS = """
UPDATE import_caller_vector v SET target_id = e.target_id, memory_sha = e.sha
FROM import_episode e WHERE e.id = v.memory_id
"""

# A memory that has vectors of the model in the target keeps them (a set is never
# mixed with another); those equal to the file's count as unchanged.
HELD_VECTORS = """
UPDATE import_caller_vector v SET held = true
FROM popagent_memory_embeddings x
WHERE x.resource_id = %(resource_id)s AND x.memory_id = v.target_id AND x.model = v.model
"""
SAME_VECTORS = """
UPDATE import_caller_vector v SET same = true
FROM popagent_memory_embeddings x
WHERE x.resource_id = %(resource_id)s AND x.memory_id = v.target_id AND x.model = v.model
  AND x.chunk = v.chunk AND x.content_sha256 = v.sha AND x.embedding = v.embedding
"""

# A memory's vectors of one model are written whole or not at all: only where the
# memory holds the content they were made from (the hash each names), as every write
# of them is; of two sets in the file for one target memory (two episodes of the same
# text), the first memory's.
INSERT_CALLER_VECTORS = """
WITH written AS (
    INSERT INTO popagent_memory_embeddings
        (resource_id, memory_id, model, chunk, dimensions, content_sha256, embedding)
    SELECT %(resource_id)s, target_id, model, chunk, dimensions, sha, embedding
    FROM (
        SELECT v.*, min(memory_id) OVER (PARTITION BY target_id, model) AS first,
               bool_and(sha = memory_sha) OVER (PARTITION BY memory_id, model) AS current
        FROM import_caller_vector v
        WHERE target_id IS NOT NULL AND NOT held
    ) wanted
    WHERE memory_id = first AND current ORDER BY target_id, model, chunk
    RETURNING 1
)
SELECT count(*) AS n FROM written
"""

SAME_VECTORS_COUNT = "SELECT count(*) AS n FROM import_caller_vector WHERE same"
