"""``Services``: the objects every route shares, built once per server process.

Routes reach them through ``services(request)``. The resource is part of the
services, not of any request: a route cannot name another one.

Invariants:
- One chat turn at a time per session (``chat_lock``): two browser tabs on one
  session take turns instead of interleaving their messages.
- ``agent`` is ``None`` when no model is configured; the chat routes then
  answer 503 with how to configure one, and everything else works.
- In multi-resource mode ``services(request)`` is a view whose ``resource_id`` is
  the one of the request's credential (set by the token gate); a request
  without one (the operator's) gets 403 from any route that asks for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection

from ..agent import Agent
from ..keys import Principal
from ..models import ObservationGroup, ObservationLog
from ..observe.state import read_state
from ..root import Popagent
from .config import ServerConfig
from .health import HealthProbe
from .logins import LoginStore
from .scheduler import MaintenanceScheduler

__all__ = ["Services", "principal_of", "services", "shown_resource"]

T = TypeVar("T")


@dataclass(slots=True)
class Services:
    """The composition root (``popagent.root.Popagent``), the (optional) agent and the
    logins of one server."""

    config: ServerConfig
    #: The composition root: the pool and the services over it (memory, threads,
    #: settings, items, keys), the same objects for every resource's view.
    root: Popagent
    agent: Agent | None
    logins: LoginStore
    #: ``/healthz``'s database probe, on a connection of its own.
    health: HealthProbe
    scheduler: MaintenanceScheduler | None = None
    _chat_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def resource_id(self) -> str:
        return self.config.resource_id

    def for_resource(self, resource_id: str) -> Services:
        """A view of these services for ``resource_id``: the same stores, locks and
        background tasks (shared objects, not copies)."""
        if resource_id == self.config.resource_id:
            return self
        return dataclasses.replace(
            self, config=dataclasses.replace(self.config, resource_id=resource_id)
        )

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
        state = await read_state(self.root.pool, self.resource_id, session_id)
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
    """The server's services (set on the app's state at startup), for the request's
    resource: the server's, or in multi-resource mode the credential's."""
    svc = cast(Services, request.app.state.services)
    if not svc.config.multi_resource:
        return svc
    principal = principal_of(request)
    if principal is None or principal.resource_id is None:
        raise HTTPException(403, "the operator credential manages keys and reads no memory")
    return svc.for_resource(principal.resource_id)


def shown_resource(request: HTTPConnection) -> str:
    """The resource a page names: the server's, or in multi-resource mode the
    credential's (empty before a login, and for the operator)."""
    svc = cast(Services, request.app.state.services)
    if not svc.config.multi_resource:
        return svc.resource_id
    principal = principal_of(request)
    return "" if principal is None or principal.resource_id is None else principal.resource_id


def principal_of(request: HTTPConnection) -> Principal | None:
    """Who the request is (set by the token gate); ``None`` without a credential."""
    principal = request.scope.get("state", {}).get("principal")
    return principal if isinstance(principal, Principal) else None
