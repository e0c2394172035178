"""Building blocks of tool descriptions: argument schemas and a ``ToolSpec``-backed tool.

A tool's arguments are a closed JSON Schema object (``object_schema``) whose
properties are mostly bounded integers and strings (``integer_arg``,
``string_arg``); a tool whose name and schema are one constant ``ToolSpec``
derives ``name`` and ``spec`` from it (``SpecTool``). The agent's tools and the
MCP server's use the same pieces, so a bound is written once per argument.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .protocol import ToolSpec

__all__ = ["SpecTool", "integer_arg", "object_schema", "string_arg"]


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed JSON Schema object: exactly ``properties``, ``required`` among them
    (``None``: all of them)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


def integer_arg(description: str, *, maximum: int, minimum: int = 1) -> dict[str, Any]:
    """An integer argument in ``[minimum, maximum]``."""
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def string_arg(description: str, *, max_length: int, min_length: int = 1) -> dict[str, Any]:
    """A string argument of ``min_length`` to ``max_length`` characters."""
    return {
        "type": "string",
        "minLength": min_length,
        "maxLength": max_length,
        "description": description,
    }


class SpecTool:
    """A tool (``popagent.agent.tools.Tool``) whose name and schema are its class's
    ``SPEC``; a subclass adds ``run``."""

    SPEC: ClassVar[ToolSpec]
    #: ``SPEC.name`` and ``SPEC``, set on each subclass that defines ``SPEC``.
    name: str
    spec: ToolSpec

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("SPEC")
        if own is not None:
            cls.name, cls.spec = own.name, own
