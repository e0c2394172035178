"""The long-term store from a shell: remember, recall, facts, episodes, cleanup, maintain."""

from __future__ import annotations

import click

from ..memory.render import render
from ..models import RecallResult
from .common import Settings, emit_json, memory_line, parse_when, print_memories, run

__all__ = ["cleanup", "episodes", "facts", "maintain", "recall", "remember"]

#: The bounds the API uses: ids are PostgreSQL bigints; offsets past ten million page nothing useful.
ID_MAX = 2**63 - 1
OFFSET_MAX = 10_000_000


@click.command()
@click.argument("content")
@click.option("--key", help="Stable semantic key (e.g. ui.theme); replaces that key's fact.")
@click.option("--importance", type=float, default=0.5, show_default=True, help="In [0, 1].")
@click.option("--session-id", help="Originating session.")
@click.option("--json", "as_json", is_flag=True, help="Print the stored fact as JSON.")
@click.pass_context
def remember(
    ctx: click.Context,
    content: str,
    key: str | None,
    importance: float,
    session_id: str | None,
    as_json: bool,
) -> None:
    """Store a durable fact (upsert by --key; identical keyless facts are kept once)."""
    result = run(
        ctx,
        lambda m, r: m.remember(r, content, key=key, importance=importance, session_id=session_id),
    )
    if as_json:
        emit_json({"action": result.action, "memory": result.memory.to_json()})
    else:
        click.echo(f"{result.action} fact {result.memory.id}")


@click.command()
@click.argument("query")
@click.option("--limit", type=int, default=8, show_default=True)
@click.option(
    "--json", "as_json", is_flag=True, help="Results with score breakdown and the rendered block."
)
@click.option("--explain", is_flag=True, help="Show each result's score components and weights.")
@click.option(
    "--budget",
    type=int,
    default=24_000,
    show_default=True,
    help="Rendered block's character budget.",
)
@click.pass_context
def recall(
    ctx: click.Context, query: str, limit: int, as_json: bool, explain: bool, budget: int
) -> None:
    """Recall the memories most relevant to QUERY and print the labelled block."""
    results: list[RecallResult] = run(ctx, lambda m, r: m.recall(r, query, limit=limit))
    block = render(results, budget=budget)
    if as_json:
        emit_json({"results": [r.to_json() for r in results], "rendered": block})
        return
    if explain:
        for rank, res in enumerate(results, 1):
            parts = "  ".join(f"{c.name}={c.value:.3f}*{c.weight:g}" for c in res.components)
            click.echo(f"#{rank} score={res.score:.3f}  {parts}")
            click.echo(f"   {memory_line(res.memory)}")
        click.echo()
    click.echo(block if block else "No relevant long-term memories.")


@click.group()
def facts() -> None:
    """List, show, add, edit and delete facts."""


@facts.command("list")
@click.option("--key")
@click.option("--text", help="Case-insensitive substring.")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0, OFFSET_MAX), default=0)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def facts_list(
    ctx: click.Context, key: str | None, text: str | None, limit: int, offset: int, as_json: bool
) -> None:
    rows = run(
        ctx,
        lambda m, r: m.list_facts(r, key=key, text=text, limit=limit, offset=offset),
    )
    print_memories(rows, as_json)


@facts.command("show")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.pass_context
def facts_show(ctx: click.Context, id: int) -> None:
    emit_json(run(ctx, lambda m, r: m.get_fact(r, id)).to_json())


@facts.command("add")
@click.argument("content")
@click.option("--key")
@click.option("--importance", type=float, default=0.5, show_default=True)
@click.pass_context
def facts_add(ctx: click.Context, content: str, key: str | None, importance: float) -> None:
    """Strictly create a fact (an existing key is an error; use `remember` to upsert)."""
    fact = run(ctx, lambda m, r: m.create_fact(r, content, key=key, importance=importance))
    click.echo(f"created fact {fact.id}")


@facts.command("edit")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.option("--content")
@click.option("--key")
@click.option("--clear-key", is_flag=True, help="Remove the fact's key.")
@click.option("--importance", type=float)
@click.pass_context
def facts_edit(
    ctx: click.Context,
    id: int,
    content: str | None,
    key: str | None,
    clear_key: bool,
    importance: float | None,
) -> None:
    if content is None and key is None and not clear_key and importance is None:
        raise click.UsageError("give at least one of --content, --key, --clear-key, --importance")
    fact = run(
        ctx,
        lambda m, r: m.update_fact(
            r, id, content=content, key=key, clear_key=clear_key, importance=importance
        ),
    )
    click.echo(f"updated fact {fact.id}")


@facts.command("delete")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.pass_context
def facts_delete(ctx: click.Context, id: int) -> None:
    run(ctx, lambda m, r: m.delete_fact(r, id))
    click.echo(f"deleted fact {id}")


@click.group()
def episodes() -> None:
    """List and delete episodes (episodes are immutable)."""


@episodes.command("list")
@click.option("--session-id")
@click.option("--text", help="Case-insensitive substring.")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0, OFFSET_MAX), default=0)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def episodes_list(
    ctx: click.Context,
    session_id: str | None,
    text: str | None,
    limit: int,
    offset: int,
    as_json: bool,
) -> None:
    rows = run(
        ctx,
        lambda m, r: m.list_episodes(
            r, session_id=session_id, text=text, limit=limit, offset=offset
        ),
    )
    print_memories(rows, as_json)


@episodes.command("delete")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.pass_context
def episodes_delete(ctx: click.Context, id: int) -> None:
    run(ctx, lambda m, r: m.delete_episode(r, id))
    click.echo(f"deleted episode {id}")


@click.command()
@click.option("--kind", type=click.Choice(["fact", "episode"]), help="Only this kind.")
@click.option("--older-than", help="Only memories created before this ISO-8601 date.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def cleanup(ctx: click.Context, kind: str | None, older_than: str | None, yes: bool) -> None:
    """Explicitly delete this resource's long-term memory (all of it, or filtered)."""
    cutoff = parse_when(older_than, "--older-than")
    settings: Settings = ctx.obj
    what = f"{kind or 'fact and episode'} memories" + (
        f" created before {cutoff.isoformat()}" if cutoff else ""
    )
    if not yes and not click.confirm(f"Delete all {what} of resource {settings.resource_id!r}?"):
        raise click.Abort()
    deleted = run(ctx, lambda m, r: m.cleanup(r, kind=kind, older_than=cutoff))  # type: ignore[arg-type]
    click.echo(f"deleted {deleted} memories")


@click.command()
@click.pass_context
def maintain(ctx: click.Context) -> None:
    """Apply retention to every resource: 90-day episode age, 5,000 episodes per resource."""
    report = run(ctx, lambda m, _r: m.maintain())
    click.echo(
        f"deleted {report.expired_episodes} expired and {report.capped_episodes} over-cap episodes"
    )
