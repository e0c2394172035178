"""``popagent mcp``: serve the resource's memory over the Model Context Protocol.

The resource is the group's ``--resource-id`` (default ``popagent-user``); MCP
clients cannot choose another. Over stdio (the default) the client starts this
command itself; over streamable HTTP it serves ``http://HOST:PORT/mcp``, on
127.0.0.1 unless ``--host`` says otherwise, which needs a bearer token
(``POPAGENT_TOKEN`` or ``--token-file``): without one the command exits with 2
before opening the database. Messages for a person go to stderr; on stdio,
stdout carries only the protocol.

SIGTERM is handled like Ctrl-C (exit 0): the server stops, then the database
connection closes and an embedded PostgreSQL this command started is stopped.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from typing import TYPE_CHECKING, Any

import click

from ..access import load_token, require_token_for
from ..checks import check_id
from ..connection import connect
from ..defaults import DEFAULT_HOST, DEFAULT_MCP_PORT
from ..embed import configured_embedder
from ..store.tenant import require_boundary
from .common import LimitFlags, Settings, exit_codes, limit_options, token_file_option

if TYPE_CHECKING:
    from ..keys import Limits

__all__ = ["mcp_command"]

# ``popagent.mcp`` (the SDK, uvicorn) is imported when the command runs, not when
# the CLI starts: it would add a second to every other command. The defaults come
# from ``popagent.defaults``.


@click.command("mcp")
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for a client that starts this command; http for streamable HTTP.",
)
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="HTTP: address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_MCP_PORT,
    show_default=True,
    help="HTTP: port to bind (0: a free one, printed on stderr).",
)
@token_file_option("HTTP: file whose first line is the bearer token (or set POPAGENT_TOKEN).")
@click.option(
    "--multi-resource",
    is_flag=True,
    help="HTTP: serve every resource; each request's from its API key (`popagent keys`).",
)
@limit_options
@click.pass_context
def mcp_command(
    ctx: click.Context,
    transport: str,
    host: str,
    port: int,
    token_file: str | None,
    multi_resource: bool,
    limits: LimitFlags,
) -> None:
    """Serve this resource's memory as MCP tools (remember, recall, list_facts,
    forget_fact, list_episodes, get_episode)."""
    settings: Settings = ctx.obj
    with exit_codes():
        resource_id = check_id("resource_id", settings.resource_id)
        sock: socket.socket | None = None
        token: str | None = None
        if multi_resource and transport != "http":
            raise click.UsageError("--multi-resource: needs --transport http")
        checked = limits.limits()  # a bad combination exits with 2 before anything starts
        if transport == "http":
            token = load_token(token_file)
            if not multi_resource:  # then every request needs an API key anyway
                require_token_for(host, token)
            from ..mcp import bind

            try:
                sock = bind(host, port)
            except OSError as exc:
                raise click.ClickException(f"cannot bind {host}:{port}: {exc.strerror}") from exc
        try:
            asyncio.run(_serve(settings, resource_id, sock, token, multi_resource, checked))
        except KeyboardInterrupt:
            pass
        finally:
            if sock is not None:
                sock.close()


class _Termination:
    """SIGTERM handled like Ctrl-C: the serving task is cancelled once, so every
    context it entered closes (the pool, and the embedded PostgreSQL it started).

    Over HTTP, ``web`` is the uvicorn server: it is told to shut down gracefully
    instead (uvicorn also sees the signal itself once it serves, and raises it
    again when done). Disarmed once serving has ended: a cancellation then would
    cut short the shutdown of the database.
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.armed = True
        self.fired = False
        self.web: Any = None

    def __call__(self) -> None:
        if not self.armed:
            return
        if self.web is not None:
            self.web.should_exit = True
        elif not self.fired:
            self.fired = True
            self.task.cancel()


async def _serve(
    settings: Settings,
    resource_id: str,
    sock: socket.socket | None,
    token: str | None,
    multi_resource: bool = False,
    limits: Limits | None = None,
) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    termination = _Termination(task)
    # Before the database is opened: a SIGTERM during start-up stops it as well.
    loop.add_signal_handler(signal.SIGTERM, termination)
    try:
        await _serve_until_done(
            settings, resource_id, sock, token, termination, multi_resource, limits
        )
    except asyncio.CancelledError:
        if not termination.fired:
            raise
        task.uncancel()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _serve_until_done(
    settings: Settings,
    resource_id: str,
    sock: socket.socket | None,
    token: str | None,
    termination: _Termination,
    multi_resource: bool = False,
    limits: Limits | None = None,
) -> None:
    from ..mcp import MCP_PATH, MemoryServer, http_server, serve_stdio

    # stdio serves one client; HTTP may serve several agents at once.
    pool_size = 4 if sock is None else 10
    async with connect(
        settings.database_url,
        data_dir=settings.data_dir,
        max_size=pool_size,
        embedder=configured_embedder(),
    ) as app:
        if multi_resource:  # refuse here, not on every request (as serve does)
            await require_boundary(app.pool)
        # The model loads now, not in the first recall; memories stored without
        # vectors (by any process) get them in the background meanwhile.
        await app.memory.warm_up()
        if not multi_resource:
            app.memory.watch_vectors(resource_id)
        server = MemoryServer(app, resource_id, multi_resource=multi_resource, limits=limits)
        if sock is None:
            _note(f"serving resource {resource_id!r} over stdio")
            await serve_stdio(server)
            termination.armed = False
            return
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        auth = "bearer token required" if token else "no token: loopback only"
        if multi_resource:
            auth = "an API key per request"
        served = "every resource" if multi_resource else f"resource {resource_id!r}"
        _note(f"serving {served} over streamable HTTP at http://{shown}:{port}{MCP_PATH} ({auth})")
        web = http_server(server, sock, token=token)
        termination.web = web
        await web.serve(sockets=[sock])
        termination.armed = False


def _note(message: str) -> None:
    click.echo(f"popagent mcp: {message}", err=True)
