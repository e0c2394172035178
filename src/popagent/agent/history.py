"""The "recent thread messages" step of a turn, behind a seam.

``HistorySource`` is what the turn asks for the session's earlier messages;
``RecentMessages`` is the default (the newest messages of the exact history).
Observational memory, a later step, replaces it with observations plus a recent
tail without touching the rest of the pipeline.

Invariants:
- A source reads only the turn's own resource and session, and only messages
  older than the turn's new user message: the turn asks before storing it
  (``before_id`` ``None``), or names it (``before_id``).
- What it returns is always a valid conversation for the wire format: it never
  starts on a tool result, and every assistant tool call it keeps has its
  result right after it. Calls whose results are missing (a turn that failed
  mid-way) are dropped with their partial results; the assistant's text stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..llm.protocol import ChatMessage, ToolCall
from ..models import Message
from ..store.database import Pool
from ..threads import turns

__all__ = ["HistoryRequest", "HistorySource", "RecentMessages", "to_chat_messages"]


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    """What a history step gets: the turn's session, the pool to read with, and
    ``before_id``: history is strictly older than that message; ``None`` means
    all stored messages (the turn asks before storing its user message)."""

    resource_id: str
    session_id: str
    before_id: int | None
    pool: Pool


class HistorySource(Protocol):
    async def load(self, request: HistoryRequest) -> list[ChatMessage]:
        """The earlier messages of the session to put before the new user message."""
        ...


class RecentMessages:
    """The ``limit`` newest stored messages of the session (a window of the exact history)."""

    def __init__(self, limit: int = 40) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 1_000:
            raise ValueError("limit must be an integer between 0 and 1000")
        self.limit = limit

    async def load(self, request: HistoryRequest) -> list[ChatMessage]:
        if self.limit == 0:
            return []
        stored = await turns.recent_messages(
            request.pool,
            request.resource_id,
            request.session_id,
            limit=self.limit,
            before_id=request.before_id,
        )
        return to_chat_messages(stored)


def _tool_calls(message: Message) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(id=str(p.get("id", "")), name=str(p.get("name", "")), arguments=_text(p))
        for p in message.parts
        if p.get("type") == "tool_call" and p.get("id")
    )


def _text(part: dict[str, Any]) -> str:
    arguments = part.get("arguments", "")
    return arguments if isinstance(arguments, str) else ""


def _result_of(message: Message) -> tuple[str, str | None] | None:
    """The (tool_call_id, name) a stored tool message answers, if it says."""
    for part in message.parts:
        if part.get("type") == "tool_result" and part.get("tool_call_id"):
            name = part.get("name")
            return str(part["tool_call_id"]), name if isinstance(name, str) else None
    return None


def to_chat_messages(stored: Sequence[Message]) -> list[ChatMessage]:
    """Stored messages, oldest first, as a valid conversation (see module doc)."""
    out: list[ChatMessage] = []
    i = 0
    while i < len(stored):
        message = stored[i]
        i += 1
        if message.role == "tool":
            continue  # an orphan: its call is outside the window or was dropped
        if message.role != "assistant":
            out.append(ChatMessage(message.role, message.content))
            continue
        calls = _tool_calls(message)
        if not calls:
            out.append(ChatMessage("assistant", message.content))
            continue
        results: dict[str, ChatMessage] = {}
        while i < len(stored) and stored[i].role == "tool":
            answered = _result_of(stored[i])
            if answered is not None:
                call_id, name = answered
                results.setdefault(
                    call_id,
                    ChatMessage("tool", stored[i].content, tool_call_id=call_id, name=name),
                )
            i += 1
        if all(call.id in results for call in calls):
            out.append(ChatMessage("assistant", message.content or None, tool_calls=calls))
            out.extend(results[call.id] for call in calls)
        elif message.content:
            out.append(ChatMessage("assistant", message.content))
    return out
