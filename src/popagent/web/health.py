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

Ahead of queued work: ``popagent serve``'s protocol (``web.edge``) answers ``GET
/healthz`` itself, as soon as its head is parsed and before any application code
or queued request runs, from the last probe's answer when that was 200 and at
most ``RECENT_S`` old (``recent``), and starts the next probe; the Host rule holds
there too. Otherwise (no recent answer, the pool closed or the server seen away)
the request goes to the route, which waits for a probe. A database that stops
answering is reported within ``HEALTH_TIMEOUT_S`` of the next probe.

Answers: 200 ``{"status": "ok", "database": "ok"}``; 503 with ``database``
``"down"`` (the pool has seen the server away: answered at once), ``"PoolClosed"``
(this process is shutting down), the error's name
(``TimeoutError``, ``OperationalError``, ...) or ``"not checked: ..."`` (the loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref

import psycopg

from ..access import AllowedHosts
from ..store.database import Pool

__all__ = ["HEALTH_TIMEOUT_S", "RECENT_S", "HealthProbe", "probe_for"]

#: Seconds of on-time waiting after which a probe that got no answer means the
#: database is unavailable.
HEALTH_TIMEOUT_S = 2.0
#: Seconds a 200 answer is given again without waiting for a new probe.
RECENT_S = 5.0
_SLICE_S = 0.1
_MAX_WAIT_S = 30.0
_CONNECT_TIMEOUT_S = 10

log = logging.getLogger("popagent.web")

Answer = tuple[int, dict[str, str]]

# The probe of the app served on each event loop, for the protocol's fast answer
# (one app per loop: one per ``serve`` worker, one per test server's thread).
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HealthProbe] = (
    weakref.WeakKeyDictionary()
)


def probe_for(loop: asyncio.AbstractEventLoop) -> HealthProbe | None:
    """The probe of the app served on ``loop``, if any."""
    return _BY_LOOP.get(loop)


class HealthProbe:
    """The database's health as ``/healthz`` reports it (module doc)."""

    def __init__(
        self,
        pool: Pool,
        *,
        timeout_s: float = HEALTH_TIMEOUT_S,
        allowed_hosts: AllowedHosts | None = None,
    ) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self.allowed_hosts = allowed_hosts
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._running: asyncio.Task[Answer] | None = None
        #: When (``time.monotonic()``) the last probe answered 200.
        self._ok_at: float | None = None

    def serve_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let the protocol on ``loop`` answer from this probe (``recent``)."""
        _BY_LOOP[loop] = self

    def recent(self, host: str | None, port: int | None) -> Answer | None:
        """The 200 answer when the last probe gave it at most ``RECENT_S`` ago and the
        request's Host names this server; ``None`` sends the request to the route.
        Starts the next probe unless one runs."""
        if (
            self._ok_at is None
            or time.monotonic() - self._ok_at > RECENT_S
            or self.pool.closed
            or self.pool.down_since is not None
            or self.allowed_hosts is None
            or not self.allowed_hosts.host_ok(host, port)
        ):
            return None
        self._start()
        return 200, {"status": "ok", "database": "ok"}

    def _start(self) -> asyncio.Task[Answer]:
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._probe())
        return self._running

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
        return await asyncio.shield(self._start())

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
                self._ok_at = None
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
            self._ok_at = None
            return 503, {"status": "unavailable", "database": type(exc).__name__}
        self._ok_at = time.monotonic()
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
        for loop, probe in list(_BY_LOOP.items()):
            if probe is self:
                del _BY_LOOP[loop]
        if self._running is not None and not self._running.done():
            self._running.cancel()
            await asyncio.wait({self._running}, timeout=1.0)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
