"""popagent for Pydantic AI: memory tools as a toolset, and recalled memories in front
of the model's messages.

- :func:`memory_toolset` is a ``FunctionToolset`` with ``remember`` and ``recall``
  for ``Agent(toolsets=[...])``.
- :class:`RecallProcessor` is a history processor (``Agent(capabilities=
  [ProcessHistory(processor)])``): before each model request it recalls what is
  relevant to the latest user prompt and puts popagent's labelled block
  (``popagent.memory.render.HEADER`` and the memories) as a system prompt in
  a request of its own at the very front of the messages. A block it put there
  before (an earlier request, or a ``message_history`` from an earlier run,
  where Pydantic AI has merged it into the first user request) is removed
  wherever it is: the model sees one block, this request's, never a stale one. :func:`memory_capabilities` gives both as capabilities.

Invariants:
- The resource is fixed by configuration (the backend's); the tools' schemas are
  closed and offer no resource, so a model naming one is refused and nothing is
  read or written (``popagent.adapters.tool_calls``).
- ``remember`` refuses a fact holding a credential and tells the model why.
- Every tool call, and the processor's recall, is audited without content
  (``MemoryToolkit``; with a local backend the rows are in ``popagent_audit``
  before the call returns).
- Pydantic AI is imported only by this module (``pip install "popagent[pydantic-ai]"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

try:
    from pydantic_ai import FunctionToolset, Tool
    from pydantic_ai.capabilities import ProcessHistory, Toolset
    from pydantic_ai.messages import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        'popagent.adapters.pydantic_ai needs Pydantic AI: pip install "popagent[pydantic-ai]"'
    ) from exc

from ..agent.hooks import Hook
from ..memory.render import HEADER
from ..memory.validation import QUERY_CAP
from ..root import Popagent
from .backend import MemoryBackend
from .tool_calls import RECALL_PARAMETERS, REMEMBER_PARAMETERS, TOOL_DESCRIPTIONS, call_memory_tool
from .toolkit import NO_MEMORIES, RECALL_LIMIT_DEFAULT, LoopBridge, MemoryToolkit, as_backend

__all__ = ["RecallProcessor", "memory_capabilities", "memory_toolset"]


def _toolkit(
    backend: MemoryBackend | Popagent,
    resource_id: str | None,
    session_id: str | None,
    hooks: Sequence[Hook] | None,
) -> MemoryToolkit:
    return MemoryToolkit(
        as_backend(backend, resource_id, origin="pydantic-ai"), hooks=hooks, session_id=session_id
    )


def memory_toolset(
    backend: MemoryBackend | Popagent,
    resource_id: str | None = None,
    *,
    session_id: str | None = None,
    hooks: Sequence[Hook] | None = None,
) -> FunctionToolset[Any]:
    """``remember`` and ``recall`` over ``backend`` (a ``MemoryBackend``, or a
    ``Popagent`` with the ``resource_id`` it acts for).

    ``session_id`` is recorded in audit rows and on stored facts. ``hooks``
    default to an ``AuditHook`` for a local backend, none for a remote one.
    """
    toolkit = _toolkit(backend, resource_id, session_id, hooks)

    bridge = LoopBridge.of(toolkit.backend)

    def make(name: str, schema: dict[str, Any]) -> Tool[Any]:
        # ``from_schema`` skips Pydantic's validation: the arguments are checked
        # against popagent's closed schema, which refuses unknown names.
        async def run(**arguments: Any) -> str:
            return (await bridge.arun(call_memory_tool(toolkit, name, arguments))).text

        return Tool.from_schema(run, name, TOOL_DESCRIPTIONS[name], schema)

    return FunctionToolset(
        [make("remember", REMEMBER_PARAMETERS), make("recall", RECALL_PARAMETERS)]
    )


def _is_block_part(part: object) -> bool:
    return isinstance(part, SystemPromptPart) and part.content.startswith(HEADER)


def _without_blocks(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """``messages`` less every block an earlier request put there: Pydantic AI merges
    consecutive requests, so a block may sit in the same request as a user prompt
    (a ``message_history`` from an earlier run) or alone in one."""
    kept: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest) and any(_is_block_part(p) for p in message.parts):
            parts = [p for p in message.parts if not _is_block_part(p)]
            if not parts:
                continue
            message = replace(message, parts=parts)
        kept.append(message)
    return kept


def _latest_prompt(messages: Sequence[ModelMessage]) -> str | None:
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart):
                if isinstance(part.content, str):
                    return part.content
                texts = [c for c in part.content if isinstance(c, str)]
                return "\n".join(texts) if texts else None
    return None


class RecallProcessor:
    """A Pydantic AI history processor that puts recalled memories first (module doc).

    ``limit`` bounds the memories recalled for each request; the query is the
    latest user prompt (its text, capped at popagent's query limit).
    """

    def __init__(
        self,
        backend: MemoryBackend | Popagent,
        resource_id: str | None = None,
        *,
        limit: int = RECALL_LIMIT_DEFAULT,
        session_id: str | None = None,
        hooks: Sequence[Hook] | None = None,
    ) -> None:
        self.toolkit = _toolkit(backend, resource_id, session_id, hooks)
        self.limit = limit

    async def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        kept = _without_blocks(messages)
        prompt = _latest_prompt(kept)
        if not prompt or not prompt.strip():
            return kept
        outcome = await self.toolkit.recall(prompt[:QUERY_CAP], limit=self.limit)
        if outcome.outcome != "ok" or outcome.text == NO_MEMORIES:
            return kept
        return [ModelRequest(parts=[SystemPromptPart(content=outcome.text)]), *kept]


def memory_capabilities(
    backend: MemoryBackend | Popagent,
    resource_id: str | None = None,
    *,
    limit: int = RECALL_LIMIT_DEFAULT,
    session_id: str | None = None,
    hooks: Sequence[Hook] | None = None,
) -> list[Any]:
    """``[Toolset(memory_toolset(...)), ProcessHistory(RecallProcessor(...))]`` for
    ``Agent(capabilities=...)``: the tools and the recalled block together."""
    backend = as_backend(backend, resource_id, origin="pydantic-ai")
    return [
        Toolset(memory_toolset(backend, session_id=session_id, hooks=hooks)),
        ProcessHistory(RecallProcessor(backend, limit=limit, session_id=session_id, hooks=hooks)),
    ]
