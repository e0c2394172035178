"""What the LangChain and LangGraph adapters share: audited memory tool calls and a sync bridge.

Invariants:
- :class:`MemoryToolkit` acts for ``backend.resource_id`` only; no method takes a
  resource, so a model's tool arguments can never choose one.
- Every call is wrapped in popagent's tool hooks (``before_tool_call`` then exactly
  one ``after_tool_call``), built from names, sizes, timing and outcome only, never
  from arguments' values or results; with a :class:`LocalBackend` the default hook is
  an :class:`~popagent.agent.audit.AuditHook` on its pool, so the rows land in
  ``popagent_audit`` exactly as an agent turn's or the MCP server's do. The rows are
  committed before a call returns.
- A refusal (bad input, a credential in a fact) is a result the model can read,
  never an exception: ``remember`` of a secret stores nothing and says why.
- :class:`LoopBridge` runs the async backend from synchronous framework code on
  the event loop that owns the backend's connections, from another thread only;
  async calls from another event loop run where the backend can serve them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..agent.audit import AuditHook
from ..agent.hooks import Hook, HookSet, ToolCallEnd, ToolCallStart, new_call_id, safe_name
from ..agent.remember import REMEMBER_SPEC, parse_expires_at
from ..agent.tools import ToolOutcome
from ..checks import check_id
from ..errors import PopagentError
from ..models import Outcome
from ..root import Popagent
from .backend import LocalBackend, MemoryBackend, render_block

__all__ = [
    "NO_MEMORIES",
    "RECALL_DESCRIPTION",
    "RECALL_LIMIT_DEFAULT",
    "RECALL_LIMIT_MAX",
    "REMEMBER_DESCRIPTION",
    "LoopBridge",
    "MemoryToolkit",
    "SyncCallOnLoopError",
    "as_backend",
]

T = TypeVar("T")

REMEMBER_DESCRIPTION = REMEMBER_SPEC.description
RECALL_DESCRIPTION = (
    "Search the user's long-term memory (durable facts and past conversations) for what "
    "is relevant to a request. Call it with the user's request, or a short description of "
    "what you need to know, before answering when earlier conversations may matter. "
    "Returns a labelled block of memories, best first. Memories can be outdated or wrong: "
    "prefer what the user says now."
)
RECALL_LIMIT_DEFAULT = 8
RECALL_LIMIT_MAX = 50
NO_MEMORIES = "No relevant long-term memories."


def as_backend(
    backend: MemoryBackend | Popagent,
    resource_id: str | None = None,
    *,
    origin: str = "library",
) -> MemoryBackend:
    """``backend`` itself, or a :class:`LocalBackend` over a ``Popagent`` and ``resource_id``
    whose writes record ``origin`` (the adapter's name) as their provenance.

    The resource is fixed here, by the application; a ``MemoryBackend`` already has
    one, so giving ``resource_id`` with it is an error rather than silently ignored.
    """
    if isinstance(backend, Popagent):
        if resource_id is None:
            raise TypeError("a Popagent needs the resource_id it acts for")
        return LocalBackend(backend, check_id("resource_id", resource_id), origin)
    if resource_id is not None:
        raise TypeError("resource_id is only for a Popagent; a MemoryBackend has its own")
    if not isinstance(backend, MemoryBackend):
        raise TypeError(f"expected a MemoryBackend or a Popagent, not {type(backend).__name__}")
    return backend


def default_hooks(backend: MemoryBackend) -> list[Hook]:
    """An ``AuditHook`` for an in-process backend; none for a remote one, whose server
    audits what it serves (and whose database this process cannot reach)."""
    if isinstance(backend, LocalBackend):
        return [AuditHook(backend.app.pool)]
    return []


class SyncCallOnLoopError(asyncio.InvalidStateError, RuntimeError):
    """A synchronous call on the thread running the backend's event loop, which it would
    block: ``asyncio.InvalidStateError`` as LangGraph's stores raise it, and a
    ``RuntimeError`` as popagent's adapters raised it before."""


class LoopBridge:
    """Runs coroutines where a backend's connections can serve them.

    ``loop`` is the event loop that owns the backend's connections: for a
    :class:`LocalBackend` the loop its pool was opened on (:meth:`of`), else the
    loop running when the bridge is made, else the first one an async entry
    point reports (``note_running``).

    - ``run`` (a synchronous call) from another thread waits for the coroutine
      on that loop (LangGraph runs sync nodes and tools in worker threads); on
      the loop's own thread it would deadlock, so it raises
      :class:`SyncCallOnLoopError` (an ``asyncio.InvalidStateError``, as
      LangGraph's own stores raise, and a ``RuntimeError``) naming the async
      method to use.
    - ``arun`` (an async call) on another event loop than the owner's: a local
      backend serves it right there (its pool gives callers on other loops
      connections of their own), so nothing waits for the owner loop, which
      may be blocked waiting for this very thread; a remote backend's HTTP
      client belongs to its loop, so the call runs there and is awaited here.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, *, any_loop: bool = False
    ) -> None:
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
        self.loop = loop
        #: Whether the backend serves callers on any event loop (a local one).
        self.any_loop = any_loop

    @classmethod
    def of(
        cls, backend: MemoryBackend, loop: asyncio.AbstractEventLoop | None = None
    ) -> LoopBridge:
        """The bridge for ``backend``: a local backend's loop is its pool's."""
        if isinstance(backend, LocalBackend):
            return cls(loop or backend.app.pool.loop, any_loop=True)
        return cls(loop)

    def note_running(self) -> None:
        """Adopt the running loop when the bridge has none yet (or its loop closed):
        async entry points call this, so an adapter made outside a loop learns it."""
        if self.loop is None or self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop = asyncio.get_running_loop()

    def run(self, coro: Coroutine[Any, Any, T], *, use: str) -> T:
        """``coro``'s result, from synchronous code in a thread that is not running the
        owner loop."""
        loop = self.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            coro.close()
            raise RuntimeError(
                "popagent's connections belong to an event loop that is not running; "
                f"call {use} from async code, or make the adapter inside the running loop "
                "and make synchronous calls from another thread"
            )
        if _on_loop(loop):
            coro.close()
            raise SyncCallOnLoopError(
                "a synchronous call on the event loop's own thread would block it "
                f"(and popagent's connections with it); use {use}"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` where the backend can serve it (see the class doc)."""
        self.note_running()
        loop = self.loop
        if (
            self.any_loop
            or loop is None
            or _on_loop(loop)
            or loop.is_closed()
            or not loop.is_running()
        ):
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread is running ``loop`` now."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class MemoryToolkit:
    """``remember`` and ``recall`` for one backend, each call hooked and audited.

    ``session_id`` is recorded in audit rows and on stored facts (a LangGraph
    ``thread_id`` fits); a call may pass its own. ``hooks`` defaults to
    :func:`default_hooks`; pass ``[]`` for none.
    """

    def __init__(
        self,
        backend: MemoryBackend,
        *,
        hooks: Sequence[Hook] | None = None,
        session_id: str | None = None,
    ) -> None:
        self.backend = backend
        self.hooks = HookSet(default_hooks(backend) if hooks is None else hooks)
        self.session_id = check_id("session_id", session_id) if session_id else None

    async def remember(
        self,
        content: str,
        *,
        key: str | None = None,
        importance: float = 0.5,
        session_id: str | None = None,
        expires_at: str | None = None,
        happened_at: str | None = None,
    ) -> ToolOutcome:
        arguments: dict[str, Any] = {"content": content}
        if key is not None:
            arguments["key"] = key
        if importance != 0.5:
            arguments["importance"] = importance
        if expires_at is not None:
            arguments["expires_at"] = expires_at
        if happened_at is not None:
            arguments["happened_at"] = happened_at
        session = self._session(session_id)
        return await self.call("remember", arguments, session, self._remember(arguments, session))

    async def recall(
        self, query: str, *, limit: int = RECALL_LIMIT_DEFAULT, session_id: str | None = None
    ) -> ToolOutcome:
        arguments: dict[str, Any] = {"query": query}
        if limit != RECALL_LIMIT_DEFAULT:
            arguments["limit"] = limit
        return await self.call(
            "recall", arguments, self._session(session_id), self._recall(query, limit)
        )

    def _session(self, session_id: str | None) -> str | None:
        if session_id is None:
            return self.session_id
        try:
            return check_id("session_id", session_id)
        except PopagentError:
            return self.session_id

    async def _remember(self, arguments: dict[str, Any], session_id: str | None) -> ToolOutcome:
        result = await self.backend.remember(
            arguments["content"],
            key=arguments.get("key"),
            importance=arguments.get("importance", 0.5),
            session_id=session_id,
            expires_at=parse_expires_at(arguments.get("expires_at")),
            happened_at=arguments.get("happened_at"),
        )
        fact = result.memory
        where = f"fact #{fact.id}" + (f" with key {fact.key!r}" if fact.key else " (no key)")
        if fact.expires_at is not None:
            where += f", expiring {fact.expires_at.astimezone(UTC).isoformat()}"
        if result.action == "created":
            return ToolOutcome.ok(f"Stored: created {where}: {fact.content}")
        if result.action == "updated":
            return ToolOutcome.ok(
                f"Stored: updated {where}; it replaces the previous value: {fact.content}"
            )
        return ToolOutcome.ok(f"Unchanged: {where} already holds this: {fact.content}")

    async def _recall(self, query: str, limit: int) -> ToolOutcome:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise _Refusal("limit: must be an integer")
        if not 1 <= limit <= RECALL_LIMIT_MAX:
            raise _Refusal(f"limit: must be between 1 and {RECALL_LIMIT_MAX}")
        results = await self.backend.recall(query, limit=limit)
        return ToolOutcome.ok(render_block(results) or NO_MEMORIES)

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        session_id: str | None,
        work: Awaitable[ToolOutcome],
        *,
        refuse: bool = True,
        drain: bool = True,
        calls: list[str] | None = None,
    ) -> ToolOutcome:
        """Run ``work`` as the tool call ``tool(arguments)``, hooked and audited.

        Only the arguments' names and their JSON size reach the hooks. With
        ``refuse`` a ``PopagentError`` becomes a ``refused`` outcome the model reads;
        without it (a store operation) it is re-raised after the hooks saw it.
        ``drain`` waits for this call's audit rows' commit before returning (and
        only this call's, whatever other calls do meanwhile); without it the
        call's id is appended to ``calls``, for the caller to drain a batch of
        calls at once (``hooks.drain(calls)``).
        """
        start = ToolCallStart(
            call_id=new_call_id(),
            resource_id=self.backend.resource_id,
            session_id=session_id,
            tool=safe_name(tool),
            argument_names=tuple(safe_name(name) for name in arguments)[:32],
            input_chars=len(json.dumps(arguments, default=str)),
            started_at=datetime.now(UTC),
        )
        await self.hooks.before_tool_call(start)
        began = time.perf_counter()
        outcome: ToolOutcome | None = None
        ended: Outcome = "error"
        error_type: str | None = None
        try:
            try:
                outcome = await work
            except PopagentError as exc:
                ended, error_type = "refused", type(exc).__name__
                if not refuse:
                    raise
                verb = "nothing was stored" if tool == "remember" else "nothing was recalled"
                outcome = ToolOutcome.refused(f"Refused, {verb}: {exc}", error_type)
            except _Refusal as exc:
                outcome = ToolOutcome.refused(f"Refused: {exc}", "InvalidArguments")
            return outcome
        except BaseException as exc:
            error_type = error_type or type(exc).__name__
            raise
        finally:
            await self.hooks.after_tool_call(
                ToolCallEnd(
                    start=start,
                    outcome=outcome.outcome if outcome is not None else ended,
                    duration_ms=(time.perf_counter() - began) * 1000,
                    output_chars=len(outcome.text) if outcome is not None else 0,
                    error_type=outcome.error_type if outcome is not None else error_type,
                )
            )
            if drain:
                # The audit rows are committed before the framework hears back.
                await self.hooks.drain([start.call_id])
            elif calls is not None:
                calls.append(start.call_id)


class _Refusal(Exception):
    """An argument the toolkit itself refuses (the message names the rule, not the value)."""
