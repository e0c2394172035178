"""The ``remember`` tool: the model's one way to store a durable fact.

Invariants:
- It writes to the resource and session of its ``ToolContext``, never to one the
  model names; its schema has no such argument and unknown arguments are
  refused before it runs, so a call naming ``resource_id`` writes nothing.
- It writes through ``LongTermMemory.remember``: the same normalization, caps,
  key rules and credential refusal as every other write path.
- Its result tells the model exactly what happened: created, updated (same key,
  new value), unchanged, or refused and why. Refusal messages name the rule,
  never the content.
"""

from __future__ import annotations

from typing import Any

from ..errors import PopagentError
from ..llm.protocol import ToolSpec
from ..memory.validation import FACT_CONTENT_CAP, KEY_CAP
from .tools import ToolContext, ToolOutcome

__all__ = ["REMEMBER_SPEC", "RememberTool"]

REMEMBER_SPEC = ToolSpec(
    name="remember",
    description=(
        "Save a durable fact about the user to long-term memory, so it is available in "
        "future conversations. Use it for lasting preferences, stable facts about the user "
        "and long-lived decisions. Do not use it for one-off requests, the current task's "
        "details, tool output, or any secret, password, API key or token (those are refused; "
        "use set_secret for credentials). Conversations are already kept automatically; only "
        "call this for facts worth recalling later."
    ),
    parameters={
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "minLength": 1,
                "maxLength": FACT_CONTENT_CAP,
                "description": (
                    "The fact as one short, self-contained statement that makes sense on its "
                    "own later, e.g. 'Prefers dark mode in every app'."
                ),
            },
            "key": {
                "type": "string",
                "minLength": 1,
                "maxLength": KEY_CAP,
                "description": (
                    "Optional stable, dotted name for a fact whose value can change, e.g. "
                    "'ui.theme' or 'profile.home_city'. Saving again with the same key "
                    "replaces the previous value. Leave it out for facts that never change."
                ),
            },
            "importance": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": (
                    "Optional importance from 0 to 1 (default 0.5); use 0.8 or more for facts "
                    "that matter for safety or that the user stressed."
                ),
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    },
)


class RememberTool:
    """``remember(content, key?, importance?)`` over the context's ``LongTermMemory``."""

    @property
    def name(self) -> str:
        return REMEMBER_SPEC.name

    @property
    def spec(self) -> ToolSpec:
        return REMEMBER_SPEC

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            result = await ctx.memory.remember(
                ctx.resource_id,
                arguments["content"],
                key=arguments.get("key"),
                importance=arguments.get("importance", 0.5),
                session_id=ctx.session_id,
            )
        except PopagentError as exc:
            return ToolOutcome.refused(
                f"Refused, nothing was stored: {exc}", error_type=type(exc).__name__
            )
        fact = result.memory
        where = f"fact #{fact.id}" + (f" with key {fact.key!r}" if fact.key else " (no key)")
        if result.action == "created":
            text = f"Stored: created {where}: {fact.content}"
        elif result.action == "updated":
            text = f"Stored: updated {where}; it replaces the previous value: {fact.content}"
        else:
            text = f"Unchanged: {where} already holds this: {fact.content}"
        return ToolOutcome.ok(text)
