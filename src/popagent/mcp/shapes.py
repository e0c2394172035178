"""The structured side of MCP tool results: JSON shapes, their schemas, and the slot
a tool leaves them in.

An MCP tool result has text (what most clients show the model) and optionally
``structuredContent`` matching the tool's declared ``outputSchema``. popagent's
``ToolRunner`` carries text only, so a tool that has structured output writes it
into a ``StructuredSlot`` it was built with; the server builds fresh tools and a
fresh slot for every call, so concurrent calls never share one.

Invariants:
- Every shape here has a schema here, and the tests validate real results
  against it (the SDK's client does too). A value's shape is a declared
  projection: its schema names the fields shown, and the JSON takes exactly
  those from the value's own ``to_json`` (``popagent.models``), never a copy.
- Shapes never carry ``resource_id``: the resource is the server's configuration,
  not something a client reads or chooses.
- Structured output is built only from memories already screened when they were
  written (facts refuse credentials; episodes are stored redacted), like the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..llm._tool_spec import object_schema
from ..models import FactVersion, Memory, RecallResult

__all__ = [
    "EPISODE_PREVIEW_CHARS",
    "EPISODE_SUMMARY_SCHEMA",
    "FACT_VERSION_SCHEMA",
    "ID_MAX",
    "MEMORY_SCHEMA",
    "OFFSET_MAX",
    "RECALL_RESULT_SCHEMA",
    "StructuredSlot",
    "array_of",
    "episode_summary_json",
    "fact_version_json",
    "memory_json",
    "preview",
    "recall_result_json",
]

#: The largest id a tool accepts (PostgreSQL's bigint), so a larger one is refused
#: naming the argument rather than failing in the database.
ID_MAX = 2**63 - 1
#: The largest offset a listing tool accepts (the HTTP API's bound).
OFFSET_MAX = 10_000_000

#: An episode in a list shows this much of its text; ``get_episode`` gives all of it.
EPISODE_PREVIEW_CHARS = 300


@dataclass(slots=True)
class StructuredSlot:
    """Where one tool call leaves its structured result (``None`` until it does)."""

    value: dict[str, Any] | None = None


def _project(schema: dict[str, Any], full: dict[str, object]) -> dict[str, Any]:
    # The declared projection: the schema's properties, in its order, taken from the
    # value's own JSON (``to_json``), so a field is described once, in ``models``.
    return {name: full[name] for name in schema["properties"]}


def array_of(items: dict[str, Any]) -> dict[str, Any]:
    """The schema of a list whose every element ``items`` describes."""
    return {"type": "array", "items": items}


_TIME = {"type": "string", "format": "date-time"}
_NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
_NULLABLE_STRING = {"type": ["string", "null"]}
# Provenance as far as an MCP client can use it: the origin and the session. The
# turn, message and tool-call ids name another application's records.
_ORIGIN = {"type": "string"}
# A memory's value, current (``Memory``) or earlier (``FactVersion``).
_VALUE = {
    "key": _NULLABLE_STRING,
    "content": {"type": "string"},
    "importance": {"type": "number", "minimum": 0, "maximum": 1},
}

# The event clock (docs/time.md) of a value, current or earlier: null where unknown.
_EVENT = {
    "happened_start": _NULLABLE_TIME,
    "happened_end": _NULLABLE_TIME,
    "happened_precision": {
        "type": ["string", "null"],
        "enum": ["day", "week", "month", "season", "year", None],
    },
    "happened_phrase": _NULLABLE_STRING,
}

MEMORY_SCHEMA = object_schema(
    {
        "id": {"type": "integer", "minimum": 1},
        "kind": {"type": "string", "enum": ["fact", "episode"]},
        **_VALUE,
        "session_id": _NULLABLE_STRING,
        "created_at": _TIME,
        "updated_at": _TIME,
        "origin": _ORIGIN,
        "expires_at": _NULLABLE_TIME,
        "version": {"type": "integer", "minimum": 1},
        "based_on": {
            "type": "array",
            "items": {"type": ["string", "integer"]},
            "description": "What the memory was derived from: fact keys and memory ids.",
        },
        "stale_since": {
            **_NULLABLE_TIME,
            "description": "Set when a source changed or went: the memory may be stale.",
        },
        "stale_source": {**_NULLABLE_STRING, "description": "The source that changed."},
        **_EVENT,
    },
)

FACT_VERSION_SCHEMA = object_schema(
    {
        "version": {"type": "integer", "minimum": 1},
        **_VALUE,
        "expires_at": _NULLABLE_TIME,
        "session_id": _NULLABLE_STRING,
        "origin": _ORIGIN,
        "valid_from": _TIME,
        "valid_to": _TIME,
        "ended": {"type": "string", "enum": ["updated", "deleted", "expired"]},
        "ended_origin": _ORIGIN,
        **_EVENT,
    },
)

RECALL_RESULT_SCHEMA = object_schema(
    {
        "memory": MEMORY_SCHEMA,
        "score": {"type": "number"},
        "components": {
            "type": "object",
            "description": "Each ranking signal: its value in [0, 1], its weight, their product.",
            "additionalProperties": object_schema(
                {
                    "value": {"type": "number"},
                    "weight": {"type": "number"},
                    "contribution": {"type": "number"},
                }
            ),
        },
        "evidence": {
            "type": "string",
            "description": "What admitted the memory: words, look-alike words, meaning, "
            "whole store or next turn ('' in lexical recall: words).",
        },
        "until": {
            **_NULLABLE_TIME,
            "description": "Set on a fact's past value: it held from memory.updated_at until then.",
        },
    },
)

EPISODE_SUMMARY_SCHEMA = object_schema(
    {
        "id": {"type": "integer", "minimum": 1},
        "session_id": _NULLABLE_STRING,
        "created_at": _TIME,
        "chars": {"type": "integer", "minimum": 0},
        "preview": {"type": "string"},
    },
)


def memory_json(m: Memory) -> dict[str, Any]:
    """A memory as ``MEMORY_SCHEMA`` describes it."""
    return _project(MEMORY_SCHEMA, m.to_json())


def fact_version_json(v: FactVersion) -> dict[str, Any]:
    """An earlier value of a fact, as ``FACT_VERSION_SCHEMA`` describes it."""
    return _project(FACT_VERSION_SCHEMA, v.to_json())


def recall_result_json(r: RecallResult) -> dict[str, Any]:
    """A recall result as ``RECALL_RESULT_SCHEMA`` describes it; ``score`` is the sum of
    the contributions."""
    return {**r.to_json(), "memory": memory_json(r.memory)}


def preview(text: str, chars: int = EPISODE_PREVIEW_CHARS) -> str:
    """``text`` on one line, at most ``chars`` characters (``…`` marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def episode_summary_json(m: Memory) -> dict[str, Any]:
    """An episode in a list, as ``EPISODE_SUMMARY_SCHEMA`` describes it."""
    return {
        "id": m.id,
        "session_id": m.session_id,
        "created_at": m.created_at.isoformat(),
        "chars": len(m.content),
        "preview": preview(m.content),
    }
