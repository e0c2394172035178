"""``Services``: the objects every route shares, built once per server process.

Routes reach them through ``services(request)``. The resource is part of the
services, not of any request: a route cannot name another one.

Invariants:
- One chat turn at a time per session (``chat_lock``): two browser tabs on one
  session take turns instead of interleaving their messages.
- ``agent`` is ``None`` when no model is configured; the chat routes then
  answer 503 with how to configure one, and everything else works.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from starlette.requests import HTTPConnection

from ..agent import Agent, build_agent
from ..memory.longterm import LongTermMemory
from ..models import ObservationGroup, ObservationLog
from ..observe.settings_store import MemorySettingsStore
from ..observe.state import read_state
from ..threads import ThreadStore
from .config import ServerConfig
from .scheduler import MaintenanceScheduler

# ``build_agent`` lives in ``popagent.agent.builder``; re-exported for old imports.
__all__ = ["Services", "build_agent", "services"]

T = TypeVar("T")


@dataclass(slots=True)
class Services:
    """The long-term store, thread store, settings store and (optional) agent of one server."""

    config: ServerConfig
    memory: LongTermMemory
    threads: ThreadStore
    settings: MemorySettingsStore
    agent: Agent | None
    scheduler: MaintenanceScheduler | None = None
    _chat_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def resource_id(self) -> str:
        return self.config.resource_id

    def chat_lock(self, session_id: str) -> asyncio.Lock:
        """The lock that serializes turns of one session in this process."""
        lock = self._chat_locks.get(session_id)
        if lock is None:
            # Locks of idle sessions are dropped so the map stays bounded.
            if len(self._chat_locks) > 1024:
                for sid in [s for s, lk in self._chat_locks.items() if not lk.locked()]:
                    del self._chat_locks[sid]
            lock = self._chat_locks[session_id] = asyncio.Lock()
        return lock

    async def observation_state(
        self, session_id: str
    ) -> tuple[list[ObservationLog], list[ObservationGroup]]:
        """Every generation of the session's observation log, oldest first, and the
        groups of the active (last) one: what the API and the GUI show, read-only
        (``observe.state.read_state``)."""
        state = await read_state(self.memory.pool, self.resource_id, session_id)
        return list(state.generations), list(state.groups)

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` in the background, kept alive until it ends or ``drain``."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for background work (chat turns whose client left) to end, then cancel the rest."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def services(request: HTTPConnection) -> Services:
    """The server's services (set on the app's state at startup)."""
    return cast(Services, request.app.state.services)
