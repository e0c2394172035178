"""Memory tool calls whose arguments arrive as the model sent them (JSON text or a dict).

The OpenAI Agents SDK and Pydantic AI hand a tool the model's raw arguments;
this module checks them against popagent's closed schemas and runs the call
through :class:`~popagent.adapters.toolkit.MemoryToolkit` (hooked, audited).

Invariants:
- The schemas are closed (``additionalProperties: false``) and have no resource
  argument: a call naming ``resource_id`` (or anything unknown) is refused,
  audited as ``refused``, and nothing is read or written.
- Arguments that are not a JSON object, or break the schema, are a refusal the
  model can read, never an exception; the message names the rule, not the value.
"""

from __future__ import annotations

import json
from typing import Any

from ..agent.remember import REMEMBER_SPEC
from ..agent.tools import ToolOutcome, check_arguments
from ..memory.validation import QUERY_CAP
from .toolkit import (
    RECALL_DESCRIPTION,
    RECALL_LIMIT_DEFAULT,
    RECALL_LIMIT_MAX,
    REMEMBER_DESCRIPTION,
    MemoryToolkit,
)

__all__ = ["RECALL_PARAMETERS", "REMEMBER_PARAMETERS", "TOOL_DESCRIPTIONS", "call_memory_tool"]

REMEMBER_PARAMETERS: dict[str, Any] = REMEMBER_SPEC.parameters
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": QUERY_CAP,
            "description": (
                "What to look for, in natural language, e.g. 'which UI theme does the user prefer'."
            ),
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": RECALL_LIMIT_MAX,
            "description": f"How many memories at most (default {RECALL_LIMIT_DEFAULT}).",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
TOOL_DESCRIPTIONS = {"remember": REMEMBER_DESCRIPTION, "recall": RECALL_DESCRIPTION}
_SCHEMAS = {"remember": REMEMBER_PARAMETERS, "recall": RECALL_PARAMETERS}


async def _refused(text: str) -> ToolOutcome:
    return ToolOutcome.refused(text, "InvalidArguments")


async def call_memory_tool(
    toolkit: MemoryToolkit, name: str, arguments: str | dict[str, Any] | None
) -> ToolOutcome:
    """Run ``remember`` or ``recall`` with the model's ``arguments`` (see module doc)."""
    if name not in _SCHEMAS:
        raise ValueError(f"no memory tool {name!r}")
    parsed: object = arguments if arguments is not None else {}
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = None
    if not isinstance(parsed, dict):
        return await toolkit.call(
            name,
            {},
            toolkit.session_id,
            _refused("Refused: the arguments must be a JSON object"),
        )
    problem = check_arguments(_SCHEMAS[name], parsed)
    if problem is not None:
        return await toolkit.call(
            name, parsed, toolkit.session_id, _refused(f"Refused, nothing was done: {problem}")
        )
    if name == "remember":
        return await toolkit.remember(
            parsed["content"],
            key=parsed.get("key"),
            importance=parsed.get("importance", 0.5),
            expires_at=parsed.get("expires_at"),
            happened_at=parsed.get("happened_at"),
        )
    return await toolkit.recall(parsed["query"], limit=parsed.get("limit", RECALL_LIMIT_DEFAULT))
