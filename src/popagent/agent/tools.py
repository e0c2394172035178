"""What a tool is: the ``Tool`` protocol, the ``ToolContext`` it runs in, its ``ToolOutcome``.

Invariants:
- The resource and session a tool acts for come from its ``ToolContext``, which
  the turn (or another trusted caller, such as an MCP server) builds; they never
  come from the model's arguments. A tool's schema does not even offer them.
- A tool's arguments reach ``run`` only after ``ToolRunner`` parsed them as a
  JSON object and ``check_arguments`` found them to match the tool's schema
  (required names, no unknown names, JSON types, bounds).
- A secret value reaches tool code only through ``ToolContext.reveal_secret``,
  which also teaches the turn's scrubber the value, so nothing the turn stores
  or shows the model afterwards can hold it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..checks import check_id
from ..errors import NotFoundError
from ..llm.protocol import ToolSpec
from ..memory.longterm import LongTermMemory
from ..memory.validation import check_provenance
from ..models import Outcome, Provenance
from ..secrets import SecretStore
from .scrubber import SecretScrubber

__all__ = [
    "AGENT_PROVENANCE",
    "ConditionalTool",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "check_arguments",
]

#: Where a tool call's writes come from when nothing more is known: a model's tool call.
AGENT_PROVENANCE = Provenance(origin="agent")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool call gives back: the text the model reads, and how the call ended.

    ``refused`` means the tool declined its input (validation, a credential in a
    fact, an unknown argument); ``error`` that it could not run. ``error_type``
    names the exception class, for the audit log.
    """

    text: str
    outcome: Outcome = "ok"
    error_type: str | None = None

    @classmethod
    def ok(cls, text: str) -> ToolOutcome:
        return cls(text, "ok")

    @classmethod
    def refused(cls, text: str, error_type: str | None = None) -> ToolOutcome:
        return cls(text, "refused", error_type)

    @classmethod
    def error(cls, text: str, error_type: str | None = None) -> ToolOutcome:
        return cls(text, "error", error_type)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who a tool call acts for, and the services it may use.

    ``resource_id`` and ``session_id`` are the turn's own (``session_id`` may be
    ``None`` for calls made outside a chat session). ``scrubber`` collects the
    secret values this turn has seen. ``provenance`` is what the memories this
    call writes record as their source: the turn gives each call its own (origin
    ``agent``, the turn, its user and assistant messages, the tool call's id);
    an MCP server gives origin ``mcp``.
    """

    resource_id: str
    session_id: str | None
    memory: LongTermMemory
    secrets: SecretStore | None = None
    scrubber: SecretScrubber = field(default_factory=SecretScrubber)
    provenance: Provenance = AGENT_PROVENANCE

    def __post_init__(self) -> None:
        check_id("resource_id", self.resource_id)
        if self.session_id is not None:
            check_id("session_id", self.session_id)
        check_provenance(self.provenance)

    async def reveal_secret(self, name: str) -> str:
        """The value of the secret ``name`` of this resource, for tool code to use.

        The value is registered with the turn's scrubber first thing, so it is
        replaced by ``[secret:NAME]`` in every result, message and episode this
        turn stores or sends. ``NotFoundError`` when there is no such secret or
        no secret store.
        """
        if self.secrets is None:
            raise NotFoundError("no secret store is configured")
        value = await self.secrets.reveal(self.resource_id, name)
        self.scrubber.add(name, value)
        return value

    async def set_secret(self, name: str, value: str) -> None:
        """Store ``value`` as the secret ``name`` of this resource.

        The value is registered with the scrubber before it is stored, so even a
        refused value is scrubbed from what the turn keeps.
        """
        if self.secrets is None:
            raise NotFoundError("no secret store is configured")
        if isinstance(value, str):
            self.scrubber.add(name if isinstance(name, str) else "value", value)
        await self.secrets.set(self.resource_id, name, value)


class Tool(Protocol):
    """A function the model may call.

    ``spec`` is what the model sees (name, a description written for the
    model, a JSON Schema of the arguments); ``name`` equals ``spec.name``.
    ``run`` gets arguments already checked against the schema and returns a
    ``ToolOutcome``; an exception it raises becomes an ``error`` (or, for a
    ``PopagentError``, a ``refused``) result, never a failed turn.
    """

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ToolSpec: ...

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome: ...


@runtime_checkable
class ConditionalTool(Protocol):
    """A tool that is offered to the model only in some turns (``offered`` says
    which, from the turn's context); a tool without ``offered`` always is."""

    def offered(self, ctx: ToolContext) -> bool: ...


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """The first way ``arguments`` break ``schema`` (a message naming the argument), or ``None``.

    Understands the subset tool schemas use: ``properties``, ``required``,
    ``additionalProperties: false`` and, per property, ``type``, ``enum``,
    ``minimum``/``maximum``, ``minLength``/``maxLength`` and ``pattern``. Messages name
    arguments and rules, never values.
    """
    properties: Mapping[str, Any] = schema.get("properties") or {}
    if schema.get("additionalProperties") is False:
        unknown = sorted(name for name in arguments if name not in properties)
        if unknown:
            allowed = ", ".join(properties) or "none"
            listed = ", ".join(repr(_short(n)) for n in unknown)
            noun = "argument" if len(unknown) == 1 else "arguments"
            return f"unknown {noun} {listed} (this tool accepts: {allowed})"
    for name in schema.get("required") or ():
        if name not in arguments:
            return f"missing required argument {name!r}"
    for name, value in arguments.items():
        rules = properties.get(name)
        if isinstance(rules, Mapping):
            problem = _check_value(rules, value)
            if problem:
                return f"argument {name!r} {problem}"
    return None


def _check_value(rules: Mapping[str, Any], value: object) -> str | None:
    kind = rules.get("type")
    if isinstance(kind, str) and kind in _JSON_TYPES:
        # JSON has no separate booleans-as-numbers; neither does this check.
        if (isinstance(value, bool) and kind != "boolean") or not isinstance(
            value, _JSON_TYPES[kind]
        ):
            return f"must be a {kind}"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
    if "enum" in rules and value not in rules["enum"]:
        return "must be one of " + ", ".join(repr(v) for v in rules["enum"])
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in rules and value < rules["minimum"]:
            return f"must be at least {rules['minimum']}"
        if "maximum" in rules and value > rules["maximum"]:
            return f"must be at most {rules['maximum']}"
    if isinstance(value, str):
        if "minLength" in rules and len(value) < rules["minLength"]:
            return f"must be at least {rules['minLength']} characters"
        if "maxLength" in rules and len(value) > rules["maxLength"]:
            return f"must be at most {rules['maxLength']} characters (got {len(value)})"
        if "pattern" in rules and not re.search(rules["pattern"], value):
            return f"must match the pattern {rules['pattern']}"
    return None


def _short(name: str) -> str:
    return name if len(name) <= 64 else name[:61] + "..."
