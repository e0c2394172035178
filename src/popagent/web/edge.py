"""The server's edge: the bounds on a request's head and on connections, enforced where
uvicorn reads bytes, before any parser that costs more than linear time sees them.

uvicorn's httptools protocol hands each received chunk to the httptools parser, which
joins the pieces of one header value by repeated concatenation: a 100 MB header value
costs time quadratic in its size (34 s measured), all on the event loop, and no
header size is bounded by default. ``GuardedHttpTools`` subclasses that protocol
and, per connection:

- feeds the parser at most ``MAX_HEAD_BYTES`` of one request's head (the request
  line and every header): past it, 431 and close, having parsed no more than that;
- feeds the parser the head's complete lines only, keeping an unfinished line here
  (appended to a buffer: linear), so that the parser never joins a header's pieces;
  an unfinished line already over ``MAX_HEADER_BYTES`` is refused (431, close) as
  it arrives, a 100 MB header value after its first 16 KiB;
- refuses a header (name and value) over ``MAX_HEADER_BYTES`` or more than
  ``MAX_HEADERS`` headers with 431 and close, as soon as the parser reports one;
- answers 408 and closes a connection whose head is not complete within
  ``HEAD_TIMEOUT_S`` of its connection or of its head's first byte (a client that
  sends one header line every few seconds no longer holds a connection forever);
- refuses a connection past ``MAX_CONNECTIONS`` open in this worker with 503 and
  closes it before reading anything;
- answers ``GET /healthz`` itself from the app's recent probe (``web.health``),
  ahead of every request queued on the event loop, and closes the connection.

Each refusal is the API's JSON error body; the connection is then half-closed and
its input dropped for ``LINGER_S`` before it is closed, so that a client still
sending (a 100 MB header) reads the refusal instead of a reset. At most
``LINGER_BYTES`` are read and dropped: past them reading stops, and a client that
goes on sending (without reading the answer it has) is held by its own socket
until the close, costing the server nothing.

The body has its own bounds (``web.middleware.RequestGuard``: size, 411, 408).
uvicorn's ``limit_concurrency`` is not used: it counts tasks as well as connections
and answers every request past it (``/healthz`` included) with a plain-text 503.

``uvicorn_options`` is the one place that turns a ``ServerConfig`` into uvicorn's
settings (``popagent serve`` and the tests' real servers share it): this protocol,
the keep-alive timeout, and forwarded headers trusted only from the proxies the
operator names (``--trusted-proxy``; uvicorn alone trusts 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import http
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import ServerConfig
from .health import probe_for

__all__ = [
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "MAX_CONNECTIONS",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_HEAD_BYTES",
    "GuardedHttpTools",
    "uvicorn_options",
]

#: Bytes of one request's head (request line and headers) a client may send.
MAX_HEAD_BYTES = 64 * 1024
#: Bytes of one line of the head: the request line, or a header's name and value.
MAX_HEADER_BYTES = 16 * 1024
#: Headers in one request.
MAX_HEADERS = 100
#: Seconds a client has to send a whole head, from its connection or the head's first byte.
HEAD_TIMEOUT_S = 10.0
#: Connections one server process holds open at once; the next is refused (503).
MAX_CONNECTIONS = 4096
#: Seconds an idle keep-alive connection is kept (uvicorn's default).
KEEP_ALIVE_S = 5.0
#: Seconds a refused connection stays open, its input read and dropped, after the
#: refusal is sent: closing at once with unread input resets the connection, and the
#: client may lose the refusal before it reads it (nginx's lingering close).
LINGER_S = 1.0
#: Bytes a refused connection's input may still cost (read and dropped) in that time:
#: what a client has in flight before it reads the refusal, not a second's worth of
#: loopback traffic (a client sending 100 MB on 127.0.0.1 had 6-12 MB read).
LINGER_BYTES = 1 << 20


class _Refused(Exception):
    """Raised in a parser callback to stop the parser once a refusal is decided."""


class GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head and connection bounds (module doc)."""

    max_head_bytes = MAX_HEAD_BYTES
    max_header_bytes = MAX_HEADER_BYTES
    max_headers = MAX_HEADERS
    head_timeout_s = HEAD_TIMEOUT_S
    max_connections = MAX_CONNECTIONS

    _in_head = True
    _head_bytes = 0
    #: The head's unfinished last line, not yet given to the parser (``_feed_lines``).
    _line: bytearray
    _header_count = 0
    _head_timer: asyncio.TimerHandle | None = None
    #: The refusal a parser callback decided on: (status, error, message).
    _refusal: tuple[int, str, str] | None = None
    _answered = False
    #: Bytes read and dropped since the connection was answered.
    _dropped = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            self.transport = transport  # for connection_lost
            self._write_refusal(
                503,
                "too_many_connections",
                f"this server process holds {self.max_connections:,} connections; retry shortly",
                retry_after=1,
            )
            return
        super().connection_made(transport)
        self._line = bytearray()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._answered:  # lingering before the close: drop, up to a bound
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES and not self.transport.is_closing():
                self.transport.pause_reading()
            return
        while data and not self._answered:
            if not self._in_head:
                super().data_received(data)
                return
            self._arm_head_timer()
            room = self.max_head_bytes - self._head_bytes
            piece, data = data[:room], data[room:]
            self._head_bytes += len(piece)
            if not self._feed_lines(piece):
                return
            if self._in_head and self._head_bytes >= self.max_head_bytes:
                self._write_refusal(
                    431,
                    "headers_too_large",
                    f"the request's head is over {self.max_head_bytes:,} bytes",
                )
                return

    def _feed_lines(self, piece: bytes) -> bool:
        """Give the parser the head's complete lines and keep its unfinished last line
        here, so that the parser sees each line of the head in one piece: it joins
        the pieces of a header value by concatenation, quadratic in their number.
        ``False`` once the connection is answered (or closing)."""
        end = piece.rfind(b"\n") + 1
        if end == 0:
            self._line += piece
            return self._line_ok()
        if self._line:
            self._line += piece[:end]
            lines = bytes(self._line)
            self._line = bytearray(piece[end:])
        else:
            lines = piece[:end]
            self._line = bytearray(piece[end:])
        super().data_received(lines)
        if self._answered or self.transport.is_closing() or self._switched():
            return False
        if self._in_head:
            return self._line_ok()
        if self._line:  # the head ended: the rest is the body's, or the next request's
            rest = bytes(self._line)
            self._line.clear()
            super().data_received(rest)
            if self._answered or self.transport.is_closing():
                return False
        return True

    def _line_ok(self) -> bool:
        """Refuse (431) an unfinished line of the head that is already over the bound."""
        # The line's name, ": " and "\r" beside the name and value on_header measures.
        if len(self._line) <= self.max_header_bytes + 3:
            return True
        self._write_refusal(
            431,
            "headers_too_large",
            f"a line of the request's head is over {self.max_header_bytes:,} bytes",
        )
        return False

    def _switched(self) -> bool:
        """Whether the connection went to another protocol (a WebSocket upgrade)."""
        return self.transport.get_protocol() is not self

    # --- parser callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # Not ``_head_bytes``: the parser begins while it is fed the head's first
        # bytes, which are counted already (they are reset when a message completes).
        self._in_head = True
        self._header_count = 0
        self._arm_head_timer()

    def on_message_complete(self) -> None:
        if self._answered:  # answered at the edge (``_health``): no request cycle ran
            return
        super().on_message_complete()
        self._in_head = True  # what this connection sends next is a request's head
        self._head_bytes = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if len(name) + len(value) > self.max_header_bytes:
            self._refusal = (
                431,
                "headers_too_large",
                f"a header is over {self.max_header_bytes:,} bytes",
            )
            raise _Refused
        if self._header_count > self.max_headers:
            self._refusal = (431, "headers_too_large", f"over {self.max_headers} headers")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm_head_timer()
        if self.url == b"/healthz" and self.parser.get_method() == b"GET" and self._health():
            return
        super().on_headers_complete()

    def _health(self) -> bool:
        """Answer ``GET /healthz`` here, ahead of every queued request, from the app's
        recent probe (``web.health``); ``False`` when it has none to give."""
        probe = probe_for(self.loop)
        hosts = [value for name, value in self.headers if name == b"host"]
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
        answer = None if probe is None else probe.recent(host, self.server and self.server[1])
        if answer is None:
            return False
        status, body = answer
        data = json.dumps(body).encode()
        head = [
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(data)}",
            "cache-control: no-store",
            "x-content-type-options: nosniff",
            "connection: close",
        ]
        self._answered = True  # the rest of this connection's input is not parsed
        self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + data)
        self.transport.close()
        return True

    def send_400_response(self, msg: str) -> None:
        if self._answered:  # the parser stopped after the answer was sent: nothing more
            return
        # The parser stops with an error when a callback refused the request: send
        # that refusal instead of uvicorn's plain 400.
        if self._refusal is not None:
            self._write_refusal(*self._refusal)
            return
        super().send_400_response(msg)

    # --- the head's deadline ----------------------------------------------------------

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._write_refusal(
                408,
                "request_timeout",
                f"the request's headers did not arrive within {self.head_timeout_s:g} seconds",
            )

    # --- answering ----------------------------------------------------------------------

    def _write_refusal(
        self, status: int, error: str, message: str, *, retry_after: int | None = None
    ) -> None:
        """Write one JSON error (the API's body) and close the connection."""
        self._answered = True
        self._disarm_head_timer()
        if self.transport.is_closing():
            return
        body = json.dumps({"error": error, "message": message, "field": None}).encode()
        lines = [
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            "connection: close",
        ]
        if retry_after is not None:
            lines.append(f"retry-after: {retry_after}")
        self.transport.write("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the client reads the refusal, then the end
            self.loop.call_later(LINGER_S, self.transport.close)  # input is dropped meanwhile
        else:
            self.transport.close()


def uvicorn_options(config: ServerConfig) -> dict[str, Any]:
    """uvicorn's settings for a server configured with ``config`` (module doc)."""
    return {
        "http": GuardedHttpTools,
        "timeout_keep_alive": KEEP_ALIVE_S,
        # Forwarded headers (client address, scheme) only from the named proxies; the
        # failed-login limit keys on the client address.
        "proxy_headers": bool(config.trusted_proxies),
        "forwarded_allow_ips": list(config.trusted_proxies),
    }
