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
- The fact records the context's provenance (in a turn: origin ``agent``, the
  turn, its messages and the tool call's id), never one the model names.
- ``expires_at`` is an ISO 8601 time with a time zone, still ahead; anything
  else is refused naming ``expires_at``, and nothing is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..errors import PopagentError, ValidationError
from ..llm._tool_spec import SpecTool, object_schema, string_arg
from ..llm.protocol import ToolSpec
from ..memory.derived import BASED_ON_CAP
from ..memory.validation import FACT_CONTENT_CAP, KEY_CAP
from ..models import HAPPENED_AT_CAP
from .tools import ToolContext, ToolOutcome

__all__ = ["EXPIRES_AT_CHARS", "REMEMBER_SPEC", "RememberTool", "parse_expires_at"]

#: The longest ``happened_at`` text the tool takes (``LongTermMemory.remember``'s limit).
HAPPENED_AT_CHARS = HAPPENED_AT_CAP
#: The longest ``expires_at`` text the tool takes (an ISO 8601 time is about 32).
EXPIRES_AT_CHARS = 64

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
    parameters=object_schema(
        {
            "content": string_arg(
                (
                    "The fact as one short, self-contained statement that makes sense on its "
                    "own later, e.g. 'Prefers dark mode in every app'."
                ),
                max_length=FACT_CONTENT_CAP,
            ),
            "key": string_arg(
                (
                    "Optional stable, dotted name for a fact whose value can change, e.g. "
                    "'ui.theme' or 'profile.home_city'. Saving again with the same key "
                    "replaces the previous value. Leave it out for facts that never change."
                ),
                max_length=KEY_CAP,
            ),
            "importance": {
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": (
                    "Optional importance from 0 to 1 (default 0.5); use 0.8 or more for facts "
                    "that matter for safety or that the user stressed."
                ),
            },
            "expires_at": string_arg(
                (
                    "Optional time after which the fact is no longer true, as ISO 8601 with a "
                    "time zone, e.g. '2030-06-30T18:00:00+02:00'. After it the fact is never "
                    "recalled and is removed. Only for facts with a known end (a trip, a "
                    "temporary address); leave it out for lasting facts."
                ),
                max_length=EXPIRES_AT_CHARS,
            ),
            "based_on": {
                "type": "array",
                "maxItems": BASED_ON_CAP,
                "items": {"type": ["string", "integer"]},
                "description": (
                    "Fill it when the fact was worked out from other memories: their keys "
                    "(e.g. 'profile.home_city') or ids (as recall shows them, e.g. 12). "
                    "Example: 'Nearest airport is Lyon-Saint Exupery' is based on "
                    "['profile.home_city']. When a source changes, this fact is marked "
                    "as possibly stale instead of silently going wrong."
                ),
            },
            "happened_at": string_arg(
                (
                    "Optional: when what the fact tells happened, or since when it holds, "
                    "e.g. '2023-07-28', '2021', 'spring 2021' or 'last Friday' (read against "
                    "today). Give it when the user said when; leave it out otherwise (a time "
                    "named in the content is read from it)."
                ),
                max_length=HAPPENED_AT_CHARS,
            ),
        },
        ["content"],
    ),
)


def parse_expires_at(value: object) -> datetime | None:
    """``expires_at`` as the tools take it: ``None``, or ISO 8601 text with a time zone.

    Whether it is still ahead is ``LongTermMemory``'s check, like every write's.
    """
    if value is None:
        return None
    rule = "must be an ISO 8601 time with a time zone, e.g. 2030-06-30T18:00:00+00:00"
    if not isinstance(value, str) or len(value) > EXPIRES_AT_CHARS:
        raise ValidationError("expires_at", rule)
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise ValidationError("expires_at", rule) from exc
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValidationError("expires_at", rule)
    return parsed


class RememberTool(SpecTool):
    """``remember(content, key?, importance?, expires_at?, based_on?, happened_at?)`` over the context's
    ``LongTermMemory``, recording the context's provenance."""

    SPEC = REMEMBER_SPEC

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            result = await ctx.memory.remember(
                ctx.resource_id,
                arguments["content"],
                key=arguments.get("key"),
                importance=arguments.get("importance", 0.5),
                session_id=ctx.session_id,
                expires_at=parse_expires_at(arguments.get("expires_at")),
                happened_at=arguments.get("happened_at"),
                provenance=ctx.provenance,
                based_on=arguments.get("based_on"),
            )
        except PopagentError as exc:
            return ToolOutcome.refused(
                f"Refused, nothing was stored: {exc}", error_type=type(exc).__name__
            )
        fact = result.memory
        where = f"fact #{fact.id}" + (f" with key {fact.key!r}" if fact.key else " (no key)")
        if fact.expires_at is not None:
            where += f", expiring {fact.expires_at.astimezone(UTC).isoformat()}"
        if fact.based_on:
            where += ", based on " + ", ".join(map(str, fact.based_on))
        if fact.happened_start is not None:
            where += f", since {fact.happened_start.astimezone(UTC).date().isoformat()}"
            where += f" ({fact.happened_precision})"
        if result.action == "created":
            text = f"Stored: created {where}: {fact.content}"
        elif result.action == "updated":
            text = f"Stored: updated {where}; it replaces the previous value: {fact.content}"
        else:
            text = f"Unchanged: {where} already holds this: {fact.content}"
        return ToolOutcome.ok(text)
