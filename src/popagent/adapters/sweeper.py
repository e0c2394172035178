"""A periodic task on an event loop that callers on any thread, sync or async, can start
and stop: the TTL sweeper of ``PopagentStore``.

LangGraph's sync ``PostgresStore.start_ttl_sweeper()`` returns a
``concurrent.futures.Future`` and its ``stop_ttl_sweeper()`` a bool; the async
store's are awaited. One store serves both APIs here, so ``Sweeper`` is a
concurrent future that ``await`` also accepts (it gives the sweeper back at
once, as awaiting ``AsyncPostgresStore.start_ttl_sweeper()`` gives its task), and
``Stopped`` is a bool-like result that may be awaited.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

__all__ = ["Stopped", "Sweeper", "start", "stop"]

log = logging.getLogger(__name__)


class Sweeper(concurrent.futures.Future[None]):
    """The running sweeper: done once stopped (cancelled) or failed."""

    def __init__(self) -> None:
        super().__init__()
        self._task: concurrent.futures.Future[None] | None = None

    def _follow(self, task: concurrent.futures.Future[None]) -> None:
        self._task = task
        task.add_done_callback(self._settle)

    def _settle(self, task: concurrent.futures.Future[None]) -> None:
        if task.cancelled():
            super().cancel()
        elif (error := task.exception()) is not None and not self.done():
            self.set_exception(error)
        elif not self.done():
            self.set_result(None)

    def cancel(self) -> bool:
        if self._task is not None:
            self._task.cancel()
        return super().cancel()

    def __await__(self) -> Generator[Any, None, Sweeper]:
        return self
        yield  # a generator: ``await`` returns at once


@dataclass(frozen=True, slots=True)
class Stopped:
    """Whether the sweeper has stopped; true-ish, and awaitable to a bool."""

    stopped: bool

    def __bool__(self) -> bool:
        return self.stopped

    def __await__(self) -> Generator[Any, None, bool]:
        return self.stopped
        yield


def start(
    loop: asyncio.AbstractEventLoop, work: Callable[[], Awaitable[Any]], interval_s: float
) -> Sweeper:
    """Run ``work()`` now and every ``interval_s`` seconds on ``loop`` until stopped."""
    if loop.is_closed() or not loop.is_running():
        raise RuntimeError("the sweeper runs on popagent's event loop, which is not running")

    async def sweep() -> None:
        while True:
            try:
                await work()
            except Exception:  # the next sweep tries again (the database may be back)
                log.warning(
                    "the TTL sweep failed; trying again in %.0f s", interval_s, exc_info=True
                )
            await asyncio.sleep(interval_s)

    sweeper = Sweeper()  # left pending, so that ``cancel`` ends it
    sweeper._follow(asyncio.run_coroutine_threadsafe(sweep(), loop))
    return sweeper


def stop(
    sweeper: Sweeper | None, loop: asyncio.AbstractEventLoop | None, timeout: float | None
) -> Stopped:
    """Cancel ``sweeper``; from another thread than ``loop``'s, wait up to ``timeout``
    seconds for it to end."""
    if sweeper is None:
        return Stopped(True)
    sweeper.cancel()
    task = sweeper._task
    if task is not None and loop is not None and loop.is_running() and not _on(loop):
        with contextlib.suppress(concurrent.futures.CancelledError, TimeoutError):
            concurrent.futures.wait([task], timeout=timeout)
    return Stopped(sweeper.done())


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
