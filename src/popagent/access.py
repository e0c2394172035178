"""Who may talk to a popagent network service: the bind rule and the bearer token.

Shared by ``popagent serve`` (the management API and GUI) and ``popagent mcp``
(streamable HTTP). The rule: a service binds 127.0.0.1 by default and needs no
token there; binding any other address requires a bearer token, and then every
request must carry it. The token comes from ``POPAGENT_TOKEN``, or from a file
named by ``--token-file`` / ``POPAGENT_TOKEN_FILE`` (first line, stripped).

``BearerTokenMiddleware`` is plain ASGI so that both services (FastAPI for the
server, the MCP SDK's Starlette app) wrap it the same way. Tokens are compared
in constant time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from .errors import ValidationError

__all__ = [
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "BearerTokenMiddleware",
    "bearer_matches",
    "is_loopback",
    "load_token",
    "require_token_for",
]

TOKEN_ENV = "POPAGENT_TOKEN"
TOKEN_FILE_ENV = "POPAGENT_TOKEN_FILE"
# A token guards memory content on a network; short ones are guessable.
MIN_TOKEN_LENGTH = 16

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(token_file: str | os.PathLike[str] | None = None) -> str | None:
    """The configured token: ``POPAGENT_TOKEN``, else the first line of ``token_file``
    (or of the file ``POPAGENT_TOKEN_FILE`` names); ``None`` when neither is set.

    Raises ``ValidationError`` for an unreadable file or a token shorter than
    ``MIN_TOKEN_LENGTH``.
    """
    token = os.environ.get(TOKEN_ENV)
    source = TOKEN_ENV
    if not token:
        path = token_file or os.environ.get(TOKEN_FILE_ENV)
        if not path:
            return None
        source = "token_file"
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValidationError(source, f"cannot read {path}: {exc.strerror}") from exc
        token = lines[0] if lines else ""
    token = token.strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValidationError(source, f"the token must be at least {MIN_TOKEN_LENGTH} characters")
    return token


def require_token_for(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback ``host`` without a token (``ValidationError``)."""
    if token is None and not is_loopback(host):
        raise ValidationError(
            "host",
            f"binding {host} needs a bearer token: set {TOKEN_ENV} or pass --token-file",
        )


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header value carries ``token``, compared in constant time."""
    if not authorization:
        return False
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


class BearerTokenMiddleware:
    """Reject every HTTP request without ``Authorization: Bearer <token>`` with 401.

    ``exempt`` paths (e.g. ``/healthz``) pass without a token. A ``None`` token
    disables the check (loopback binding). Lifespan passes through; neither
    service speaks websockets.
    """

    def __init__(self, app: ASGIApp, token: str | None, *, exempt: frozenset[str] = frozenset()):
        self.app = app
        self.token = token
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if bearer_matches(authorization, self.token):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": "missing or wrong bearer token"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
