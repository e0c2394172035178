"""Keeping an embedded cluster up while a pool uses it.

``supervised(server, pool)`` runs a task that checks every half second
whether the postmaster is alive (a process-table look-up: no query, no lock).
When it is gone (``kill -9``, the OOM killer), the task restarts the cluster in
a worker thread and then has the pool test its idle connections, so that
broken ones are replaced before callers meet them, and use one, so that the
pool (and ``/healthz``) no longer reports the server away. Meanwhile callers get
``DatabaseError`` from the pool within its checkout timeout.

Restarts are logged on ``popagent.store``, without any content. The task is
stopped before the context exits, so before the pool closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ..errors import DatabaseError
from .embedded import EmbeddedServer

if TYPE_CHECKING:
    from .database import Pool

__all__ = ["CHECK_INTERVAL_S", "supervise", "supervised"]

logger = logging.getLogger("popagent.store")

#: How often the postmaster's liveness is checked.
CHECK_INTERVAL_S = 0.5


async def supervise(
    server: EmbeddedServer, pool: Pool, *, interval: float = CHECK_INTERVAL_S
) -> None:
    """Restart ``server`` whenever its postmaster dies, then refresh ``pool``; runs until cancelled."""
    while True:
        await asyncio.sleep(interval)
        if server.is_running():
            continue
        began = time.monotonic()
        if pool.down_since is None:
            pool.down_since = began  # /healthz reports it at once, not after a timeout
        logger.warning("embedded PostgreSQL stopped unexpectedly; restarting it")
        try:
            await asyncio.to_thread(server.restart_if_down)
        except DatabaseError as exc:
            logger.error("%s; trying again", exc)
            continue
        except Exception as exc:  # keep supervising whatever the wheel raised
            logger.error("restarting embedded PostgreSQL failed: %s; trying again", exc)
            continue
        logger.warning(
            "embedded PostgreSQL is running again after %.1f s", time.monotonic() - began
        )
        await pool.recheck()  # replaces broken connections and clears down_since


@asynccontextmanager
async def supervised(
    server: EmbeddedServer, pool: Pool, *, interval: float = CHECK_INTERVAL_S
) -> AsyncIterator[None]:
    """Run ``supervise`` for the duration of the block; the task is gone when it exits."""
    task = asyncio.create_task(
        supervise(server, pool, interval=interval), name="popagent-postgres-supervisor"
    )
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the block itself is being cancelled, not just the supervisor
