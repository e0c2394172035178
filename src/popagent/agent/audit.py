"""The audit trail: ``AuditHook`` writes ``popagent_audit`` rows, ``AuditLog`` reads them.

Invariants:
- One row per hook firing, built only from the hook's event (names, ids,
  counts, sizes, timing, outcome, an exception's class name), so memory
  content, recalled text, argument values, error messages and secrets never
  enter a row.
- Cheap under any load: a call's ``before_*`` row waits in memory and is
  written together with its ``after_*`` row, in the background. One writer
  per event loop takes every call's rows queued so far and writes them in one
  transaction whose commit does not wait for the WAL flush (a group commit):
  a burst of calls costs a few transactions and one connection at a time, not
  one of each per call.
- ``drain(call_ids)`` waits for the rows of those calls only; ``drain()`` for
  every row handed to the hook on this loop so far (the turn drains before it
  returns, so a finished turn's rows are there). Either waits for at most the
  batch being written and the one holding its rows, whatever others do
  meanwhile.
- Never dropped while the database answers: a batch that finds the pool busy
  (``DatabaseBusyError``) is retried; a batch another error refuses is split
  and written call by call, so one bad row costs only its own call's rows. The
  price of writing in the background: rows are lost when the database is
  away (``DatabaseError``), when the process dies mid-call (a cancelled call
  still gets both rows, its outcome ``error``), and in a server crash, the
  last fraction of a second (as recall's access counts may be); never a
  message, memory or episode, whose commits stay synchronous.
- Never fails a turn: a failed write is logged (the exception's class and
  SQLSTATE, not its message, which can quote row values), once per call.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Collection
from typing import Any

from ..checks import check_id, check_limit
from ..errors import DatabaseBusyError, DatabaseError
from ..models import AuditRecord
from ..store.database import Pool
from ..threads import audit as audit_store
from .hooks import ModelCallEnd, ModelCallStart, ToolCallEnd, ToolCallStart

__all__ = ["AUDIT_LIST_CAP", "AuditHook", "AuditLog"]

log = logging.getLogger(__name__)

AUDIT_LIST_CAP = 10_000
#: The most calls whose rows one transaction writes.
BATCH_CALLS = 500
#: Delays (seconds) before each retry of a batch that found the pool busy.
BUSY_RETRY_DELAYS_S = (0.25, 1.0, 4.0)

#: One call's rows waiting to be written: its id, its rows, and what its drain awaits.
_Queued = tuple[str, list[dict[str, Any]], "asyncio.Future[None]"]


def _row(
    kind: str,
    start: ModelCallStart | ToolCallStart,
    end: ModelCallEnd | ToolCallEnd | None,
    **own: Any,
) -> dict[str, Any]:
    """The audit row of a ``kind`` call (``model``, ``tool``) before it runs (``end``
    ``None``) or after: the columns every call fills, then the kind's ``own``."""
    return {
        "resource_id": start.resource_id,
        "session_id": start.session_id,
        "call_id": start.call_id,
        "hook": f"before_{kind}_call" if end is None else f"after_{kind}_call",
        "started_at": start.started_at,
        "duration_ms": end.duration_ms if end is not None else None,
        "outcome": end.outcome if end is not None else None,
        "error_type": end.error_type if end is not None else None,
        "input_chars": start.input_chars,
        "output_chars": end.output_chars if end is not None else None,
        **own,
    }


def _model_row(start: ModelCallStart, end: ModelCallEnd | None) -> dict[str, Any]:
    return _row(
        "model",
        start,
        end,
        tool=None,
        model=start.model,
        message_count=start.message_count,
        argument_names=None,
    )


def _tool_row(start: ToolCallStart, end: ToolCallEnd | None) -> dict[str, Any]:
    return _row(
        "tool",
        start,
        end,
        tool=start.tool,
        model=None,
        message_count=None,
        argument_names=list(start.argument_names),
    )


class _Writer:
    """The rows waiting to be written on one event loop, and the task writing them."""

    def __init__(self) -> None:
        self.queue: list[_Queued] = []
        self.by_call: dict[str, asyncio.Future[None]] = {}
        self.last: asyncio.Future[None] | None = None
        self.task: asyncio.Task[None] | None = None


class AuditHook:
    """A ``Hook`` that records every model and tool call in ``popagent_audit`` (module doc).

    One hook may serve callers on several event loops (an adapter called from
    threads that run loops of their own): each loop has its own writer.
    """

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._pending: dict[str, dict[str, Any]] = {}
        self._writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Writer] = (
            weakref.WeakKeyDictionary()
        )

    async def before_model_call(self, event: ModelCallStart) -> None:
        self._pending[event.call_id] = _model_row(event, None)

    async def after_model_call(self, event: ModelCallEnd) -> None:
        self._write(event.start.call_id, _model_row(event.start, event))

    async def before_tool_call(self, event: ToolCallStart) -> None:
        self._pending[event.call_id] = _tool_row(event, None)

    async def after_tool_call(self, event: ToolCallEnd) -> None:
        self._write(event.start.call_id, _tool_row(event.start, event))

    async def drain(self, call_ids: Collection[str] | None = None) -> None:
        """Wait until the rows of ``call_ids`` (default: every row handed to this hook on
        this event loop so far) are written, or their failure logged."""
        writer = self._writers.get(asyncio.get_running_loop())
        if writer is None:
            return
        if call_ids is None:
            wanted = [] if writer.last is None else [writer.last]
        else:
            wanted = [writer.by_call[c] for c in call_ids if c in writer.by_call]
        wanted = [f for f in wanted if not f.done()]
        if wanted:
            # ``wait``, not ``gather``: a cancelled drain must not cancel the write.
            await asyncio.wait(wanted)

    def _write(self, call_id: str, after: dict[str, Any]) -> None:
        # In the background: the caller goes on (the next tool call, the turn's
        # last writes) while the rows are written; ``drain`` waits for them.
        before = self._pending.pop(call_id, None)
        rows = [before, after] if before is not None else [after]
        loop = asyncio.get_running_loop()
        writer = self._writers.get(loop)
        if writer is None:
            writer = self._writers[loop] = _Writer()
        done: asyncio.Future[None] = loop.create_future()
        writer.queue.append((call_id, rows, done))
        writer.by_call[call_id] = done
        writer.last = done
        if writer.task is None or writer.task.done():
            # One writer batches every resource's rows: it runs as the owner, even when
            # a request confined to one resource (``store.tenant``) starts it.
            with audit_store.bypass("the audit writer serves every resource"):
                writer.task = loop.create_task(self._run(writer))

    async def _run(self, writer: _Writer) -> None:
        """Write the queued calls' rows, a batch at a time, until the queue is empty."""
        try:
            while writer.queue:
                batch = writer.queue[:BATCH_CALLS]
                del writer.queue[:BATCH_CALLS]
                try:
                    await self._flush(batch)
                finally:
                    _settle(writer, batch)
        finally:
            if writer.queue:  # cancelled (the loop is closing): nobody may wait forever
                _log_lost(writer.queue, "CancelledError")
                _settle(writer, writer.queue)
                writer.queue.clear()

    async def _flush(self, batch: list[_Queued]) -> None:
        rows = [row for _call, call_rows, _done in batch for row in call_rows]
        for delay in (*BUSY_RETRY_DELAYS_S, None):
            try:
                await audit_store.write_audit_rows(self._pool, rows)
                return
            except DatabaseBusyError as exc:
                if delay is None:
                    _log_lost(batch, type(exc).__name__)
                    return
                await asyncio.sleep(delay)
            except DatabaseError as exc:  # the database is away: these rows are lost
                _log_lost(batch, type(exc).__name__)
                return
            except Exception as exc:
                if len(batch) > 1:  # one call's bad row must not cost the others theirs
                    for one in batch:
                        await self._flush([one])
                    return
                _log_lost(batch, type(exc).__name__, getattr(exc, "sqlstate", None))
                return


def _settle(writer: _Writer, batch: list[_Queued]) -> None:
    for call_id, _rows, done in batch:
        if writer.by_call.get(call_id) is done:
            del writer.by_call[call_id]
        if not done.done():
            done.set_result(None)


def _log_lost(batch: list[_Queued], error: str, sqlstate: str | None = None) -> None:
    for _call_id, rows, _done in batch:
        log.warning(
            "audit rows for %s were not written: %s%s",
            rows[-1]["hook"],
            error,
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
