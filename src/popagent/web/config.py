"""``ServerConfig``: what one ``popagent serve`` process is configured with.

The resource is fixed here, never by a client: every route reads and writes
``resource_id`` only (``popagent-user`` by default), as the spec requires of
management endpoints. In multi-resource mode it is fixed by each request's API
key instead (docs/server.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..defaults import DEFAULT_HOST, DEFAULT_KEY_RATE, DEFAULT_PORT, DEFAULT_RESOURCE

# The login defaults, here so that ``web.config`` stays importable without the driver.
LOGIN_TTL_S = 12 * 3600.0
LOGIN_FAILURES = 5
LOGIN_WINDOW_S = 300.0
#: Failed logins per client address (any credential) per window: a bound on guesses
#: that the per-credential limit alone would not give.
LOGIN_ADDRESS_FAILURES = 25
#: Requests one server process lets wait for a database connection; past it, 503
#: ``database_busy`` at once (``web.admission``). Above the 2,000-request burst the
#: fault suite sends through two workers, should every request land on one of them.
QUEUE_LIMIT = 2_500

__all__ = [
    "BODY_TIMEOUT_S",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_RESOURCE",
    "MAX_BODY_BYTES",
    "QUEUE_LIMIT",
    "ServerConfig",
]

#: The largest request body accepted. A fact is at most 2,000 characters (8 kB
#: of UTF-8 at worst) and a chat message 32,000; this leaves room for JSON escapes.
MAX_BODY_BYTES = 256 * 1024
#: Seconds a client has, from its request's headers, to send the whole body (else 408):
#: a body shorter than its Content-Length must not hold a connection and a task.
BODY_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One server's settings (see ``popagent serve --help`` for the flags)."""

    resource_id: str = DEFAULT_RESOURCE
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    #: The bearer token; ``None`` only on a loopback address.
    token: str | None = None
    #: Seconds between scheduled maintenance runs; ``None`` turns the schedule off.
    maintenance_interval_s: float | None = 24 * 3600.0
    #: Seconds after start before the first scheduled run.
    maintenance_delay_s: float = 60.0
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout_s: float = BODY_TIMEOUT_S
    #: Extra names (``NAME`` or ``NAME:PORT``) the server answers to besides its bind
    #: address (the loopback names on a loopback bind); any other Host gets 421.
    allowed_hosts: tuple[str, ...] = ()
    #: Multi-resource mode: each request's resource comes from its API key
    #: (``popagent.keys``); ``resource_id`` is then unused and ``token`` is the
    #: operator's, which manages keys and reads no memory.
    multi_resource: bool = False
    #: Seconds a GUI login lasts.
    login_ttl_s: float = LOGIN_TTL_S
    #: Failed logins of one credential from one client address per ``login_window_s``
    #: before 429; ``login_address_failures``: of any credential from that address.
    login_failures: int = LOGIN_FAILURES
    login_window_s: float = LOGIN_WINDOW_S
    login_address_failures: int = LOGIN_ADDRESS_FAILURES
    #: Proxies (addresses or networks) whose ``X-Forwarded-For`` and
    #: ``X-Forwarded-Proto`` are believed; none by default (``--trusted-proxy``).
    trusted_proxies: tuple[str, ...] = ()
    #: Requests that may wait for a database connection in this process (module
    #: ``web.admission``); past it 503 ``database_busy`` with ``Retry-After``.
    queue_limit: int = QUEUE_LIMIT
    #: Multi-resource mode: requests one key may make per minute (429 past it);
    #: ``None``: no limit. ``key_burst``: how many it may send at once (default:
    #: ``popagent.keys.BURST_SECONDS`` of the rate).
    key_requests_per_minute: int | None = DEFAULT_KEY_RATE
    key_burst: int | None = None
    #: Multi-resource mode: memories, and bytes of their content, one resource may
    #: store; a write past either gets 429. ``None``: no quota.
    quota_memories: int | None = None
    quota_bytes: int | None = None
