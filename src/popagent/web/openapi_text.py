"""The OpenAPI document as a reader sees it: docstrings turned into text with code marked,
and no bound a JSON client never meets.

FastAPI copies each route's and model's docstring into the document as it is written
for Python readers: reStructuredText code (double backticks), hard-wrapped lines,
``None`` for JSON's null; and an id's ``le=2**63 - 1`` check shows as ``maximum:
9223372036854775807`` (on ``/docs``: "≤ 9,223,372,036,854,775,807" on every id).
``tidy`` rewrites the document once, in place, where it is made (``install``):

- every ``description``: RST code spans become Markdown code spans (```` ``x`` ```` to
  `` `x` ``; ``None``, ``True``, ``False`` become ``null``, ``true``, ``false``), and
  lines wrapped inside a paragraph are joined (blank lines and ``- `` items stay);
- an integer whose ``maximum`` is PostgreSQL's ``bigint`` bound says ``format: int64``
  instead. The route still refuses a larger value (the check is the route's, not the
  document's).

``/docs`` (``gui/pages_docs.py``) renders the result with ``marked``: paragraphs, and
each code span as ``<code>``. Both scans are single regular-expression passes, linear
in the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from markupsafe import Markup, escape

__all__ = ["INT64_MAX", "install", "markdown_text", "marked", "tidy"]

#: PostgreSQL's ``bigint`` (an id's) upper bound, which a JSON schema says as ``int64``.
INT64_MAX = 2**63 - 1

_RST_CODE = re.compile(r"``([^`\n]+?)``")
_CODE = re.compile(r"`([^`\n]+)`")
_PYTHON_TO_JSON = {"None": "null", "True": "true", "False": "false"}


def _code(match: re.Match[str]) -> str:
    text = match.group(1)
    return f"`{_PYTHON_TO_JSON.get(text, text)}`"


def markdown_text(text: str) -> str:
    """``text`` (a docstring) as Markdown: RST code spans as Markdown ones, and each
    paragraph on one line (a line starting ``- `` starts a new one). Idempotent."""
    text = _RST_CODE.sub(_code, text)
    paragraphs = []
    for block in re.split(r"\n[ \t]*\n", text.strip()):
        lines: list[str] = []
        for line in block.splitlines():
            line = line.strip()
            if lines and not line.startswith("- "):
                lines[-1] += " " + line
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def marked(text: str) -> Markup:
    """Markdown ``text`` as safe HTML: its paragraphs as ``<p>`` (one paragraph as it is),
    its lines kept, its code spans as ``<code>``; everything else escaped."""
    html = []
    for paragraph in markdown_text(text).split("\n\n"):
        pieces = _CODE.split(paragraph)
        body = "".join(
            f"<code>{escape(piece)}</code>" if odd else str(escape(piece)).replace("\n", "<br>")
            for odd, piece in ((i % 2 == 1, p) for i, p in enumerate(pieces))
        )
        html.append(body)
    if len(html) == 1:
        return Markup(html[0])
    return Markup("".join(f"<p>{body}</p>" for body in html))


def tidy(node: Any) -> Any:
    """Rewrite an OpenAPI document (or part of one) in place as the module says; returns it."""
    if isinstance(node, dict):
        if node.get("type") == "integer" and node.get("maximum") == INT64_MAX:
            del node["maximum"]
            node.setdefault("format", "int64")
        for name, value in node.items():
            if name == "description" and isinstance(value, str):
                node[name] = markdown_text(value)
            else:
                tidy(value)
    elif isinstance(node, list):
        for item in node:
            tidy(item)
    return node


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and so ``/openapi.json`` and ``/docs``) answer the tidied
    document; FastAPI builds it once and keeps it."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = tidy(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
