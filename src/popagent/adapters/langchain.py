"""LangChain core: popagent's ``remember`` and ``recall`` as tools, and a retriever over recall.

::

    from popagent.adapters.langchain import PopagentRetriever, memory_tools

    tools = memory_tools(memory, "user-42")          # [remember, recall] StructuredTools
    retriever = PopagentRetriever.of(memory, "user-42", k=4)
    docs = await retriever.ainvoke("which editor does the user use?")

Invariants:
- The resource is the backend's (fixed by the application when it builds the
  tools or the retriever); the tools' schemas (popagent's own, closed) offer no
  resource argument, and the model's arguments are checked against them by
  popagent (``popagent.adapters.tool_calls``), so a call naming ``resource_id``
  is refused (audited as ``refused``) and stores and reads nothing.
- Writes go through the backend's ``remember``: popagent's normalization, caps,
  key rules and credential refusal; a refusal comes back as the tool's text
  (``Refused, nothing was stored: ...``), never as an exception.
- Every tool call and retriever query is hooked and audited without content
  (``popagent.adapters.toolkit``); a run's LangGraph ``thread_id`` is the audit
  session and the session recorded on stored facts.
- Sync ``invoke`` works from a thread other than the one running the event loop
  that owns the backend (a local backend's pool's loop; for a remote one, the
  loop running when the tools or retriever were made); on that thread it raises
  ``asyncio.InvalidStateError`` naming ``ainvoke``. ``ainvoke`` works on any
  event loop.

LangChain is an optional extra: ``pip install "popagent[langchain]"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, StructuredTool
except ImportError as exc:  # pragma: no cover - exercised by the import test in a subprocess
    raise ImportError(
        'popagent.adapters.langchain needs langchain-core: pip install "popagent[langchain]"'
    ) from exc

from pydantic import ConfigDict, Field, PrivateAttr

from ..agent.hooks import Hook
from ..agent.tools import ToolOutcome
from ..errors import PopagentError, ValidationError
from ..models import RecallResult
from ..root import Popagent
from .backend import MemoryBackend
from .tool_calls import (
    RECALL_PARAMETERS,
    REMEMBER_PARAMETERS,
    TOOL_DESCRIPTIONS,
    call_memory_tool,
)
from .toolkit import RECALL_LIMIT_MAX, LoopBridge, MemoryToolkit, as_backend

__all__ = [
    "PopagentRetriever",
    "document_of",
    "memory_tools",
    "recall_tool",
    "remember_tool",
]


def thread_of(config: RunnableConfig) -> str | None:
    """The LangGraph ``thread_id`` of a run, if any (the audit session and facts' session)."""
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else None


def _for_run(toolkit: MemoryToolkit, config: RunnableConfig) -> MemoryToolkit:
    """``toolkit`` acting in the run's thread (its ``thread_id``) when there is one."""
    thread = thread_of(config)
    if thread is None or thread == toolkit.session_id:
        return toolkit
    try:
        return MemoryToolkit(toolkit.backend, hooks=toolkit.hooks.hooks, session_id=thread)
    except PopagentError:  # not a usable session ID (too long, blank): keep the toolkit's
        return toolkit


def _tool(
    name: str, toolkit: MemoryToolkit, bridge: LoopBridge, schema: dict[str, Any]
) -> BaseTool:
    async def run(*, config: RunnableConfig, **arguments: Any) -> str:
        # The model's arguments as sent: popagent checks them against its closed schema,
        # so an unknown one (``resource_id``) is a refusal, audited like any call.
        outcome = await bridge.arun(call_memory_tool(_for_run(toolkit, config), name, arguments))
        return outcome.text

    def run_sync(*, config: RunnableConfig, **arguments: Any) -> str:
        return bridge.run(run(config=config, **arguments), use="ainvoke")

    return StructuredTool.from_function(
        func=run_sync,
        coroutine=run,
        name=name,
        description=TOOL_DESCRIPTIONS[name],
        args_schema=schema,
    )


def remember_tool(toolkit: MemoryToolkit, *, bridge: LoopBridge | None = None) -> BaseTool:
    """``remember(content, key?, importance?)`` as a LangChain ``StructuredTool``."""
    return _tool("remember", toolkit, bridge or LoopBridge.of(toolkit.backend), REMEMBER_PARAMETERS)


def recall_tool(toolkit: MemoryToolkit, *, bridge: LoopBridge | None = None) -> BaseTool:
    """``recall(query, limit?)`` as a LangChain ``StructuredTool``: the labelled block as text."""
    return _tool("recall", toolkit, bridge or LoopBridge.of(toolkit.backend), RECALL_PARAMETERS)


def memory_tools(
    backend: MemoryBackend | Popagent,
    resource_id: str | None = None,
    *,
    hooks: Sequence[Hook] | None = None,
    session_id: str | None = None,
) -> list[BaseTool]:
    """``[remember, recall]`` for one resource: a ``MemoryBackend``, or a ``Popagent``
    and the ``resource_id`` it acts for.

    ``hooks`` defaults to an ``AuditHook`` for an in-process backend (``[]``: none);
    ``session_id`` is the audit session when a call's run has no LangGraph
    ``thread_id``. Make the tools inside the event loop that owns the backend.
    """
    toolkit = MemoryToolkit(
        as_backend(backend, resource_id, origin="langchain"), hooks=hooks, session_id=session_id
    )
    bridge = LoopBridge.of(toolkit.backend)
    return [remember_tool(toolkit, bridge=bridge), recall_tool(toolkit, bridge=bridge)]


def document_of(result: RecallResult) -> Document:
    """A recalled memory as a ``Document``: its content, and its id, kind, key, times and
    score (with the ranking components' contributions) as metadata."""
    memory = result.memory
    return Document(
        id=str(memory.id),
        page_content=memory.content,
        metadata={
            "id": memory.id,
            "kind": memory.kind,
            "key": memory.key,
            "session_id": memory.session_id,
            "importance": memory.importance,
            "created_at": memory.created_at.isoformat(),
            "updated_at": memory.updated_at.isoformat(),
            "score": result.score,
            "components": {c.name: c.contribution for c in result.components},
        },
    )


class PopagentRetriever(BaseRetriever):
    """A LangChain retriever over popagent's recall, for one resource.

    Returns the ``k`` best memories (facts and episodes), best first, as
    :func:`document_of` makes them; ``invoke(query, k=n)`` asks for ``n`` instead
    (LangChain's retriever convention). Each query is hooked and audited like a
    tool call named ``retrieve`` (no query text, no content). Build it with
    :meth:`of`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    toolkit: MemoryToolkit
    k: int = Field(default=4, ge=1, le=RECALL_LIMIT_MAX)
    _bridge: LoopBridge = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        # Made now: for a remote backend, the loop running here owns its client.
        self._bridge = LoopBridge.of(self.toolkit.backend)

    @classmethod
    def of(
        cls,
        backend: MemoryBackend | Popagent,
        resource_id: str | None = None,
        *,
        k: int = 4,
        hooks: Sequence[Hook] | None = None,
        session_id: str | None = None,
    ) -> PopagentRetriever:
        """A retriever over a ``MemoryBackend``, or a ``Popagent`` and ``resource_id``."""
        toolkit = MemoryToolkit(
            as_backend(backend, resource_id, origin="langchain"), hooks=hooks, session_id=session_id
        )
        return cls(toolkit=toolkit, k=k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        return await self._bridge.arun(self._retrieve(query, self._k(k)))

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._bridge.run(self._retrieve(query, self._k(k)), use="ainvoke")

    def _k(self, k: int | None) -> int:
        if k is None:
            return self.k
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= RECALL_LIMIT_MAX:
            raise ValidationError("k", f"must be an integer from 1 to {RECALL_LIMIT_MAX}")
        return k

    async def _retrieve(self, query: str, k: int) -> list[Document]:
        found: list[RecallResult] = []
        refused: list[PopagentError] = []

        async def work() -> ToolOutcome:
            try:
                found.extend(await self.toolkit.backend.recall(query, limit=k))
            except PopagentError as exc:
                refused.append(exc)
                raise
            return ToolOutcome.ok(f"{len(found)} documents")

        arguments: dict[str, Any] = {"query": query}
        if k != self.k:
            arguments["k"] = k
        await self.toolkit.call("retrieve", arguments, self.toolkit.session_id, work())
        if refused:
            # A refused query (empty, too long) is the caller's error, not an empty answer.
            raise refused[0]
        return [document_of(result) for result in found]
