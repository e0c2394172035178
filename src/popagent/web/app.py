"""``create_app``: the server's ASGI application (JSON API, GUI, OpenAPI document).

The lifespan opens what the app needs and closes it in reverse order on
shutdown: the database (an embedded PostgreSQL is stopped cleanly), the model
client, observational memory's background work, the maintenance schedule.
At start it also loads the embedding model (so that no request pays for
its first load) and has the vector worker watch the served resource: memories
without vectors, written before or by other processes, get them in the
background (progress in the log, the recall preview and ``/api/info``).
Tests pass an open ``Popagent`` (``connect()``'s) and a model instead; the app
then borrows them and closes neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from .. import __version__
from ..access import AllowedHosts, HostGuard
from ..connection import CONFIGURED, EmbedderChoice, connect
from ..keys import Limits
from ..llm import ModelSettings, OpenAIChatModel
from ..llm.protocol import ChatModel
from ..offload import stop_processes, use_processes
from ..root import Popagent
from ..secrets import SecretCipher
from ..store.tenant import require_boundary
from .admission import AdmissionGate
from .api import ROUTERS
from .api.keys import router as keys_router
from .config import ServerConfig
from .errors import install_error_handlers
from .gui import STATIC_DIR, gui_router
from .health import HealthProbe
from .logins import LoginLimits, LoginStore
from .middleware import AccessLog, LifespanGuard, RequestGuard, SecurityHeaders, TokenGate
from .openapi_text import install as install_openapi_text
from .scheduler import MaintenanceScheduler
from .services import Services

__all__ = ["create_app"]

DESCRIPTION = """\
Management API of one popagent server. Every route acts on the server's
configured resource; no route accepts a resource ID. Errors share one body:
`{"error", "message", "field"}`."""


def create_app(
    config: ServerConfig | None = None,
    *,
    root: Popagent | None = None,
    model: ChatModel | None = None,
    model_settings: ModelSettings | None = None,
    model_from_env: bool = True,
    cipher: SecretCipher | None = None,
    database_url: str | None = None,
    data_dir: str | Path | None = None,
    pool_size: int = 16,
    embedder: EmbedderChoice = CONFIGURED,
    database_migrated: bool = False,
) -> FastAPI:
    """The server app for ``config``.

    Without ``root``, the lifespan connects to ``database_url`` (or
    ``POPAGENT_DATABASE_URL``, else the embedded server in ``data_dir``).
    Without ``model``, the chat routes use a client opened by the lifespan for
    ``model_settings``, else for ``POPAGENT_MODEL`` and friends when
    ``model_from_env``; with none of them they answer 503. ``cipher`` turns on
    the secret tools in chat turns; ``embedder`` is the embedding model of the
    connection the lifespan opens (default: the configured one, as
    ``connect``'s; ``None``: lexical recall only). ``database_migrated`` (a worker of
    ``serve --workers``) connects as ``connect(migrated=True)``: no migrations,
    and a startup that does not fail while the database is away.
    """
    config = config or ServerConfig()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            # Large screening and checks run in worker processes: no request can
            # hold the event loop (``popagent.offload``). They start on first use.
            use_processes()
            stack.callback(stop_processes)
            pa = root
            if pa is None:
                pa = await stack.enter_async_context(
                    connect(
                        database_url,
                        data_dir=data_dir,
                        max_size=pool_size,
                        embedder=embedder,
                        migrated=database_migrated,
                        queue_limit=config.queue_limit,
                    )
                )
            if config.multi_resource:
                await require_boundary(pa.pool)  # refuse here, not on every request
            mem = pa.memory
            if mem.embedder is not None:
                await mem.warm_up()  # failures are logged once; recall is lexical then
                if not config.multi_resource:
                    mem.watch_vectors(config.resource_id)
                    stack.callback(mem.unwatch_vectors, config.resource_id)
            chat_model = model
            wanted = model_settings
            if chat_model is None and wanted is None and model_from_env:
                wanted = ModelSettings.from_env()
            if chat_model is None and wanted is not None:
                chat_model = await stack.enter_async_context(OpenAIChatModel(wanted))
            secrets = pa.secrets(cipher) if cipher is not None else None
            agent = (
                pa.configured_agent(chat_model, stack, secrets=secrets)
                if chat_model is not None
                else None
            )
            scheduler = None
            if config.maintenance_interval_s is not None:
                scheduler = MaintenanceScheduler(
                    pa.pool, mem, config.maintenance_interval_s, delay_s=config.maintenance_delay_s
                )
                scheduler.start()
                stack.push_async_callback(scheduler.aclose)
            # Audits the refusals it answered without the database (popagent.keys);
            # a borrowed root's keys too, so that none goes unaudited at shutdown.
            stack.push_async_callback(pa.keys.aclose)
            health = HealthProbe(pa.pool, allowed_hosts=allowed_hosts)
            health.serve_on(asyncio.get_running_loop())  # answered ahead (web.edge)
            stack.push_async_callback(health.aclose)
            svc = Services(
                config=config,
                root=pa,
                agent=agent,
                logins=LoginStore(
                    pa.pool,
                    LoginLimits(
                        ttl_s=config.login_ttl_s,
                        failures=config.login_failures,
                        window_s=config.login_window_s,
                        address_failures=config.login_address_failures,
                    ),
                ),
                health=health,
                scheduler=scheduler,
            )
            # Closed first: turns still running finish before their model and pool go.
            stack.push_async_callback(svc.drain)
            app.state.services = svc
            yield

    app = FastAPI(
        title="popagent",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load scripts from CDNs; the GUI is local-only
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    install_openapi_text(app)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    if config.multi_resource:
        app.include_router(keys_router)
    app.include_router(gui_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    allowed_hosts = AllowedHosts.for_bind(config.host, config.allowed_hosts)
    # Added innermost first: the access log sees every response, refusals included.
    app.add_middleware(
        RequestGuard,
        max_body_bytes=config.max_body_bytes,
        resource_id="the API key's" if config.multi_resource else config.resource_id,
        allowed_hosts=allowed_hosts,
        body_timeout_s=config.body_timeout_s,
    )
    app.add_middleware(
        TokenGate,
        token=config.token,
        resource_id=config.resource_id,
        multi_resource=config.multi_resource,
        limits=Limits.of(
            requests_per_minute=config.key_requests_per_minute,
            burst=config.key_burst,
            max_memories=config.quota_memories,
            max_bytes=config.quota_bytes,
        ),
    )
    # Before any credential is looked up (a key is, in the database): a full queue
    # refuses at the door.
    app.add_middleware(AdmissionGate)
    app.add_middleware(HostGuard, allowed=allowed_hosts)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(AccessLog)
    app.add_middleware(LifespanGuard)
    return app
