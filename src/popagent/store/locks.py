"""Cross-process locks in PostgreSQL: one chat turn at a time per session.

``serve --workers N``, ``popagent chat`` and library callers may all run turns
of one session from different processes; an in-process lock cannot serialize
them. A session-level advisory lock can: it is held by one database
connection, for as long as that connection holds it, and PostgreSQL releases
it when the connection ends, so a killed process never leaves a session
locked.

Invariants:
- The lock is taken with ``pg_try_advisory_lock`` in a polling loop, never a
  blocking ``pg_advisory_lock``: a cancelled waiter is never left with a lock
  it does not know it holds (a blocking call cancelled just as it is granted
  could be), and a waiting turn never pins a query on the server.
- Releasing runs ``pg_advisory_unlock_all()`` on the lock's own connection, so
  whatever happened, the connection goes back to the pool holding no lock.
- The key is a 64-bit hash of (namespace, resource_id, session_id): distinct
  sessions may share a key (a hash collision makes them take turns, never
  interleave), and no other advisory lock of popagent uses this namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .database import Conn, Pool

__all__ = ["TURN_LOCK_NAMESPACE", "session_turn_lock", "turn_lock_held", "turn_lock_held_sql"]

TURN_LOCK_NAMESPACE = "popagent.turn"

TRY_TURN_LOCK = f"""
SELECT pg_try_advisory_lock(
    hashtextextended('{TURN_LOCK_NAMESPACE}' || chr(31) || %(resource_id)s || chr(31) || %(session_id)s, 0)
) AS locked
"""


def turn_lock_held_sql(resource_id: str, session_id: str) -> str:
    """A SQL boolean: whether any backend holds the turn lock of the session named by
    the SQL expressions ``resource_id`` and ``session_id`` (a live turn somewhere).

    A single-key advisory lock shows in ``pg_locks`` as the key's high and low 32
    bits (``classid``, ``objid``) with ``objsubid`` 1.
    """
    key = (
        f"hashtextextended('{TURN_LOCK_NAMESPACE}' || chr(31) || {resource_id} "
        f"|| chr(31) || {session_id}, 0)"
    )
    return f"""EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND ((l.classid::bigint << 32) | l.objid::bigint) = {key})"""


TURN_LOCK_HELD = f"""
SELECT {turn_lock_held_sql("%(resource_id)s", "%(session_id)s")} AS held
"""

UNLOCK_ALL = "SELECT pg_advisory_unlock_all()"

#: How often a waiting turn asks again.
POLL_S = 0.05


async def _try(conn: Conn, resource_id: str, session_id: str) -> bool:
    cur = await conn.execute(TRY_TURN_LOCK, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    return bool(row and row["locked"])


@asynccontextmanager
async def session_turn_lock(pool: Pool, resource_id: str, session_id: str) -> AsyncIterator[None]:
    """Hold session ``session_id``'s turn lock, waiting as long as another turn of
    the session (in any process) holds it; a turn is bounded by the agent's
    longest turn, so the wait is too. Holds one pooled connection meanwhile."""
    async with pool.connection() as conn:
        try:
            locked = await _try(conn, resource_id, session_id)
            while not locked:
                await asyncio.sleep(POLL_S)
                locked = await _try(conn, resource_id, session_id)
            yield
        finally:
            # Shielded: a cancelled turn still gives its lock back before the
            # connection returns to the pool.
            await asyncio.shield(conn.execute(UNLOCK_ALL))


async def turn_lock_held(conn: Conn, resource_id: str, session_id: str) -> bool:
    """Whether a live turn (of any process) holds this session's turn lock now."""
    cur = await conn.execute(TURN_LOCK_HELD, {"resource_id": resource_id, "session_id": session_id})
    row = await cur.fetchone()
    return bool(row and row["held"])
