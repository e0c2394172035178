"""Merged batches for the framework stores: calls queue on their event loop and one
task serves everything queued so far, with a bound on the work done at once (as
LangGraph's ``AsyncBatchedBaseStore`` merges calls). Pure asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Queue", "Request", "gated", "settled"]

Op = TypeVar("Op")
R = TypeVar("R")


@dataclass(eq=False)
class Request(Generic[Op, R]):
    """One call's operations waiting in a store's queue, and where its results go."""

    ops: list[Op]
    done: asyncio.Future[list[R]]


@dataclass(eq=False)
class Queue(Generic[Op, R]):
    """A store's queue on one event loop, and the task serving it."""

    waiting: list[Request[Op, R]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


def gated(gate: asyncio.Semaphore, work: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]:
    """``work()`` as a task that runs once ``gate`` lets it."""

    async def run() -> Any:
        async with gate:
            return await work()

    return asyncio.ensure_future(run())


async def settled(tasks: list[asyncio.Future[Any]]) -> None:
    """Wait until every task is done; when this wait is cancelled, so are they."""
    if not tasks:
        return
    try:
        await asyncio.wait(tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
