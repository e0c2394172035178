"""SQL of ``popagent import``: a file staged in temporary tables, then written set by set.

An import streams its checked records into one temporary table per record type
(``import_session``, ``import_message``, ...: ``STAGING``) with ``COPY``, then
checks the references between them and writes them with a few statements per
type (``INSERT ... SELECT``). So the importing process holds one batch of
records at a time, whatever the file's size; the id maps (a source id and the
target row it became) are columns of the staging tables, not Python objects.
The writes of ``caller_vector`` records (the vectors callers made) are in
``store.portable_vectors``.

Invariants:
- Everything runs inside the caller's transaction: the staging tables are
  created ``ON COMMIT DROP`` (a rollback removes them too), and nothing here
  commits. The caller writes nothing before every check has passed, and
  rolls back on any error.
- Every statement that reads or writes a popagent table filters it on
  ``resource_id``; the staging tables hold one import's records only.
- Imported rows get new ids. Rows that other records point at (turns,
  messages, observation logs and groups, facts) have them drawn from their
  table's own identity sequence first (``allocate``) and are inserted with
  ``OVERRIDING SYSTEM VALUE``: the map from source id to target id is then a
  column (``new_id``) that the later statements join on. Ids are drawn in
  source order, so rows keep their order.
- Statements that insert memories count them in recall's statistics
  (``store.recall_stats.counted``), and the memories' vectors are queued by
  migration 0016's trigger, as for every other write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import sql

from .database import Conn
from .derived import DERIVED_COLUMNS
from .memories import EVENT_COLUMNS
from .recall_stats import MESSAGE_BYTES, counted, thread_counted

__all__ = [
    "CHECKS",
    "COLUMNS",
    "COPY_MEM0",
    "DUPLICATES",
    "FIRST_SECRET",
    "INSERT_MEM0",
    "MEM0_RESOURCES",
    "MEM0_TOTAL",
    "ORPHANS",
    "SEQUENCES",
    "STAGING",
    "STAGING_MEM0",
    "TOTALS",
    "allocate",
    "copy_row",
    "copy_statement",
    "create_staging",
    "duplicate_query",
    "first_line",
    "index_staging",
    "outcomes",
    "scalar",
    "sequences",
    "totals",
]

#: A write's provenance, and a fact's value with it (a current or an earlier one).
_PROVENANCE_COLUMNS = ("origin", "turn_id", "message_ids", "tool_call_id")
_FACT_VALUE_COLUMNS = (
    "key",
    "content",
    "sha",
    "importance",
    "expires_at",
    "session_id",
    *_PROVENANCE_COLUMNS,
)

#: The staged columns of each record type, in ``COPY`` order (after ``lineno``).
COLUMNS: dict[str, tuple[str, ...]] = {
    "session": ("session_id", "title", "metadata", "created_at", "updated_at"),
    "turn": ("session_id", "turn_id", "status", "started_at", "ended_at"),
    "message": (
        "session_id",
        "id",
        "turn_id",
        "role",
        "content",
        "parts",
        "item",
        "created_at",
    ),
    "observation_log": (
        "session_id",
        "id",
        "generation",
        "origin",
        "observations",
        "observation_tokens",
        "last_observed_message_id",
        "covered_group_ids",
        "next_reflection_tokens",
        "created_at",
        "updated_at",
    ),
    "observation_group": (
        "session_id",
        "id",
        "log_id",
        "kind",
        "status",
        "first_message_id",
        "last_message_id",
        "observations",
        "observation_tokens",
        "message_tokens",
        "created_at",
    ),
    "observation_actor": ("session_id", "actor", "recorded_at"),
    "fact": (
        "id",
        *_FACT_VALUE_COLUMNS,
        "version",
        "created_at",
        "updated_at",
        *EVENT_COLUMNS,
        *DERIVED_COLUMNS,
    ),
    "fact_version": (
        "fact_id",
        "version",
        *_FACT_VALUE_COLUMNS,
        "valid_from",
        "valid_to",
        "ended",
        "ended_origin",
        "ended_session_id",
        *EVENT_COLUMNS,
    ),
    "episode": (
        "id",
        "session_id",
        "content",
        "sha",
        "importance",
        *_PROVENANCE_COLUMNS,
        "created_at",
        *EVENT_COLUMNS,
    ),
    "caller_vector": ("memory_id", "model", "chunk", "sha", "dimensions", "embedding"),
    "secret": (
        "name",
        "ciphertext",
        "nonce",
        "key_id",
        "created_at",
        "updated_at",
        "last_used_at",
        "expires_at",
    ),
}

_PROVENANCE = """
    origin text NOT NULL, turn_id bigint, message_ids bigint[], tool_call_id text"""
_EVENT = """happened_start timestamptz, happened_end timestamptz, happened_precision text,
    happened_phrase text"""


def _staging(record_type: str, columns: str) -> str:
    """The temporary table of ``record_type``: ``lineno``, then ``columns``; dropped
    when the caller's transaction ends (a rollback removes it too)."""
    return f"""
CREATE TEMPORARY TABLE import_{record_type} (
    lineno bigint NOT NULL, {columns}
) ON COMMIT DROP"""


# The staged columns of each record type after ``lineno`` (the file's line): the
# checked values, and the columns the import fills in as it goes (outcome, target ids).
_STAGED: dict[str, str] = {
    "session": """session_id text NOT NULL, title text, metadata jsonb NOT NULL,
    created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
    outcome text""",
    "turn": """session_id text NOT NULL, turn_id bigint NOT NULL,
    status text NOT NULL, started_at timestamptz NOT NULL, ended_at timestamptz,
    new_id bigint""",
    "message": """session_id text NOT NULL, id bigint NOT NULL, turn_id bigint,
    role text NOT NULL, content text NOT NULL, parts jsonb NOT NULL, item jsonb,
    created_at timestamptz NOT NULL,
    new_id bigint""",
    "observation_log": """session_id text NOT NULL, id bigint NOT NULL,
    generation integer NOT NULL, origin text NOT NULL, observations text NOT NULL,
    observation_tokens integer NOT NULL, last_observed_message_id bigint,
    covered_group_ids bigint[] NOT NULL, next_reflection_tokens integer NOT NULL,
    created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL,
    new_id bigint""",
    "observation_group": """session_id text NOT NULL, id bigint NOT NULL,
    log_id bigint NOT NULL, kind text NOT NULL, status text NOT NULL,
    first_message_id bigint NOT NULL, last_message_id bigint NOT NULL,
    observations text NOT NULL, observation_tokens integer NOT NULL,
    message_tokens integer NOT NULL, created_at timestamptz NOT NULL,
    new_id bigint""",
    "observation_actor": """session_id text NOT NULL, actor text NOT NULL,
    recorded_at timestamptz NOT NULL""",
    # target_id: the target's fact (matched, or added as new_id); versions_to: the
    # fact the record's versions go to (NULL: a matched fact with another history).
    "fact": f"""id bigint NOT NULL, key text, content text NOT NULL,
    sha text NOT NULL, importance double precision NOT NULL, expires_at timestamptz,
    session_id text, {_PROVENANCE}, version integer NOT NULL,
    created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, {_EVENT},
    based_on jsonb, stale_since timestamptz, stale_source text,
    target_id bigint, target_version integer, same boolean, new_id bigint""",
    # in_file: the record's fact is a fact record of the file; target_id: where the
    # version goes (NULL: skipped).
    "fact_version": f"""fact_id bigint NOT NULL, version integer NOT NULL, key text,
    content text NOT NULL, sha text NOT NULL, importance double precision NOT NULL,
    expires_at timestamptz, session_id text, {_PROVENANCE},
    valid_from timestamptz NOT NULL, valid_to timestamptz NOT NULL, ended text NOT NULL,
    ended_origin text NOT NULL, ended_session_id text, {_EVENT},
    in_file boolean NOT NULL DEFAULT false, target_id bigint""",
    # target_id: the target's episode of the same content (added now, or there before).
    "episode": f"""id bigint NOT NULL, session_id text, content text NOT NULL,
    sha text NOT NULL, importance double precision NOT NULL, {_PROVENANCE},
    created_at timestamptz NOT NULL, {_EVENT},
    target_id bigint""",
    # target_id and memory_sha: the target's memory the vector goes to, and the content
    # hash it holds; held: the target has vectors of this model for it already; same:
    # the target holds this very vector.
    "caller_vector": """memory_id bigint NOT NULL, model text NOT NULL,
    chunk smallint NOT NULL, sha text NOT NULL, dimensions integer NOT NULL,
    embedding vector NOT NULL,
    target_id bigint, memory_sha text, held boolean NOT NULL DEFAULT false,
    same boolean NOT NULL DEFAULT false""",
    "secret": """name text NOT NULL, ciphertext bytea NOT NULL,
    nonce bytea NOT NULL, key_id text NOT NULL, created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL, last_used_at timestamptz, expires_at timestamptz,
    outcome text""",
}

#: One temporary table per record type (``_staging``).
STAGING: dict[str, str] = {t: _staging(t, columns) for t, columns in _STAGED.items()}

#: Lookups the checks and writes join on, made once the file is staged.
_INDEXES = (
    *(f"CREATE UNIQUE INDEX ON import_{t} (lineno)" for t in COLUMNS),
    "CREATE INDEX ON import_session (session_id)",
    "CREATE INDEX ON import_turn (turn_id)",
    "CREATE INDEX ON import_message (id)",
    "CREATE INDEX ON import_message (session_id, id)",
    "CREATE INDEX ON import_observation_log (id)",
    "CREATE INDEX ON import_observation_group (id)",
    "CREATE INDEX ON import_fact (id)",
    "CREATE INDEX ON import_fact_version (fact_id)",
    "CREATE INDEX ON import_episode (id)",
    "CREATE INDEX ON import_caller_vector (memory_id)",
)


def table(record_type: str) -> sql.Identifier:
    return sql.Identifier(f"import_{record_type}")


def copy_statement(record_type: str) -> sql.Composed:
    """``COPY import_<type> (lineno, <COLUMNS>) FROM STDIN``."""
    columns = sql.SQL(", ").join(map(sql.Identifier, ("lineno", *COLUMNS[record_type])))
    return sql.SQL("COPY {} ({}) FROM STDIN").format(table(record_type), columns)


async def create_staging(conn: Conn) -> None:
    for statement in STAGING.values():
        await conn.execute(statement)


async def index_staging(conn: Conn) -> None:
    """The lookups' indexes, and fresh statistics (autovacuum never analyzes a
    temporary table, and the planner would guess its size)."""
    for statement in _INDEXES:
        await conn.execute(statement)
    for record_type in STAGING:
        await conn.execute(sql.SQL("ANALYZE {}").format(table(record_type)))


# --- checks -------------------------------------------------------------------------------

#: A natural key repeated in the file: ``(record type, field, key, rows)``; the
#: query gives the first line that repeats a key and the line it repeats.
DUPLICATES: dict[str, tuple[str, str, str, str]] = {
    "session": ("session", "session_id", "session_id", "true"),
    "actor": ("observation_actor", "session_id", "session_id", "true"),
    "turn": ("turn", "turn_id", "turn_id", "true"),
    "message": ("message", "id", "id", "true"),
    "log": ("observation_log", "id", "id", "true"),
    "generation": ("observation_log", "generation", "session_id, generation", "true"),
    "group": ("observation_group", "id", "id", "true"),
    "fact": ("fact", "id", "id", "true"),
    "fact_key": ("fact", "key", "key", "key IS NOT NULL"),
    "fact_content": ("fact", "content", "sha", "key IS NULL"),
    "fact_version": ("fact_version", "version", "fact_id, version", "true"),
    "episode": ("episode", "id", "id", "true"),
    "caller_vector": ("caller_vector", "chunk", "memory_id, model, chunk", "true"),
    "secret": ("secret", "name", "name", "true"),
}


def duplicate_query(record_type: str, key: str, where: str) -> sql.Composed:
    return sql.SQL(
        """
SELECT lineno, first FROM (
    SELECT lineno, min(lineno) OVER (PARTITION BY {key}) AS first FROM {table} WHERE {where}
) d
WHERE lineno <> first ORDER BY lineno LIMIT 1
"""
    ).format(key=sql.SQL(key), table=table(record_type), where=sql.SQL(where))


#: Records that name another record of the file which is not there:
#: ``(record type, field, message, query giving the first such line)``.
ORPHANS: dict[str, tuple[str, str, str, str]] = {
    **{
        kind: (
            kind,
            "session_id",
            "names no session record of this file",
            f"""
SELECT lineno FROM import_{kind} r
WHERE NOT EXISTS (SELECT 1 FROM import_session s WHERE s.session_id = r.session_id)
ORDER BY lineno LIMIT 1
""",
        )
        for kind in ("turn", "message", "observation_log", "observation_group", "observation_actor")
    },
    "message_turn": (
        "message",
        "turn_id",
        "names no turn record of this message's session",
        """
SELECT lineno FROM import_message r
WHERE r.turn_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM import_turn t WHERE t.turn_id = r.turn_id AND t.session_id = r.session_id)
ORDER BY lineno LIMIT 1
""",
    ),
    "group_log": (
        "observation_group",
        "log_id",
        "names no observation_log of this group's session",
        """
SELECT lineno FROM import_observation_group r
WHERE NOT EXISTS (
    SELECT 1 FROM import_observation_log g
    WHERE r.log_id = g.id AND g.session_id = r.session_id)
ORDER BY lineno LIMIT 1
""",
    ),
    "version_below": (
        "fact_version",
        "version",
        "must be below the current version of its fact",
        """
SELECT r.lineno FROM import_fact_version r JOIN import_fact f ON f.id = r.fact_id
WHERE r.version >= f.version
ORDER BY r.lineno LIMIT 1
""",
    ),
    "vector_memory": (
        "caller_vector",
        "memory_id",
        "names no fact or episode record of this file",
        """
SELECT lineno FROM import_caller_vector r
WHERE NOT EXISTS (SELECT 1 FROM import_fact f WHERE f.id = r.memory_id)
  AND NOT EXISTS (SELECT 1 FROM import_episode e WHERE e.id = r.memory_id)
ORDER BY lineno LIMIT 1
""",
    ),
    "vector_memory_twice": (
        "caller_vector",
        "memory_id",
        "names both a fact and an episode record of this file (a memory has one id)",
        """
SELECT lineno FROM import_caller_vector r
WHERE EXISTS (SELECT 1 FROM import_fact f WHERE f.id = r.memory_id)
  AND EXISTS (SELECT 1 FROM import_episode e WHERE e.id = r.memory_id)
ORDER BY lineno LIMIT 1
""",
    ),
    # The vectors of one memory and model are of one size, as each write makes them.
    "vector_dimensions": (
        "caller_vector",
        "embedding",
        "must have as many dimensions as the other chunks of its memory and model",
        """
SELECT lineno FROM (
    SELECT lineno, dimensions,
           first_value(dimensions) OVER (PARTITION BY memory_id, model ORDER BY chunk) AS first
    FROM import_caller_vector
) d
WHERE dimensions <> first ORDER BY lineno LIMIT 1
""",
    ),
}

#: The order of the checks (a name of ``DUPLICATES`` or of ``ORPHANS``): the
#: first that fails is reported.
CHECKS: tuple[tuple[str, str], ...] = (
    ("duplicate", "session"),
    ("orphan", "turn"),
    ("orphan", "message"),
    ("orphan", "observation_log"),
    ("orphan", "observation_group"),
    ("duplicate", "actor"),
    ("orphan", "observation_actor"),
    ("duplicate", "turn"),
    ("orphan", "message_turn"),
    ("duplicate", "message"),
    ("duplicate", "log"),
    ("duplicate", "generation"),
    ("orphan", "group_log"),
    ("duplicate", "group"),
    ("duplicate", "fact"),
    ("duplicate", "fact_key"),
    ("duplicate", "fact_content"),
    ("duplicate", "fact_version"),
    ("orphan", "version_below"),
    ("duplicate", "episode"),
    ("duplicate", "caller_vector"),
    ("orphan", "vector_memory"),
    ("orphan", "vector_memory_twice"),
    ("orphan", "vector_dimensions"),
    ("duplicate", "secret"),
)

#: How many records of each type the file holds.
TOTALS = "SELECT " + ", ".join(f"(SELECT count(*) FROM import_{t}) AS {t}" for t in COLUMNS)

FIRST_SECRET = "SELECT lineno FROM import_secret ORDER BY lineno LIMIT 1"


async def first_line(conn: Conn, query: str | sql.Composed) -> dict[str, Any] | None:
    cur = await conn.execute(query)
    return await cur.fetchone()


async def totals(conn: Conn) -> dict[str, int]:
    cur = await conn.execute(TOTALS)
    row = await cur.fetchone()
    assert row is not None
    return {k: int(v) for k, v in row.items()}


# --- ids ----------------------------------------------------------------------------------

#: The identity sequences the import draws ids from.
SEQUENCES = """
SELECT pg_get_serial_sequence('popagent_turns', 'turn_id') AS turn,
       pg_get_serial_sequence('popagent_messages', 'id') AS message,
       pg_get_serial_sequence('popagent_observation_logs', 'id') AS observation_log,
       pg_get_serial_sequence('popagent_observation_groups', 'id') AS observation_group,
       pg_get_serial_sequence('popagent_memories', 'id') AS fact
"""


async def sequences(conn: Conn) -> dict[str, str]:
    cur = await conn.execute(SEQUENCES)
    row = await cur.fetchone()
    assert row is not None
    return {k: str(v) for k, v in row.items()}


def _allocate(record_type: str, where: str, order: str) -> sql.Composed:
    return sql.SQL(
        """
WITH wanted AS (
    SELECT lineno, row_number() OVER (ORDER BY {order}) AS n FROM {table} WHERE {where}
), drawn AS (
    SELECT nextval(%(sequence)s::regclass) AS new_id FROM wanted
), numbered AS (
    SELECT new_id, row_number() OVER (ORDER BY new_id) AS n FROM drawn
)
UPDATE {table} r SET new_id = numbered.new_id
FROM wanted JOIN numbered USING (n)
WHERE r.lineno = wanted.lineno
"""
    ).format(table=table(record_type), where=sql.SQL(where), order=sql.SQL(order))


_IN_ADDED_SESSION = "session_id IN (SELECT session_id FROM import_session WHERE outcome = 'added')"

#: Which staged rows get new ids, in which order (the ids follow the source order).
_ALLOCATIONS: dict[str, sql.Composed] = {
    "turn": _allocate("turn", _IN_ADDED_SESSION, "turn_id"),
    "message": _allocate("message", _IN_ADDED_SESSION, "id"),
    "observation_log": _allocate("observation_log", _IN_ADDED_SESSION, "session_id, generation"),
    "observation_group": _allocate("observation_group", _IN_ADDED_SESSION, "id"),
    "fact": _allocate("fact", "target_id IS NULL", "id"),
}


async def allocate(conn: Conn, record_type: str, sequence: str) -> None:
    """Draw a new id (``new_id``) for each staged row of ``record_type`` to be added."""
    await conn.execute(_ALLOCATIONS[record_type], {"sequence": sequence})


async def scalar(conn: Conn, query: str | sql.Composed, params: dict[str, Any]) -> Any:
    cur = await conn.execute(query, params)
    row = await cur.fetchone()
    return None if row is None else next(iter(row.values()))


async def outcomes(
    conn: Conn, query: str | sql.Composed, params: dict[str, Any] | None = None
) -> Sequence[dict[str, Any]]:
    """Rows of ``(outcome, n)``."""
    cur = await conn.execute(query, params or {})
    return await cur.fetchall()


# --- writes: sessions ---------------------------------------------------------------------

ADD_SESSIONS = """
WITH added AS (
    INSERT INTO popagent_sessions
        (resource_id, session_id, title, metadata, created_at, updated_at)
    SELECT %(resource_id)s, session_id, title, metadata, created_at, updated_at
    FROM import_session ORDER BY session_id
    ON CONFLICT (resource_id, session_id) DO NOTHING
    RETURNING session_id
)
UPDATE import_session s SET outcome = 'added' FROM added a WHERE a.session_id = s.session_id
"""

# A session the target holds already is never merged: unchanged when its messages
# equal the file's (role, content, parts, item, in order), else skipped. The stored
# messages are read in one set, not by a subquery per staged session: Citus cannot
# correlate a distributed table with a temporary one (docs/scaling.md).
MATCH_SESSIONS = """
WITH stored AS (
    SELECT session_id, role, content, parts, item,
           row_number() OVER (PARTITION BY session_id ORDER BY id) AS n
    FROM popagent_messages
    WHERE resource_id = %(resource_id)s
      AND session_id IN (SELECT session_id FROM import_session WHERE outcome IS NULL)
), filed AS (
    SELECT session_id, role, content, parts, item,
           row_number() OVER (PARTITION BY session_id ORDER BY id) AS n
    FROM import_message
    WHERE session_id IN (SELECT session_id FROM import_session WHERE outcome IS NULL)
), differing AS (
    SELECT coalesce(stored.session_id, filed.session_id) AS session_id
    FROM stored FULL JOIN filed ON filed.session_id = stored.session_id AND filed.n = stored.n
    WHERE stored.n IS NULL OR filed.n IS NULL
       OR (stored.role, stored.content, stored.parts, stored.item)
          IS DISTINCT FROM (filed.role, filed.content, filed.parts, filed.item)
)
UPDATE import_session s
SET outcome = CASE WHEN s.session_id IN (SELECT session_id FROM differing)
                   THEN 'skipped' ELSE 'unchanged' END
WHERE s.outcome IS NULL
"""

# The sessions' outcomes, known to the planner (it plans the statements that follow
# by how many sessions were added).
ANALYZE_SESSIONS = "ANALYZE import_session"

# The messages of an unchanged session map onto the stored ones, in order; its turns
# too when there are as many.
MAP_MATCHED_MESSAGES = """
UPDATE import_message f SET new_id = stored.id
FROM (
    SELECT lineno, session_id, row_number() OVER (PARTITION BY session_id ORDER BY id) AS n
    FROM import_message
    WHERE session_id IN (SELECT session_id FROM import_session WHERE outcome = 'unchanged')
) filed
JOIN (
    SELECT id, session_id, row_number() OVER (PARTITION BY session_id ORDER BY id) AS n
    FROM popagent_messages
    WHERE resource_id = %(resource_id)s
      AND session_id IN (SELECT session_id FROM import_session WHERE outcome = 'unchanged')
) stored USING (session_id, n)
WHERE f.lineno = filed.lineno
"""

MAP_MATCHED_TURNS = """
WITH stored AS (
    SELECT turn_id, session_id, row_number() OVER (PARTITION BY session_id ORDER BY turn_id) AS n,
           count(*) OVER (PARTITION BY session_id) AS total
    FROM popagent_turns
    WHERE resource_id = %(resource_id)s
      AND session_id IN (SELECT session_id FROM import_session WHERE outcome = 'unchanged')
), filed AS (
    SELECT lineno, session_id,
           row_number() OVER (PARTITION BY session_id ORDER BY turn_id) AS n,
           count(*) OVER (PARTITION BY session_id) AS total
    FROM import_turn
    WHERE session_id IN (SELECT session_id FROM import_session WHERE outcome = 'unchanged')
)
UPDATE import_turn t SET new_id = stored.turn_id
FROM filed JOIN stored USING (session_id, n, total)
WHERE t.lineno = filed.lineno
"""

INSERT_TURNS = f"""
INSERT INTO popagent_turns (resource_id, session_id, turn_id, status, started_at, ended_at)
OVERRIDING SYSTEM VALUE
SELECT %(resource_id)s, session_id, new_id, status, started_at, ended_at
FROM import_turn WHERE {_IN_ADDED_SESSION} ORDER BY new_id
"""

# Their bytes are counted in the resource's thread_bytes (the storage quota).
INSERT_MESSAGES = f"""
WITH written AS (
    INSERT INTO popagent_messages
        (resource_id, session_id, id, turn_id, role, content, parts, item, created_at)
    OVERRIDING SYSTEM VALUE
    SELECT %(resource_id)s, m.session_id, m.new_id,
           (SELECT t.new_id FROM import_turn t WHERE t.turn_id = m.turn_id),
           m.role, m.content, m.parts, m.item, m.created_at
    FROM import_message m WHERE m.{_IN_ADDED_SESSION} ORDER BY m.new_id
    RETURNING resource_id, {MESSAGE_BYTES.format(m="popagent_messages")} AS bytes
), {thread_counted("written")}
SELECT count(*) AS n FROM written
"""

# The target id of the source message a pointer names, or of its nearest
# neighbour among the session's messages of the file (the next one for a range's
# start, the previous one otherwise); NULL when there is none.
_NEAREST_MESSAGE = """coalesce(
    (SELECT m.new_id FROM import_message m WHERE m.id = {{pointer}} AND m.new_id IS NOT NULL),
    (SELECT m.new_id FROM import_message m
     WHERE m.session_id = {{alias}}.session_id AND m.id {beyond} {{pointer}} ORDER BY m.id{order}
     LIMIT 1))"""
_NEXT_MESSAGE = _NEAREST_MESSAGE.format(beyond=">", order="")
_PREVIOUS_MESSAGE = _NEAREST_MESSAGE.format(beyond="<", order=" DESC")

# A generation with its cursor and covered groups mapped (groups of its own session).
INSERT_LOGS = f"""
INSERT INTO popagent_observation_logs (
    resource_id, session_id, id, generation, origin, observations, observation_tokens,
    last_observed_message_id, covered_group_ids, next_reflection_tokens, created_at, updated_at
)
OVERRIDING SYSTEM VALUE
SELECT %(resource_id)s, g.session_id, g.new_id, g.generation, g.origin, g.observations,
       g.observation_tokens,
       {_PREVIOUS_MESSAGE.format(pointer="g.last_observed_message_id", alias="g")},
       ARRAY(SELECT c.new_id
             FROM unnest(g.covered_group_ids) WITH ORDINALITY AS u(group_id, n)
             JOIN import_observation_group c
               ON c.id = u.group_id AND c.session_id = g.session_id
             ORDER BY u.n),
       g.next_reflection_tokens, g.created_at, g.updated_at
FROM import_observation_log g WHERE g.{_IN_ADDED_SESSION} ORDER BY g.new_id
"""

# A range whose start has no message in the file keeps its source pointer; its end
# never falls below its start.
INSERT_GROUPS = f"""
INSERT INTO popagent_observation_groups (
    resource_id, session_id, id, log_id, kind, status, first_message_id, last_message_id,
    observations, observation_tokens, message_tokens, created_at
)
OVERRIDING SYSTEM VALUE
SELECT %(resource_id)s, session_id, new_id, log_target, kind, status, first_id,
       greatest(coalesce(last_id, last_message_id), first_id),
       observations, observation_tokens, message_tokens, created_at
FROM (
    SELECT g.*, coalesce({_NEXT_MESSAGE.format(pointer="g.first_message_id", alias="g")},
                         g.first_message_id) AS first_id,
           {_PREVIOUS_MESSAGE.format(pointer="g.last_message_id", alias="g")} AS last_id,
           (SELECT l.new_id FROM import_observation_log l WHERE g.log_id = l.id) AS log_target
    FROM import_observation_group g WHERE g.{_IN_ADDED_SESSION}
) ranged
ORDER BY new_id
"""

INSERT_ACTORS = f"""
INSERT INTO popagent_observation_actors (resource_id, session_id, actor, recorded_at)
SELECT %(resource_id)s, session_id, actor, recorded_at
FROM import_observation_actor WHERE {_IN_ADDED_SESSION}
ON CONFLICT (resource_id, session_id) DO NOTHING
"""

#: How each thread record type came out: its session's outcome.
SESSION_OUTCOMES = "SELECT outcome, count(*) AS n FROM import_session GROUP BY outcome"


def child_outcomes(record_type: str) -> sql.Composed:
    return sql.SQL(
        "SELECT s.outcome, count(*) AS n FROM {} r JOIN import_session s USING (session_id) "
        "GROUP BY s.outcome"
    ).format(table(record_type))


SKIPPED_SESSIONS = (
    "SELECT session_id FROM import_session WHERE outcome = 'skipped' ORDER BY session_id"
)

# --- writes: long-term memory -------------------------------------------------------------

# Provenance that names a message or turn is mapped to the target's, when that
# message or turn is in the target after the import, and dropped when not.
_TURN = "(SELECT t.new_id FROM import_turn t WHERE t.turn_id = {alias}.turn_id)"
_MESSAGE_IDS = """nullif(ARRAY(
    SELECT m.new_id FROM unnest({alias}.message_ids) WITH ORDINALITY AS u(message_id, n)
    JOIN import_message m ON m.id = u.message_id
    WHERE m.new_id IS NOT NULL ORDER BY u.n), '{{}}')"""


def _provenance(alias: str) -> str:
    return (
        f"{alias}.origin, {_TURN.format(alias=alias)}, "
        f"{_MESSAGE_IDS.format(alias=alias)}, {alias}.tool_call_id"
    )


# The current fact each fact record matches: by key, or (keyless) by content hash.
_MATCH_FACTS = """
UPDATE import_fact f
SET target_id = m.id, target_version = m.version,
    same = (m.content_sha256, m.importance, m.expires_at)
           IS NOT DISTINCT FROM (f.sha, f.importance, f.expires_at)
FROM popagent_memories m
WHERE m.resource_id = %(resource_id)s AND m.kind = 'fact' AND {match}
"""
MATCH_KEYED_FACTS = _MATCH_FACTS.format(match="f.key IS NOT NULL\n  AND m.key = f.key")
MATCH_KEYLESS_FACTS = _MATCH_FACTS.format(
    match="m.key IS NULL\n  AND f.key IS NULL AND m.content_sha256 = f.sha"
)

#: The first fact record whose key (or content) the target holds with another value.
FIRST_CONFLICT = """
SELECT lineno, key, target_id FROM import_fact
WHERE target_id IS NOT NULL AND NOT same ORDER BY lineno LIMIT 1
"""

# Straight in, not through the upsert: the exported version, times, provenance and
# stale mark are kept as they are (the version trigger fires on UPDATE only). The
# sources (``based_on``) are set once the episodes are in (``SET_FACT_SOURCES``).
INSERT_FACTS = f"""
WITH written AS (
    INSERT INTO popagent_memories
        (resource_id, id, session_id, kind, key, content, content_sha256, importance,
         expires_at, origin, turn_id, message_ids, tool_call_id, version, created_at, updated_at,
         {", ".join(EVENT_COLUMNS)}, stale_since, stale_source)
    OVERRIDING SYSTEM VALUE
    SELECT %(resource_id)s, f.new_id, f.session_id, 'fact', f.key, f.content, f.sha,
           f.importance, f.expires_at, {_provenance("f")}, f.version, f.created_at, f.updated_at,
           {", ".join("f." + c for c in EVENT_COLUMNS)}, f.stale_since, f.stale_source
    FROM import_fact f WHERE f.new_id IS NOT NULL ORDER BY f.new_id
    RETURNING resource_id, id, search_vector, content
), {counted("written", 1)}
SELECT count(*) AS n FROM written
"""

# The versions of a fact of the file go to its target fact: the one added, or the
# one matched when it has the same version number (the same history); a matched
# fact with another history gets none of them (skipped).
TARGET_FILED_VERSIONS = """
UPDATE import_fact_version v
SET in_file = true,
    target_id = CASE WHEN f.new_id IS NOT NULL THEN f.new_id
                     WHEN f.target_version = f.version THEN f.target_id END
FROM import_fact f WHERE f.id = v.fact_id
"""

# A deleted fact's history goes to the same history imported earlier (the same
# first version, value and start, to the microsecond), else to an id reserved from
# the memories' own sequence, so that ``restore_fact`` can bring it back under it.
TARGET_DELETED_VERSIONS = """
WITH firsts AS (
    SELECT DISTINCT ON (fact_id) fact_id, version, sha, valid_from
    FROM import_fact_version WHERE NOT in_file ORDER BY fact_id, version
), targets AS (
    SELECT f.fact_id, coalesce(
        (SELECT h.fact_id FROM popagent_fact_versions h
         WHERE h.resource_id = %(resource_id)s AND h.version = f.version
           AND h.content_sha256 = f.sha AND h.valid_from = f.valid_from
         ORDER BY h.fact_id LIMIT 1),
        nextval(%(sequence)s::regclass)) AS target_id
    FROM firsts f
)
UPDATE import_fact_version v SET target_id = t.target_id
FROM targets t WHERE v.fact_id = t.fact_id AND NOT v.in_file
"""

INSERT_FACT_VERSIONS = f"""
WITH written AS (
    INSERT INTO popagent_fact_versions
        (resource_id, fact_id, version, key, content, content_sha256, importance, expires_at,
         session_id, origin, turn_id, message_ids, tool_call_id, valid_from, valid_to, ended,
         ended_origin, ended_session_id, {", ".join(EVENT_COLUMNS)})
    SELECT %(resource_id)s, v.target_id, v.version, v.key, v.content, v.sha, v.importance,
           v.expires_at, v.session_id, {_provenance("v")}, v.valid_from, v.valid_to, v.ended,
           v.ended_origin, v.ended_session_id, {", ".join("v." + c for c in EVENT_COLUMNS)}
    FROM import_fact_version v WHERE v.target_id IS NOT NULL ORDER BY v.target_id, v.version
    ON CONFLICT (resource_id, fact_id, version) DO NOTHING
    RETURNING 1
)
SELECT count(*) AS n FROM written
"""

FACT_VERSIONS_SKIPPED = "SELECT count(*) AS n FROM import_fact_version WHERE target_id IS NULL"

# Episodes deduplicate by content hash (a repeat in the file too: the first in
# time is kept).
INSERT_EPISODES = f"""
WITH written AS (
    INSERT INTO popagent_memories
        (resource_id, session_id, kind, content, content_sha256, importance, origin, turn_id,
         message_ids, tool_call_id, created_at, updated_at, {", ".join(EVENT_COLUMNS)})
    SELECT %(resource_id)s, e.session_id, 'episode', e.content, e.sha, e.importance,
           {_provenance("e")}, e.created_at, e.created_at,
           {", ".join("e." + c for c in EVENT_COLUMNS)}
    FROM import_episode e ORDER BY e.created_at, e.id
    ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
    RETURNING resource_id, id, search_vector, content
), {counted("written", 1)}
SELECT count(*) AS n FROM written
"""

# Each episode record's target: the episode of its content in the target after the
# import (added now, or there before: episodes deduplicate by content hash).
MAP_EPISODES = """
UPDATE import_episode e SET target_id = m.id
FROM popagent_memories m
WHERE m.resource_id = %(resource_id)s AND m.kind = 'episode' AND m.key IS NULL
  AND m.content_sha256 = e.sha
"""

# The target memory a source id names: a fact of the file (added or matched), a
# deleted fact whose history the file holds (the id its history went to, under which
# ``restore_fact`` brings it back), or an episode of the file; NULL when the file
# has no memory of that id.
_TARGET_OF = """coalesce(
    (SELECT coalesce(x.new_id, x.target_id) FROM import_fact x WHERE x.id = {ref}),
    (SELECT v.target_id FROM import_fact_version v
     WHERE v.fact_id = {ref} AND NOT v.in_file LIMIT 1),
    (SELECT e.target_id FROM import_episode e WHERE e.id = {ref}))"""

# An added fact's sources: a key is a name and is kept; a memory id is mapped to the
# target's id of that memory of the file, and dropped when the file has none (a
# source id kept as it is would name an unrelated memory of the target), as
# provenance is; nothing left: based on nothing. A stale mark's source that is an id
# (``#`` and the id) is mapped the same way, and kept as exported when it names no
# memory of the file (the source was gone before the export). No trigger fires:
# only content and key changes mark dependents (migration 0022).
SET_FACT_SOURCES = f"""
WITH mapped AS (
    SELECT f.new_id,
           (SELECT jsonb_agg(r.ref ORDER BY r.n) FROM (
                SELECT min(u.n) AS n, u.ref FROM (
                    SELECT s.n, CASE WHEN jsonb_typeof(s.ref) = 'string' THEN s.ref
                                     ELSE to_jsonb({_TARGET_OF.format(ref="(s.ref)::bigint")})
                                END AS ref
                    FROM jsonb_array_elements(f.based_on) WITH ORDINALITY AS s(ref, n)
                ) u
                WHERE u.ref IS NOT NULL GROUP BY u.ref
            ) r) AS based_on,
           CASE WHEN f.stale_source LIKE '#%%'
                THEN coalesce(
                    '#' || {_TARGET_OF.format(ref="substr(f.stale_source, 2)::bigint")},
                    f.stale_source)
                ELSE f.stale_source END AS stale_source
    FROM import_fact f
    WHERE f.new_id IS NOT NULL AND (f.based_on IS NOT NULL OR f.stale_source LIKE '#%%')
)
UPDATE popagent_memories m SET based_on = mapped.based_on, stale_source = mapped.stale_source
FROM mapped
WHERE m.resource_id = %(resource_id)s AND m.id = mapped.new_id
"""

# --- writes: secrets ----------------------------------------------------------------------

# A secret is written as exported (ciphertext); a name the target holds stays as
# it is: unchanged when it holds the same ciphertext, else skipped.
ADD_SECRETS = """
WITH added AS (
    INSERT INTO popagent_secrets
        (resource_id, name, ciphertext, nonce, key_id, created_at, updated_at, last_used_at,
         expires_at)
    SELECT %(resource_id)s, name, ciphertext, nonce, key_id, created_at, updated_at,
           last_used_at, expires_at
    FROM import_secret ORDER BY name
    ON CONFLICT (resource_id, name) DO NOTHING
    RETURNING name
)
UPDATE import_secret s SET outcome = 'added' FROM added a WHERE a.name = s.name
"""

MATCH_SECRETS = """
UPDATE import_secret s
SET outcome = CASE WHEN (t.ciphertext, t.nonce, t.key_id) = (s.ciphertext, s.nonce, s.key_id)
                   THEN 'unchanged' ELSE 'skipped' END
FROM popagent_secrets t
WHERE t.resource_id = %(resource_id)s AND t.name = s.name AND s.outcome IS NULL
"""

SECRET_OUTCOMES = "SELECT outcome, count(*) AS n FROM import_secret GROUP BY outcome"


# --- COPY text ----------------------------------------------------------------------------


def copy_row(values: Sequence[object]) -> str:
    """One row of ``COPY ... FROM STDIN`` text format: tab-separated, ``\\N`` for NULL,
    backslash, newline, carriage return and tab escaped; integer lists as arrays,
    bytes as ``bytea`` hex, times in ISO 8601. Pure, so a worker can build the rows."""
    out: list[str] = []
    for value in values:
        if value is None:
            out.append("\\N")
        elif isinstance(value, str):
            out.append(
                value.replace("\\", "\\\\")
                .replace("\n", "\\n")
                .replace("\r", "\\r")
                .replace("\t", "\\t")
            )
        elif isinstance(value, bool):
            out.append("t" if value else "f")
        elif isinstance(value, int):
            out.append(str(value))
        elif isinstance(value, float):
            out.append(repr(value))
        elif isinstance(value, datetime):
            out.append(value.isoformat())
        elif isinstance(value, bytes):
            out.append("\\\\x" + value.hex())
        elif isinstance(value, list | tuple):
            out.append("{" + ",".join(str(int(item)) for item in value) + "}")
        else:
            raise TypeError(f"no COPY text for {type(value).__name__}")
    return "\t".join(out) + "\n"


# --- Mem0 ---------------------------------------------------------------------------------

MEM0_COLUMNS = (
    "position", "resource_id", "content", "sha", "created_at", "updated_at", *EVENT_COLUMNS
)  # fmt: skip

STAGING_MEM0 = f"""
CREATE TEMPORARY TABLE import_mem0 (
    position bigint NOT NULL, resource_id text NOT NULL, content text NOT NULL,
    sha text NOT NULL, created_at timestamptz, updated_at timestamptz, {_EVENT}
) ON COMMIT DROP"""

COPY_MEM0 = f"COPY import_mem0 ({', '.join(MEM0_COLUMNS)}) FROM STDIN"

# Each memory a keyless fact (version 1, origin import); keyless facts deduplicate by
# content hash, so a memory already there (or repeated in the file) is not written.
INSERT_MEM0 = f"""
WITH written AS (
    INSERT INTO popagent_memories
        (resource_id, kind, content, content_sha256, importance, origin, version, created_at,
         updated_at, {", ".join(EVENT_COLUMNS)})
    SELECT resource_id, 'fact', content, sha, %(importance)s, 'import', 1,
           coalesce(created_at, now()), coalesce(updated_at, created_at, now()),
           {", ".join(EVENT_COLUMNS)}
    FROM import_mem0 ORDER BY position
    ON CONFLICT (resource_id, kind, content_sha256) WHERE key IS NULL DO NOTHING
    RETURNING resource_id, id, search_vector, content
), {counted("written", 1)}
SELECT count(*) AS n FROM written
"""

#: The resources a Mem0 document names, in the order it names them first.
MEM0_RESOURCES = """
SELECT resource_id FROM import_mem0 GROUP BY resource_id ORDER BY min(position)
"""

MEM0_TOTAL = "SELECT count(*) AS n FROM import_mem0"
