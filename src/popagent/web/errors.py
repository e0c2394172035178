"""One error body for the whole API: ``{"error": ..., "message": ..., "field": ...}``.

Status codes: 400 unreadable JSON, 401 no or wrong token, 404 no such memory or
session in this resource, 408 a body that did not arrive in time, 409 a
conflicting fact, 413 a body over the limit, 421 a Host that does not name this
server, 422 anything that breaks a documented rule (naming the field), 500 an
unexpected failure (its traceback goes to the log, never into the response),
502 the model failed during a chat turn, 503 the database or the model is not
available. A request that gets any of them has written nothing.

A database outage (``DatabaseError``, or a raw ``psycopg.OperationalError`` /
``psycopg_pool.PoolTimeout`` from a path that did not wrap it) is a 503
``database_unavailable`` and one short warning in the log per request, without
a traceback. A busy database (``DatabaseBusyError``: every pooled connection
in use past the pool's queue limits, ``popagent.store.database``) is a 503
``database_busy`` with ``Retry-After: 1``: the server is well, retry.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ..errors import (
    ConflictError,
    DatabaseBusyError,
    DatabaseError,
    NotFoundError,
    PopagentError,
    TurnFailedError,
    ValidationError,
)

__all__ = [
    "BUSY_RETRY_AFTER_S",
    "DATABASE_UNAVAILABLE",
    "OUTAGE_ERRORS",
    "database_busy",
    "database_unavailable",
    "error_body",
    "error_response",
    "install_error_handlers",
    "log_outage",
]

log = logging.getLogger("popagent.web")

#: Errors that mean the database cannot serve now (``psycopg_pool.PoolTimeout``
#: and ``psycopg.errors.DiskFull`` are ``OperationalError`` subclasses).
OUTAGE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, psycopg.OperationalError)
DATABASE_UNAVAILABLE = "the database is not available right now; try again shortly"
#: The ``Retry-After`` (seconds) of a 503 ``database_busy``.
BUSY_RETRY_AFTER_S = 1

_STATUS: tuple[tuple[type[PopagentError], int, str], ...] = (
    (ValidationError, 422, "validation_error"),
    (NotFoundError, 404, "not_found"),
    (ConflictError, 409, "conflict"),
    (TurnFailedError, 502, "model_failed"),
    (DatabaseError, 503, "database_unavailable"),
)
_HTTP_NAMES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "body_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    422: "validation_error",
    503: "unavailable",
}


def error_body(error: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": error, "message": message, "field": field}


def error_response(status: int, error: str, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(error, message, field), status_code=status)


_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


def _field(loc: Sequence[Any]) -> str | None:
    """The field a validation error's location names: its parts after the leading
    location kind (``("body", "query")`` is the body field ``query``)."""
    parts = list(loc)
    if parts == ["body"]:
        return "body"  # the body as a whole (not a JSON object, or missing)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(str(p) for p in parts)[:120] or None


def _validation_message(errors: Sequence[Any]) -> tuple[int, str, str, str | None]:
    first: dict[str, Any] = (
        dict(errors[0]) if errors else {"loc": (), "msg": "invalid request", "type": ""}
    )
    field = _field(first.get("loc", ()))
    kind = first.get("type", "")
    if kind == "json_invalid":
        detail = first.get("ctx", {}).get("error", "")
        return 400, "invalid_json", f"the body is not valid JSON: {detail}".rstrip(": "), None
    message = str(first.get("msg", "invalid value"))
    if kind == "extra_forbidden":
        message = "is not a field of this request"
    elif kind == "missing":
        message = "is required"
    if field is not None:
        message = f"{field}: {message}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more)"
    return 422, "validation_error", message, field


def _not_an_object(errors: Sequence[Any]) -> bool:
    """Whether the first error is "the body is not an object" (pydantic's words for it,
    "Input should be a valid dictionary", say nothing of what to send instead)."""
    return bool(errors) and dict(errors[0]).get("type") in ("dict_type", "model_attributes_type")


def _body_not_an_object(content_type: str) -> str:
    """What to send instead: a JSON object, with its content type."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind != "application/json":
        sent = f"this request's is {kind[:80]!r}" if kind else "this request has none"
        return f"body: send a JSON object, with the header content-type: application/json ({sent})"
    return "body: must be a JSON object ({...}), not another JSON value"


#: Paths whose unknown routes get the JSON error body; any other unknown path is a
#: GUI address and gets the HTML 404 page.
_JSON_PATHS = ("/api/", "/api", "/openapi.json", "/healthz", "/static/", "/mcp")


def install_error_handlers(app: FastAPI) -> None:
    """Map FastAPI's, Starlette's and popagent's errors to the one error body."""

    async def on_request_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        status, error, message, field = _validation_message(exc.errors())
        if field == "body" and _not_an_object(exc.errors()):
            message = _body_not_an_object(request.headers.get("content-type", ""))
        return error_response(status, error, message, field)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404 and not request.url.path.startswith(_JSON_PATHS):
            # A person typed or followed a link to a page that does not exist: a page.
            from .gui.rendering import error_page  # the GUI imports this module

            return error_page(request, 404, "Not found", "there is no such page")
        name = _HTTP_NAMES.get(exc.status_code, "error")
        response = error_response(exc.status_code, name, str(exc.detail))
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def on_popagent(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PopagentError)
        for cls, status, name in _STATUS:
            if isinstance(exc, cls):
                if isinstance(exc, ValidationError):
                    return error_response(status, name, str(exc), exc.field)
                if isinstance(exc, DatabaseBusyError):
                    return database_busy(request, exc)
                if isinstance(exc, DatabaseError):
                    return database_unavailable(request, exc)
                if status >= 500:
                    log.warning("request failed: %s", type(exc).__name__)
                return error_response(status, name, str(exc))
        log.error("unexpected popagent error: %s", type(exc).__name__)
        return error_response(500, "internal_error", "the server failed; see its log")

    async def on_outage(request: Request, exc: Exception) -> JSONResponse:
        return database_unavailable(request, exc)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette logs the traceback (as JSON, through the log config) after this.
        return error_response(500, "internal_error", "the server failed; see its log")

    app.add_exception_handler(RequestValidationError, on_request_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(PopagentError, on_popagent)
    app.add_exception_handler(psycopg.OperationalError, on_outage)
    app.add_exception_handler(Exception, on_unexpected)


def log_outage(request: Request, exc: BaseException) -> None:
    """The one short warning a request met by a database outage logs (no traceback)."""
    log.warning(
        "database unavailable: %s %s (%s)",
        request.method,
        request.url.path,
        type(exc).__name__,
        extra={"path": request.url.path, "error": type(exc).__name__},
    )


def database_unavailable(request: Request, exc: BaseException) -> JSONResponse:
    """503 with the error body for a database that cannot serve now."""
    log_outage(request, exc)
    # popagent's own message is written for people; a driver's may name internals.
    message = str(exc) if isinstance(exc, DatabaseError) and str(exc) else DATABASE_UNAVAILABLE
    return error_response(503, "database_unavailable", message)


def database_busy(request: Request, exc: DatabaseBusyError) -> JSONResponse:
    """503 ``database_busy`` with ``Retry-After``: every database connection stayed in
    use past the pool's queue limits. Logged like an outage, as one short warning."""
    log.warning(
        "database busy: %s %s (%s)",
        request.method,
        request.url.path,
        type(exc).__name__,
        extra={"path": request.url.path, "error": type(exc).__name__},
    )
    response = error_response(503, "database_busy", str(exc))
    response.headers["retry-after"] = str(BUSY_RETRY_AFTER_S)
    return response
