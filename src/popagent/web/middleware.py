"""The server's ASGI middleware, outermost first: access log, security headers,
token gate, request guard.

Plain ASGI classes (no ``BaseHTTPMiddleware``): each adds a few microseconds,
and streamed chat replies pass through unbuffered.

Invariants:
- The access log names method, path, status, size and time, never the query
  string or a body: a text filter or a recall query is memory content.
- With a token configured, every route but ``/healthz``, ``/login`` and the
  static assets needs it: ``Authorization: Bearer`` (API clients) or the
  ``popagent_token`` cookie that ``/login`` sets (the GUI in a browser).
- A request that names a resource (query parameter or header) is refused with
  422: the resource is the server's, and silently ignoring the name would let
  a client believe it read another resource.
- Unsafe methods from another origin are refused (403): with no CORS and JSON
  bodies this makes the API and the GUI's forms safe from cross-site requests.
- Bodies over the limit are refused (413) before the route reads them; bodies
  without a declared length (chunked) are refused with 411.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from ..access import bearer_matches

__all__ = [
    "SECURITY_HEADERS",
    "TOKEN_COOKIE",
    "AccessLog",
    "RequestGuard",
    "SecurityHeaders",
    "TokenGate",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_COOKIE = "popagent_token"
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_OPEN_PATHS = frozenset({"/healthz", "/login", "/favicon.ico"})
_STATIC = "/static/"
_RESOURCE_NAME = re.compile(r"resource", re.IGNORECASE)

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; "
        b"object-src 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # Not no-referrer: under it browsers send "Origin: null" with same-site form
    # posts, which the request guard must refuse as cross-origin.
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
)

access_log = logging.getLogger("popagent.access")


async def _send_json(
    send: Send, status: int, body: dict[str, Any], *extra: tuple[bytes, bytes]
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _error(error: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": error, "message": message, "field": field}


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or []}


class AccessLog:
    """One structured log record per request: method, path, status, bytes, milliseconds."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 0
        size = 0

        async def logged(message: Message) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, logged)
        finally:
            client = scope.get("client")
            access_log.info(
                "%s %s %s",
                scope["method"],
                scope["path"],
                status or 500,
                extra={
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status or 500,
                    "bytes": size,
                    "ms": round((time.perf_counter() - began) * 1000, 2),
                    "client": client[0] if client else None,
                },
            )


class SecurityHeaders:
    """Add ``SECURITY_HEADERS`` to every response, and ``no-store`` to all but static assets."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith(_STATIC)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers.extend(SECURITY_HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class TokenGate:
    """Require the bearer token (header or login cookie) on every route but the open ones."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    def _authorized(self, scope: Scope) -> bool:
        assert self.token is not None
        headers = _headers(scope)
        if bearer_matches(headers.get(b"authorization", b"").decode("latin-1"), self.token):
            return True
        raw = headers.get(b"cookie")
        if raw:
            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(raw.decode("latin-1"))
            except Exception:  # a malformed cookie header is no token
                return False
            morsel = cookie.get(TOKEN_COOKIE)
            if morsel is not None:
                return bearer_matches(f"Bearer {morsel.value}", self.token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            self.token is None
            or scope["type"] != "http"
            or path in _OPEN_PATHS
            or path.startswith(_STATIC)
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        if path.startswith("/api/") or path == "/openapi.json":
            await _send_json(
                send,
                401,
                _error("unauthorized", "missing or wrong bearer token"),
                (b"www-authenticate", b"Bearer"),
            )
            return
        location = "/login?next=" + quote(path, safe="/")
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", location.encode()), (b"content-length", b"0")],
            }
        )
        await send({"type": "http.response.body", "body": b""})


class RequestGuard:
    """Refuse resource names, cross-origin unsafe requests and oversized or unsized bodies."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, resource_id: str) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.resource_id = resource_id

    def _refusal(self, scope: Scope) -> tuple[int, dict[str, Any]] | None:
        headers = _headers(scope)
        named = [
            name
            for name, _ in parse_qsl(scope.get("query_string", b"").decode("latin-1"), True)
            if _RESOURCE_NAME.search(name)
        ]
        named += [
            n.decode("latin-1") for n in headers if _RESOURCE_NAME.search(n.decode("latin-1"))
        ]
        if named:
            return 422, _error(
                "validation_error",
                f"{named[0][:80]}: the resource is fixed by the server "
                f"({self.resource_id}); a request may not name one",
                named[0][:80],
            )
        if scope["method"] in _UNSAFE:
            if headers.get(b"sec-fetch-site") == b"cross-site" or not _same_origin(headers):
                return 403, _error("forbidden", "cross-origin requests are refused")
            length = headers.get(b"content-length")
            if length is None:
                if b"transfer-encoding" in headers:
                    return 411, _error("length_required", "send the body with a Content-Length")
            elif not length.isdigit():
                return 400, _error("bad_request", "Content-Length is not a number")
            elif int(length) > self.max_body_bytes:
                return 413, _error(
                    "body_too_large",
                    f"the body is {int(length):,} bytes; the limit is {self.max_body_bytes:,}",
                )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self._refusal(scope)
            if refusal is not None:
                await _send_json(send, *refusal)
                return
        await self.app(scope, receive, send)


def _same_origin(headers: dict[bytes, bytes]) -> bool:
    """True without an ``Origin`` header (not a browser's cross-site request) or when
    the origin's host and port are the request's ``Host``."""
    origin = headers.get(b"origin")
    if origin is None:
        return True
    if origin == b"null":
        return False
    host = headers.get(b"host", b"").decode("latin-1").lower()
    return urlsplit(origin.decode("latin-1")).netloc.lower() == host
