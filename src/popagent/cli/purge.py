"""``popagent purge``: remove everything of one resource, after an explicit confirmation."""

from __future__ import annotations

import click

from ..memory.purge import PurgeReport
from .common import emit_json, run

__all__ = ["purge_command"]


@click.command("purge")
@click.option(
    "--resource",
    "resource",
    required=True,
    help="The resource to purge, named explicitly (the group's --resource-id is not used).",
)
@click.option("--yes", is_flag=True, help="Confirm: purge without asking.")
@click.option("--no-vacuum", is_flag=True, help="Do not VACUUM the emptied tables afterwards.")
@click.option("--json", "as_json", is_flag=True, help="Print the per-table counts as JSON.")
@click.pass_context
def purge_command(
    ctx: click.Context, resource: str, yes: bool, no_vacuum: bool, as_json: bool
) -> None:
    """Delete EVERYTHING of one resource, for good: facts with every version, episodes,
    vectors, sessions and messages, observations, settings, secrets and audit rows.

    Unlike cleanup this is not limited to long-term memory. The resource must be
    named with --resource; asks for confirmation (refused when there is no
    terminal to answer) unless --yes is given.
    """
    target = resource
    if not yes and not click.confirm(
        f"Purge EVERYTHING of resource {target!r} (memories, sessions, secrets, settings, "
        "audit rows)? This cannot be undone"
    ):
        raise click.Abort()
    report: PurgeReport = run(ctx, lambda m, _r: m.purge(target, vacuum=not no_vacuum))
    if as_json:
        emit_json(report.to_json())
        return
    for table, n in report.deleted:
        click.echo(f"{table:<28} {n:>10,}")
    click.echo(f"purged {report.total:,} rows of resource {target!r}")
    if report.vacuum_error is not None:
        click.echo(f"warning: VACUUM failed: {report.vacuum_error}", err=True)
    elif report.vacuumed:
        click.echo(f"vacuumed {len(report.vacuumed)} tables")
