"""The ``popagent`` command line: the long-term store, chat sessions and secrets from a shell.

Every command works on one resource (``--resource-id``, default
``popagent-user``, or ``POPAGENT_RESOURCE_ID``) and one database
(``--database-url`` / ``POPAGENT_DATABASE_URL``, else the embedded server in
``--data-dir`` / ``POPAGENT_DATA_DIR``). Bad input exits with status 2 and a
message naming the field; a missing memory, session or secret, or a conflict,
exits with 1.

Layout: ``common`` (settings, the database, exit codes, output), ``memory``
(remember, recall, facts, episodes, cleanup, maintain), ``purge`` (everything
of one resource), ``chat``, ``sessions``,
``secrets``, ``mcp`` (the memory as an MCP server), ``backup`` (backup and
restore of the whole database, every resource), ``portable`` (export and import of
one resource as JSON Lines, and Mem0's memories).
"""

from __future__ import annotations

import click

from ..defaults import DATA_DIR_ENV, DATABASE_URL_ENV, RESOURCE_ID_ENV
from .backup import backup_command, restore_command
from .chat import chat_command
from .common import DEFAULT_RESOURCE, Settings
from .embed import embed_command
from .mcp import mcp_command
from .memory import cleanup, episodes, facts, maintain, recall, remember
from .portable import export_command, import_command
from .purge import purge_command
from .secrets import secrets_group
from .serve import serve_command
from .sessions import sessions_group
from .settings import settings_group

__all__ = ["main"]


@click.group()
@click.option(
    "--database-url",
    envvar=DATABASE_URL_ENV,
    help="PostgreSQL URL; default: embedded server.",
)
@click.option(
    "--data-dir",
    envvar=DATA_DIR_ENV,
    help="popagent's data folder; the embedded server's cluster lives in its pgdata/.",
)
@click.option(
    "--resource-id",
    envvar=RESOURCE_ID_ENV,
    default=DEFAULT_RESOURCE,
    show_default=True,
    help="The resource whose memory to use.",
)
@click.version_option(package_name="popagent")
@click.pass_context
def main(
    ctx: click.Context, database_url: str | None, data_dir: str | None, resource_id: str
) -> None:
    """popagent: long-term memory for LLM agents on PostgreSQL."""
    ctx.obj = Settings(database_url=database_url, data_dir=data_dir, resource_id=resource_id)


for _command in (
    remember,
    recall,
    facts,
    episodes,
    cleanup,
    purge_command,
    maintain,
    embed_command,
    chat_command,
    sessions_group,
    secrets_group,
    settings_group,
    mcp_command,
    serve_command,
    backup_command,
    restore_command,
    export_command,
    import_command,
):
    main.add_command(_command)
del _command
