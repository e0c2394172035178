"""Who may talk to a popagent network service: the bind rule and the bearer token.

Shared by ``popagent serve`` (the management API and GUI) and ``popagent mcp``
(streamable HTTP). The rule: a service binds 127.0.0.1 by default and needs no
token there; binding any other address requires a bearer token, and then every
request must carry it. The token comes from ``POPAGENT_TOKEN``, or from a file
named by ``--token-file`` / ``POPAGENT_TOKEN_FILE`` (first line, stripped).

The Host rule (DNS rebinding): a service answers only requests whose ``Host``
names it (``AllowedHosts``): on a loopback bind ``127.0.0.1``, ``localhost``
and ``[::1]``; on any other bind that address; plus the hosts configured with
``--allowed-host`` / ``POPAGENT_ALLOWED_HOSTS``. Everything else gets 421
(``HostGuard``). A browser's ``Origin`` is compared with the same list, never
with the client-supplied ``Host``.

``BearerTokenMiddleware`` and ``HostGuard`` are plain ASGI so that both services
(FastAPI for the server, the MCP SDK's Starlette app) wrap them the same way.
Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .defaults import ALLOWED_HOSTS_ENV, TOKEN_ENV, TOKEN_FILE_ENV
from .errors import ValidationError

__all__ = [
    "ALLOWED_HOSTS_ENV",
    "LOOPBACK_NAMES",
    "MIN_TOKEN_LENGTH",
    "REPEATED_AUTHORIZATION",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "AllowedHosts",
    "BearerTokenMiddleware",
    "HostGuard",
    "bearer_matches",
    "is_loopback",
    "load_token",
    "parse_allowed_hosts",
    "parse_trusted_proxies",
    "repeated_authorization",
    "request_port",
    "require_token_for",
    "send_json",
    "send_rate_limited",
    "send_unauthorized",
    "split_host",
]

#: The names a loopback-bound service answers to (besides configured ones).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
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
        if repeated_authorization(scope):
            await send_json(send, 400, {"detail": REPEATED_AUTHORIZATION})
            return
        headers = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if bearer_matches(authorization, self.token):
            await self.app(scope, receive, send)
            return
        await send_unauthorized(send, "missing or wrong bearer token")


REPEATED_AUTHORIZATION = "the request has more than one Authorization header; send one"


def repeated_authorization(scope: Scope) -> bool:
    """Whether the request carries more than one ``Authorization`` header. Servers and
    proxies disagree on which one counts (the first, the last, both joined), so a
    request that sends two is refused (400), never answered for one of them."""
    return sum(1 for name, _ in scope.get("headers") or () if name.lower() == b"authorization") > 1


async def send_unauthorized(send: Send, detail: str) -> None:
    """A 401 JSON answer that asks for a bearer credential (``detail`` says which)."""
    await send_json(send, 401, {"detail": detail}, (b"www-authenticate", b"Bearer"))


async def send_rate_limited(send: Send, detail: str, retry_after: int) -> None:
    """A 429 JSON answer with ``Retry-After: retry_after`` (whole seconds)."""
    await send_json(send, 429, {"detail": detail}, (b"retry-after", str(retry_after).encode()))


async def send_json(
    send: Send, status: int, body: dict[str, Any], *headers: tuple[bytes, bytes]
) -> None:
    """A complete JSON answer of ``status`` with ``headers`` (for middleware, below the routes)."""
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


# --- the Host rule --------------------------------------------------------------------------

# A host name or IPv4 address as it appears in a Host header: letters, digits,
# dots, hyphens, underscores. IPv6 literals come bracketed and are parsed apart.
_NAME = re.compile(r"[a-z0-9_.-]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None] | None:
    """A ``Host`` header value (or an allowed-host entry) as ``(name, port)``.

    The name is lower-cased; an IPv6 literal keeps its brackets and is
    normalized (``[0:0::1]`` is ``[::1]``). ``None`` when the value is not a
    host name with an optional port.
    """
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        try:
            name = f"[{ipaddress.IPv6Address(text[1:end]).compressed}]"
        except ValueError:
            return None
        rest = text[end + 1 :]
    else:
        if text.count(":") > 1:  # a bare IPv6 address: Host must bracket it
            try:
                return f"[{ipaddress.IPv6Address(text).compressed}]", None
            except ValueError:
                return None
        name, colon, port_text = text.partition(":")
        rest = colon + port_text
        if not _NAME.fullmatch(name):
            return None
    if not rest:
        return name, None
    digits = rest[1:]
    if not rest.startswith(":") or not digits.isdigit() or len(digits) > 5:
        return None
    port = int(digits)
    return (name, port) if port <= 65535 else None


def parse_allowed_hosts(values: Iterable[str]) -> tuple[str, ...]:
    """Allowed-host entries (``NAME`` or ``NAME:PORT``), each checked and normalized.

    Entries may also be comma-separated within one value (the environment
    variable's form). Raises ``ValidationError`` (field ``allowed_host``) for an
    entry that is not a host name with an optional port.
    """
    entries: list[str] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            parsed = split_host(part)
            if parsed is None:
                raise ValidationError(
                    "allowed_host",
                    f"{part.strip()[:80]!r} is not a host name with an optional port "
                    "(e.g. memory.example.com or localhost:9000)",
                )
            name, port = parsed
            entry = name if port is None else f"{name}:{port}"
            if entry not in entries:
                entries.append(entry)
    return tuple(entries)


def parse_trusted_proxies(values: Iterable[str]) -> tuple[str, ...]:
    """Trusted-proxy entries: IP addresses or networks (``10.0.0.0/8``), normalized.

    Comma-separated values are split. Raises ``ValidationError`` (field
    ``trusted_proxy``) for anything else: a name or ``*`` would let a client
    that is not the proxy choose its own address (the failed-login limit keys on it).
    """
    entries: list[str] = []
    for value in values:
        for part in value.split(","):
            text = part.strip()
            if not text:
                continue
            try:
                network = ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise ValidationError(
                    "trusted_proxy",
                    f"{text[:80]!r} is not an IP address or network (e.g. 10.0.0.5 or 10.0.0.0/8)",
                ) from None
            entry = str(network.network_address) if network.num_addresses == 1 else str(network)
            if entry not in entries:
                entries.append(entry)
    return tuple(entries)


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The names a service answers to, and the origins it accepts writes from.

    ``own``: names accepted without a port or at the service's own port (the
    bind address, or the loopback names on a loopback bind). ``extra``: the
    configured entries; one without a port accepts that name at any port (a
    reverse proxy or tunnel in front), one with a port only that port.
    """

    own: frozenset[str]
    extra: frozenset[tuple[str, int | None]] = frozenset()

    @classmethod
    def for_bind(cls, bind_host: str, allowed: Iterable[str] = ()) -> AllowedHosts:
        """The rule for a service bound to ``bind_host`` with ``allowed`` entries.

        A wildcard bind (``0.0.0.0``, ``::``) answers to the loopback names as
        well: the machine itself reaches it over loopback.
        """
        own: set[str] = set()
        bound = split_host(bind_host) or (bind_host.strip().lower(), None)
        if is_loopback(bind_host):
            own.update(LOOPBACK_NAMES)
        else:
            own.add(bound[0])
            try:
                if ipaddress.ip_address(bind_host.strip("[]")).is_unspecified:
                    own.update(LOOPBACK_NAMES)
            except ValueError:
                pass
        extra: set[tuple[str, int | None]] = set()
        for entry in parse_allowed_hosts(allowed):
            parsed = split_host(entry)
            assert parsed is not None  # parse_allowed_hosts checked it
            extra.add(parsed)
        return cls(frozenset(own), frozenset(extra))

    def allows(self, name: str, port: int | None, own_port: int | None) -> bool:
        """Whether ``name`` at ``port`` (``None``: none given) is this service.

        ``own_port`` is the port the service listens on (``None``: unknown, any).
        """
        if (name, None) in self.extra or (port is not None and (name, port) in self.extra):
            return True
        if name not in self.own:
            return False
        return port is None or own_port is None or port == own_port

    def host_ok(self, host: str | None, own_port: int | None) -> bool:
        """Whether a ``Host`` header value names this service (a missing one does not)."""
        if not host:
            return False
        parsed = split_host(host)
        return parsed is not None and self.allows(parsed[0], parsed[1], own_port)

    def origin_ok(self, origin: str, own_port: int | None) -> bool:
        """Whether a browser's ``Origin`` (scheme, host and port) is this service.

        ``null`` and other schemes are not; an origin without a port has its
        scheme's default port.
        """
        try:
            parts = urlsplit(origin.strip())
            scheme = parts.scheme.lower()
            netloc = parts.netloc
        except ValueError:
            return False
        if scheme not in _DEFAULT_PORTS or not netloc or "@" in netloc:
            return False
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            return False
        parsed = split_host(netloc)
        if parsed is None:
            return False
        name, port = parsed
        return self.allows(name, _DEFAULT_PORTS[scheme] if port is None else port, own_port)


def request_port(scope: Scope) -> int | None:
    """The port the request arrived on (uvicorn puts the socket's address in ``server``)."""
    server = scope.get("server")
    if server and len(server) > 1 and isinstance(server[1], int):
        return server[1]
    return None


class HostGuard:
    """Refuse every HTTP or websocket request whose ``Host`` is not allowed, with 421.

    The body is popagent's error body, ``{"error": "misdirected_request",
    "message": ..., "field": "host"}``. Lifespan passes through.
    """

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = [v for k, v in scope.get("headers") or [] if k.lower() == b"host"]
        host = raw[0].decode("latin-1") if len(raw) == 1 else None
        if self.allowed.host_ok(host, request_port(scope)):
            await self.app(scope, receive, send)
            return
        shown = "no Host header" if host is None else f"Host {host[:100]!r}"
        body = json.dumps(
            {
                "error": "misdirected_request",
                "message": f"{shown} does not name this server; "
                "start it with --allowed-host NAME to answer to another name",
                "field": "host",
            }
        ).encode()
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
