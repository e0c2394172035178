"""``popagent export`` and ``popagent import``: one resource as JSON Lines, and back.

``export`` writes to ``-o FILE`` (through a temporary file renamed at the end,
so a failed export leaves no partial file) or to standard output; its counts
go to standard error. ``import`` reads a popagent export or, with ``--from
mem0``, a Mem0 JSON document; ``-`` reads standard input. The format is
docs/export-format.md. Bad input exits with 2 naming the line and field, a
conflict with 1; either way nothing is written.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

import click

from ..memory.longterm import LongTermMemory
from ..portable import ImportReport, export_resource, import_mem0, import_resource
from .common import Settings, emit_json, run

__all__ = ["export_command", "import_command"]


def _counts_line(counts: dict[str, int]) -> str:
    shown = [f"{n} {t}" for t, n in counts.items() if n]
    return ", ".join(shown) if shown else "nothing but the header"


@click.command("export")
@click.option("--resource", help="The resource to export; default: the group's --resource-id.")
@click.option(
    "--include-secrets",
    is_flag=True,
    help="Also export the secrets, as the ciphertext stored (never decrypted).",
)
@click.option(
    "-o", "--output", default="-", show_default=True, help="The file to write; - is stdout."
)
@click.pass_context
def export_command(
    ctx: click.Context, resource: str | None, include_secrets: bool, output: str
) -> None:
    """Export one resource as JSON Lines (embeddings excluded: `popagent embed` remakes them)."""
    settings: Settings = ctx.obj
    resource_id = resource if resource is not None else settings.resource_id
    if output == "-":

        async def to_stdout(memory: LongTermMemory, _r: str) -> dict[str, int]:
            return await export_resource(
                memory.pool, resource_id, sys.stdout, include_secrets=include_secrets
            )

        counts = run(ctx, to_stdout)
        sys.stdout.flush()
    else:
        target = Path(output)
        handle, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".part", dir=target.parent.absolute()
        )
        try:
            with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:

                async def to_file(memory: LongTermMemory, _r: str) -> dict[str, int]:
                    return await export_resource(
                        memory.pool, resource_id, out, include_secrets=include_secrets
                    )

                counts = run(ctx, to_file)
            os.replace(temporary, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    click.echo(f"exported {resource_id}: {_counts_line(counts)}", err=True)


def _report_lines(report: ImportReport) -> list[str]:
    lines = []
    for record_type, outcomes in report.counts.items():
        shown = ", ".join(f"{n} {o}" for o, n in outcomes.items() if n)
        lines.append(f"  {record_type}: {shown or 'none'}")
    if report.skipped_sessions:
        lines.append(
            "  sessions already present with other messages (not merged): "
            + ", ".join(report.skipped_sessions)
        )
    return lines


@click.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option(
    "--resource",
    help="The resource to import into; default: the group's --resource-id when given, "
    "else the file's (popagent) or each memory's user_id (mem0).",
)
@click.option(
    "--from",
    "source",
    type=click.Choice(["popagent", "mem0"]),
    default="popagent",
    show_default=True,
    help="The file's format.",
)
@click.option("--dry-run", is_flag=True, help="Check and count, write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def import_command(
    ctx: click.Context,
    file: TextIO,
    resource: str | None,
    source: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Import FILE (a popagent export, or Mem0's memories) idempotently, in one transaction."""
    text = file.read()
    if resource is None and ctx.parent is not None:
        # The group's --resource-id (or POPAGENT_RESOURCE_ID) counts when given; its
        # default does not, so that a file goes back to its own resource.
        given = ctx.parent.get_parameter_source("resource_id")
        if given not in (None, click.core.ParameterSource.DEFAULT):
            resource = ctx.obj.resource_id

    async def load(memory: LongTermMemory, _r: str) -> ImportReport:
        if source == "mem0":
            return await import_mem0(memory.pool, text, resource_id=resource, dry_run=dry_run)
        return await import_resource(
            memory.pool, text.splitlines(), resource_id=resource, dry_run=dry_run
        )

    report = run(ctx, load)
    if as_json:
        emit_json(report.to_json())
        return
    verb = "would import" if dry_run else "imported"
    click.echo(f"{verb} into {', '.join(report.resource_ids) or 'nothing'}:")
    for line in _report_lines(report):
        click.echo(line)
    if not dry_run and report.total("added"):
        click.echo("run `popagent embed` to make the new memories' embeddings")
