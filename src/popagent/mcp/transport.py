"""Running a ``MemoryServer``: over stdio for desktop clients, or over streamable
HTTP with uvicorn.

Invariants:
- stdout belongs to the protocol on stdio: nothing here writes to it; messages
  for a person go to stderr. Every stdin line is answered or passed to the SDK
  (``popagent.mcp.lines``): none is dropped silently.
- HTTP follows ``popagent.access``: 127.0.0.1 by default and no token needed
  there; any other address is refused without a bearer token
  (``require_token_for``), and with a token every request must carry it
  (``BearerTokenMiddleware`` around the SDK's app, 401 otherwise). On loopback
  the SDK's DNS-rebinding protection is on as well (Host and Origin checked).
- In multi-resource mode (``MemoryServer(multi_resource=True)``) every request
  needs an API key instead, and each tool call acts on the key's resource
  (``KeyGate``); a read key runs only the read-only tools.
- The socket is bound before ``serve_http`` is called, so the caller knows the
  real port (``--port 0`` picks a free one) before the first request.
"""

from __future__ import annotations

import socket
from typing import cast

import anyio
import uvicorn
from mcp.server.stdio import stdio_server

from ..access import (
    REPEATED_AUTHORIZATION,
    ASGIApp,
    BearerTokenMiddleware,
    Message,
    Receive,
    Scope,
    Send,
    repeated_authorization,
    require_token_for,
    send_json,
    send_rate_limited,
    send_unauthorized,
)
from ..keys import KeyStore, Limits, pace_refusal
from ..store.tenant import serving
from .lines import LineScreen, claimed_stdin
from .server import MemoryServer

__all__ = [
    "MCP_PATH",
    "KeyGate",
    "bind",
    "http_app",
    "http_server",
    "serve_http",
    "serve_stdio",
]

MCP_PATH = "/mcp"


async def serve_stdio(server: MemoryServer) -> None:
    """Serve one client on this process's stdin and stdout until it closes stdin
    (or the task is cancelled).

    stdin is read through ``LineScreen``: a line the SDK would drop (invalid
    JSON, a malformed envelope, a lone surrogate) is answered with its JSON-RPC
    error instead, and serving goes on (see ``popagent.mcp.lines``).
    """
    lowlevel = server.lowlevel
    with claimed_stdin() as fd:
        screen = LineScreen(fd)
        # The SDK iterates whatever it is given as stdin; it needs only ``async for``.
        stdin = cast("anyio.AsyncFile[str]", screen.lines())
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):
            screen.write_stream = write_stream
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def http_app(server: MemoryServer, *, host: str, token: str | None) -> ASGIApp:
    """The streamable-HTTP ASGI app at ``MCP_PATH``, behind the bearer-token check
    (in multi-resource mode: behind ``KeyGate``, every request needs an API key).

    Raises ``ValidationError`` for a non-loopback ``host`` without a token (in
    single-resource mode).
    """
    app = server.lowlevel.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    if server.multi_resource:
        return KeyGate(app, server.keys, server.limits)
    require_token_for(host, token)
    return BearerTokenMiddleware(app, token)


class KeyGate:
    """Multi-resource mode: every HTTP request needs a live API key (``popagent.keys``);
    its principal goes into ``scope["state"]["principal"]``, where ``MemoryServer``
    takes each tool call's resource and scope from. Anything else gets 401; a key
    past the rate of ``limits`` (the same token bucket as ``popagent serve``'s) gets 429 with
    ``Retry-After``, audited by the statement that found the bucket empty."""

    def __init__(self, app: ASGIApp, keys: KeyStore, limits: Limits | None = None) -> None:
        self.app = app
        self.keys = keys
        self.limits = limits or Limits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._closing(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if repeated_authorization(scope):
            await send_json(send, 400, {"detail": REPEATED_AUTHORIZATION})
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        principal = None
        if scheme.lower() == "bearer":
            principal = await self.keys.authenticate(
                key.strip(), method=scope.get("method"), path=MCP_PATH, rate=self.limits.rate
            )
        if principal is None:
            await send_unauthorized(send, "missing, wrong, expired or revoked API key")
            return
        if principal.retry_after_s is not None:
            wait = await pace_refusal(principal)
            await send_rate_limited(send, self.limits.rate_message(), wait)
            return
        scope.setdefault("state", {})["principal"] = principal
        # The request's connections are confined to the key's resource (``store.tenant``).
        # Calls of a handshake-era session run in the session's task, which started
        # under its first request's key: ``MemoryServer.call`` confines them again.
        assert principal.resource_id is not None
        with serving(principal.resource_id):
            await self.app(scope, receive, send)

    def _closing(self, send: Send) -> Send:
        """``send`` that, at shutdown, first audits the refusals the key store answered
        without the database (``popagent.keys``)."""

        async def closing(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.keys.aclose()
            await send(message)

        return closing


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``0``: a free port)."""
    family, kind, proto, _name, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def http_server(server: MemoryServer, sock: socket.socket, *, token: str | None) -> uvicorn.Server:
    """The uvicorn server for ``sock``: ``await it.serve(sockets=[sock])``; set its
    ``should_exit`` to shut it down gracefully."""
    host = str(sock.getsockname()[0])
    config = uvicorn.Config(
        http_app(server, host=host, token=token),
        log_level="warning",
        lifespan="on",
        server_header=False,
    )
    return uvicorn.Server(config)


async def serve_http(server: MemoryServer, sock: socket.socket, *, token: str | None) -> None:
    """Serve streamable HTTP on the bound ``sock`` until interrupted (SIGINT/SIGTERM)."""
    await http_server(server, sock, token=token).serve(sockets=[sock])
