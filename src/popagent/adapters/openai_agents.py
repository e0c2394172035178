"""popagent for the OpenAI Agents SDK: a ``Session`` over popagent threads, and
``remember``/``recall`` as function tools.

- :class:`PopagentSession` is the SDK's ``Session`` protocol over one popagent
  session: ``get_items``/``add_items``/``pop_item``/``clear_session`` keep the
  exact list of input items (every kind: messages, function calls and their
  outputs, reasoning, ...), in process (:meth:`PopagentSession.local`: a
  ``Popagent`` or pool, and the resource) or through a ``popagent serve``
  (:meth:`PopagentSession.remote`: ``/api/sessions/{session_id}/items``).
- :func:`memory_tools` gives ``FunctionTool`` objects for ``Agent(tools=...)``
  over a :class:`~popagent.adapters.backend.MemoryBackend` (or a
  ``Popagent`` and a ``resource_id``), so what one session remembers
  another recalls.

Invariants:
- The resource is fixed by configuration: the session's and the backend's. The
  tools' schemas are closed and offer no resource, so a model that names one is
  refused and nothing is read or written (``popagent.adapters.tool_calls``).
- Credentials: items are screened as every popagent message is (each credential
  becomes ``[REDACTED:<kind>]`` before it is stored; ``popagent.threads.items``);
  ``remember`` refuses a fact holding one and says so to the model.
- Every tool call is audited without content (``MemoryToolkit``): with a local
  backend the rows are in ``popagent_audit`` before the tool returns.
- A session and the tools work from any event loop: the SDK's
  ``Runner.run_sync`` in a worker thread, or threads that each run a loop of
  their own while the loop that opened popagent waits for them. A local
  session then uses a connection of its own for the call, opened and closed on
  that loop (``popagent.store.database``), so nothing waits for the owner loop
  and nothing is left behind on a loop that closes; a remote one runs the call
  on the loop that owns its HTTP client when that loop is running.
- The SDK is imported only by this module (``pip install "popagent[openai-agents]"``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import quote

try:
    from agents import FunctionTool, RunContextWrapper
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        'popagent.adapters.openai_agents needs the OpenAI Agents SDK: pip install "popagent[openai-agents]"'
    ) from exc

import httpx

from ..agent.hooks import Hook
from ..checks import check_id
from ..errors import PopagentError
from ..root import Popagent
from ..store.database import Pool
from ..threads.items import ITEM_BATCH_CAP, SessionItems
from .backend import MemoryBackend
from .tool_calls import RECALL_PARAMETERS, REMEMBER_PARAMETERS, TOOL_DESCRIPTIONS, call_memory_tool
from .toolkit import LoopBridge, MemoryToolkit, as_backend

if TYPE_CHECKING:
    from agents import TResponseInputItem

__all__ = ["PopagentSession", "memory_tools"]

_ITEMS_PATH = "/api/sessions/{session_id}/items"
_BATCH_BYTES = 192 * 1024
#: The most items one GET of the item routes gives.
_PAGE = 1_000


class _Items(Protocol):
    async def get(self, session_id: str, limit: int | None) -> list[dict[str, Any]]: ...
    async def add(self, session_id: str, items: list[dict[str, Any]]) -> None: ...
    async def pop(self, session_id: str) -> dict[str, Any] | None: ...
    async def clear(self, session_id: str) -> None: ...


class _LocalItems:
    def __init__(self, items: SessionItems, resource_id: str) -> None:
        self._items = items
        self._resource_id = check_id("resource_id", resource_id)

    async def get(self, session_id: str, limit: int | None) -> list[dict[str, Any]]:
        return await self._items.get(self._resource_id, session_id, limit=limit)

    async def add(self, session_id: str, items: list[dict[str, Any]]) -> None:
        await self._items.append(self._resource_id, session_id, items)

    async def pop(self, session_id: str) -> dict[str, Any] | None:
        return await self._items.pop(self._resource_id, session_id)

    async def clear(self, session_id: str) -> None:
        await self._items.clear(self._resource_id, session_id)


class _RemoteItems:
    """The item routes of a ``popagent serve`` (its resource is the server's)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def _send(
        self, method: str, session_id: str, suffix: str = "", **kwargs: Any
    ) -> httpx.Response:
        path = _ITEMS_PATH.format(session_id=quote(session_id, safe=""))
        response = await self._http.request(method, path + suffix, **kwargs)
        if response.status_code >= 400:
            raise _remote_error(response)
        return response

    async def get(self, session_id: str, limit: int | None) -> list[dict[str, Any]]:
        if limit is not None and limit <= _PAGE:
            body = (await self._send("GET", session_id, params={"last": limit})).json()
            return [row["item"] for row in body["items"]]
        items: list[dict[str, Any]] = []
        after: int | None = None
        while True:
            params: dict[str, Any] = {"limit": _PAGE}
            if after is not None:
                params["after_id"] = after
            body = (await self._send("GET", session_id, params=params)).json()
            items.extend(row["item"] for row in body["items"])
            after = body["next_after_id"]
            if after is None:
                return items if limit is None else items[-limit:]

    async def add(self, session_id: str, items: list[dict[str, Any]]) -> None:
        # Batches under the server's body limit (256 KiB by default); each is atomic.
        chunk: list[dict[str, Any]] = []
        size = 0
        for item in items:
            n = len(json.dumps(item, ensure_ascii=False).encode())
            if chunk and (len(chunk) == ITEM_BATCH_CAP or size + n > _BATCH_BYTES):
                await self._send("POST", session_id, json={"items": chunk})
                chunk, size = [], 0
            chunk.append(item)
            size += n
        if chunk:
            await self._send("POST", session_id, json={"items": chunk})

    async def pop(self, session_id: str) -> dict[str, Any] | None:
        body = (await self._send("DELETE", session_id, "/last")).json()
        return cast("dict[str, Any] | None", body["item"])

    async def clear(self, session_id: str) -> None:
        await self._send("DELETE", session_id)


def _remote_error(response: httpx.Response) -> PopagentError:
    try:
        body = response.json()
        message = str(body.get("message") or body.get("detail") or body)
    except ValueError:
        message = response.reason_phrase
    return PopagentError(f"popagent server answered {response.status_code}: {message}")


class PopagentSession:
    """The SDK's ``Session`` over one popagent session (see the module doc).

    Make one with :meth:`local` or :meth:`remote`. ``session_settings`` is
    normalized as the SDK's own sessions do: a ``SessionSettings``, a dict of its
    fields (another key is a ``TypeError``) or ``None`` (``SessionSettings()``).
    Its ``limit`` bounds what ``get_items()`` gives the runner (the newest
    items); a run's ``RunConfig(session_settings=...)`` overrides it.
    """

    def __init__(
        self,
        session_id: str,
        items: _Items,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        owned: httpx.AsyncClient | None = None,
        bridge: LoopBridge | None = None,
    ) -> None:
        self.session_id = check_id("session_id", session_id)
        # Typed as the SDK's Session protocol has it; always a SessionSettings here.
        self.session_settings: SessionSettings | None = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self._items = items
        self._owned = owned
        self._bridge = bridge or LoopBridge()

    @classmethod
    def local(
        cls,
        session_id: str,
        app: Popagent | Pool,
        resource_id: str,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> PopagentSession:
        """A session in this process's database, for the resource ``resource_id``."""
        pool = app.pool if isinstance(app, Popagent) else app
        return cls(
            session_id,
            _LocalItems(SessionItems(pool), resource_id),
            session_settings=session_settings,
            bridge=LoopBridge(pool.loop, any_loop=True),
        )

    @classmethod
    def remote(
        cls,
        session_id: str,
        base_url: str | None = None,
        *,
        token: str | None = None,
        http: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> PopagentSession:
        """A session kept by the ``popagent serve`` at ``base_url`` (its resource).

        ``token`` is the server's bearer token. Pass ``http`` (an
        ``httpx.AsyncClient`` whose ``base_url`` and auth are set) instead to
        share one; otherwise the session owns a client: :meth:`close` it.
        """
        if http is None:
            if base_url is None:
                raise TypeError("give the server's base_url, or an httpx.AsyncClient as http")
            headers = {"authorization": f"Bearer {token.strip()}"} if token else {}
            owned = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)
            return cls(
                session_id, _RemoteItems(owned), session_settings=session_settings, owned=owned
            )
        if base_url is not None or token is not None:
            raise TypeError("with http, set base_url and the token on that client")
        return cls(session_id, _RemoteItems(http), session_settings=session_settings)

    async def close(self) -> None:
        """Close the HTTP client this session made (a no-op otherwise)."""
        if self._owned is not None:
            await self._owned.aclose()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """All items oldest first, or the ``limit`` newest (oldest first)."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        items = await self._bridge.arun(self._items.get(self.session_id, limit))
        return cast("list[TResponseInputItem]", items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in order (all or none of each batch), screened for credentials."""
        if items:
            copies = [dict(cast("dict[str, Any]", i)) for i in items]
            await self._bridge.arun(self._items.add(self.session_id, copies))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; ``None`` when there is none."""
        item = await self._bridge.arun(self._items.pop(self.session_id))
        return cast("TResponseInputItem | None", item)

    async def clear_session(self) -> None:
        """Remove every item; the popagent session itself (title, metadata) stays."""
        await self._bridge.arun(self._items.clear(self.session_id))


def memory_tools(
    backend: MemoryBackend | Popagent,
    resource_id: str | None = None,
    *,
    session_id: str | None = None,
    hooks: Sequence[Hook] | None = None,
) -> list[FunctionTool]:
    """``remember`` and ``recall`` as SDK function tools over ``backend``.

    ``backend`` is a ``MemoryBackend`` (``LocalBackend``, ``popagent.client``'s
    ``RemoteBackend``) or a ``Popagent`` with the ``resource_id`` it acts
    for. ``session_id`` is recorded in audit rows and on stored facts (pass the
    ``PopagentSession``'s). ``hooks`` default to an ``AuditHook`` for a local
    backend and none for a remote one (the server audits its own API).
    """
    toolkit = MemoryToolkit(
        as_backend(backend, resource_id, origin="openai-agents"), hooks=hooks, session_id=session_id
    )

    bridge = LoopBridge.of(toolkit.backend)

    def make(name: str, schema: dict[str, Any]) -> FunctionTool:
        async def invoke(ctx: RunContextWrapper[Any], arguments: str) -> str:
            return (await bridge.arun(call_memory_tool(toolkit, name, arguments))).text

        return FunctionTool(
            name=name,
            description=TOOL_DESCRIPTIONS[name],
            params_json_schema=schema,
            on_invoke_tool=invoke,
            # Optional arguments (key, importance, limit) are not strict-mode JSON
            # Schema; the arguments are checked here, against the closed schema.
            strict_json_schema=False,
        )

    return [make("remember", REMEMBER_PARAMETERS), make("recall", RECALL_PARAMETERS)]
