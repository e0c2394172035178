"""Running a ``MemoryServer``: over stdio for desktop clients, or over streamable
HTTP with uvicorn.

Invariants:
- stdout belongs to the protocol on stdio: nothing here writes to it; messages
  for a person go to stderr.
- HTTP follows ``popagent.access``: 127.0.0.1 by default and no token needed
  there; any other address is refused without a bearer token
  (``require_token_for``), and with a token every request must carry it
  (``BearerTokenMiddleware`` around the SDK's app, 401 otherwise). On loopback
  the SDK's DNS-rebinding protection is on as well (Host and Origin checked).
- The socket is bound before ``serve_http`` is called, so the caller knows the
  real port (``--port 0`` picks a free one) before the first request.
"""

from __future__ import annotations

import socket

import uvicorn
from mcp.server.stdio import stdio_server

from ..access import ASGIApp, BearerTokenMiddleware, require_token_for
from .server import MemoryServer

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MCP_PATH",
    "bind",
    "http_app",
    "serve_http",
    "serve_stdio",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8766
MCP_PATH = "/mcp"


async def serve_stdio(server: MemoryServer) -> None:
    """Serve one client on this process's stdin and stdout until it closes stdin."""
    lowlevel = server.lowlevel
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def http_app(server: MemoryServer, *, host: str, token: str | None) -> ASGIApp:
    """The streamable-HTTP ASGI app at ``MCP_PATH``, behind the bearer-token check.

    Raises ``ValidationError`` for a non-loopback ``host`` without a token.
    """
    require_token_for(host, token)
    app = server.lowlevel.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return BearerTokenMiddleware(app, token)


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


async def serve_http(server: MemoryServer, sock: socket.socket, *, token: str | None) -> None:
    """Serve streamable HTTP on the bound ``sock`` until interrupted (SIGINT/SIGTERM)."""
    host = str(sock.getsockname()[0])
    config = uvicorn.Config(
        http_app(server, host=host, token=token),
        log_level="warning",
        lifespan="on",
        server_header=False,
    )
    await uvicorn.Server(config).serve(sockets=[sock])
