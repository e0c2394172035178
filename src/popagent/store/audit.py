"""SQL over ``popagent_audit``: named statements and the functions that run them.

Invariants:
- Functions take the caller's connection and never open a transaction or commit.
- Every read filters on ``resource_id`` first.
- The row shape has no free-text column: what the caller passes is names, ids,
  counts, sizes, timing and outcomes, never content (the hook events it is
  built from carry nothing else).
- Nothing here touches ``popagent_memories``, the thread tables or secrets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import AuditRecord
from .database import Conn

__all__ = [
    "ASYNC_COMMIT",
    "AUDIT_COLUMNS",
    "INSERT_AUDIT",
    "LIST_AUDIT",
    "insert_audit_rows",
    "list_audit",
]

AUDIT_COLUMNS = (
    "id, resource_id, session_id, call_id, hook, tool, model, started_at, duration_ms, "
    "outcome, error_type, input_chars, output_chars, message_count, argument_names"
)

INSERT_AUDIT = """
INSERT INTO popagent_audit
    (resource_id, session_id, call_id, hook, tool, model, started_at, duration_ms,
     outcome, error_type, input_chars, output_chars, message_count, argument_names)
VALUES
    (%(resource_id)s, %(session_id)s, %(call_id)s, %(hook)s, %(tool)s, %(model)s,
     %(started_at)s, %(duration_ms)s, %(outcome)s, %(error_type)s, %(input_chars)s,
     %(output_chars)s, %(message_count)s, %(argument_names)s)
"""

#: For the caller's transaction: its commit does not wait for the WAL flush.
ASYNC_COMMIT = "SET LOCAL synchronous_commit TO off"

LIST_AUDIT = f"""
SELECT {AUDIT_COLUMNS} FROM popagent_audit
WHERE resource_id = %(resource_id)s
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
ORDER BY id DESC
LIMIT %(limit)s
"""


async def insert_audit_rows(conn: Conn, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts keyed like ``INSERT_AUDIT``'s parameters).

    ``executemany`` sends them in one pipeline: one round trip however many rows.
    """
    if not rows:
        return
    async with conn.cursor() as cur:
        await cur.executemany(INSERT_AUDIT, rows)


async def list_audit(
    conn: Conn, resource_id: str, *, session_id: str | None, limit: int
) -> list[AuditRecord]:
    """The newest ``limit`` rows of this resource (or of one of its sessions), newest first."""
    cur = await conn.execute(
        LIST_AUDIT, {"resource_id": resource_id, "session_id": session_id, "limit": limit}
    )
    return [_record(row) for row in await cur.fetchall()]


def _record(row: dict[str, Any]) -> AuditRecord:
    names = row["argument_names"]
    return AuditRecord(
        id=row["id"],
        resource_id=row["resource_id"],
        session_id=row["session_id"],
        call_id=str(row["call_id"]),
        hook=row["hook"],
        tool=row["tool"],
        model=row["model"],
        started_at=row["started_at"],
        duration_ms=row["duration_ms"],
        outcome=row["outcome"],
        error_type=row["error_type"],
        input_chars=row["input_chars"],
        output_chars=row["output_chars"],
        message_count=row["message_count"],
        argument_names=tuple(names) if names is not None else None,
    )
