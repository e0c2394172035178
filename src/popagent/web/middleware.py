"""The server's ASGI middleware, outermost first: lifespan guard, access log,
security headers, host guard (``popagent.access.HostGuard``), token gate,
request guard.

Plain ASGI classes (no ``BaseHTTPMiddleware``): each adds a few microseconds,
and streamed chat replies pass through unbuffered.

Invariants:
- The access log names method, path, status, size and time, never the query
  string or a body: a text filter or a recall query is memory content; a
  credential in the path is masked (``logged_path``), even on a refused request.
- A request with more than one ``Authorization`` header is refused (400) in
  every mode: which one would count is ambiguous.
- With a token configured, every route but ``/healthz``, ``/login`` and the
  static assets needs it: ``Authorization: Bearer`` (API clients) or the
  ``popagent_login`` cookie of a live login that ``/login`` made (the GUI in a
  browser; ``web.logins``: the cookie holds a random login id, never the token).
- In multi-resource mode every such route needs an API key (its resource and
  scope, ``popagent.keys``) or the operator token, which reaches only the key
  routes; what a credential's scope does not allow gets 403, audited (JSON on
  the API, the GUI's error page elsewhere).
- A key past its rate (a token bucket on its row, ``popagent.keys.RateLimit``,
  shared by every process; a GUI login made with a key spends from the key's)
  gets 429 with ``Retry-After`` (held back until its next token is due, at most
  a second: ``popagent.keys.pace_refusal``), audited; so does a write that adds content to
  a resource at its storage quota (``popagent.keys.Limits``).
- A request that names a resource (query parameter or header) is refused with
  422: the resource is the server's, and silently ignoring the name would let
  a client believe it read another resource.
- A Host that does not name this server is refused (421) before anything
  else runs: a DNS-rebinding page cannot reach the API under its own name.
- Unsafe methods from another origin are refused (403): the ``Origin`` must be
  one of the server's allowed hosts (scheme, name and port), never merely equal
  to the client-supplied ``Host``. With no CORS and JSON bodies this makes the
  API and the GUI's forms safe from cross-site requests.
- A path whose percent-encoding is not UTF-8 is refused (422) before any route
  sees a replacement character in it.
- Bodies over the limit are refused (413) before the route reads them; bodies
  without a declared length (chunked) are refused with 411; a body not fully
  received within ``body_timeout_s`` of the request is answered with 408.
- A startup failure (the database unreachable, a bad URL, an unusable data
  dir) is reported as one log line without a traceback (``LifespanGuard``).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, quote, unquote_to_bytes

import psycopg
from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..access import (
    REPEATED_AUTHORIZATION,
    AllowedHosts,
    bearer_matches,
    repeated_authorization,
    request_port,
    send_json,
)
from ..credentials import redacted_path
from ..errors import PopagentError
from ..keys import Limits, Principal, pace_refusal
from ..keys import Scope as KeyScope
from ..store.tenant import serving
from .gui.rendering import error_page
from .logins import LOGIN_COOKIE

__all__ = [
    "LOGIN_COOKIE",
    "SECURITY_HEADERS",
    "AccessLog",
    "BodyTimeout",
    "LifespanGuard",
    "RequestGuard",
    "SecurityHeaders",
    "TokenGate",
    "needed_scope",
    "refusal",
    "startup_failure",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
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
log = logging.getLogger("popagent.web")


class BodyTimeout(HTTPException):
    """The request's body did not arrive in time (408); the connection is closed after."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408,
            f"the request body did not arrive within {timeout_s:g} seconds",
            headers={"connection": "close"},
        )


def _error(error: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": error, "message": message, "field": field}


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or []}


class _ScopeMiddleware:
    """An ASGI middleware that acts on one type of scope (``scope_type``) in ``handle``
    and passes every other scope straight through to ``app``."""

    scope_type = "http"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != self.scope_type:
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class AccessLog(_ScopeMiddleware):
    """One structured log record per request: method, path, status, bytes, milliseconds."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            path = logged_path(scope["path"])
            access_log.info(
                "%s %s %s",
                scope["method"],
                path,
                status or 500,
                extra={
                    "method": scope["method"],
                    "path": path,
                    "status": status or 500,
                    "bytes": size,
                    "ms": round((time.perf_counter() - began) * 1000, 2),
                    "client": client[0] if client else None,
                },
            )


class SecurityHeaders(_ScopeMiddleware):
    """Add ``SECURITY_HEADERS`` to every response, and ``no-store`` to all but static assets."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
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
    """Require a credential on every route but the open ones, and tell the routes whose.

    Single-resource mode (the default): with a token configured, the bearer token
    or a live login cookie; without one (loopback only), nothing. Multi-resource
    mode: an API key (its resource and scope), or the operator token (keys only,
    no memory), as ``Authorization: Bearer`` or a live login cookie. The
    principal goes into ``scope["state"]["principal"]``, where ``services()``
    takes the request's resource from.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        *,
        resource_id: str = "",
        multi_resource: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.resource_id = resource_id
        self.multi_resource = multi_resource
        #: Multi-resource mode: each key's request rate and each resource's storage.
        self.limits = limits or Limits()

    async def _principal(self, scope: Scope) -> tuple[Principal | None, bool]:
        """Who the request is, and whether it presented any credential at all."""
        headers = _headers(scope)
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        svc = scope["app"].state.services
        if authorization:
            if self.token is not None and bearer_matches(authorization, self.token):
                if self.multi_resource:
                    return Principal(None, "operator"), True
                return Principal(self.resource_id, "admin"), True
            if self.multi_resource:
                scheme, _, key = authorization.partition(" ")
                if scheme.lower() == "bearer":
                    found = await svc.root.keys.authenticate(
                        key.strip(),
                        method=scope["method"],
                        path=_route_of(scope["path"]),
                        rate=self.limits.rate,
                    )
                    return found, True
            return None, True
        login = _cookie(headers, LOGIN_COOKIE)
        if login is None:
            return None, False
        principal = await svc.logins.lookup(login)
        if principal is None:
            return None, True
        if not self.multi_resource:
            ok = principal.key_id is None and principal.resource_id == self.resource_id
            return (principal if ok else None), True
        # A login of the single-resource mode (the token, no key) is not valid here.
        if not principal.is_operator and principal.key_id is None:
            return None, True
        if self.limits.rate is not None:
            # A login made with a key spends from the key's bucket, as the key would.
            spent = await svc.root.keys.spend(
                principal, self.limits.rate, method=scope["method"], path=_route_of(scope["path"])
            )
            return spent, True
        return principal, True

    async def _over_limit(self, scope: Scope, principal: Principal) -> tuple[str, str, int] | None:
        """(reason, message, Retry-After seconds) when the key's bucket had no token
        for this request (already audited by the statement that found it empty), or
        the resource has used up its storage on a write that adds content; else
        ``None``."""
        if principal.retry_after_s is not None:
            return "rate_limited", self.limits.rate_message(), await pace_refusal(principal)
        if (
            principal.resource_id is not None
            and self.limits.has_quota
            and scope["method"] in ("POST", "PUT", "PATCH")
            and _ADDS_CONTENT.match(scope["path"])
        ):
            keys = scope["app"].state.services.root.keys
            message = await keys.over_quota(principal.resource_id, self.limits)
            if message is not None:
                await keys.audit_refusal(
                    principal, "quota", method=scope["method"], path=_route_of(scope["path"])
                )
                return (
                    "quota",
                    message + "; delete memories or sessions to make room",
                    QUOTA_RETRY_AFTER_S,
                )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and repeated_authorization(scope):
            await send_json(send, 400, _error("bad_request", REPEATED_AUTHORIZATION))
            return
        if (
            scope["type"] != "http"
            or (self.token is None and not self.multi_resource)
            or path in _OPEN_PATHS
            or path.startswith(_STATIC)
        ):
            await self.app(scope, receive, send)
            return
        principal, presented = await self._principal(scope)
        api = path.startswith("/api/") or path == "/openapi.json"
        if principal is None:
            if presented and self.multi_resource and api:
                await scope["app"].state.services.root.keys.audit_refusal(
                    None, "unknown_credential", method=scope["method"], path=_route_of(path)
                )
            if api:
                await send_json(
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
            return
        if self.multi_resource:
            limited = await self._over_limit(scope, principal)
            if limited is not None:
                why, message, retry_after = limited
                wait = (b"retry-after", str(retry_after).encode())
                if api:
                    error = "rate_limited" if why == "rate_limited" else "quota_exceeded"
                    await send_json(send, 429, _error(error, message), wait)
                else:
                    scope.setdefault("state", {})["principal"] = principal
                    title = "Too many requests" if why == "rate_limited" else "Storage full"
                    shown = error_page(Request(scope, receive), 429, title, message)
                    shown.raw_headers.append(wait)
                    await shown(scope, receive, send)
                return
            reason = refusal(principal, scope["method"], path)
            if reason is not None:
                await scope["app"].state.services.root.keys.audit_refusal(
                    principal, reason, method=scope["method"], path=_route_of(path)
                )
                message = (
                    "the operator credential manages keys and reads no memory"
                    if reason == "operator_reads_no_memory"
                    else f"this key's scope ({principal.scope}) does not allow this request"
                )
                if api:
                    await send_json(send, 403, _error("forbidden", message))
                else:
                    # A person in the GUI gets a page with the nav, not a JSON body.
                    scope.setdefault("state", {})["principal"] = principal
                    refused = error_page(Request(scope, receive), 403, "Forbidden", message)
                    await refused(scope, receive, send)
                return
        scope.setdefault("state", {})["principal"] = principal
        if not self.multi_resource or principal.resource_id is None:
            await self.app(scope, receive, send)
            return
        # Every connection this request (and work it starts) takes is confined to the
        # key's resource by row-level security (``store.tenant``, migration 0018).
        with serving(principal.resource_id):
            await self.app(scope, receive, send)


_ADDS_CONTENT = re.compile(
    r"^(/api/facts(/by-key/.*)?|/api/sessions/[^/]+/(chat|items)|/facts(/\d+)?|/chat/[^/]+)$"
)


#: Retry-After of a write refused by a storage quota: room comes back only when the
#: resource deletes memories or sessions, so a client should not retry soon.
QUOTA_RETRY_AFTER_S = 3600


def needed_scope(method: str, path: str) -> KeyScope | None:
    """The scope a key needs for ``method path`` (multi-resource mode); ``None``: any
    credential (logging out)."""
    if path == "/logout":
        return None
    if path.startswith(("/api/keys", "/keys")) or path in ("/api/purge", "/purge"):
        return "admin"
    if method in _SAFE or (method == "POST" and path in ("/api/recall", "/recall")):
        return "read"
    return "write"


def refusal(principal: Principal, method: str, path: str) -> str | None:
    """Why ``principal`` may not make this request (an audit reason), else ``None``."""
    needed = needed_scope(method, path)
    if principal.is_operator:
        if needed is None or path.startswith("/api/keys") or path == "/openapi.json":
            return None
        return "operator_reads_no_memory"
    if needed is not None and not principal.allows(needed):
        return "scope"
    return None


def _route_of(path: str) -> str:
    """The first two segments of ``path`` (``/api/facts``): what the audit keeps of a
    request, since later segments can be ids a client chose (credentials masked, as
    in the access log: ``logged_path``)."""
    return logged_path("/".join(path.split("/")[:3])[:200])


def logged_path(path: str) -> str:
    """``path`` as the access log and the audit write it: each credential in it
    replaced by ``[REDACTED:<kind>]`` (``popagent.credentials``, linear in the path).
    A credential can arrive in a path (``/api/sessions/sk-proj-.../items``): the
    request is refused, but its log line is written whatever the answer."""
    return redacted_path(path)


def _cookie(headers: dict[bytes, bytes], name: str) -> str | None:
    raw = headers.get(b"cookie")
    if not raw:
        return None
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(raw.decode("latin-1"))
    except Exception:  # a malformed cookie header is no login
        return None
    morsel = cookie.get(name)
    return None if morsel is None else morsel.value


class RequestGuard(_ScopeMiddleware):
    """Refuse resource names, undecodable paths, cross-origin unsafe requests and
    oversized, unsized or late bodies."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        resource_id: str,
        allowed_hosts: AllowedHosts,
        body_timeout_s: float,
    ) -> None:
        super().__init__(app)
        self.max_body_bytes = max_body_bytes
        self.resource_id = resource_id
        self.allowed_hosts = allowed_hosts
        self.body_timeout_s = body_timeout_s

    def _refusal(self, scope: Scope) -> tuple[int, dict[str, Any]] | None:
        headers = _headers(scope)
        bad_path = _undecodable_path(scope)
        if bad_path is not None:
            return 422, _error(
                "validation_error",
                f"{bad_path}: the path's percent-encoding is not valid UTF-8",
                bad_path,
            )
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
            origin = headers.get(b"origin")
            if headers.get(b"sec-fetch-site") == b"cross-site" or (
                origin is not None
                and not self.allowed_hosts.origin_ok(origin.decode("latin-1"), request_port(scope))
            ):
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

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope)
        if refusal is not None:
            await send_json(send, *refusal)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        body_done = False
        started = False
        json_body = b"json" in _headers(scope).get(b"content-type", b"")
        utf8 = codecs.getincrementaldecoder("utf-8")()

        async def timed_receive() -> Message:
            # Only the body is timed: once it is in, receive() waits for the
            # disconnect that a streamed reply listens for, as long as it takes.
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(self.body_timeout_s) from None
            if message["type"] == "http.request" and json_body:
                # JSON is UTF-8 (RFC 8259); json.loads would guess UTF-16 or -32.
                try:
                    utf8.decode(message.get("body", b""), final=not message.get("more_body"))
                except UnicodeDecodeError:
                    raise HTTPException(400, "the body is not UTF-8 encoded JSON") from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, timed_receive, tracked_send)
        except BodyTimeout as exc:
            # Raised where no handler turned it into a response (e.g. in a middleware).
            if started:
                raise
            await send_json(
                send,
                408,
                _error("request_timeout", str(exc.detail)),
                (b"connection", b"close"),
            )


class LifespanGuard(_ScopeMiddleware):
    """Report a failed startup or shutdown as one clean line instead of a traceback.

    Starlette sends the traceback as the ``lifespan.startup.failed`` (or
    ``shutdown.failed``) message and uvicorn logs it whole; this holds that
    message back and sends ``startup_failure(exc)`` instead. The full error is
    still logged at debug level.
    """

    _FAILED = frozenset({"lifespan.startup.failed", "lifespan.shutdown.failed"})
    scope_type = "lifespan"

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: str | None = None

        async def guarded(message: Message) -> None:
            nonlocal held
            if message["type"] in self._FAILED:
                held = message["type"]
                return
            await send(message)

        try:
            await self.app(scope, receive, guarded)
        except Exception as exc:
            if held is None:
                raise
            log.debug("lifespan failed", exc_info=exc)
            phase = "startup" if held.startswith("lifespan.startup") else "shutdown"
            await send({"type": held, "message": startup_failure(exc, phase)})
            return
        if held is not None:  # failed without raising: say so without the details
            await send({"type": held, "message": "the lifespan failed"})


def startup_failure(exc: BaseException, phase: str = "startup") -> str:
    """One line that says why the server could not start (or stop)."""
    if isinstance(exc, PopagentError):
        text = str(exc)
    elif isinstance(exc, psycopg.Error):
        text = f"could not connect to PostgreSQL: {exc}"
    elif isinstance(exc, OSError):
        text = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    else:
        text = f"{type(exc).__name__}: {exc}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{phase} failed: {first or type(exc).__name__}"[:500]


def _undecodable_path(scope: Scope) -> str | None:
    """The field to blame when the raw path's percent-encoding is not UTF-8, else ``None``:
    ``session_id`` for a session's segment, ``path`` otherwise."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        return None
    raw = raw.split(b"?", 1)[0]  # some clients (httpx's ASGI transport) include the query
    previous = b""
    for segment in raw.split(b"/"):
        try:
            unquote_to_bytes(segment).decode("utf-8")
        except UnicodeDecodeError:
            return "session_id" if previous == b"sessions" else "path"
        previous = segment
    return None
