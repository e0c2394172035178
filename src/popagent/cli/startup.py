"""What ``popagent serve`` tells a person while it starts: each step, then the URL.

Plain lines on standard output (standard error stays JSON lines, ``web.logs``):
what is being started (PostgreSQL, its cluster made on the first run, the
migrations, the chat model and the embedder as configured), then
``popagent serve: ready at URL`` once the server answers HTTP, never before.
A port that another process holds is reported before anything starts, with
what to do.

Invariants: the ready line is printed at most once, only after a request to the
server's own address got an HTTP answer (any status: a token-protected server
answers 401 to a tokenless check); the check runs in a daemon thread and stops
when the server process ends.
"""

from __future__ import annotations

import errno
import http.client
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

__all__ = ["PortInUse", "check_port", "describe_database", "say", "when_ready"]

#: Seconds between two readiness checks, and the most one check waits for its answer.
_POLL_S = 0.2
_CHECK_TIMEOUT_S = 5.0


def say(message: str) -> None:
    """One progress line for a person, on standard output, at once."""
    click.echo(f"popagent serve: {message}")


class PortInUse(click.ClickException):
    """The port is taken: said in one sentence with what to do (exit 1)."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"port {port} on {host} is in use by another program (another `popagent serve`?). "
            f"Stop that one, or start this one on another port: popagent serve --port {port + 1}"
        )


def _family(host: str) -> socket.AddressFamily:
    try:
        return (
            socket.AF_INET6
            if ipaddress.ip_address(host.strip("[]")).version == 6
            else socket.AF_INET
        )
    except ValueError:  # a name: as uvicorn binds it
        return socket.AF_INET


def check_port(host: str, port: int) -> None:
    """Raise ``PortInUse`` when ``host:port`` cannot be bound because it is taken.

    Binds the way uvicorn will (``SO_REUSEADDR``, so a port in TIME_WAIT is free)
    and lets go at once; other bind errors are left for uvicorn to report.
    Port 0 (any free port) is never taken.
    """
    if port == 0:
        return
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(host, port) from exc


def describe_database(database_url: str | None, data_dir: str | None) -> str:
    """What will be started or used, for the progress line before it happens."""
    if database_url:
        return "connecting to the PostgreSQL server of --database-url and applying migrations"
    from ..store.embedded import CLUSTER_DIR, default_data_dir

    folder = Path(data_dir).expanduser() if data_dir else default_data_dir()
    pgdata = folder / CLUSTER_DIR
    if (pgdata / "PG_VERSION").exists():
        return f"starting PostgreSQL ({pgdata}) and applying migrations"
    return (
        f"creating the PostgreSQL cluster in {pgdata} (first run only: initdb, up to a "
        "minute), starting it and applying migrations"
    )


def _probe_host(host: str) -> str:
    """The address to check: the bound one, or loopback for a wildcard bind."""
    bare = host.strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return bare
    if address.is_unspecified:
        return "::1" if address.version == 6 else "127.0.0.1"
    return bare


def _answers(host: str, port: int) -> bool:
    connection = http.client.HTTPConnection(host, port, timeout=_CHECK_TIMEOUT_S)
    try:
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def when_ready(host: str, port: int, on_ready: Callable[[], None]) -> threading.Thread:
    """Call ``on_ready()`` once the server on ``host:port`` answers HTTP (a daemon thread)."""
    target = _probe_host(host)

    def watch() -> None:
        while not _answers(target, port):
            time.sleep(_POLL_S)
        on_ready()

    thread = threading.Thread(target=watch, name="popagent-ready", daemon=True)
    thread.start()
    return thread
