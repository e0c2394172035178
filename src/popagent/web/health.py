"""``HealthProbe``: what ``/healthz`` says about the database, and only the truth.

The probe runs ``SELECT 1`` on a connection of its own (opened on first use, kept,
reopened after any failure), never one from the pool: a health answer does not wait
in line behind a burst of queued work, and needs no body, no credential and no
pool checkout. Concurrent ``/healthz`` requests share one probe in flight.

A probe that did not answer within ``HEALTH_TIMEOUT_S`` reports the database
unavailable only when the event loop ran on time while it waited: the wait is
measured in slices of ``_SLICE_S``, and the time a slice overran (the loop was
blocked, by a request's CPU work or a parser, and could not have read the answer)
does not count against the database. A loop blocked for longer than
``_MAX_WAIT_S`` in all is reported as what it is: this server process too busy to
check, never "database down".

Answers: 200 ``{"status": "ok", "database": "ok"}``; 503 with ``database``
``"down"`` (the pool has seen the server away: answered at once), ``"PoolClosed"``
(this process is shutting down), the error's name
(``TimeoutError``, ``OperationalError``, ...) or ``"not checked: ..."`` (the loop).
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from ..store.database import Pool

__all__ = ["HEALTH_TIMEOUT_S", "HealthProbe"]

#: Seconds of on-time waiting after which a probe that got no answer means the
#: database is unavailable.
HEALTH_TIMEOUT_S = 2.0
_SLICE_S = 0.1
_MAX_WAIT_S = 30.0
_CONNECT_TIMEOUT_S = 10

log = logging.getLogger("popagent.web")

Answer = tuple[int, dict[str, str]]


class HealthProbe:
    """The database's health as ``/healthz`` reports it (module doc)."""

    def __init__(self, pool: Pool, *, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._running: asyncio.Task[Answer] | None = None

    async def check(self) -> Answer:
        """The status code and body of ``/healthz``."""
        if self.pool.closed:  # shutting down: this process serves nothing more
            return 503, {"status": "unavailable", "database": "PoolClosed"}
        if self.pool.down_since is not None:
            # Known to be away (a lost connection, or the embedded server restarting):
            # say so now, and have the pool look again in the background, which
            # clears the mark once it answers.
            self.pool.recheck_soon()
            return 503, {"status": "unavailable", "database": "down"}
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._probe())
        return await asyncio.shield(self._running)

    async def _probe(self) -> Answer:
        loop = asyncio.get_running_loop()
        task = loop.create_task(self._select_one())
        on_time = 0.0  # seconds waited while the loop ran on time
        blocked = 0.0  # seconds the loop overran the slices
        while not task.done():
            began = loop.time()
            await asyncio.wait({task}, timeout=_SLICE_S)
            if task.done():
                break
            elapsed = loop.time() - began
            overran = max(0.0, elapsed - _SLICE_S)
            on_time += elapsed - overran
            blocked += overran
            if on_time >= self.timeout_s or on_time + blocked >= _MAX_WAIT_S:
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
                if on_time >= self.timeout_s:
                    return 503, {"status": "unavailable", "database": "TimeoutError"}
                return 503, {
                    "status": "unavailable",
                    "database": f"not checked: this server process was too busy to run "
                    f"the check (its event loop was blocked for {blocked:.1f} s)",
                }
        try:
            task.result()
        except Exception as exc:  # any failure to reach the database is "unavailable"
            return 503, {"status": "unavailable", "database": type(exc).__name__}
        return 200, {"status": "ok", "database": "ok"}

    async def _select_one(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(
                self.pool.target, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S
            )
        try:
            await self._conn.execute("SELECT 1")
        except BaseException:
            # Failed or cancelled mid-statement: its state is unknown; open a new one next time.
            conn, self._conn = self._conn, None
            await conn.close()
            raise

    async def aclose(self) -> None:
        """Stop a probe in flight and close the probe's connection."""
        if self._running is not None and not self._running.done():
            self._running.cancel()
            await asyncio.wait({self._running}, timeout=1.0)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
