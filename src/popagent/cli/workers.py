"""``popagent serve --workers N``: several server processes on one socket, one database.

The parent process binds the socket (uvicorn's multiprocess supervisor), owns
the embedded PostgreSQL when there is no database URL (started once, watched
and restarted if its postmaster dies, stopped cleanly last), and hands every
worker the same configuration through one environment variable. Each worker
is a whole ``create_app`` server: its own pool, model client and, when the
schedule is on, scheduler.

Invariants:
- One cluster: workers connect to the parent's server by URL and never start
  or stop one themselves.
- One maintenance run at a time: the scheduler runs only in the process that
  holds its advisory try-lock (``web.scheduler``).
- One turn at a time per session across processes: the agent takes the
  session's advisory lock (``store.locks``).
- A worker's startup never fails on the database: the parent migrated it,
  and a worker (re)started while it is away serves 503s until it is back
  (uvicorn stops every process when one worker fails to start).
- A worker never outlives the parent: on Linux it asks the kernel to kill it
  when the parent dies, so a killed ``serve`` frees its port at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import json
import logging
import logging.config
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI

from ..defaults import DATABASE_URL_ENV, WORKER_CONFIG_ENV, WORKER_PARENT_ENV
from ..embed import configured_embedder
from ..errors import SecretKeyError
from ..secrets import SecretCipher
from ..store.database import open_pool
from ..store.embedded import EmbeddedServer
from ..store.tenant import require_boundary
from ..web import create_app
from ..web.config import ServerConfig
from .common import secret_cipher
from .serve_output import ServeOutput

__all__ = [
    "WORKER_CONFIG_ENV",
    "create_worker_app",
    "default_workers",
    "freeze_startup_heap",
    "parent_cluster",
]

log = logging.getLogger("popagent.serve")

#: How often the parent checks the embedded postmaster (and a worker its parent).
WATCH_INTERVAL_S = 0.5
_PR_SET_PDEATHSIG = 1


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def worker_environment(
    config: ServerConfig, *, database_url: str, log_level: str, output: ServeOutput
) -> None:
    """Put what every worker needs into this process's environment (inherited)."""
    payload = {"config": asdict(config), "log_level": log_level, **output.to_payload()}
    os.environ[WORKER_CONFIG_ENV] = json.dumps(payload)
    os.environ[WORKER_PARENT_ENV] = str(os.getpid())
    os.environ[DATABASE_URL_ENV] = database_url


def _die_with_parent() -> None:
    """End this worker as soon as its parent is gone.

    Linux's parent-death signal is relative to the parent's *thread* that
    started the worker, and uvicorn starts replacement workers from wherever
    it notices a death; so a watchdog thread also checks the parent every
    ``WATCH_INTERVAL_S`` (a worker whose parent died is re-parented).
    """
    # The parent's PID as the parent saw it: a worker still loading when its
    # parent died is already re-parented by the time it gets here.
    parent = int(os.environ.get(WORKER_PARENT_ENV, os.getppid()))
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_INTERVAL_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="popagent-parent-watch", daemon=True).start()


def create_worker_app() -> FastAPI:
    """The app of one worker process (uvicorn's factory): configured by the parent."""
    _die_with_parent()
    payload: dict[str, Any] = json.loads(os.environ[WORKER_CONFIG_ENV])
    output = ServeOutput.from_payload(payload)
    logging.config.dictConfig(output.logging_config(payload["log_level"]))
    logging.captureWarnings(True)
    fields = payload["config"]
    for name in ("allowed_hosts", "trusted_proxies"):  # JSON lists back to tuples
        fields[name] = tuple(fields[name])
    config = ServerConfig(**fields)
    cipher: SecretCipher | None
    try:
        cipher = secret_cipher()  # the parent created the key file if it was missing
    except SecretKeyError:
        cipher = None  # the parent already said why
    app = create_app(
        config,
        cipher=cipher,
        database_url=os.environ[DATABASE_URL_ENV],
        embedder=configured_embedder(),
        # The parent migrated it; a worker started during an outage must come up
        # (and answer 503) rather than fail, which would stop the whole server.
        database_migrated=True,
    )
    freeze_startup_heap()
    return app


def freeze_startup_heap() -> None:
    """Put what the server process holds before it serves (its modules, the app, their
    schemas: some 150,000 objects, which live as long as the process) out of the
    cyclic garbage collector's reach, so that a full collection scans only what
    serving allocated since.

    Called once, in the process that serves (``popagent serve``'s own, or each
    worker's), just before uvicorn starts it. A full collection comes after enough
    allocations, which an attack's connections (300 slow clients, a burst) make
    happen at once: over the whole startup heap it took ~80-100 ms of CPU on the
    event loop, and ``/healthz`` waited that long; over what serving allocated, ~5
    ms (``bench/edges.py``). The frozen objects are never collected, which they
    would not be anyway: ``gc.collect`` first frees the garbage startup left.
    """
    gc.collect()
    gc.freeze()


@contextmanager
def parent_cluster(
    database_url: str | None, data_dir: str | None, *, multi_resource: bool = False
) -> Iterator[str]:
    """The database URL the workers share: ``database_url``, or an embedded server
    started here, watched (restarted when its postmaster dies) and stopped on exit.
    With ``multi_resource``, a database that cannot keep resources apart is refused
    here (``store.tenant.require_boundary``)."""
    if database_url:
        asyncio.run(_preflight(database_url, multi_resource))
        yield database_url
        return
    server = EmbeddedServer(data_dir)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(WATCH_INTERVAL_S):
            if server.is_running():
                continue
            log.warning("embedded PostgreSQL stopped unexpectedly; restarting it")
            try:
                server.restart_if_down()
            except Exception as exc:  # keep watching whatever the wheel raised
                log.error("restarting embedded PostgreSQL failed: %s; trying again", exc)

    watcher = threading.Thread(target=watch, name="popagent-postgres-watch", daemon=True)
    try:
        asyncio.run(_preflight(server.url, multi_resource))
        watcher.start()
        yield server.url
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=5)
        server.stop()


async def _preflight(url: str, multi_resource: bool) -> None:
    """Reach and migrate the database once before any worker starts, so that a bad
    URL or an unreachable server is one clean error here, not N failing workers."""
    async with open_pool(url, min_size=1, max_size=1) as pool:
        if multi_resource:
            await require_boundary(pool)
