"""SQL of ``popagent export`` and ``popagent import``: one resource's rows, read and written.

Invariants:
- Every function takes the caller's connection and never opens a transaction
  or commits: ``popagent.portable`` reads inside one repeatable-read snapshot
  and writes an import inside one transaction.
- Every statement filters on ``resource_id`` first.
- Reads return rows in a stable order (by natural key, then id), so two
  exports of an unchanged resource are equal apart from their header's time.
- Writes keep the exported timestamps and values: imported rows get new ids
  (identities), and are idempotent by natural key, either through ``ON
  CONFLICT DO NOTHING`` or through a lookup the caller makes first.
- Secrets are read and written as ciphertext only; nothing here decrypts.
- Embeddings are neither read nor written (``popagent embed`` remakes them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from psycopg.types.json import Jsonb

from .database import Conn

__all__ = [
    "EXPORT_QUERIES",
    "find_deleted_fact_id",
    "find_fact",
    "insert_actor",
    "insert_episode",
    "insert_fact",
    "insert_fact_version",
    "insert_group",
    "insert_log",
    "insert_message",
    "insert_secret",
    "insert_session",
    "insert_turn",
    "reserve_fact_id",
    "rows",
    "secret_ciphertext",
    "session_messages",
    "session_turns",
    "set_covered_groups",
]

_PROVENANCE = "origin, turn_id, message_ids, tool_call_id"

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
       version, created_at, updated_at
FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'fact' ORDER BY id
""",
    "fact_version": f"""
SELECT fact_id, version, key, content, content_sha256, importance, expires_at, session_id,
       {_PROVENANCE}, valid_from, valid_to, ended, ended_origin, ended_session_id
FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s ORDER BY fact_id, version
""",
    "episode": f"""
SELECT id, session_id, content, content_sha256, importance, {_PROVENANCE}, created_at
FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'episode' ORDER BY created_at, id
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


# --- threads --------------------------------------------------------------------------------

INSERT_SESSION = """
INSERT INTO popagent_sessions (resource_id, session_id, title, metadata, created_at, updated_at)
VALUES (%(resource_id)s, %(session_id)s, %(title)s, %(metadata)s, %(created_at)s, %(updated_at)s)
ON CONFLICT (resource_id, session_id) DO NOTHING
RETURNING session_id
"""

SESSION_MESSAGES = """
SELECT id, turn_id, role, content, parts, item FROM popagent_messages
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s ORDER BY id
"""

SESSION_TURNS = """
SELECT turn_id FROM popagent_turns
WHERE resource_id = %(resource_id)s AND session_id = %(session_id)s ORDER BY turn_id
"""

INSERT_TURN = """
INSERT INTO popagent_turns (resource_id, session_id, status, started_at, ended_at)
VALUES (%(resource_id)s, %(session_id)s, %(status)s, %(started_at)s, %(ended_at)s)
RETURNING turn_id
"""

INSERT_MESSAGE = """
INSERT INTO popagent_messages
    (resource_id, session_id, turn_id, role, content, parts, item, created_at)
VALUES (%(resource_id)s, %(session_id)s, %(turn_id)s, %(role)s, %(content)s, %(parts)s,
        %(item)s, %(created_at)s)
RETURNING id
"""

INSERT_LOG = """
INSERT INTO popagent_observation_logs (
    resource_id, session_id, generation, origin, observations, observation_tokens,
    last_observed_message_id, covered_group_ids, next_reflection_tokens, created_at, updated_at
) VALUES (
    %(resource_id)s, %(session_id)s, %(generation)s, %(origin)s, %(observations)s,
    %(observation_tokens)s, %(last_observed_message_id)s, '{}', %(next_reflection_tokens)s,
    %(created_at)s, %(updated_at)s
)
RETURNING id
"""

SET_COVERED_GROUPS = """
UPDATE popagent_observation_logs SET covered_group_ids = %(covered_group_ids)s
WHERE resource_id = %(resource_id)s AND id = %(id)s
"""

INSERT_GROUP = """
INSERT INTO popagent_observation_groups (
    resource_id, session_id, log_id, kind, status, first_message_id, last_message_id,
    observations, observation_tokens, message_tokens, created_at
) VALUES (
    %(resource_id)s, %(session_id)s, %(log_id)s, %(kind)s, %(status)s, %(first_message_id)s,
    %(last_message_id)s, %(observations)s, %(observation_tokens)s, %(message_tokens)s,
    %(created_at)s
)
RETURNING id
"""

INSERT_ACTOR = """
INSERT INTO popagent_observation_actors (resource_id, session_id, actor, recorded_at)
VALUES (%(resource_id)s, %(session_id)s, %(actor)s, %(recorded_at)s)
ON CONFLICT (resource_id, session_id) DO NOTHING
"""


async def _one(conn: Conn, query: str, params: dict[str, Any]) -> dict[str, Any] | None:
    cur = await conn.execute(query, params)
    return await cur.fetchone()


async def insert_session(conn: Conn, resource_id: str, record: dict[str, Any]) -> bool:
    """Create the session with its exported times; ``False`` if it exists already."""
    params = {**record, "resource_id": resource_id, "metadata": Jsonb(record["metadata"])}
    return await _one(conn, INSERT_SESSION, params) is not None


async def session_messages(conn: Conn, resource_id: str, session_id: str) -> list[dict[str, Any]]:
    """A stored session's messages (id, turn_id, role, content, parts, item), oldest first."""
    cur = await conn.execute(
        SESSION_MESSAGES, {"resource_id": resource_id, "session_id": session_id}
    )
    return await cur.fetchall()


async def session_turns(conn: Conn, resource_id: str, session_id: str) -> list[int]:
    cur = await conn.execute(SESSION_TURNS, {"resource_id": resource_id, "session_id": session_id})
    return [r["turn_id"] for r in await cur.fetchall()]


async def insert_turn(conn: Conn, resource_id: str, record: dict[str, Any]) -> int:
    row = await _one(conn, INSERT_TURN, {**record, "resource_id": resource_id})
    assert row is not None
    return int(row["turn_id"])


async def insert_message(conn: Conn, resource_id: str, record: dict[str, Any]) -> int:
    """``record`` with its ``turn_id`` already mapped to the target's turn."""
    item = record.get("item")
    params = {
        **record,
        "resource_id": resource_id,
        "parts": Jsonb(record["parts"]),
        "item": None if item is None else Jsonb(item),
    }
    row = await _one(conn, INSERT_MESSAGE, params)
    assert row is not None
    return int(row["id"])


async def insert_log(conn: Conn, resource_id: str, record: dict[str, Any]) -> int:
    """A generation without its covered groups (``set_covered_groups`` adds them once
    the groups exist: they belong to the generation before)."""
    row = await _one(conn, INSERT_LOG, {**record, "resource_id": resource_id})
    assert row is not None
    return int(row["id"])


async def set_covered_groups(
    conn: Conn, resource_id: str, log_id: int, group_ids: list[int]
) -> None:
    await conn.execute(
        SET_COVERED_GROUPS,
        {"resource_id": resource_id, "id": log_id, "covered_group_ids": group_ids},
    )


async def insert_group(conn: Conn, resource_id: str, record: dict[str, Any]) -> int:
    row = await _one(conn, INSERT_GROUP, {**record, "resource_id": resource_id})
    assert row is not None
    return int(row["id"])


async def insert_actor(conn: Conn, resource_id: str, record: dict[str, Any]) -> None:
    await conn.execute(INSERT_ACTOR, {**record, "resource_id": resource_id})


# --- long-term memory -----------------------------------------------------------------------

_CURRENT = (
    "id, key, content_sha256, importance, expires_at, version, session_id, origin, "
    "created_at, updated_at"
)

# The current fact a record matches: by key, or (keyless) by content hash.
FIND_FACT = f"""
SELECT {_CURRENT} FROM popagent_memories
WHERE resource_id = %(resource_id)s AND kind = 'fact'
  AND CASE WHEN %(key)s::text IS NULL THEN key IS NULL AND content_sha256 = %(sha)s
           ELSE key = %(key)s END
"""

# Straight in, not through the upsert: the exported version, times and
# provenance are kept as they are (the version trigger fires on UPDATE only).
INSERT_FACT = f"""
INSERT INTO popagent_memories
    (resource_id, session_id, kind, key, content, content_sha256, importance, expires_at,
     {_PROVENANCE}, version, created_at, updated_at)
VALUES (%(resource_id)s, %(session_id)s, 'fact', %(key)s, %(content)s, %(sha)s, %(importance)s,
        %(expires_at)s, %(origin)s, %(turn_id)s, %(message_ids)s, %(tool_call_id)s, %(version)s,
        %(created_at)s, %(updated_at)s)
RETURNING id
"""

# A deleted fact's history imported earlier (and perhaps restored since): the
# same version, value and start, to the microsecond.
FIND_DELETED_FACT_ID = """
SELECT fact_id FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s AND version = %(version)s
  AND content_sha256 = %(sha)s AND valid_from = %(valid_from)s
ORDER BY fact_id
LIMIT 1
"""

# An id from the memories' own identity, never to be taken by a new memory, so
# that a deleted fact's history can be restored under it.
RESERVE_FACT_ID = "SELECT nextval(pg_get_serial_sequence('popagent_memories', 'id')) AS id"

INSERT_FACT_VERSION = f"""
INSERT INTO popagent_fact_versions
    (resource_id, fact_id, version, key, content, content_sha256, importance, expires_at,
     session_id, {_PROVENANCE}, valid_from, valid_to, ended, ended_origin, ended_session_id)
VALUES (%(resource_id)s, %(fact_id)s, %(version)s, %(key)s, %(content)s, %(sha)s,
        %(importance)s, %(expires_at)s, %(session_id)s, %(origin)s, %(turn_id)s,
        %(message_ids)s, %(tool_call_id)s, %(valid_from)s, %(valid_to)s, %(ended)s,
        %(ended_origin)s, %(ended_session_id)s)
ON CONFLICT (resource_id, fact_id, version) DO NOTHING
"""

INSERT_EPISODE = f"""
INSERT INTO popagent_memories
    (resource_id, session_id, kind, content, content_sha256, importance, {_PROVENANCE},
     created_at, updated_at)
VALUES (%(resource_id)s, %(session_id)s, 'episode', %(content)s, %(sha)s, %(importance)s,
        %(origin)s, %(turn_id)s, %(message_ids)s, %(tool_call_id)s, %(created_at)s,
        %(created_at)s)
ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
RETURNING id
"""


async def find_fact(
    conn: Conn, resource_id: str, key: str | None, sha: str
) -> dict[str, Any] | None:
    """The current fact of ``key`` (or the keyless fact of content hash ``sha``)."""
    return await _one(conn, FIND_FACT, {"resource_id": resource_id, "key": key, "sha": sha})


async def insert_fact(conn: Conn, resource_id: str, params: dict[str, Any]) -> int:
    """Raises ``UniqueViolation`` when the key or keyless content is taken."""
    row = await _one(conn, INSERT_FACT, {**params, "resource_id": resource_id})
    assert row is not None
    return int(row["id"])


async def find_deleted_fact_id(
    conn: Conn, resource_id: str, *, version: int, sha: str, valid_from: Any
) -> int | None:
    row = await _one(
        conn,
        FIND_DELETED_FACT_ID,
        {"resource_id": resource_id, "version": version, "sha": sha, "valid_from": valid_from},
    )
    return int(row["fact_id"]) if row else None


async def reserve_fact_id(conn: Conn) -> int:
    row = await _one(conn, RESERVE_FACT_ID, {})
    assert row is not None
    return int(row["id"])


async def insert_fact_version(conn: Conn, resource_id: str, params: dict[str, Any]) -> bool:
    """``False`` when that version of that fact exists already."""
    cur = await conn.execute(INSERT_FACT_VERSION, {**params, "resource_id": resource_id})
    return cur.rowcount > 0


async def insert_episode(conn: Conn, resource_id: str, params: dict[str, Any]) -> bool:
    """``False`` when an identical episode exists already."""
    return await _one(conn, INSERT_EPISODE, {**params, "resource_id": resource_id}) is not None


# --- secrets --------------------------------------------------------------------------------

INSERT_SECRET = """
INSERT INTO popagent_secrets
    (resource_id, name, ciphertext, nonce, key_id, created_at, updated_at, last_used_at, expires_at)
VALUES (%(resource_id)s, %(name)s, %(ciphertext)s, %(nonce)s, %(key_id)s, %(created_at)s,
        %(updated_at)s, %(last_used_at)s, %(expires_at)s)
ON CONFLICT (resource_id, name) DO NOTHING
RETURNING name
"""

SECRET_CIPHERTEXT = """
SELECT ciphertext, nonce, key_id FROM popagent_secrets
WHERE resource_id = %(resource_id)s AND name = %(name)s
"""


async def insert_secret(conn: Conn, resource_id: str, params: dict[str, Any]) -> bool:
    """The sealed value as exported; ``False`` when the name is taken (left as it is)."""
    return await _one(conn, INSERT_SECRET, {**params, "resource_id": resource_id}) is not None


async def secret_ciphertext(conn: Conn, resource_id: str, name: str) -> dict[str, Any] | None:
    return await _one(conn, SECRET_CIPHERTEXT, {"resource_id": resource_id, "name": name})
