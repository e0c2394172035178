"""The ``popagent`` command line: the long-term store, chat sessions and secrets from a shell.

Every command works on one resource (``--resource-id``, default
``popagent-user``, or ``POPAGENT_RESOURCE_ID``; given before the command or
after it, the same option) and one database (``--database-url`` /
``POPAGENT_DATABASE_URL``, else the embedded server in ``--data-dir`` /
``POPAGENT_DATA_DIR``). Bad input exits with status 2 and a message naming the
field; a missing memory, session or secret, or a conflict, exits with 1.

Layout: ``common`` (settings, the database, exit codes, output), ``memory``
(remember, recall, facts, episodes, cleanup, maintain), ``purge`` (everything
of one resource), ``chat``, ``sessions``,
``secrets``, ``mcp`` (the memory as an MCP server), ``backup`` (backup and
restore of the whole database, every resource), ``portable`` (export and import of
one resource as JSON Lines, and Mem0's memories).

Start-up time: a command's module is imported only when that command runs
(``COMMANDS`` below names each one's module and its line in ``--help``), and
no module imported by ``--help`` or ``--version`` imports the database driver,
the model SDK, the web app or the agent. ``tests/test_cli_startup.py`` holds
this; ``bench/cli_startup.py`` measures it.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import NamedTuple

import click

from .. import __version__
from ..checks import check_id
from ..defaults import DATA_DIR_ENV, DATABASE_URL_ENV, RESOURCE_ID_ENV
from ..errors import ValidationError
from .common import DEFAULT_RESOURCE, Settings

__all__ = ["COMMANDS", "main"]


class Command(NamedTuple):
    """One top-level command: where it lives, its line in ``popagent --help``, and
    whether it acts on one resource (it then takes ``--resource-id`` after its name)."""

    module: str
    attribute: str
    help: str
    per_resource: bool = True


#: Every top-level command, in the order ``popagent --help`` lists them.
COMMANDS: dict[str, Command] = {
    "remember": Command("memory", "remember", "Store a durable fact (upsert by --key)."),
    "recall": Command("memory", "recall", "Recall the memories most relevant to a query."),
    "facts": Command("memory", "facts", "List, show, add, edit, delete and restore facts."),
    "episodes": Command("memory", "episodes", "List and delete episodes."),
    "chat": Command("chat", "chat_command", "Chat with a model, with this resource's memory."),
    "sessions": Command("sessions", "sessions_group", "List, show, rename and delete chats."),
    "serve": Command("serve", "serve_command", "Serve the web GUI, the API and chat over HTTP."),
    "mcp": Command("mcp", "mcp_command", "Serve this resource's memory as MCP tools."),
    "settings": Command("settings", "settings_group", "Show and change the memory settings."),
    "secrets": Command("secrets", "secrets_group", "Set, list and delete encrypted secrets."),
    "embed": Command("embed", "embed_command", "Make the vectors for semantic recall."),
    "cleanup": Command("memory", "cleanup", "Delete this resource's long-term memory."),
    "purge": Command("purge", "purge_command", "Delete EVERYTHING of one resource, for good."),
    "export": Command("portable", "export_command", "Export one resource as JSON Lines."),
    "import": Command("portable", "import_command", "Import an export (or Mem0's memories)."),
    "keys": Command("keys", "keys_group", "Create, list and revoke per-resource API keys.", True),
    "maintain": Command(
        "memory", "maintain", "Apply retention to every resource (for cron).", False
    ),
    "backup": Command(
        "backup", "backup_command", "Back up the whole database (every resource).", False
    ),
    "restore": Command(
        "backup", "restore_command", "Restore the whole database from a backup.", False
    ),
}

_RESOURCE_HELP = "The resource whose memory to use."


def _resource_id(value: str) -> str:
    """The resource ID, checked before any command runs (bad input exits 2)."""
    try:
        return check_id("resource_id", value)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc


def _resource_after(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``--resource-id`` given after a command: it wins over one given before."""
    if value is not None:
        settings: Settings = ctx.obj
        ctx.obj = dataclasses.replace(
            settings,
            resource_id=_resource_id(value),
            resource_given=True,
            resource_on_command_line=True,
        )


def _accept_resource_id(command: click.Command) -> None:
    """Give ``command`` (and every subcommand of a group) the ``--resource-id`` option."""
    if not any(p.name == "resource_id_after" for p in command.params):
        command.params.append(
            click.Option(
                ["--resource-id", "resource_id_after"],
                metavar="TEXT",
                expose_value=False,
                callback=_resource_after,
                help=f"{_RESOURCE_HELP} Same as `popagent --resource-id`.",
            )
        )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_resource_id(sub)


class _Commands(click.Group):
    """Imports a command's module when that command is used, not for ``--help``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(f"{__name__}.{entry.module}")
        command: click.Command = getattr(module, entry.attribute)
        if entry.per_resource:
            _accept_resource_id(command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # Click suggests from ``self.commands``, which a lazy group leaves empty: a typo
        # of a command ("recal") gets the same "Did you mean" as a subcommand's.
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib  # here, not at the top: ``--help`` must not pay for it

            close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
            if close and not ctx.resilient_parsing:
                ctx.fail(f"No such command {name!r}. Did you mean {close[0]!r}?")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, entry.help) for name, entry in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_Commands)
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
    help=f"{_RESOURCE_HELP} Also accepted after the command.",
)
@click.version_option(__version__, package_name="popagent")
@click.pass_context
def main(
    ctx: click.Context, database_url: str | None, data_dir: str | None, resource_id: str
) -> None:
    """popagent: long-term memory for LLM agents on PostgreSQL.

    Start with `popagent remember TEXT` and `popagent recall QUERY`;
    `popagent serve` opens the web GUI. `popagent COMMAND --help` says more.
    """
    source = ctx.get_parameter_source("resource_id")
    ctx.obj = Settings(
        database_url=database_url,
        data_dir=data_dir,
        resource_id=_resource_id(resource_id),
        resource_on_command_line=source is click.core.ParameterSource.COMMANDLINE,
        resource_given=source
        in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT),
    )
