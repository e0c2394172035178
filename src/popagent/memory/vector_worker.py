"""The vector worker: writes the vectors of memories after they commit, in the background.

A write stores its memory and returns; migration 0016's triggers record the
memory in ``popagent_pending_vectors`` in the same statement. This worker (one
per ``LongTermMemory`` with an embedder, an asyncio task of its own) embeds
those memories in batches and writes their vectors. Invariants:

* a batch is one transaction: claim up to ``batch_size`` pending rows of one
  resource (``FOR UPDATE SKIP LOCKED``), embed them, write their vectors,
  delete the rows. Workers in any number of processes share the work without
  doing any of it twice, and a process that dies mid-batch loses nothing: its
  transaction rolls back and the rows wait for the next worker;
* it looks at a resource when a write of this process notifies it (after a
  short delay, so a command that exits at once never loads the model), then
  every ``poll_s`` for ``linger_s`` more seconds (a write whose transaction
  was still open, rows written by other processes), and for as long as the
  process lives for a *watched* resource (the server's own). With nothing
  to look at, the task ends; the next write starts it again;
* the first time it works on a resource in a process it also queues that
  resource's memories without a vector of its model (a model switch), so the
  pending rows then name everything that is missing;
* a model that fails (``EmbeddingError``) is reported once (``embed.health``)
  and retried after a growing pause; the rows stay pending. A database error
  is logged and retried the same way. The worker never raises into a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import psycopg

from ..embed.health import record_failure, record_success
from ..embed.protocol import Embedder
from ..errors import EmbeddingError, PopagentError
from ..store import pending as pending_sql
from ..store.database import Pool
from ..store.tenant import bypass
from .semantic import write_pending

__all__ = [
    "BATCH_SIZE",
    "LINGER_S",
    "POLL_S",
    "START_DELAY_S",
    "VectorProgress",
    "VectorWorker",
]

log = logging.getLogger("popagent.vectors")

#: Memories per batch (one transaction, one ``embed`` call).
BATCH_SIZE = 32
#: How long after a write the worker first looks: a command that exits sooner
#: (``popagent remember``) leaves its memory to the next process, unhurried.
START_DELAY_S = 0.05
#: How often a resource is looked at again while it is active or watched.
POLL_S = 0.5
#: How long a resource stays active after this process's last write or recall.
LINGER_S = 5.0
#: Pauses after a failure: doubled each time, up to the last.
BACKOFF_S = (1.0, 2.0, 5.0, 15.0, 60.0)
#: A backlog at least this long is announced in the log, with progress.
LOG_BACKLOG = 100
#: Seconds between progress lines while a backlog is worked off.
LOG_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class VectorProgress:
    """What the worker did for one resource in this process."""

    #: Memories whose vectors this process wrote.
    embedded: int
    #: Whether a batch of this resource is being written now.
    working: bool
    #: The last error, when the last attempt failed.
    error: str | None


@dataclass(slots=True)
class _Resource:
    due: float | None = None  # monotonic time of the next look; None: not scheduled
    active_until: float = 0.0
    watched: bool = False
    reconciled: bool = False
    embedded: int = 0
    working: int = 0
    failures: int = 0
    error: str | None = None
    # A backlog being announced: when it started, how many it held, when last logged.
    backlog_started: float | None = None
    backlog_embedded: int = 0
    logged_at: float = 0.0


class VectorWorker:
    """Writes pending vectors of the resources this process works with (module docstring)."""

    def __init__(
        self,
        pool: Pool,
        embedder: Embedder,
        *,
        batch_size: int = BATCH_SIZE,
        poll_s: float = POLL_S,
        linger_s: float = LINGER_S,
        start_delay_s: float = START_DELAY_S,
    ) -> None:
        if batch_size < 1 or poll_s <= 0 or linger_s < 0 or start_delay_s < 0:
            raise ValueError("batch_size >= 1, poll_s > 0, linger_s and start_delay_s >= 0")
        self._pool = pool
        self._embedder = embedder
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._linger_s = linger_s
        self._start_delay_s = start_delay_s
        self._resources: dict[str, _Resource] = {}
        self._reconciling: dict[str, asyncio.Lock] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    # --- scheduling -----------------------------------------------------------------------

    def notify(self, resource_id: str) -> None:
        """A memory of ``resource_id`` was written (or its transaction is about to commit)."""
        self._schedule(resource_id, self._start_delay_s)

    def watch(self, resource_id: str) -> None:
        """Look at ``resource_id`` now and every ``poll_s`` while this worker lives."""
        self._state(resource_id).watched = True
        self._schedule(resource_id, 0.0)

    def unwatch(self, resource_id: str) -> None:
        state = self._resources.get(resource_id)
        if state is not None:
            state.watched = False

    def _state(self, resource_id: str) -> _Resource:
        state = self._resources.get(resource_id)
        if state is None:
            state = self._resources[resource_id] = _Resource()
        return state

    def _schedule(self, resource_id: str, delay: float) -> None:
        if self._closed:
            return
        now = time.monotonic()
        state = self._state(resource_id)
        state.active_until = max(state.active_until, now + self._linger_s)
        at = now + delay
        if state.due is None or at < state.due:
            state.due = at
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop runs now: the next call from one starts the task
                return
            self._wake = asyncio.Event()
            # One worker serves every resource: it runs as the owner, even when a
            # request confined to one resource (``store.tenant``) is what starts it.
            with bypass("the vector worker serves every resource"):
                self._task = loop.create_task(self._run(), name="popagent-vectors")
        elif self._wake is not None:
            self._wake.set()

    def progress(self, resource_id: str) -> VectorProgress:
        state = self._resources.get(resource_id) or _Resource()
        return VectorProgress(state.embedded, state.working > 0, state.error)

    async def aclose(self) -> None:
        """Stop the worker; a batch in progress rolls back (its rows stay pending)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while not self._closed:
            now = time.monotonic()
            due = [(s.due, r) for r, s in self._resources.items() if s.due is not None]
            if not due:
                return  # nothing active or watched: a later write starts a new task
            at, resource_id = min(due)
            if at > now:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), at - now)
                continue
            state = self._resources[resource_id]
            state.due = None
            pause = await self._look(resource_id, state)
            now = time.monotonic()
            if pause is not None:
                state.due = now + pause
            elif (state.watched or state.active_until > now) and (
                state.due is None or state.due > now + self._poll_s
            ):
                state.due = now + self._poll_s

    async def _look(self, resource_id: str, state: _Resource) -> float | None:
        """Work off the resource's pending rows; a pause before the next look after a
        failure, else ``None``."""
        try:
            await self._reconcile(resource_id, state)
            while not self._closed:
                if not await self._batch(resource_id, state):
                    break
                await asyncio.sleep(0)  # let requests in between batches
            state.failures, state.error = 0, None
            self._log_done(resource_id, state)
            return None
        except asyncio.CancelledError:
            raise
        except EmbeddingError as exc:
            record_failure(self._embedder.model, exc)
            return self._failed(state, exc)
        except (PopagentError, psycopg.Error, OSError) as exc:
            log.warning("vectors: writing vectors of resource %s failed: %s", resource_id, exc)
            return self._failed(state, exc)

    def _failed(self, state: _Resource, exc: BaseException) -> float:
        state.error = " ".join(str(exc).split()) or type(exc).__name__
        pause = BACKOFF_S[min(state.failures, len(BACKOFF_S) - 1)]
        state.failures += 1
        return pause

    async def _reconcile(self, resource_id: str, state: _Resource) -> None:
        """Once per process and resource: queue the memories without a vector of the model."""
        if state.reconciled:
            return
        lock = self._reconciling.setdefault(resource_id, asyncio.Lock())
        async with lock:
            if state.reconciled:
                return
            async with self._pool.connection() as conn:
                added = await pending_sql.enqueue_missing(conn, resource_id, self._embedder.model)
            state.reconciled = True
        if added:
            log.info(
                "vectors: %d memories of resource %s had no vector of %s; queued",
                added,
                resource_id,
                self._embedder.model,
                extra={"resource_id": resource_id, "queued": added},
            )

    async def _batch(self, resource_id: str, state: _Resource) -> int:
        """One transaction: claim, embed, write, delete; the memories it embedded."""
        state.working += 1
        try:
            async with self._pool.connection() as conn, conn.transaction():
                written = await write_pending(conn, self._embedder, resource_id, self._batch_size)
        finally:
            state.working -= 1
        if not written:
            return 0
        record_success(self._embedder.model)
        state.embedded += len(written)
        if state.backlog_started is not None:
            state.backlog_embedded += len(written)
            self._log_progress(resource_id, state)
        elif len(written) == self._batch_size:
            await self._announce(resource_id, state, len(written))
        return len(written)

    # --- progress in the log --------------------------------------------------------------

    async def _announce(self, resource_id: str, state: _Resource, written: int) -> None:
        """After a full batch: a long backlog is announced, and its progress logged."""
        async with self._pool.connection() as conn:
            pending = await pending_sql.count_pending(conn, resource_id) + written
        if pending < LOG_BACKLOG:
            return
        now = time.monotonic()
        state.backlog_started, state.backlog_embedded, state.logged_at = now, written, now
        log.info(
            "vectors: %d memories of resource %s wait for vectors of %s; embedding them "
            "in the background",
            pending,
            resource_id,
            self._embedder.model,
            extra={"resource_id": resource_id, "pending": pending},
        )

    def _log_progress(self, resource_id: str, state: _Resource) -> None:
        now = time.monotonic()
        if state.backlog_started is None or now - state.logged_at < LOG_EVERY_S:
            return
        state.logged_at = now
        rate = state.backlog_embedded / max(now - state.backlog_started, 1e-9)
        log.info(
            "vectors: resource %s: %d embedded so far (%.0f/s)",
            resource_id,
            state.backlog_embedded,
            rate,
            extra={"resource_id": resource_id, "embedded": state.backlog_embedded},
        )

    def _log_done(self, resource_id: str, state: _Resource) -> None:
        if state.backlog_started is None:
            return
        seconds = time.monotonic() - state.backlog_started
        log.info(
            "vectors: resource %s is up to date: %d memories embedded in %.0f s",
            resource_id,
            state.backlog_embedded,
            seconds,
            extra={"resource_id": resource_id, "embedded": state.backlog_embedded},
        )
        state.backlog_started = None

    # --- waiting --------------------------------------------------------------------------

    async def wait(self, resource_id: str, timeout: float) -> int:  # noqa: ASYNC109
        """Write the resource's pending vectors, here and by any other worker, until none
        is left or ``timeout`` seconds have passed; how many are still pending.

        Returns at once (with the count) when the model fails.
        """
        deadline = time.monotonic() + timeout
        state = self._state(resource_id)
        try:
            await self._reconcile(resource_id, state)
            while True:
                # At least one batch, however short the timeout: every call makes progress.
                while await self._batch(resource_id, state) and time.monotonic() < deadline:
                    pass
                async with self._pool.connection() as conn:
                    left = await pending_sql.count_pending(conn, resource_id)
                if left == 0 or time.monotonic() >= deadline:
                    return left
                # The rest is held by another worker (here or in another process).
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        except EmbeddingError as exc:
            record_failure(self._embedder.model, exc)
            state.error = " ".join(str(exc).split())
            async with self._pool.connection() as conn:
                return await pending_sql.count_pending(conn, resource_id)
