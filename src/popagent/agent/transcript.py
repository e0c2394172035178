"""``Transcript``: the messages one turn writes to its session's exact history.

Invariants:
- Every message is scrubbed with the turn's known secret values before it is
  written: its text, and the strings of its parts (tool-call arguments are
  scrubbed as JSON, so an escaped value is found too).
- When the turn learns a new secret value (``set_secret``, ``reveal_secret``),
  ``rescrub`` rewrites the messages this turn already wrote, so the user
  message that carried the value keeps it nowhere. Messages of earlier turns
  are not rewritten: they were scrubbed with what their own turn knew.
- Tool calls are stored as ``tool_call`` parts on the assistant message and
  each result as a ``tool`` message with one ``tool_result`` part naming the
  call it answers and its outcome, so the history step can rebuild the
  conversation exactly.
- The user message starts the turn (``turn_id``, a ``running`` row in
  ``popagent_turns``) in the same statement; every later message carries the
  turn's id, and the final answer is written by ``add_final`` on the caller's
  connection, marking the turn completed in the same statement.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..llm.protocol import ChatMessage, ToolCall
from ..models import Message, Outcome, Role
from ..store.database import Conn, Pool
from ..threads import ThreadStore, turns
from .scrubber import SecretScrubber

__all__ = ["Transcript"]


@dataclass(eq=False)
class Transcript:
    """Appends a turn's messages, scrubbed, and keeps them scrubbed as the turn learns."""

    threads: ThreadStore
    pool: Pool
    resource_id: str
    session_id: str
    scrubber: SecretScrubber
    #: The turn's id, once ``add_user`` has started it.
    turn_id: int | None = field(default=None, init=False)
    #: The turn's user message's id, once ``add_user`` has stored it (the
    #: source message of what the turn writes to long-term memory).
    user_message_id: int | None = field(default=None, init=False)
    _written: list[Message] = field(default_factory=list, init=False, repr=False)
    _scrubbed_at: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._scrubbed_at = self.scrubber.version

    @property
    def messages(self) -> tuple[Message, ...]:
        """What this turn wrote so far, as stored."""
        return tuple(self._written)

    async def add_user(self, text: str) -> Message:
        """The turn's user message; creates the session if it is new and starts the turn."""
        stored = await self._append("user", text, [], turn="start")
        self.turn_id = stored.turn_id
        self.user_message_id = stored.id
        return stored

    async def add_final(self, message: ChatMessage, conn: Conn) -> Message:
        """The turn's final answer, on ``conn`` (the caller's transaction); the same
        statement marks the turn completed."""
        parts = _call_parts(message)
        return await self._append(
            "assistant", message.content or "", parts, turn="complete", conn=conn
        )

    async def add_assistant(self, message: ChatMessage) -> Message:
        return await self._append("assistant", message.content or "", _call_parts(message))

    async def add_tool_result(self, call: ToolCall, text: str, outcome: Outcome) -> Message:
        part = {"type": "tool_result", "tool_call_id": call.id, "name": call.name}
        return await self._append("tool", text, [{**part, "outcome": outcome}])

    async def rescrub(self) -> int:
        """Rewrite this turn's messages if a secret value was learnt since; return how many."""
        if self.scrubber.version == self._scrubbed_at:
            return 0
        self._scrubbed_at = self.scrubber.version
        rewrites: list[tuple[int, str, list[dict[str, Any]]]] = []
        for i, message in enumerate(self._written):
            content = self.scrubber.scrub(message.content)
            parts = self._scrub_parts(list(message.parts))
            if content != message.content or parts != list(message.parts):
                rewrites.append((message.id, content, parts))
                self._written[i] = replace(message, content=content, parts=tuple(parts))
        if rewrites:
            await turns.rewrite_messages(self.pool, self.resource_id, self.session_id, rewrites)
        return len(rewrites)

    async def _append(
        self,
        role: Role,
        content: str,
        parts: list[dict[str, Any]],
        *,
        turn: Literal["start", "complete"] | None = None,
        conn: Conn | None = None,
    ) -> Message:
        stored = await self.threads.append_message(
            self.resource_id,
            self.session_id,
            role,
            self.scrubber.scrub(content),
            parts=self._scrub_parts(parts),
            turn_id=self.turn_id,
            turn=turn,
            conn=conn,
        )
        self._written.append(stored)
        return stored

    def _scrub_parts(self, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        scrubbed: list[dict[str, Any]] = []
        for part in parts:
            arguments = part.get("arguments")
            clean = dict(self.scrubber.scrub_json(part))
            if part.get("type") == "tool_call" and isinstance(arguments, str):
                clean["arguments"] = self.scrubber.scrub_json_text(arguments)
            scrubbed.append(clean)
        return scrubbed


def _call_parts(message: ChatMessage) -> list[dict[str, Any]]:
    return [
        {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        for call in message.tool_calls
    ]
