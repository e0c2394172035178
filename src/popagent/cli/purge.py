"""``popagent purge``: remove everything of one resource, after an explicit confirmation."""

from __future__ import annotations

import click

from ..models import PurgeReport
from .common import Settings, emit_json, plural, run

__all__ = ["purge_command"]


@click.command("purge")
@click.option("--yes", is_flag=True, help="Confirm: purge without asking.")
@click.option("--no-vacuum", is_flag=True, help="Do not VACUUM the emptied tables afterwards.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-table counts as JSON.")
@click.pass_context
def purge_command(ctx: click.Context, yes: bool, no_vacuum: bool, as_json: bool) -> None:
    """Delete EVERYTHING of one resource, for good: facts with every version, episodes,
    vectors, sessions and messages, observations, settings, secrets and audit rows.

    Unlike cleanup this is not limited to long-term memory. The resource must be
    named on the command line with --resource-id (before or after `purge`; the
    default and POPAGENT_RESOURCE_ID are not enough); asks for confirmation
    (refused when there is no terminal to answer) unless --yes is given.
    """
    settings: Settings = ctx.obj
    if not settings.resource_on_command_line:
        raise click.UsageError(
            "name the resource to purge on the command line: "
            "popagent purge --resource-id RESOURCE (the default and "
            "POPAGENT_RESOURCE_ID are not used here)"
        )
    target = settings.resource_id
    if not yes and not click.confirm(
        f"Purge EVERYTHING of resource {target!r} (memories, sessions, secrets, settings, "
        "audit rows)? This cannot be undone"
    ):
        raise click.Abort()
    report: PurgeReport = run(ctx, lambda app, _r: app.memory.purge(target, vacuum=not no_vacuum))
    if as_json:
        emit_json({"resource_id": target, **report.to_json()})
        return
    for table, n in report.deleted.items():
        click.echo(f"{table:<28} {n:>10,}")
    click.echo(f"purged {plural(report.total, 'row')} of resource {target!r}")
    if report.vacuum_error is not None:
        click.echo(f"warning: VACUUM failed: {report.vacuum_error}", err=True)
    elif report.vacuumed:
        click.echo(f"vacuumed {plural(len(report.vacuumed), 'table')}")
