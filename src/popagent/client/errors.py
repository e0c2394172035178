"""How the client turns an HTTP answer it did not want into popagent's errors.

The server's error body is ``{"error": ..., "message": ..., "field": ...}``
(``popagent.web.errors``). Answers with a popagent meaning become the same
exception the library raises: 422 ``ValidationError`` naming the server's
field, 404 ``NotFoundError``, 409 ``ConflictError``, 502 ``TurnFailedError``.
Everything the library has no class for is a :class:`ClientError` whose
message says in one sentence what happened: :class:`TransportError` (no
answer at all), :class:`UnauthorizedError` (401), :class:`ServerError` (any
other 5xx; a 503 for the database is also a ``DatabaseError``, and a 503
``database_busy`` a :class:`ServerBusyError`, also a ``DatabaseBusyError``) and
:class:`ClientError` itself for the rest (400, 408, 413, 421, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..errors import (
    ClientError,
    ConflictError,
    DatabaseUnavailableError,
    NotFoundError,
    PopagentError,
    ServerBusyError,
    ServerError,
    TransportError,
    TurnFailedError,
    UnauthorizedError,
    ValidationError,
)

__all__ = [
    "ClientError",
    "DatabaseUnavailableError",
    "ServerBusyError",
    "ServerError",
    "TransportError",
    "UnauthorizedError",
    "error_from_body",
    "error_from_response",
    "in_client_words",
]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


#: The routes a server's message may point to, and the client's method for each: a
#: client user is told what to call, not which HTTP request to make. Each pattern is
#: anchored on a literal, so a message is scanned once, in linear time.
_ROUTE_TO_METHOD: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (
        re.compile(r"PUT /api/facts/by-key/(.+?) sets its value"),
        lambda m: f"put_fact({m.group(1)!r}, content) sets its value",
    ),
    (re.compile(r"PATCH /api/facts/(\d+)"), lambda m: f"update_fact({m.group(1)}, ...)"),
)


def in_client_words(message: str) -> str:
    """The server's ``message`` with each route it names replaced by the client's method
    (``PUT /api/facts/by-key/k`` is ``put_fact('k', content)``)."""
    for pattern, method in _ROUTE_TO_METHOD:
        message = pattern.sub(method, message)
    return message


def error_from_body(status: int, body: Any, what: str) -> PopagentError:
    """The exception for an error answer: ``status`` and its JSON ``body`` (anything
    else when it was not JSON) to the request ``what`` (``"GET /api/info"``)."""
    fields = body if isinstance(body, dict) else {}
    code = _text(fields.get("error"))
    message = _text(fields.get("message"))
    message = None if message is None else in_client_words(message)
    field = _text(fields.get("field"))
    if status == 422 and code == "validation_error":
        field = field or "body"
        text = message or "invalid value"
        # The server writes "field: message"; ValidationError adds the prefix itself.
        if text.startswith(f"{field}: "):
            text = text[len(field) + 2 :]
        return ValidationError(field, text)
    if status == 404 and message is not None:
        return NotFoundError(message)
    if status == 409:
        return ConflictError(message or f"{what} conflicts with what the server holds")
    if status == 502 and code == "model_failed":
        return TurnFailedError(message or "the model failed")
    detail = message or "no error message"
    sentence = f"{what} answered {status} {code or 'error'}: {detail}"
    if status == 401:
        return UnauthorizedError(
            f"{what} answered 401: the server needs the right bearer token ({detail})",
            status=status,
            error=code,
        )
    if status == 503 and code == "database_busy":
        return ServerBusyError(sentence, status=status, error=code)
    if status == 503 and code == "database_unavailable":
        return DatabaseUnavailableError(sentence, status=status, error=code)
    if status >= 500:
        return ServerError(sentence, status=status, error=code)
    return ClientError(sentence, status=status, error=code)


def error_from_response(status: int, content: bytes, what: str) -> PopagentError:
    """:func:`error_from_body` for raw response bytes (JSON or not)."""
    try:
        body: Any = json.loads(content)
    except ValueError:
        body = {"message": content[:200].decode("utf-8", "replace").strip() or None}
    return error_from_body(status, body, what)
