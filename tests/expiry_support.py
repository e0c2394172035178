"""Letting a fact's expiry pass without waiting on the wall clock.

Recall compares a fact's ``expires_at`` with PostgreSQL's ``now()``, and every
write refuses an expiry that is not in the future. A test that wrote an expiry
a second ahead and then waited for it depended on the machine doing the write
and the first recall within that second; on a busy machine it did not (a red
first test run). So a test writes an expiry well ahead (``LATER``: nothing
races it), checks what holds while the fact lives, then lets time pass with
``pass_expiry``: the stored expiry moves to a moment already past, as the clock
would have made it, and the fact's history is as it was (time passing is not an
edit, so the version the history trigger keeps for an update is taken back and
the fact keeps its version number). Only ``expires_at`` changes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

__all__ = ["LATER", "pass_expiry", "pass_expiry_sync"]

#: How far ahead a test's expiry is: no write or recall on any machine takes that long.
LATER = timedelta(hours=1)

# One transaction: the fact's row locked, its expiry moved into the past, and the
# version the trigger kept for that "update" (and the number it advanced) undone.
_LOCK = """
SELECT version FROM popagent_memories
WHERE resource_id = %(resource_id)s AND id = %(id)s AND kind = 'fact' AND expires_at IS NOT NULL
FOR UPDATE"""
_AGE = """
UPDATE popagent_memories SET expires_at = now() - interval '1 second'
WHERE resource_id = %(resource_id)s AND id = %(id)s
RETURNING expires_at"""
_UNDO_VERSION = """
DELETE FROM popagent_fact_versions
WHERE resource_id = %(resource_id)s AND fact_id = %(id)s AND version = %(version)s"""
_KEEP_NUMBER = """
UPDATE popagent_memories SET version = %(version)s
WHERE resource_id = %(resource_id)s AND id = %(id)s"""


async def pass_expiry(
    conn: psycopg.AsyncConnection[dict[str, Any]], resource_id: str, fact_id: int
) -> datetime:
    """Let the expiry of fact ``fact_id`` pass (module doc); return the expiry it now has."""
    params: dict[str, Any] = {"resource_id": resource_id, "id": fact_id}
    async with conn.transaction():
        row = await (await conn.execute(_LOCK, params)).fetchone()
        assert row is not None, f"fact {fact_id} of {resource_id} has no expiry to pass"
        params["version"] = row["version"]
        aged = await (await conn.execute(_AGE, params)).fetchone()
        await conn.execute(_UNDO_VERSION, params)
        await conn.execute(_KEEP_NUMBER, params)
    assert aged is not None
    expires_at: datetime = aged["expires_at"]
    return expires_at


def pass_expiry_sync(database_url: str, resource_id: str, fact_id: int) -> datetime:
    """``pass_expiry`` on a connection of its own, for tests without an event loop."""
    params: dict[str, Any] = {"resource_id": resource_id, "id": fact_id}
    with psycopg.connect(database_url, row_factory=dict_row) as conn, conn.transaction():
        row = conn.execute(_LOCK, params).fetchone()
        assert row is not None, f"fact {fact_id} of {resource_id} has no expiry to pass"
        params["version"] = row["version"]
        aged = conn.execute(_AGE, params).fetchone()
        conn.execute(_UNDO_VERSION, params)
        conn.execute(_KEEP_NUMBER, params)
    assert aged is not None
    expires_at: datetime = aged["expires_at"]
    return expires_at
