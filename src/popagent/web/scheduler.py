"""Scheduled maintenance: the server runs ``LongTermMemory.maintain`` every interval.

Several server processes may share one database. Each run first takes a
session-level advisory *try*-lock on its own connection: a process that finds
it taken skips that run instead of queueing behind it, so maintenance never
runs twice at once and never piles up. (``maintain`` itself also serializes on
its own transaction lock, for ``popagent maintain`` run by cron meanwhile.)
A failed run is logged and retried at the next interval; it never stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..memory.longterm import LongTermMemory
from ..models import MaintenanceReport
from ..store.database import Pool

__all__ = ["SCHEDULE_LOCK_ID", "MaintenanceScheduler", "ScheduleState"]

log = logging.getLogger("popagent.maintenance")

#: Advisory lock key of the schedule ("popagent" schedule), distinct from maintain's own.
SCHEDULE_LOCK_ID = 0x706F_7061_0000_0002

TRY_LOCK = "SELECT pg_try_advisory_lock(%s) AS locked"
UNLOCK = "SELECT pg_advisory_unlock(%s)"


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the GUI and ``/api/maintenance`` show about the schedule."""

    interval_s: float | None
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_report: MaintenanceReport | None
    last_outcome: str | None


class MaintenanceScheduler:
    """Runs maintenance after ``delay_s`` and then every ``interval_s`` seconds."""

    def __init__(
        self, pool: Pool, memory: LongTermMemory, interval_s: float, *, delay_s: float = 60.0
    ) -> None:
        if not interval_s > 0 or not delay_s >= 0:
            raise ValueError("interval_s must be > 0 and delay_s >= 0")
        self.pool = pool  # the schedule lock is a session lock on one of its connections
        self.memory = memory
        self.interval_s = interval_s
        self.delay_s = delay_s
        self._task: asyncio.Task[None] | None = None
        self._next: datetime | None = None
        self._last_run: datetime | None = None
        self._last_report: MaintenanceReport | None = None
        self._last_outcome: str | None = None

    def state(self) -> ScheduleState:
        return ScheduleState(
            self.interval_s, self._next, self._last_run, self._last_report, self._last_outcome
        )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="popagent-maintenance")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run_once(self) -> MaintenanceReport | None:
        """One scheduled run; ``None`` when another process holds the schedule lock."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(TRY_LOCK, (SCHEDULE_LOCK_ID,))
            row = await cur.fetchone()
            if not row or not row["locked"]:
                self._last_outcome = "skipped: another process was running maintenance"
                log.info("maintenance skipped: another process holds the lock")
                return None
            try:
                report = await self.memory.maintain()
            finally:
                await conn.execute(UNLOCK, (SCHEDULE_LOCK_ID,))
        self._last_run = datetime.now(UTC)
        self._last_report = report
        self._last_outcome = "ran"
        log.info(
            "maintenance ran",
            extra={
                "expired_episodes": report.expired_episodes,
                "capped_episodes": report.capped_episodes,
                "expired_facts": report.expired_facts,
            },
        )
        return report

    async def _loop(self) -> None:
        delay = self.delay_s
        while True:
            self._next = datetime.now(UTC) + timedelta(seconds=delay)
            await asyncio.sleep(delay)
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # logged and retried next interval
                self._last_outcome = f"failed: {type(exc).__name__}"
                log.warning("maintenance failed: %s", type(exc).__name__)
            delay = self.interval_s
