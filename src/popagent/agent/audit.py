"""The audit trail: ``AuditHook`` writes ``popagent_audit`` rows, ``AuditLog`` reads them.

Invariants:
- One row per hook firing, built only from the hook's event (names, ids,
  counts, sizes, timing, outcome, an exception's class name), so memory
  content, recalled text, argument values, error messages and secrets never
  enter a row.
- Cheap: a call's ``before_*`` row waits in memory and is written together
  with its ``after_*`` row, in the background, in one transaction whose commit
  does not wait for the WAL flush; ``drain()`` waits for the writes started so
  far (the turn drains before it returns, so a finished turn's rows are there). The price: a process that dies mid-call leaves no row for
  that call (a cancelled call still gets both, its outcome ``error``), and a
  server crash may lose the last fraction of a second of audit rows, as it may
  lose recall's access counts; never a message, memory or episode, whose
  commits stay synchronous.
- Never fails a turn: a failed write is logged (the exception's class and
  SQLSTATE, not its message, which can quote row values) and dropped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..checks import check_id, check_limit
from ..models import AuditRecord
from ..threads import audit as audit_store
from ..threads.turns import Pool
from .hooks import ModelCallEnd, ModelCallStart, ToolCallEnd, ToolCallStart

__all__ = ["AUDIT_LIST_CAP", "AuditHook", "AuditLog"]

log = logging.getLogger(__name__)

AUDIT_LIST_CAP = 10_000


def _model_row(start: ModelCallStart, end: ModelCallEnd | None) -> dict[str, Any]:
    return {
        "resource_id": start.resource_id,
        "session_id": start.session_id,
        "call_id": start.call_id,
        "hook": "before_model_call" if end is None else "after_model_call",
        "tool": None,
        "model": start.model,
        "started_at": start.started_at,
        "duration_ms": end.duration_ms if end is not None else None,
        "outcome": end.outcome if end is not None else None,
        "error_type": end.error_type if end is not None else None,
        "input_chars": start.input_chars,
        "output_chars": end.output_chars if end is not None else None,
        "message_count": start.message_count,
        "argument_names": None,
    }


def _tool_row(start: ToolCallStart, end: ToolCallEnd | None) -> dict[str, Any]:
    return {
        "resource_id": start.resource_id,
        "session_id": start.session_id,
        "call_id": start.call_id,
        "hook": "before_tool_call" if end is None else "after_tool_call",
        "tool": start.tool,
        "model": None,
        "started_at": start.started_at,
        "duration_ms": end.duration_ms if end is not None else None,
        "outcome": end.outcome if end is not None else None,
        "error_type": end.error_type if end is not None else None,
        "input_chars": start.input_chars,
        "output_chars": end.output_chars if end is not None else None,
        "message_count": None,
        "argument_names": list(start.argument_names),
    }


class AuditHook:
    """A ``Hook`` that records every model and tool call in ``popagent_audit``."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._pending: dict[str, dict[str, Any]] = {}
        self._writes: set[asyncio.Task[None]] = set()

    async def before_model_call(self, event: ModelCallStart) -> None:
        self._pending[event.call_id] = _model_row(event, None)

    async def after_model_call(self, event: ModelCallEnd) -> None:
        self._write(event.start.call_id, _model_row(event.start, event))

    async def before_tool_call(self, event: ToolCallStart) -> None:
        self._pending[event.call_id] = _tool_row(event, None)

    async def after_tool_call(self, event: ToolCallEnd) -> None:
        self._write(event.start.call_id, _tool_row(event.start, event))

    async def drain(self) -> None:
        """Wait until every row handed to this hook so far is written (or its failure logged)."""
        while self._writes:
            await asyncio.gather(*self._writes)

    def _write(self, call_id: str, after: dict[str, Any]) -> None:
        # In the background: the caller goes on (the next tool call, the turn's
        # last writes) while the rows are written; ``drain`` waits for them.
        task = asyncio.ensure_future(self._flush(call_id, after))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _flush(self, call_id: str, after: dict[str, Any]) -> None:
        before = self._pending.pop(call_id, None)
        rows = [before, after] if before is not None else [after]
        try:
            await audit_store.write_audit_rows(self._pool, rows)
        except Exception as exc:
            sqlstate = getattr(exc, "sqlstate", None)
            log.warning(
                "audit rows for %s were not written: %s%s",
                after["hook"],
                type(exc).__name__,
                f" (SQLSTATE {sqlstate})" if sqlstate else "",
            )


class AuditLog:
    """Read access to the audit trail, one resource at a time."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def list_audit(
        self, resource_id: str, session_id: str | None = None, *, limit: int = 100
    ) -> list[AuditRecord]:
        """The newest ``limit`` (1 to 10,000) rows of this resource, or of one of its
        sessions, newest first."""
        resource_id = check_id("resource_id", resource_id)
        if session_id is not None:
            session_id = check_id("session_id", session_id)
        limit = check_limit(limit, cap=AUDIT_LIST_CAP)
        return await audit_store.list_audit(
            self._pool, resource_id, session_id=session_id, limit=limit
        )
