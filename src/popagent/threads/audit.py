"""The audit trail's storage, for the agent layer's ``AuditHook`` and ``AuditLog``.

``popagent_audit`` rows record a session's model and tool calls (content-free;
see ``popagent.agent.audit``). This is the one seam between them and the SQL of
``popagent.store.audit``: the agent never imports the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..credentials import redacted
from ..models import AuditRecord
from ..store import audit as sql
from ..store.database import Pool
from ..store.tenant import bypass

# ``bypass``: the agent's audit writer, shared by every resource, runs as the owner.
__all__ = ["bypass", "list_audit", "screen_audit_row", "write_audit_rows"]


def screen_audit_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its model-chosen names (the tool, the argument names) screened.

    A row holds no values, but the names come from the model's tool call, and a
    model can put anything there: they pass the credential screen like every
    other text popagent keeps.
    """
    names = row.get("argument_names")
    return {
        **row,
        "tool": redacted(row["tool"]) if row.get("tool") else row.get("tool"),
        "argument_names": [redacted(n) for n in names] if names is not None else None,
    }


async def write_audit_rows(pool: Pool, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` in one transaction whose commit does not wait for the WAL flush
    (an audit row may be lost in a server crash; never a message or a memory)."""
    screened = [screen_audit_row(row) for row in rows]
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(sql.ASYNC_COMMIT)
        await sql.insert_audit_rows(conn, screened)


async def list_audit(
    pool: Pool, resource_id: str, *, session_id: str | None, limit: int
) -> list[AuditRecord]:
    """The newest ``limit`` rows of this resource (or of one of its sessions), newest first."""
    async with pool.connection() as conn:
        return await sql.list_audit(conn, resource_id, session_id=session_id, limit=limit)
