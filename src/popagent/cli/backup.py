"""``popagent backup FILE`` and ``popagent restore FILE``: the whole database, every resource.

Both work on the group's database: ``--database-url`` / ``POPAGENT_DATABASE_URL``,
else the embedded server in ``--data-dir`` (started for the command and
stopped after it). ``--resource-id`` plays no part: the unit is the database.
A refusal or a failure exits with 1 and one line (``pg_dump``'s or
``pg_restore``'s own message included); see ``popagent.store.backup``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from psycopg.conninfo import conninfo_to_dict

from ..store.backup import (
    BackupError,
    BackupReport,
    backup_database,
    check_target,
    inspect_archive,
    other_clients,
)
from ..store.database import resolve_url
from ..store.embedded import EmbeddedServer, check_data_dir, default_data_dir
from ..store.migrate import load_migrations
from ..store.restore import check_restorable, restore_database
from .common import Settings, exit_codes

__all__ = ["backup_command", "restore_command"]


def describe_url(url: str) -> str:
    """``database 'name' on host`` for a URL, without its password."""
    try:
        params = conninfo_to_dict(url)
    except Exception:  # a URL libpq cannot parse fails later with its own message
        return "the database at --database-url"
    host = str(params.get("host") or "localhost")
    port = f":{params['port']}" if params.get("port") else ""
    return f"database {str(params.get('dbname') or params.get('user') or '?')!r} on {host}{port}"


@contextmanager
def _database(settings: Settings, *, existing: bool = False) -> Iterator[tuple[str, str]]:
    """``(url, description)`` of the group's database; an embedded server lives as long.

    ``existing``: refuse an embedded data directory without a cluster rather
    than create one (a backup of nothing).
    """
    url = resolve_url(settings.database_url)
    if url is not None:
        yield url, describe_url(url)
        return
    if existing:
        folder = Path(settings.data_dir).expanduser() if settings.data_dir else default_data_dir()
        if not (check_data_dir(folder.absolute()) / "PG_VERSION").exists():
            raise BackupError(
                f"there is no popagent database in {folder} (no cluster in it yet); "
                "check --data-dir (or POPAGENT_DATA_DIR) or --database-url"
            )
    server = EmbeddedServer(settings.data_dir)
    try:
        yield server.url, f"the embedded database in {server.data_dir}"
    finally:
        server.stop()


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("kB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _table_lines(tables: dict[str, int]) -> list[str]:
    width = max((len(name) for name in tables), default=0)
    return [f"  {name:<{width}}  {rows:>9}" for name, rows in tables.items()]


@click.command("backup")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.pass_context
def backup_command(ctx: click.Context, file: Path, force: bool) -> None:
    """Write the whole database (every resource) to FILE, a pg_dump custom-format archive.

    Facts, episodes, vectors, sessions, messages, observations, settings,
    audit rows and secrets (still encrypted; keep the secret key apart) of
    every resource, read in one snapshot while popagent keeps running. FILE
    appears only once complete, readable by its owner only.
    """
    settings: Settings = ctx.obj
    with exit_codes():
        check_target(file, replace=force)  # before starting a server for nothing
        with _database(settings, existing=True) as (url, where):
            report: BackupReport = asyncio.run(backup_database(url, file, replace=force))
    click.echo(
        f"wrote {report.path} ({_size(report.size_bytes)}) from {where}: "
        f"{len(report.tables)} tables, {report.rows} rows, schema version {report.schema_version}"
    )
    for line in _table_lines(report.tables):
        click.echo(line)


@click.command("restore")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--force", is_flag=True, help="Restore even while other clients are connected to the database."
)
@click.pass_context
def restore_command(ctx: click.Context, file: Path, yes: bool, force: bool) -> None:
    """Replace the whole database (every resource) with the backup FILE, in one transaction.

    Every popagent table is dropped and recreated with the backup's rows;
    on any error nothing changes. Stop `popagent serve` (and chat, mcp) on
    this database first; secrets need the key they were sealed with.

    What is checked: every entry that `pg_restore --list FILE` shows must be
    one of popagent's tables, their rows, or a sequence, index, constraint,
    function, trigger or extension that popagent's own migrations create,
    and every line of the backup's data must be a row or a sequence position;
    anything else is refused, naming it, before anything runs. The restore
    never runs the backup's SQL: the schema comes from popagent's own
    migrations, and the rows are loaded by a database role that cannot run
    programs on the server or read or write its files.

    A backup's rows become your memory, settings and secrets: restore only
    files that come from a trusted place (your own backups).
    """
    settings: Settings = ctx.obj
    with exit_codes():
        archive = asyncio.run(inspect_archive(file))
        with _database(settings) as (url, where):
            asyncio.run(check_restorable(url, archive))
            clients = asyncio.run(other_clients(url))
            if clients and not force:
                raise click.ClickException(
                    f"{clients} other client(s) are connected to {where}: stop `popagent serve` "
                    "(and chat, mcp) on it first, or pass --force"
                )
            if not yes and not click.confirm(
                f"Replace everything in {where} (the memories, sessions, settings and "
                f"secrets of every resource) with the backup {archive.path}?"
            ):
                raise click.Abort()
            report = asyncio.run(restore_database(url, archive))
    latest = max((m.version for m in load_migrations()), default=0)
    upgrade = (
        f"; popagent upgrades it to schema version {latest} when it next opens it"
        if report.schema_version < latest
        else ""
    )
    click.echo(
        f"restored {archive.path} into {where}: {len(report.tables)} tables, "
        f"{report.rows} rows, schema version {report.schema_version}{upgrade}"
    )
    for line in _table_lines(report.tables):
        click.echo(line)
