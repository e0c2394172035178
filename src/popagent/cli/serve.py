"""``popagent serve``: the management API, the web GUI and chat over HTTP, with uvicorn.

Binds 127.0.0.1 by default. Binding any other address needs a bearer token
(``POPAGENT_TOKEN`` or ``--token-file``); the command refuses to start without
one (exit 2). Stops gracefully on Ctrl-C or SIGTERM: running turns finish, the
schedule stops, and an embedded PostgreSQL is shut down cleanly.
"""

from __future__ import annotations

import click

from ..access import load_token, require_token_for
from ..embed import configured_embedder
from ..secrets import SecretCipher, SecretKeyError
from ..web.config import DEFAULT_HOST, DEFAULT_PORT, ServerConfig
from .common import Settings, exit_codes, secret_cipher

__all__ = ["serve_command"]


@click.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to bind.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token-file",
    envvar="POPAGENT_TOKEN_FILE",
    type=click.Path(dir_okay=False),
    help="File whose first line is the bearer token (or set POPAGENT_TOKEN).",
)
@click.option(
    "--maintenance-interval",
    default=24.0,
    show_default=True,
    type=click.FloatRange(min=0.0),
    help="Hours between scheduled maintenance runs; 0 turns the schedule off.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.pass_context
def serve_command(
    ctx: click.Context,
    host: str,
    port: int,
    token_file: str | None,
    maintenance_interval: float,
    log_level: str,
) -> None:
    """Serve the management API, the web GUI and chat for this resource.

    The GUI is at the printed URL. Chat uses POPAGENT_MODEL_BASE_URL,
    POPAGENT_MODEL and POPAGENT_MODEL_API_KEY when set.
    """
    import uvicorn

    from ..web import create_app
    from ..web.logs import logging_config

    settings: Settings = ctx.obj
    with exit_codes():
        token = load_token(token_file)
        require_token_for(host, token)
    cipher: SecretCipher | None
    try:
        cipher = secret_cipher()
    except SecretKeyError as exc:
        click.echo(f"Secret tools are off: {exc}", err=True)
        cipher = None
    config = ServerConfig(
        resource_id=settings.resource_id,
        host=host,
        port=port,
        token=token,
        maintenance_interval_s=maintenance_interval * 3600 if maintenance_interval else None,
    )
    with exit_codes():
        embedder = configured_embedder()
    app = create_app(
        config,
        cipher=cipher,
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        embedder=embedder,
    )
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"popagent serve: resource {settings.resource_id}; GUI and API at http://{shown}:{port}/ "
        "(Ctrl-C stops)",
        err=True,
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=logging_config(log_level),
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=30,
    )
