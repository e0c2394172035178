"""Opening the database: choose the server, open the pool, migrate, keep it up.

``POPAGENT_DATABASE_URL`` (or an explicit URL) selects an existing server;
without one, an embedded cluster is started, supervised (restarted when its
postmaster dies, see ``supervisor``) and stopped with the pool.

Failures speak popagent's vocabulary: a server that cannot be reached at
start, an unparsable URL or a failed migration raises ``DatabaseError``, and so
does every ``psycopg.OperationalError`` that escapes ``pool.connection()``
(connection refused or lost, a server shutting down, disk full). Other psycopg
errors (integrity violations above all, which the services catch) pass
through unchanged.

Waiting for a connection is not an outage. A burst larger than the pool waits
in the pool's queue, in order, and a caller waits

- while the server answers: up to ``queue_timeout`` (``DEFAULT_QUEUE_TIMEOUT``,
  30 s), and not at all when ``queue_limit`` callers (``DEFAULT_QUEUE_LIMIT``,
  10,000) already wait; past either it gets ``DatabaseBusyError`` ("busy, retry"),
  which the server answers with 503 ``database_busy`` and ``Retry-After``;
- while the server is known away: at most ``checkout_timeout``
  (``DEFAULT_CHECKOUT_TIMEOUT``, 2 s) from its arrival or from when the server
  was seen away, whichever is later, then ``DatabaseError`` ("PostgreSQL does
  not answer"). The pool's ``down_since`` marks it away: set by a connection
  lost in use, by the embedded server's supervisor, or by a probe; cleared by
  the next connection used without error. The probe runs when a caller has
  waited ``checkout_timeout`` and no connection came back to the pool
  meanwhile (a server that hangs rather than refuses): it opens a connection
  of its own and runs ``SELECT 1``, within ``checkout_timeout``.

A caller on another event loop than the pool's (a thread running a loop of its
own, as ``asyncio.run`` or the OpenAI Agents SDK's ``Runner.run_sync`` in a
worker thread make) cannot use the pool's connections, which belong to the
pool's loop: it gets a connection of its own for the call, opened and closed on
its loop, at most ``max_size`` such at a time. Nothing then depends on the
pool's loop running (it may be blocked waiting for that very thread).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout, TooManyRequests

from ..defaults import DATABASE_URL_ENV
from ..errors import DatabaseBusyError, DatabaseError
from . import tenant
from .embedded import EmbeddedServer
from .migrate import apply_migrations
from .supervisor import supervised

__all__ = [
    "DATABASE_URL_ENV",
    "DEFAULT_CHECKOUT_TIMEOUT",
    "DEFAULT_QUEUE_LIMIT",
    "DEFAULT_QUEUE_TIMEOUT",
    "DOWN_MESSAGE",
    "HNSW_EF_SEARCH",
    "SESSION_SETTINGS",
    "Conn",
    "Pool",
    "configure_connection",
    "database_error",
    "node_refusal",
    "open_pool",
    "resolve_url",
]

#: Seconds a caller waits for a connection once the server is known away (and the
#: probe's limit) before ``DatabaseError``.
DEFAULT_CHECKOUT_TIMEOUT = 2.0
#: Seconds a caller waits in the pool's queue while the server answers, before
#: ``DatabaseBusyError``.
DEFAULT_QUEUE_TIMEOUT = 30.0
#: Callers that may wait in one pool's queue; the next one gets ``DatabaseBusyError`` at once.
DEFAULT_QUEUE_LIMIT = 10_000

DOWN_MESSAGE = "PostgreSQL does not answer (it is down or restarting); try again in a few seconds"

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
# How often a caller on another event loop looks for a free slot for its connection.
_FOREIGN_POLL_S = 0.01
# SQLSTATE too_many_connections: the server answers, it is only full.
_TOO_MANY_CONNECTIONS = "53300"

logger = logging.getLogger("popagent.store")

#: A pooled connection: dict rows, autocommit (the service layer opens transactions).
Conn = psycopg.AsyncConnection[dict[str, Any]]


#: Candidates pgvector's graph search keeps per step (``store.vectors``): more finds
#: more true neighbours, slower.
HNSW_EF_SEARCH = 100

# popagent's statements are short index lookups whose latency matters; starting a
# parallel worker costs more than it could save, yet the planner chose one for
# recall once a costly index expression made the scan look large. The graph
# search's settings are the session's too, so that on plain PostgreSQL a search
# is one statement, not a transaction of three (measured: 1 ms less per fused
# recall at 10,000 memories); ``set_config`` on a name pgvector has not defined
# yet keeps it until the extension loads, and is harmless without pgvector.
SESSION_SETTINGS = (
    "SELECT set_config('max_parallel_workers_per_gather', '0', false),"
    " set_config('hnsw.iterative_scan', 'relaxed_order', false),"
    f" set_config('hnsw.ef_search', '{HNSW_EF_SEARCH}', false)"
)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# Citus reports a node that refused its connection with the SQLSTATE of a lost
# connection (08006) and the node's own error in the message ("connection to the
# remote node USER@HOST:PORT failed with the following error: ..."). When the node
# refused the role itself (it may not log in there, has no pg_hba.conf entry or
# does not exist), no retry can succeed: that is a configuration error. The message
# is the server's, of bounded size; the pattern has no nested repetition.
_NODE_REFUSED = re.compile(
    r"connection to the remote node (?P<user>[^@\s]+)@(?P<node>\S+) failed with the following"
    r" error:.*?(?P<why>is not permitted to log in|password authentication failed"
    r"|no pg_hba\.conf entry|does not exist|permission denied)",
    re.DOTALL,
)


def node_refusal(exc: psycopg.Error) -> str | None:
    """What a Citus node refused (role and node), as a sentence saying what to do,
    when ``exc`` is such a refusal; else ``None``."""
    found = _NODE_REFUSED.search(str(exc))
    if found is None:
        return None
    user, node, why = found["user"], found["node"], found["why"]
    if user == tenant.TENANT_ROLE:
        remedy = (
            "multi-resource mode needs plain PostgreSQL; on Citus, run one server per "
            "resource (without --multi-resource)"
        )
    else:
        remedy = f"let {user} connect to every node of the cluster (docs/scaling.md)"
    return (
        f"a node of the Citus cluster ({node}) refused a connection as the role {user} "
        f"({why}): a configuration error, not an outage, so retrying cannot help; {remedy}"
    )


def _connection_lost(exc: psycopg.OperationalError) -> bool:
    """A failure of the connection or the server, not of one statement (nor of the
    wait, nor a Citus node refusing a role: ``node_refusal``)."""
    if isinstance(exc, PoolTimeout | TooManyRequests | PoolClosed):
        return False
    code = exc.sqlstate or ""
    if code.startswith("08") and node_refusal(exc) is not None:
        return False
    return not code or code.startswith(("08", "57P"))


def database_error(exc: psycopg.OperationalError) -> DatabaseError:
    """``exc`` as popagent's ``DatabaseError``, with a message that names no data.

    A ``PoolTimeout`` here is a wait for a server known away (``Pool`` turns a
    wait in line into ``DatabaseBusyError`` itself), ``TooManyRequests`` a full
    queue.
    """
    code = exc.sqlstate or ""
    if isinstance(exc, PoolTimeout):
        message = DOWN_MESSAGE
    elif isinstance(exc, TooManyRequests):
        return DatabaseBusyError(
            "every database connection is in use and the queue for one is full; retry shortly"
        )
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
    elif refused := node_refusal(exc):
        message = refused
    elif _connection_lost(exc):
        message = (
            "the connection to PostgreSQL was lost or could not be made (it may be "
            "restarting); try again in a few seconds"
        )
    else:
        message = f"PostgreSQL could not complete the operation (SQLSTATE {code}); try again"
    return DatabaseError(message)


class Pool(AsyncConnectionPool[Conn]):
    """popagent's connection pool: a failing database surfaces as ``DatabaseError``,
    a busy one as ``DatabaseBusyError`` (module doc).

    ``connection()`` translates a ``psycopg.OperationalError`` raised while
    getting or using the connection (see ``database_error``); every other error,
    ``CancelledError`` included, passes unchanged. A wait without an explicit
    ``timeout`` follows the queue's rules (module doc); with one (the
    background re-check) it is psycopg_pool's plain wait. After a lost
    connection the idle connections are tested in the background (at most
    once a second) so broken ones are replaced as soon as the server is back,
    and a connection is then used, which clears ``down_since``. Without that
    last step a process that only answers ``/healthz`` (one of several
    workers, say) would report the database down forever: ``/healthz`` answers
    503 at once while ``down_since`` is set, and nothing else would ever use a
    connection there.
    """

    _refresh: asyncio.Task[None] | None = None
    _refreshed_at: float = 0.0

    def __init__(
        self,
        conninfo: str,
        *,
        checkout_timeout: float = DEFAULT_CHECKOUT_TIMEOUT,
        queue_timeout: float = DEFAULT_QUEUE_TIMEOUT,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        **kwargs: Any,
    ) -> None:
        for name, value in (
            ("checkout_timeout", checkout_timeout),
            ("queue_timeout", queue_timeout),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if isinstance(queue_limit, bool) or not isinstance(queue_limit, int) or queue_limit < 1:
            raise ValueError("queue_limit must be a positive integer")
        # psycopg_pool's own timeout is a backstop: ``getconn`` ends a queued wait first.
        super().__init__(
            conninfo,
            timeout=queue_timeout + checkout_timeout,
            max_waiting=queue_limit,
            **kwargs,
        )
        # Kept as given for the probe and for callers on other event loops.
        self._target = conninfo
        self._connect_kwargs: dict[str, Any] = dict(kwargs.get("kwargs") or {})
        self.checkout_timeout = checkout_timeout
        self.queue_timeout = queue_timeout
        self.queue_limit = queue_limit
        self._down_since: float | None = None
        # Callers waiting in the queue: their deadline's timer and when they arrived.
        self._waiting_callers: dict[int, tuple[asyncio.Timeout, float]] = {}
        self._returned_at = time.monotonic()
        self._probe: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._foreign_slots = threading.BoundedSemaphore(self.max_size)

    # --- the server seen away -------------------------------------------------------

    @property
    def down_since(self) -> float | None:
        """Since when (``time.monotonic()``) the server has been seen away: set by a
        lost connection, the embedded server's supervisor or a failed probe, cleared
        by the next connection used without error. ``None`` while it answers."""
        return self._down_since

    @down_since.setter
    def down_since(self, value: float | None) -> None:
        changed = (value is None) != (self._down_since is None)
        self._down_since = value
        if changed and self._waiting_callers:
            self._reschedule()

    def _deadline(self, arrival: float) -> float:
        """When a caller that arrived at ``arrival`` stops waiting (``time.monotonic()``)."""
        deadline = arrival + self.queue_timeout
        if self._down_since is not None:
            deadline = min(deadline, max(arrival, self._down_since) + self.checkout_timeout)
        return deadline

    def _reschedule(self) -> None:
        """Move every waiting caller's deadline after ``down_since`` changed."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        for limit, arrival in self._waiting_callers.values():
            limit.reschedule(loop.time() + self._deadline(arrival) - now)

    # --- checking a connection out ----------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the pool was opened on (its connections belong to it);
        ``None`` before ``open``."""
        return self._loop

    async def open(self, wait: bool = False, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        self._loop = asyncio.get_running_loop()
        await super().open(wait, timeout)

    async def getconn(self, timeout: float | None = None) -> Conn:  # noqa: ASYNC109
        if timeout is not None:
            return await super().getconn(timeout)
        loop = asyncio.get_running_loop()
        arrival = time.monotonic()
        limit = asyncio.timeout(self._deadline(arrival) - arrival)
        stalled = loop.call_later(self.checkout_timeout, self._stalled)
        key = id(limit)
        self._waiting_callers[key] = (limit, arrival)
        try:
            async with limit:
                return await super().getconn()
        except TimeoutError:
            if not limit.expired():
                raise
            raise PoolTimeout(f"no connection within {time.monotonic() - arrival:.1f} s") from None
        finally:
            stalled.cancel()
            del self._waiting_callers[key]

    async def putconn(self, conn: Conn) -> None:
        self._returned_at = time.monotonic()
        await super().putconn(conn)

    def _wait_error(self, exc: PoolTimeout | TooManyRequests) -> DatabaseError:
        """A wait that ended without a connection: an outage, or a busy pool."""
        if isinstance(exc, PoolTimeout) and self._down_since is None:
            return DatabaseBusyError(
                f"every database connection stayed in use: {exc}; {len(self._waiting_callers)} "
                "more requests are waiting; retry shortly"
            )
        return database_error(exc)

    # The overrides keep psycopg_pool's signatures, ``timeout`` included.
    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[Conn]:  # noqa: ASYNC109
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            async with self._foreign_connection() as conn:
                yield conn
            return
        try:
            async with super().connection(timeout) as conn:
                # Multi-resource mode: confined to the caller's resource by row-level
                # security, or the owner's again (``store.tenant``).
                await tenant.confine(conn, tenant.current_tenant())
                yield conn
        except (PoolTimeout, TooManyRequests) as exc:
            raise self._wait_error(exc) from exc
        except psycopg.OperationalError as exc:
            if _connection_lost(exc):
                self.mark_down()
            raise database_error(exc) from exc
        if self._down_since is not None:
            self.down_since = None

    def mark_down(self, since: float | None = None) -> None:
        """Note the server away (since ``since``, default now) unless it is already, and
        have the connections tested in the background (``recheck_soon``)."""
        if self._down_since is None:
            self.down_since = time.monotonic() if since is None else since
        self.recheck_soon()

    def _stalled(self) -> None:
        """A caller has waited ``checkout_timeout``: probe the server, unless a connection
        came back to the pool meanwhile (then it is only busy)."""
        if self.closed or self._down_since is not None:
            return
        if time.monotonic() - self._returned_at < self.checkout_timeout:
            return
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_server())

    async def _probe_server(self) -> None:
        """Connect and run ``SELECT 1`` outside the pool; mark the server away when that
        fails, or takes longer than ``checkout_timeout`` while no connection came back
        to the pool. Never raises."""
        began = time.monotonic()
        try:
            async with asyncio.timeout(self.checkout_timeout):
                conn = await psycopg.AsyncConnection.connect(
                    self._target, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S
                )
                async with conn:
                    await conn.execute("SELECT 1")
        except TimeoutError:
            # Too slow: away, unless connections came back meanwhile (then this
            # process's loop was only too busy to run the probe in time).
            if self._returned_at < began:
                self.mark_down(began)
        except psycopg.OperationalError as exc:
            if exc.sqlstate != _TOO_MANY_CONNECTIONS:  # full, but it answers
                self.mark_down(began)
        except Exception as exc:  # a probe never fails its caller
            logger.debug("pool probe failed: %s", type(exc).__name__)

    @asynccontextmanager
    async def _foreign_connection(self) -> AsyncIterator[Conn]:
        """A connection of its own for a caller on another event loop (module doc)."""
        arrival = time.monotonic()
        while not self._foreign_slots.acquire(blocking=False):
            if time.monotonic() - arrival > self.queue_timeout:
                raise DatabaseBusyError(
                    f"every connection for other event loops ({self.max_size}) stayed in use "
                    f"for {self.queue_timeout:g} s; retry shortly"
                )
            await asyncio.sleep(_FOREIGN_POLL_S)
        try:
            try:
                raw = await psycopg.AsyncConnection.connect(self._target, **self._connect_kwargs)
            except psycopg.OperationalError as exc:
                raise database_error(exc) from exc
            conn = cast(Conn, raw)
            try:
                async with conn:  # closed however the setup or the caller ends
                    await configure_connection(conn)
                    await tenant.confine(conn, tenant.current_tenant())
                    yield conn
            except psycopg.OperationalError as exc:
                raise database_error(exc) from exc
        finally:
            self._foreign_slots.release()

    # --- keeping it up ----------------------------------------------------------------

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

    @property
    def waiting(self) -> int:
        """Callers of this process now waiting in the queue for a connection."""
        return len(self._waiting_callers)

    @property
    def target(self) -> str:
        """The connection string the pool connects with (a probe's own connection)."""
        return self._target

    def busy(self) -> bool:
        """Whether callers wait in the queue while connections keep coming back (a
        busy pool, not a silent server)."""
        return bool(self._waiting_callers) and (
            time.monotonic() - self._returned_at < self.checkout_timeout
        )

    async def close(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        tasks = [t for t in (self._refresh, self._probe) if t is not None and not t.done()]
        try:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
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
    queue_timeout: float = DEFAULT_QUEUE_TIMEOUT,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
    migrated: bool = False,
) -> AsyncIterator[Pool]:
    """Yield a migrated, open pool; close it (and stop any embedded server) on exit.

    Without a URL the embedded server in ``data_dir`` is started and supervised
    for the life of the pool. ``checkout_timeout``, ``queue_timeout`` and
    ``queue_limit`` bound how long ``pool.connection()`` waits (module doc).
    Raises ``DatabaseError`` when the server cannot be started, reached or
    migrated.

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
            checkout_timeout=checkout_timeout,
            queue_timeout=queue_timeout,
            queue_limit=queue_limit,
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
