"""SQL that deletes every row of one resource: the statements a purge runs, in order.

Invariants:
- ``PURGE_TABLES`` names every table with a ``resource_id`` column (a test
  reads the schema and fails when a new one is missing), and ``PURGE_STATEMENTS``
  holds one ``DELETE`` per table, in that order.
- The order respects the foreign keys and the triggers: children before their
  parents (observation groups before their logs; messages before turns;
  everything thread-scoped before the sessions; vectors before memories), so
  every count is the table's own rows, not a cascade's; the recall statistics
  after the memories, because deleting memories makes their trigger write
  (zero) counts that must go too. The resource's sessions are locked first and
  the thread tables go before the memories: the order a chat turn takes its
  locks in (see ``LOCK_SESSIONS``).
- ``purge_rows`` takes the caller's connection and never opens a transaction
  or commits: the service (``popagent.memory.purge``) runs it in one
  transaction, so a purge is all or nothing.
- Every statement filters on ``resource_id`` alone: nothing of another
  resource is touched.
"""

from __future__ import annotations

from psycopg.pq import TransactionStatus

from .database import Conn

__all__ = [
    "COUNT_ROWS",
    "DELETE_ACCESS_AUDIT",
    "DELETE_API_KEYS",
    "DELETE_AUDIT",
    "DELETE_EMBEDDINGS",
    "DELETE_FACT_VERSIONS",
    "DELETE_LEXEME_STATS",
    "DELETE_LOGINS",
    "DELETE_MEMORIES",
    "DELETE_MEMORY_SETTINGS",
    "DELETE_MESSAGES",
    "DELETE_OBSERVATION_ACTORS",
    "DELETE_OBSERVATION_GROUPS",
    "DELETE_OBSERVATION_LOGS",
    "DELETE_RESOURCE_STATS",
    "DELETE_SECRETS",
    "DELETE_SESSIONS",
    "DELETE_TURNS",
    "LOCK_SESSIONS",
    "PURGE_STATEMENTS",
    "PURGE_TABLES",
    "count_rows",
    "purge_rows",
]

# --- threads and observational memory ---------------------------------------------------------

# Run first: a thread write in flight (it holds a key-share lock on its session,
# from the foreign key) finishes before the purge holds anything it could
# need, and a later one waits for the purge (then finds its session gone). A
# turn's final transaction writes its message before its episode; taking the
# sessions before the memories is the same order, so the two queue instead of
# deadlocking.
LOCK_SESSIONS = """
SELECT session_id FROM popagent_sessions WHERE resource_id = %(resource_id)s
ORDER BY session_id
FOR UPDATE
"""

DELETE_OBSERVATION_GROUPS = (
    "DELETE FROM popagent_observation_groups WHERE resource_id = %(resource_id)s"
)
DELETE_OBSERVATION_ACTORS = (
    "DELETE FROM popagent_observation_actors WHERE resource_id = %(resource_id)s"
)
DELETE_OBSERVATION_LOGS = (
    "DELETE FROM popagent_observation_logs WHERE resource_id = %(resource_id)s"
)
DELETE_MESSAGES = "DELETE FROM popagent_messages WHERE resource_id = %(resource_id)s"
DELETE_TURNS = "DELETE FROM popagent_turns WHERE resource_id = %(resource_id)s"
# Last of the thread tables: its cascades also take any thread row written by a
# transaction that committed after the statements above took their snapshots.
DELETE_SESSIONS = "DELETE FROM popagent_sessions WHERE resource_id = %(resource_id)s"

# --- long-term memory -------------------------------------------------------------------------

DELETE_EMBEDDINGS = "DELETE FROM popagent_memory_embeddings WHERE resource_id = %(resource_id)s"
DELETE_PENDING_VECTORS = "DELETE FROM popagent_pending_vectors WHERE resource_id = %(resource_id)s"
DELETE_FACT_VERSIONS = "DELETE FROM popagent_fact_versions WHERE resource_id = %(resource_id)s"
# Fires the statistics trigger, which upserts this resource's counts down to 0.
DELETE_MEMORIES = "DELETE FROM popagent_memories WHERE resource_id = %(resource_id)s"
DELETE_LEXEME_STATS = "DELETE FROM popagent_lexeme_stats WHERE resource_id = %(resource_id)s"
DELETE_RESOURCE_STATS = "DELETE FROM popagent_resource_stats WHERE resource_id = %(resource_id)s"

# --- the stores apart from memory -------------------------------------------------------------

DELETE_SECRETS = "DELETE FROM popagent_secrets WHERE resource_id = %(resource_id)s"
DELETE_MEMORY_SETTINGS = "DELETE FROM popagent_memory_settings WHERE resource_id = %(resource_id)s"
# Audit rows hold no content, but each names the resource and its sessions: a
# purged resource leaves none behind (docs/long-term-memory.md, "Purge").
DELETE_AUDIT = "DELETE FROM popagent_audit WHERE resource_id = %(resource_id)s"
# The resource's API keys (migration 0017) go too, and their GUI logins with them
# (deleted first: the key's rows are what they refer to); so does its access audit.
DELETE_LOGINS = "DELETE FROM popagent_logins WHERE resource_id = %(resource_id)s"
DELETE_API_KEYS = "DELETE FROM popagent_api_keys WHERE resource_id = %(resource_id)s"
DELETE_ACCESS_AUDIT = "DELETE FROM popagent_access_audit WHERE resource_id = %(resource_id)s"

#: (table, statement) in the order a purge runs them.
PURGE_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("popagent_observation_groups", DELETE_OBSERVATION_GROUPS),
    ("popagent_observation_actors", DELETE_OBSERVATION_ACTORS),
    ("popagent_observation_logs", DELETE_OBSERVATION_LOGS),
    ("popagent_messages", DELETE_MESSAGES),
    ("popagent_turns", DELETE_TURNS),
    ("popagent_sessions", DELETE_SESSIONS),
    ("popagent_pending_vectors", DELETE_PENDING_VECTORS),
    ("popagent_memory_embeddings", DELETE_EMBEDDINGS),
    ("popagent_fact_versions", DELETE_FACT_VERSIONS),
    ("popagent_memories", DELETE_MEMORIES),
    ("popagent_lexeme_stats", DELETE_LEXEME_STATS),
    ("popagent_resource_stats", DELETE_RESOURCE_STATS),
    ("popagent_secrets", DELETE_SECRETS),
    ("popagent_memory_settings", DELETE_MEMORY_SETTINGS),
    ("popagent_audit", DELETE_AUDIT),
    ("popagent_logins", DELETE_LOGINS),
    ("popagent_api_keys", DELETE_API_KEYS),
    ("popagent_access_audit", DELETE_ACCESS_AUDIT),
)

#: Every table that holds rows of a resource, in purge order.
PURGE_TABLES: tuple[str, ...] = tuple(table for table, _ in PURGE_STATEMENTS)

# The table names are the constants above, never input.
COUNT_ROWS = "\nUNION ALL\n".join(
    f"SELECT '{table}' AS table_name, count(*) AS n FROM {table} "
    "WHERE resource_id = %(resource_id)s"
    for table in PURGE_TABLES
)


async def count_rows(conn: Conn, resource_id: str) -> dict[str, int]:
    """The rows of ``resource_id`` per table, in purge order: what a purge would delete."""
    cur = await conn.execute(COUNT_ROWS, {"resource_id": resource_id})
    counts = {row["table_name"]: int(row["n"]) for row in await cur.fetchall()}
    return {table: counts[table] for table in PURGE_TABLES}


async def purge_rows(conn: Conn, resource_id: str) -> dict[str, int]:
    """Delete every row of ``resource_id``, table by table; the rows deleted per table.

    Run it inside the caller's transaction: on its own (autocommit) a failure
    part-way would leave the resource half purged.
    """
    if conn.info.transaction_status != TransactionStatus.INTRANS:
        raise RuntimeError("purge_rows must run inside the caller's transaction")
    deleted: dict[str, int] = {}
    params = {"resource_id": resource_id}
    await conn.execute(LOCK_SESSIONS, params)
    for table, statement in PURGE_STATEMENTS:
        cur = await conn.execute(statement, params)
        deleted[table] = max(cur.rowcount, 0)
    return deleted
