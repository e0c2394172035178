"""``AdmissionGate``: a request that would wait in line for a database connection past
the queue's bound is refused at the door, before it costs anything more.

During a burst (3,000 creates at once on one worker) every admitted request takes
event-loop time before it waits for a connection (its body read, validated,
screened); past the bound that time buys nothing but a longer wait, and it delays
everything else on the loop, ``/healthz`` included. So once ``pool.waiting``
requests of this process wait for a connection (``ServerConfig.queue_limit``, the
pool's own ``queue_limit`` as well), the next one gets 503 ``database_busy`` with
``Retry-After`` at once: the API's error body, as when the pool's queue refuses.

Invariants:
- ``/healthz`` and the static assets are never refused here: health has its own
  probe connection (``web.health``) and the assets need no database.
- Nothing is read from the request before the decision: no body, no credential.
"""

from __future__ import annotations

from ..access import send_json
from .errors import BUSY_RETRY_AFTER_S, error_body
from .middleware import ASGIApp, Receive, Scope, Send

__all__ = ["AdmissionGate"]

_EXEMPT = frozenset({"/healthz", "/favicon.ico"})


class AdmissionGate:
    """Refuse with 503 ``database_busy`` while the pool's queue is full (module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path not in _EXEMPT and not path.startswith("/static/"):
            pool = scope["app"].state.services.root.pool
            if pool.waiting >= pool.queue_limit:
                await send_json(
                    send,
                    503,
                    error_body(
                        "database_busy",
                        f"{pool.waiting:,} requests are waiting for a database connection "
                        "(the limit); retry shortly",
                    ),
                    (b"retry-after", str(BUSY_RETRY_AFTER_S).encode()),
                )
                return
        await self.app(scope, receive, send)
