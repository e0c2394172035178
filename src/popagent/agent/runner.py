"""``ToolRunner``: one tool call, from the model's raw arguments to a scrubbed result.

The turn pipeline uses it for every tool call, and any other caller (an MCP
server) can too: ``await ToolRunner(tools, hooks).call(ctx, name, raw_arguments)``.

Invariants:
- A call never raises for anything the model did: an unknown tool is an
  ``error`` result; arguments that are not a JSON object, or that break the
  tool's schema, are a ``refused`` result and the tool does not run; a tool
  that raises gives a ``refused`` (``PopagentError``) or ``error`` result.
- Hooks run around every call, the ones above included: ``before_tool_call``
  once, then exactly one ``after_tool_call``, even when the tool raised or
  the call was cancelled.
- The result text is scrubbed with the context's secret values after the tool
  ran (it may have just learnt one), so no result holds a known secret value.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import PopagentError
from ..llm.protocol import ToolSpec
from .hooks import (
    Hook,
    HookSet,
    ToolCallEnd,
    ToolCallStart,
    new_call_id,
    observe_call,
    safe_name,
)
from .tools import Tool, ToolContext, ToolOutcome, check_arguments

__all__ = ["ToolRunner"]

log = logging.getLogger(__name__)


class ToolRunner:
    """The tools offered to a model, each call wrapped in hooks."""

    def __init__(self, tools: Sequence[Tool], hooks: Sequence[Hook] | HookSet = ()) -> None:
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if tool.name != tool.spec.name:
                raise ValueError(f"tool {tool.name!r} has a spec named {tool.spec.name!r}")
            if tool.name in by_name:
                raise ValueError(f"two tools are named {tool.name!r}")
            by_name[tool.name] = tool
        self._tools = by_name
        self._hooks = hooks if isinstance(hooks, HookSet) else HookSet(hooks)

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered, in the order the tools were given."""
        return tuple(tool.spec for tool in self._tools.values())

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    async def drain(self) -> None:
        """Wait for the hooks' background work (audit rows) of the calls made so far.

        A turn does this before it returns; a caller using the runner on its own
        (an MCP server) does it after each call it answers.
        """
        await self._hooks.drain()

    async def call(
        self, ctx: ToolContext, name: str, raw_arguments: str | Mapping[str, Any]
    ) -> ToolOutcome:
        """Run the tool ``name`` with the model's arguments (JSON text, or an already
        parsed object) for ``ctx``; return the scrubbed outcome."""
        arguments, problem = _parse(raw_arguments)
        raw_size = (
            len(raw_arguments)
            if isinstance(raw_arguments, str)
            else len(json.dumps(raw_arguments, default=str))
        )
        start = ToolCallStart(
            call_id=new_call_id(),
            resource_id=ctx.resource_id,
            session_id=ctx.session_id,
            tool=safe_name(name),
            argument_names=tuple(safe_name(str(n)) for n in (arguments or {}))[:32],
            input_chars=raw_size,
            started_at=datetime.now(UTC),
        )

        async def run() -> ToolOutcome:
            outcome = await self._run(ctx, name, arguments, problem)
            return ToolOutcome(
                ctx.scrubber.scrub(outcome.text), outcome.outcome, outcome.error_type
            )

        async def ended(outcome: ToolOutcome | None, error_type: str | None, ms: float) -> None:
            await self._hooks.after_tool_call(
                ToolCallEnd(
                    start=start,
                    outcome=outcome.outcome if outcome is not None else "error",
                    duration_ms=ms,
                    output_chars=len(outcome.text) if outcome is not None else 0,
                    error_type=outcome.error_type if outcome is not None else error_type,
                )
            )

        return await observe_call(self._hooks.before_tool_call, start, run, ended)

    async def _run(
        self,
        ctx: ToolContext,
        name: str,
        arguments: dict[str, Any] | None,
        problem: str | None,
    ) -> ToolOutcome:
        tool = self._tools.get(name)
        if tool is None:
            offered = ", ".join(self._tools) or "none"
            return ToolOutcome.error(
                f"Error: there is no tool named {name!r} (available tools: {offered}).",
                "UnknownTool",
            )
        if arguments is None:
            return ToolOutcome.refused(
                f"Refused, the tool did not run: {problem}.", "InvalidArguments"
            )
        problem = check_arguments(tool.spec.parameters, arguments)
        if problem is not None:
            return ToolOutcome.refused(
                f"Refused, the tool did not run: {problem}.", "InvalidArguments"
            )
        try:
            return await tool.run(ctx, arguments)
        except PopagentError as exc:
            return ToolOutcome.refused(f"Refused: {exc}", type(exc).__name__)
        except Exception as exc:
            # The class name only in the log: the message may quote a value.
            log.warning("tool %s raised %s", tool.name, type(exc).__name__)
            return ToolOutcome.error(
                f"Error: the tool failed ({type(exc).__name__}: {exc}).", type(exc).__name__
            )


def _parse(raw: str | Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments as a dict, or ``None`` and why not (never quoting the text)."""
    if isinstance(raw, Mapping):
        return dict(raw), None
    if not raw.strip():
        return {}, None  # some servers send "" for a call without arguments
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = getattr(exc, "msg", "nested too deeply")
        return None, f"the arguments are not valid JSON ({reason})"
    if not isinstance(parsed, dict):
        return None, f"the arguments must be a JSON object, not {type(parsed).__name__}"
    return parsed, None
