"""The part the suite's fake HTTP servers share: a ``ThreadingHTTPServer`` on 127.0.0.1
serving from a background thread, closed by ``close()`` or by leaving the ``with`` block.
Standard library only (``tests/scripted_model.py`` and ``tests/embedding_server.py``)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

__all__ = ["BackgroundServer", "OwnedHTTPServer", "QuietHandler"]

OwnerT = TypeVar("OwnerT")


class OwnedHTTPServer(ThreadingHTTPServer, Generic[OwnerT]):
    """Bound to a free port on 127.0.0.1; ``owner`` is the fake its handlers ask.
    ``join_handlers``: closing waits for the handler threads, so no socket outlives it."""

    def __init__(
        self, owner: OwnerT, handler: type[BaseHTTPRequestHandler], *, join_handlers: bool
    ) -> None:
        self.daemon_threads = not join_handlers
        self.block_on_close = join_handlers
        super().__init__(("127.0.0.1", 0), handler)
        self.owner = owner


class BackgroundServer:
    """Serves ``httpd`` (already bound, normally to port 0) until closed; closing stops
    the loop, closes the socket and joins the serving thread (bounded)."""

    def __init__(self, httpd: ThreadingHTTPServer) -> None:
        self._httpd = httpd
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """Where an OpenAI-compatible client points (both fakes serve under ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        # With ``block_on_close`` (the scripted model server) this joins the handler threads.
        self._httpd.server_close()
        self._thread.join(timeout=30)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing, to keep test output quiet."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
