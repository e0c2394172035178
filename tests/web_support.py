"""Web test helpers: the server app in process (httpx over ASGI, lifespan run) and a
real uvicorn on 127.0.0.1 in a background thread."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

import popagent
from popagent import Popagent
from popagent.llm import ModelSettings
from popagent.llm.protocol import ChatModel
from popagent.web import ServerConfig, create_app
from popagent.web.edge import uvicorn_options
from tests.scripted_model import ScriptedModelServer

BASE = "http://127.0.0.1:8787"


@asynccontextmanager
async def in_process(app: FastAPI, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to ``app`` in process, with its lifespan running."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as client:
            yield client


def scripted_settings(
    scripted: ScriptedModelServer, *, max_retries: int = 0, timeout_s: float = 10.0
) -> ModelSettings:
    """The real client's settings for the scripted model server, with millisecond backoff."""
    return ModelSettings(
        base_url=scripted.base_url,
        api_key=None,
        model="scripted-1",
        timeout_s=timeout_s,
        connect_timeout_s=2.0,
        max_retries=max_retries,
        backoff_initial_s=0.01,
        backoff_max_s=0.02,
    )


@asynccontextmanager
async def api_client(
    root: Popagent, resource_id: str, model: ChatModel | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the server app for ``resource_id`` on ``root``, no schedule; chat
    turns use ``model`` (without one, and never from the environment, they answer 503)."""
    app = create_app(
        ServerConfig(resource_id=resource_id, maintenance_interval_s=None),
        root=root,
        model=model,
        model_from_env=False,
    )
    async with in_process(app) as client:
        yield client


async def count_rows(memory: popagent.LongTermMemory, resource_id: str) -> int:
    """How many memories (facts and episodes) ``resource_id`` has."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM popagent_memories WHERE resource_id = %s", (resource_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def memory_state(memory: popagent.LongTermMemory, resource_id: str) -> tuple[Any, ...]:
    """Every memory and fact version of ``resource_id``, exactly: a refused write must
    leave it as it was."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id, key, content, importance, expires_at, version, origin, updated_at"
            " FROM popagent_memories WHERE resource_id = %s ORDER BY id",
            (resource_id,),
        )
        memories = [tuple(r.values()) for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT fact_id, version, content, ended, valid_to FROM popagent_fact_versions"
            " WHERE resource_id = %s ORDER BY fact_id, version",
            (resource_id,),
        )
        versions = [tuple(r.values()) for r in await cur.fetchall()]
    return tuple(memories), tuple(versions)


def cli_command(*args: str) -> list[str]:
    """``popagent ARGS`` as this interpreter runs it."""
    return [sys.executable, "-m", "popagent.cli", *args]


def wait_healthy(base: str, process: subprocess.Popen[str], seconds: float = 60) -> None:
    """Poll ``base``/healthz until it answers 200; fails when ``process`` (the server)
    exits first, showing its stderr if piped, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            stderr = process.communicate(timeout=30)[1] if process.stderr is not None else ""
            raise AssertionError(f"the server exited ({process.returncode}): {stderr}")
        assert time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def uvicorn_server(config: ServerConfig, **app_kwargs: Any) -> Iterator[str]:
    """A real uvicorn serving ``create_app(config, ...)`` on 127.0.0.1 in a thread of its
    own (its own event loop, so pass ``database_url``, not an open ``memory``).
    Yields the base URL; shuts the server down gracefully on exit."""
    port = free_port()
    app = create_app(config, **app_kwargs)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_config=None,
            access_log=False,
            **uvicorn_options(config),  # as ``popagent serve`` runs it
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
