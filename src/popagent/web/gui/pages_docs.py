"""``/docs``: the API reference, browsable, rendered on the server from the app's own
OpenAPI document (``/openapi.json``).

FastAPI's Swagger UI and ReDoc pages load their scripts and styles from CDNs,
which the GUI's Content-Security-Policy forbids and an offline server cannot
reach; this page needs neither a script nor anything but ``/static``. It lists
each operation by tag (method, path, what it does, its parameters, its body and
its responses) and every schema with its fields, each type linking to its schema.

Invariants: the page is built from ``app.openapi()`` only, so it can never
disagree with the document; every value is escaped by the template, and every
description by ``openapi_text.marked`` (which marks its code spans).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ..openapi_text import marked
from .rendering import page
from .routing import HtmlRoute

__all__ = ["Operation", "operations", "router", "type_of"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

_METHODS = ("get", "post", "put", "patch", "delete")
_REF = "#/components/schemas/"


@dataclass(frozen=True, slots=True)
class Field:
    """One parameter or schema property as the page shows it."""

    name: str
    type: str
    required: bool
    description: str
    where: str = ""


@dataclass(slots=True)
class Operation:
    """One method on one path."""

    anchor: str
    method: str
    path: str
    summary: str
    description: str
    parameters: list[Field] = field(default_factory=list)
    body: str | None = None
    responses: list[tuple[str, str, str | None]] = field(default_factory=list)


def type_of(schema: dict[str, Any]) -> str:
    """A schema as a short type: ``integer``, ``array of Memory``, ``string or null``;
    a schema name (from a ``$ref``) stays a name, which the template links."""
    if "$ref" in schema:
        return str(schema["$ref"]).removeprefix(_REF)
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " or ".join(type_of(s) for s in schema[union])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "array of " + type_of(schema.get("items", {}))
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return "object of " + (type_of(extra) if isinstance(extra, dict) else "any")
    text = str(kind or "any")
    if "format" in schema:
        text += f" ({schema['format']})"
    limits = [
        f"{word} {schema[key]:,}" if isinstance(schema[key], int) else f"{word} {schema[key]}"
        for key, word in (
            ("minimum", "≥"),
            ("maximum", "≤"),
            ("minLength", "length ≥"),
            ("maxLength", "length ≤"),
        )
        if key in schema
    ]
    return text + (f", {', '.join(limits)}" if limits else "")


def _json_schema(content: dict[str, Any] | None) -> dict[str, Any] | None:
    for media in (content or {}).values():
        if isinstance(media, dict) and "schema" in media:
            return dict(media["schema"])
    return None


def operations(document: dict[str, Any]) -> dict[str, list[Operation]]:
    """The document's operations by tag (the first tag; ``other`` without one), in path order."""
    by_tag: dict[str, list[Operation]] = {}
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            entry = Operation(
                anchor=f"{method}-{path}".replace("/", "-").replace("{", "").replace("}", ""),
                method=method.upper(),
                path=path,
                summary=op.get("summary", ""),
                description=marked(op.get("description", "")),
            )
            for p in op.get("parameters", []):
                entry.parameters.append(
                    Field(
                        p["name"],
                        type_of(p.get("schema", {})),
                        bool(p.get("required")),
                        marked(p.get("description", "")),
                        p.get("in", ""),
                    )
                )
            body = _json_schema(op.get("requestBody", {}).get("content"))
            entry.body = type_of(body) if body is not None else None
            for status, response in op.get("responses", {}).items():
                schema = _json_schema(response.get("content"))
                entry.responses.append(
                    (
                        status,
                        marked(response.get("description", "")),
                        type_of(schema) if schema else None,
                    )
                )
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append(entry)
    return by_tag


def _schemas(document: dict[str, Any]) -> list[tuple[str, str, list[Field]]]:
    shown: list[tuple[str, str, list[Field]]] = []
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        required = set(schema.get("required", []))
        fields = [
            Field(prop, type_of(spec), prop in required, marked(spec.get("description", "")))
            for prop, spec in schema.get("properties", {}).items()
        ]
        shown.append((name, marked(schema.get("description", "")), fields))
    return shown


@router.get("/docs")
async def api_reference(request: Request) -> Response:
    document = request.app.openapi()
    return page(
        request,
        "api_docs.html",
        active="docs",
        info=document.get("info", {}),
        info_description=marked(document.get("info", {}).get("description", "")),
        tags=operations(document),
        schemas=_schemas(document),
        names={name for name, _, _ in _schemas(document)},
    )
