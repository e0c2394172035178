"""``popagent export`` and ``popagent import``: one resource as JSON Lines, and back.

``export`` writes to ``-o FILE`` (through a temporary file renamed at the end,
so a failed export leaves no partial file) or to standard output; its counts
go to standard error. ``import`` reads a popagent export or, with ``--from
mem0``, a Mem0 JSON document; ``-`` reads standard input. Either is read as
it goes (a line, or a memory, at a time), never whole, so memory stays flat
whatever the file's size. The format is
docs/export-format.md. Bad input exits with 2 naming the line and field, a
conflict with 1; either way nothing is written.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

import click

from ..offload import stop_processes, use_processes
from ..portable import ImportReport, export_resource, import_mem0, import_resource
from ..root import Popagent
from .common import Settings, emit_json, plural, run

__all__ = ["export_command", "import_command"]


def _counts_line(counts: dict[str, int]) -> str:
    shown = [plural(n, t) for t, n in counts.items() if n]
    return ", ".join(shown) if shown else "nothing but the header"


@click.command("export")
@click.option(
    "--include-secrets",
    is_flag=True,
    help="Also export the secrets, as the ciphertext stored (never decrypted).",
)
@click.option(
    "-o", "--output", default="-", show_default=True, help="The file to write; - is stdout."
)
@click.pass_context
def export_command(ctx: click.Context, include_secrets: bool, output: str) -> None:
    """Export the resource (--resource-id) as JSON Lines (popagent's own embeddings
    excluded: `popagent embed` remakes them; vectors made with a caller's model, such as
    LangGraph's index=, included)."""
    settings: Settings = ctx.obj
    resource_id = settings.resource_id
    if output == "-":

        async def to_stdout(app: Popagent, _r: str) -> dict[str, int]:
            return await export_resource(
                app.pool, resource_id, sys.stdout, include_secrets=include_secrets
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

                async def to_file(app: Popagent, _r: str) -> dict[str, int]:
                    return await export_resource(
                        app.pool, resource_id, out, include_secrets=include_secrets
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
@click.argument("file", type=click.File("rb"))
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
    file: BinaryIO,
    source: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Import FILE (a popagent export, or Mem0's memories) idempotently, in one transaction.

    Into the resource given with --resource-id (or POPAGENT_RESOURCE_ID); without
    one, into the file's own resource (popagent) or each memory's user_id (mem0).
    """
    settings: Settings = ctx.obj
    # The default resource does not count, so that a file goes back to its own resource.
    resource = settings.resource_id if settings.resource_given else None

    async def load(app: Popagent, _r: str) -> ImportReport:
        # Read as it goes (a line, or a Mem0 memory, at a time), never whole.
        if source == "mem0":
            return await import_mem0(app.pool, file, resource_id=resource, dry_run=dry_run)
        return await import_resource(app.pool, file, resource_id=resource, dry_run=dry_run)

    # The lines are checked in worker processes where there are CPUs to spare (on a
    # small machine the database needs them); they start only for a large file.
    workers = min(8, (os.cpu_count() or 1) - 2)
    if workers >= 2:
        use_processes(workers)
    try:
        report = run(ctx, load)
    finally:
        stop_processes()
    if as_json:
        emit_json(report.to_json())
        return
    verb = "would import" if dry_run else "imported"
    click.echo(f"{verb} into {', '.join(report.resource_ids) or 'nothing'}:")
    for line in _report_lines(report):
        click.echo(line)
    if not dry_run and report.total("added"):
        click.echo(
            "the new memories wait for their vectors (semantic recall): a running "
            "`popagent serve` writes them in the background, `popagent embed` now"
        )
