"""Opening the database: choose the server, open the pool, migrate, keep it up.

``POPAGENT_DATABASE_URL`` (or an explicit URL) selects an existing server;
without one, an embedded cluster is started, supervised (restarted when its
postmaster dies, see ``supervisor``) and stopped with the pool.

Failures speak popagent's vocabulary: a server that cannot be reached at
start, an unparsable URL or a failed migration raises ``DatabaseError``, and so
does every ``psycopg.OperationalError`` that escapes ``pool.connection()``
(connection refused or lost, a server shutting down, no connection within the
checkout timeout, disk full). Other psycopg errors (integrity violations above
all, which the services catch) pass through unchanged. A caller waits at most
the checkout timeout (2 s by default) for a connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout, TooManyRequests

from ..defaults import DATABASE_URL_ENV
from ..errors import DatabaseError
from .embedded import EmbeddedServer
from .migrate import apply_migrations
from .supervisor import supervised

__all__ = [
    "DATABASE_URL_ENV",
    "DEFAULT_CHECKOUT_TIMEOUT",
    "SESSION_SETTINGS",
    "Conn",
    "Pool",
    "configure_connection",
    "database_error",
    "open_pool",
    "resolve_url",
]

#: Seconds a caller waits for a pooled connection before ``DatabaseError``.
DEFAULT_CHECKOUT_TIMEOUT = 2.0

# Applied only where the URL sets no connect_timeout: libpq would otherwise wait on an
# unreachable TCP host for minutes.
_CONNECT_TIMEOUT_S = 10
# A lost connection is retried with doubling delays; giving a slot up after this long
# lets a fresh attempt start at once, so recovery never waits on a long delay.
_RECONNECT_TIMEOUT_S = 10.0
# At most one refresh of idle connections per this interval after failures.
_REFRESH_INTERVAL_S = 1.0
# How long the background re-check waits for a connection.
_RECHECK_TIMEOUT_S = 2.0

logger = logging.getLogger("popagent.store")

#: A pooled connection: dict rows, autocommit (the service layer opens transactions).
Conn = psycopg.AsyncConnection[dict[str, Any]]


# popagent's statements are short index lookups whose latency matters; starting a
# parallel worker costs more than it could save, yet the planner chose one for
# recall once a costly index expression made the scan look large.
SESSION_SETTINGS = "SET max_parallel_workers_per_gather = 0"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """A failure of the connection or the server, not of one statement."""
    code = exc.sqlstate or ""
    return isinstance(exc, PoolTimeout) or not code or code.startswith(("08", "57P"))


def database_error(exc: psycopg.OperationalError) -> DatabaseError:
    """``exc`` as popagent's ``DatabaseError``, with a message that names no data."""
    code = exc.sqlstate or ""
    if isinstance(exc, PoolTimeout):
        message = (
            "the database did not answer in time (PostgreSQL is down, restarting or "
            "overloaded); try again in a few seconds"
        )
    elif isinstance(exc, TooManyRequests):
        message = "too many requests are waiting for the database; try again shortly"
    elif isinstance(exc, PoolClosed):
        message = "the database connection pool is closed"
    elif code == "53100":
        message = "PostgreSQL is out of disk space; free space on its disk and try again"
    elif code.startswith("53"):
        name = type(exc).__name__
        message = f"PostgreSQL is out of resources ({name}); try again shortly"
    elif code.startswith("40"):
        message = "the database gave up the operation because of a conflicting one; try again"
    elif code == "57014":
        message = "the database canceled the operation; try again"
    elif _connection_lost(exc):
        message = (
            "the connection to PostgreSQL was lost or could not be made (it may be "
            "restarting); try again in a few seconds"
        )
    else:
        message = f"PostgreSQL could not complete the operation (SQLSTATE {code}); try again"
    return DatabaseError(message)


class Pool(AsyncConnectionPool[Conn]):
    """popagent's connection pool: a failing database surfaces as ``DatabaseError``.

    ``connection()`` translates a ``psycopg.OperationalError`` raised while
    getting or using the connection (see ``database_error``); every other error,
    ``CancelledError`` included, passes unchanged. After a lost connection the
    idle connections are tested in the background (at most once a second) so
    broken ones are replaced as soon as the server is back, and a connection is
    then used, which clears ``down_since``. Without that last step a process
    that only answers ``/healthz`` (one of several workers, say) would report
    the database down forever: ``/healthz`` answers 503 at once while
    ``down_since`` is set, and nothing else would ever use a connection there.
    """

    _refresh: asyncio.Task[None] | None = None
    _refreshed_at: float = 0.0
    #: Since when (``time.monotonic()``) the server has been seen away: set by a
    #: lost connection or by the embedded server's supervisor, cleared by the
    #: next connection used without error. ``None`` while it answers.
    down_since: float | None = None

    # The overrides keep psycopg_pool's signatures, ``timeout`` included.
    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[Conn]:  # noqa: ASYNC109
        try:
            async with super().connection(timeout) as conn:
                yield conn
        except psycopg.OperationalError as exc:
            if _connection_lost(exc):
                if self.down_since is None:
                    self.down_since = time.monotonic()
                self.recheck_soon()
            raise database_error(exc) from exc
        if self.down_since is not None:
            self.down_since = None

    def recheck_soon(self) -> None:
        """Test the connections in the background (at most once a second), then use one.

        A no-op when a check ran in the last second or is running; callers that
        see the server away call it freely.
        """
        now = time.monotonic()
        if self.closed or now - self._refreshed_at < _REFRESH_INTERVAL_S:
            return
        if self._refresh is None or self._refresh.done():
            self._refreshed_at = now
            self._refresh = asyncio.get_running_loop().create_task(self.recheck())

    async def recheck(self) -> None:
        """Replace broken idle connections, then run ``SELECT 1`` (clearing
        ``down_since`` when it succeeds); never raises."""
        try:
            await self.check()
            async with self.connection(timeout=_RECHECK_TIMEOUT_S) as conn:
                await conn.execute("SELECT 1")
        except Exception as exc:  # the pool keeps reconnecting by itself
            logger.debug("pool check failed: %s", type(exc).__name__)

    async def close(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        task = self._refresh
        try:
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait([task])
        finally:
            await super().close(timeout)


async def configure_connection(conn: Conn) -> None:
    """Session settings of every pooled connection."""
    await conn.execute(SESSION_SETTINGS)


def resolve_url(url: str | None) -> str | None:
    """The explicit URL, else ``POPAGENT_DATABASE_URL``, else ``None`` (embedded)."""
    return url or os.environ.get(DATABASE_URL_ENV) or None


def _connect_options(target: str) -> dict[str, Any]:
    """Connection options ``target`` leaves out; ``DatabaseError`` for an unparsable URL."""
    try:
        params = conninfo_to_dict(target)
    except psycopg.Error as exc:
        # libpq's message quotes the string, which may hold a password.
        raise DatabaseError(
            "the database URL is not a valid PostgreSQL connection string "
            "(expected postgresql://user:password@host:port/dbname)"
        ) from exc
    return {} if "connect_timeout" in params else {"connect_timeout": _CONNECT_TIMEOUT_S}


async def _migrate(target: str, options: dict[str, Any]) -> None:
    try:
        conn = await psycopg.AsyncConnection.connect(target, **options)
    except psycopg.Error as exc:
        raise DatabaseError(f"could not connect to PostgreSQL: {_one_line(exc)}") from exc
    try:
        async with conn:
            await apply_migrations(conn)
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"could not prepare the database: {database_error(exc)}") from exc
    except psycopg.Error as exc:
        raise DatabaseError(f"could not prepare the database: {_one_line(exc)}") from exc


@asynccontextmanager
async def open_pool(
    url: str | None = None,
    *,
    data_dir: Path | str | None = None,
    min_size: int = 1,
    max_size: int = 10,
    checkout_timeout: float = DEFAULT_CHECKOUT_TIMEOUT,
    migrated: bool = False,
) -> AsyncIterator[Pool]:
    """Yield a migrated, open pool; close it (and stop any embedded server) on exit.

    Without a URL the embedded server in ``data_dir`` is started and supervised
    for the life of the pool. ``checkout_timeout`` bounds how long
    ``pool.connection()`` waits before raising ``DatabaseError``. Raises
    ``DatabaseError`` when the server cannot be started, reached or migrated.

    ``migrated=True`` (a server worker whose parent process migrated the
    database, with a URL) skips the migrations and opens the pool without
    waiting for the server: a worker that starts during an outage (a crashed
    worker's replacement, say) comes up, answers 503 until the server is back,
    and never takes the whole server down by failing its startup.
    """
    if migrated and resolve_url(url) is None:
        raise ValueError("migrated=True needs a database URL (no embedded server)")
    target = resolve_url(url)
    server: EmbeddedServer | None = None
    if target is None:
        server = EmbeddedServer(data_dir)
        target = server.url
    try:
        options = _connect_options(target)
        if not migrated:
            await _migrate(target, options)
        pool = Pool(
            target,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row, "autocommit": True, **options},
            configure=configure_connection,
            timeout=checkout_timeout,
            reconnect_timeout=_RECONNECT_TIMEOUT_S,
            name="popagent",
            open=False,
        )
        try:
            await pool.open(wait=not migrated, timeout=30)
        except psycopg.Error as exc:
            await pool.close()
            raise DatabaseError(f"could not connect to PostgreSQL: {_one_line(exc)}") from exc
        try:
            if server is None:
                yield pool
            else:
                async with supervised(server, pool):
                    yield pool
        finally:
            await pool.close()
    finally:
        if server is not None:
            server.stop()
