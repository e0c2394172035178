"""SQL over ``popagent_memory_settings``: named statements and the functions that run them.

Invariants:
- Every function takes the caller's connection and never opens a transaction
  or commits: the service layer (``popagent.observe.settings_store``) owns them.
- Every statement filters on ``resource_id``; a resource without a row has
  every setting at its default.
- ``version`` only grows: every write adds one, in the same statement.
- Nothing here touches ``popagent_memories`` or the thread tables.
"""

from __future__ import annotations

from typing import Any

from .database import Conn

__all__ = [
    "COLUMNS",
    "insert_default_row",
    "select_settings",
    "write_settings",
]

#: The setting columns, named exactly as ``MemorySettings``' fields (a test keeps them equal).
COLUMNS = (
    "observation_threshold_tokens",
    "reflection_threshold_tokens",
    "retained_context_percent",
    "retained_context_tokens",
    "observation_buffer_percent",
    "observation_buffer_tokens",
    "reflection_buffer_start_percent",
    "observation_block_after_percent",
    "observation_block_after_tokens",
    "reflection_block_after_percent",
    "reflection_block_after_tokens",
    "observation_activate_after_idle",
    "observation_activate_on_provider_change",
    "reflection_activate_after_idle",
    "reflection_activate_on_provider_change",
    "shared_token_budget",
    "temporal_markers",
    "forward_attachments",
    "previous_observation_tokens",
    "retrieval_scope",
    "observer_guidance",
    "reflector_guidance",
)

_SELECTED = "version, updated_at, " + ", ".join(COLUMNS)
_ASSIGNMENTS = ", ".join(f"{c} = %({c})s" for c in COLUMNS)

SELECT_SETTINGS = f"""
SELECT {_SELECTED} FROM popagent_memory_settings
WHERE resource_id = %(resource_id)s
"""

SELECT_SETTINGS_FOR_UPDATE = SELECT_SETTINGS + "FOR UPDATE\n"

# The row a first update starts from: every column at its default, version 0.
# It exists only inside the updating transaction, which always bumps it to 1 or
# rolls back.
INSERT_DEFAULT_ROW = """
INSERT INTO popagent_memory_settings (resource_id) VALUES (%(resource_id)s)
ON CONFLICT (resource_id) DO NOTHING
"""

WRITE_SETTINGS = f"""
UPDATE popagent_memory_settings
SET {_ASSIGNMENTS},
    version = version + 1,
    updated_at = now()
WHERE resource_id = %(resource_id)s
RETURNING {_SELECTED}
"""


async def select_settings(
    conn: Conn, resource_id: str, *, for_update: bool = False
) -> dict[str, Any] | None:
    """The row's ``version``, ``updated_at`` and setting columns; ``None`` if there is none.

    ``for_update`` locks the row until the caller's transaction ends.
    """
    query = SELECT_SETTINGS_FOR_UPDATE if for_update else SELECT_SETTINGS
    cur = await conn.execute(query, {"resource_id": resource_id})
    return await cur.fetchone()


async def insert_default_row(conn: Conn, resource_id: str) -> None:
    """Create the resource's row with every default (version 0) unless it exists."""
    await conn.execute(INSERT_DEFAULT_ROW, {"resource_id": resource_id})


async def write_settings(conn: Conn, resource_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """Overwrite every setting column of an existing row, bump ``version``; return the row."""
    cur = await conn.execute(WRITE_SETTINGS, {**values, "resource_id": resource_id})
    row = await cur.fetchone()
    assert row is not None, "the caller ensured the row exists"
    return row
