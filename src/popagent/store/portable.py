"""SQL of ``popagent export``: one resource's rows, read in a stable order.

The import's SQL is ``store.portable_import``.

Invariants:
- Every function takes the caller's connection and never opens a transaction
  or commits: ``popagent.portable`` reads inside one repeatable-read snapshot.
- Every statement filters on ``resource_id`` first.
- Reads return rows in a stable order (by natural key, then id), so two
  exports of an unchanged resource are equal apart from their header's time.
- Secrets are read as ciphertext only; nothing here decrypts.
- Of the embeddings, only the vectors callers made with their own models are
  read (``store.caller_vectors``: popagent cannot remake them); popagent's own
  model's vectors are not (the vector worker remakes them after an import).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .caller_vectors import CALLER_MODEL_PREFIX
from .database import Conn
from .derived import DERIVED_COLUMNS
from .memories import EVENT_COLUMNS

__all__ = ["EXPORT_QUERIES", "rows"]

#: The event clock (migration 0021): null where it is unknown.
_EVENT = ", ".join(EVENT_COLUMNS)
_PROVENANCE = "origin, turn_id, message_ids, tool_call_id"
#: A derived fact's sources and stale mark (migration 0022): null where none.
_DERIVED = ", ".join(DERIVED_COLUMNS)

#: What an export reads, by record type, in the order it writes them.
EXPORT_QUERIES: dict[str, str] = {
    "session": """
SELECT session_id, title, metadata, created_at, updated_at FROM popagent_sessions
WHERE resource_id = %(resource_id)s ORDER BY session_id
""",
    "turn": """
SELECT session_id, turn_id, status, started_at, ended_at FROM popagent_turns
WHERE resource_id = %(resource_id)s ORDER BY session_id, turn_id
""",
    "message": """
SELECT session_id, id, turn_id, role, content, parts, item, created_at FROM popagent_messages
WHERE resource_id = %(resource_id)s ORDER BY session_id, id
""",
    "observation_log": """
SELECT session_id, id, generation, origin, observations, observation_tokens,
       last_observed_message_id, covered_group_ids, next_reflection_tokens, created_at, updated_at
FROM popagent_observation_logs
WHERE resource_id = %(resource_id)s ORDER BY session_id, generation
""",
    "observation_group": """
SELECT session_id, id, log_id, kind, status, first_message_id, last_message_id, observations,
       observation_tokens, message_tokens, created_at
FROM popagent_observation_groups
WHERE resource_id = %(resource_id)s ORDER BY session_id, id
""",
    "observation_actor": """
SELECT session_id, actor, recorded_at FROM popagent_observation_actors
WHERE resource_id = %(resource_id)s ORDER BY session_id
""",
    "fact": f"""
SELECT id, key, content, content_sha256, importance, session_id, {_PROVENANCE}, expires_at,
       version, created_at, updated_at, {_EVENT}, {_DERIVED}
FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'fact' ORDER BY id
""",
    "fact_version": f"""
SELECT fact_id, version, key, content, content_sha256, importance, expires_at, session_id,
       {_PROVENANCE}, valid_from, valid_to, ended, ended_origin, ended_session_id, {_EVENT}
FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s ORDER BY fact_id, version
""",
    "episode": f"""
SELECT id, session_id, content, content_sha256, importance, {_PROVENANCE}, created_at, {_EVENT}
FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'episode' ORDER BY created_at, id
""",
    # As float4 values, whose shortest text form brings each back exactly.
    "caller_vector": f"""
SELECT memory_id, model, chunk, content_sha256, embedding::real[] AS embedding
FROM popagent_memory_embeddings
WHERE resource_id = %(resource_id)s AND starts_with(model, '{CALLER_MODEL_PREFIX}')
ORDER BY memory_id, model, chunk
""",
    "secret": """
SELECT name, ciphertext, nonce, key_id, created_at, updated_at, last_used_at, expires_at
FROM popagent_secrets
WHERE resource_id = %(resource_id)s ORDER BY name
""",
}


async def rows(conn: Conn, record_type: str, resource_id: str) -> AsyncIterator[dict[str, Any]]:
    """Stream the resource's rows of ``record_type`` (a key of ``EXPORT_QUERIES``)."""
    cur = conn.cursor()
    async with cur:
        async for row in cur.stream(EXPORT_QUERIES[record_type], {"resource_id": resource_id}):
            yield row
