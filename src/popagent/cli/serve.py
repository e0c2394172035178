"""``popagent serve``: the management API, the web GUI and chat over HTTP, with uvicorn.

Binds 127.0.0.1 by default. Binding any other address needs a bearer token
(``POPAGENT_TOKEN`` or ``--token-file``); the command refuses to start without
one (exit 2). Answers only requests whose ``Host`` names it: the loopback
names on a loopback bind, else the bind address, plus every ``--allowed-host``
(``POPAGENT_ALLOWED_HOSTS``, comma-separated); anything else gets 421. Stops
gracefully on Ctrl-C or SIGTERM: running turns finish, the schedule stops, and
an embedded PostgreSQL is shut down cleanly.

A port another program holds is refused first, in one plain sentence (exit 1).
While it starts, plain progress lines go to stdout (``cli.startup``): the
database being started (its cluster made on the first run) and migrated, the
chat model and the embedder; ``popagent serve: ready at URL`` follows once the
server answers HTTP, never before. Once serving starts, the log goes to stderr:
short human lines in a terminal, else one JSON object a line (``web.logs``),
this command's own notices included (``--log-format``, ``--access-log``:
``cli.serve_output``); a startup failure is one such line (``startup failed:
...``, no traceback) and a non-zero exit. Ctrl-C or SIGTERM ends with
``popagent serve: stopped`` on stdout.
"""

from __future__ import annotations

import ipaddress
import logging
import logging.config
from typing import Any
from urllib.parse import urlsplit

import click

from ..access import load_token, parse_allowed_hosts, parse_trusted_proxies, require_token_for
from ..defaults import ALLOWED_HOSTS_ENV, DEFAULT_HOST, DEFAULT_PORT, WORKERS_ENV
from ..embed import Embedder, configured_embedder
from ..errors import PopagentError, SecretKeyError, ValidationError
from ..secrets import SecretCipher
from ..web.config import ServerConfig
from ..web.middleware import startup_failure
from .common import (
    LimitFlags,
    Settings,
    exit_codes,
    limit_options,
    secret_cipher,
    token_file_option,
)
from .serve_output import LogFormat, ServeOutput, output_options, said_stopped
from .startup import check_port, describe_database, say, when_ready

__all__ = ["serve_command"]

log = logging.getLogger("popagent.serve")

#: Seconds a worker may miss uvicorn's health ping before it is replaced.
WORKER_HEALTHCHECK_S = 30


@click.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@token_file_option("File whose first line is the bearer token (or set POPAGENT_TOKEN).")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar=ALLOWED_HOSTS_ENV,
    metavar="HOST[:PORT]",
    help="Another name the server answers to (a proxy's or tunnel's), without a port "
    "for any port; repeatable. Env: comma-separated.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS[/BITS]",
    help="A reverse proxy (address or network) whose X-Forwarded-For and "
    "X-Forwarded-Proto are believed; repeatable. Default: none, every client's "
    "address is its own.",
)
@click.option(
    "--maintenance-interval",
    default=24.0,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="Hours between scheduled maintenance runs; 0 turns the schedule off.",
)
@click.option(
    "--workers",
    envvar=WORKERS_ENV,
    type=click.IntRange(1, 64),
    help="Server processes on the one socket (default: one per core). Env: POPAGENT_WORKERS.",
)
@click.option(
    "--multi-resource",
    is_flag=True,
    help="Serve every resource: each request's resource comes from its API key "
    "(`popagent keys create`); the token, if any, is the operator's (keys only).",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@output_options
@limit_options
@click.pass_context
def serve_command(
    ctx: click.Context,
    host: str,
    port: int,
    token_file: str | None,
    allowed_hosts: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
    maintenance_interval: float,
    workers: int | None,
    multi_resource: bool,
    log_level: str,
    log_format: LogFormat | None,
    access_log: bool | None,
    limits: LimitFlags,
) -> None:
    """Serve the management API, the web GUI and chat for this resource.

    The GUI is at the printed URL. Chat uses POPAGENT_MODEL_BASE_URL,
    POPAGENT_MODEL and POPAGENT_MODEL_API_KEY when set.
    """
    import uvicorn

    from ..web import create_app
    from ..web.edge import uvicorn_options
    from .workers import (
        default_workers,
        freeze_startup_heap,
        parent_cluster,
        worker_environment,
    )

    settings: Settings = ctx.obj
    workers = workers or default_workers()
    with exit_codes():
        token = load_token(token_file)
        if not multi_resource:  # in multi-resource mode every request needs a key anyway
            require_token_for(host, token)
        allowed = parse_allowed_hosts(allowed_hosts)
        proxies = parse_trusted_proxies(trusted_proxies)
        limits.limits()  # a bad combination exits with 2 before anything starts
        embedder = configured_embedder()
    check_port(host, port)
    served_resources = (
        "every resource, each request's from its API key"
        if multi_resource
        else f"resource {settings.resource_id!r}"
    )
    say(f"{served_resources}, {workers} worker{'' if workers == 1 else 's'}")
    say(_model_line())
    say(_embedder_line(embedder))
    # From here on stderr is the log only (human lines or JSON): ours, uvicorn's and
    # every library's.
    output = ServeOutput.choose(log_format, access_log)
    logging.config.dictConfig(output.logging_config(log_level))
    logging.captureWarnings(True)
    cipher: SecretCipher | None
    try:
        cipher = secret_cipher()
    except SecretKeyError as exc:
        log.warning("secret tools are off: %s", exc)
        cipher = None
    config = ServerConfig(
        resource_id=settings.resource_id,
        host=host,
        port=port,
        token=token,
        maintenance_interval_s=maintenance_interval * 3600 if maintenance_interval else None,
        allowed_hosts=allowed,
        trusted_proxies=proxies,
        multi_resource=multi_resource,
        key_requests_per_minute=limits.key_rate,
        key_burst=limits.key_burst,
        quota_memories=limits.quota_memories,
        quota_bytes=limits.quota_bytes,
    )
    if _is_wildcard(host) and not allowed:
        log.warning(
            "bound to %s: only loopback names are accepted as Host; pass --allowed-host "
            "with the name or address other machines use",
            host,
        )
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    served: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_config": None,  # configured above
        "access_log": False,
        "server_header": False,
        "timeout_graceful_shutdown": 30,
        **uvicorn_options(config),  # the edge's bounds and trusted proxies (web.edge)
    }
    step = describe_database(settings.database_url, settings.data_dir)
    if workers == 1:
        app = create_app(
            config,
            cipher=cipher,
            database_url=settings.database_url,
            data_dir=settings.data_dir,
            embedder=embedder,
        )
        say(step + "...")  # in the app's startup, which uvicorn runs next
        _when_ready(
            None if multi_resource else settings.resource_id, host, port, url, workers, output
        )
        freeze_startup_heap()  # the app is built: a full collection skips it
        with said_stopped():
            uvicorn.run(app, **served)
        return
    try:
        say(step + "...")
        with (
            said_stopped(),
            parent_cluster(
                settings.database_url, settings.data_dir, multi_resource=multi_resource
            ) as database_url,
        ):
            worker_environment(
                config, database_url=database_url, log_level=log_level, output=output
            )
            say(f"database ready; starting {workers} server processes...")
            _when_ready(
                None if multi_resource else settings.resource_id, host, port, url, workers, output
            )
            uvicorn.run(
                "popagent.cli.workers:create_worker_app",
                factory=True,
                workers=workers,
                # uvicorn kills a worker that misses its health ping (default 5 s) as
                # hung; on a machine starved of CPU that kills busy, healthy workers
                # and resets their connections.
                timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
                **served,
            )
    except (PopagentError, OSError) as exc:
        log.error(startup_failure(exc))
        raise SystemExit(1) from exc


def _when_ready(
    resource_id: str | None, host: str, port: int, url: str, workers: int, output: ServeOutput
) -> None:
    """Say the URL (and log it, in a JSON log) once the server answers; port 0 has no
    URL to say. ``resource_id`` is ``None`` in multi-resource mode (each request's
    from its key)."""
    if port == 0:
        return

    def ready() -> None:
        if output.human:  # the line below says it on the same terminal
            say(f"ready at {url} (the web GUI and the API; Ctrl-C stops)")
            return
        log.info(
            "popagent serve: %s; GUI and API at %s (%d worker%s; Ctrl-C stops)",
            f"resource {resource_id}"
            if resource_id is not None
            else "every resource, each request's from its API key",
            url,
            workers,
            "" if workers == 1 else "s",
            extra={"resource_id": resource_id, "url": url, "workers": workers},
        )
        say(f"ready at {url} (the web GUI and the API; Ctrl-C stops)")

    when_ready(host, port, ready)


def _model_line() -> str:
    """The chat model as configured (the server opens it at startup)."""
    from ..llm import ModelSettings

    try:
        model = ModelSettings.from_env()
    except ValidationError as exc:
        return f"chat model misconfigured ({exc}); chat will answer 503"
    if model is None:
        return (
            "chat: no model configured (set POPAGENT_MODEL, and POPAGENT_MODEL_BASE_URL for "
            "a local server); memory, recall and the GUI work without one"
        )
    parts = urlsplit(model.base_url)
    where = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()  # no user:password
    return f"chat model {model.model} at {where}"


def _embedder_line(embedder: Embedder | None) -> str:
    if embedder is None:
        return "recall: by words only (no embedding model; POPAGENT_EMBEDDER chooses one)"
    name = getattr(embedder, "model", None) or type(embedder).__name__
    return f"recall: by words and meaning; the embedding model {name} loads during startup"


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False
