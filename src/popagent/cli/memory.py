"""The long-term store from a shell: remember, recall, facts, episodes, cleanup, maintain.

Every write records origin ``cli`` (and ``--session-id`` where a command takes
one); a fact's earlier values are read with ``facts history`` and brought back
with ``facts restore``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from ..errors import NotFoundError
from ..memory.longterm import LongTermMemory
from ..memory.render import render
from ..memory.validation import filter_from
from ..models import (
    HAPPENED_AT_HELP,
    RECALL_MOMENTS,
    FactVersion,
    Kind,
    Memory,
    MemoryFilter,
    Provenance,
    RecallOptions,
)
from .common import (
    Settings,
    emit_json,
    memory_line,
    one_line,
    parse_when,
    plural,
    print_rows,
    run,
    when,
)

if TYPE_CHECKING:
    from ..memory.recall_report import RecallReport

__all__ = ["cleanup", "episodes", "facts", "maintain", "recall", "remember"]

#: The bounds the API uses: ids are PostgreSQL bigints; offsets past ten million page nothing useful.
ID_MAX = 2**63 - 1
OFFSET_MAX = 10_000_000
#: Version numbers are PostgreSQL integers.
VERSION_MAX = 2**31 - 1
#: What every write of the CLI records as its source.
CLI = Provenance(origin="cli")

_EXPIRES_HELP = (
    "When the fact stops being true (ISO 8601; a time without a zone is UTC). "
    "After it the fact is never recalled, and maintenance removes it."
)


_FILTER_DEFAULTS = {f.name: f.default for f in fields(MemoryFilter)}
#: The option of each ``MemoryFilter`` field a list command may take.
_FILTER_OPTIONS = {
    "key": click.option("--key"),
    "session_id": click.option("--session-id"),
    "text": click.option("--text", help="Case-insensitive substring."),
    "limit": click.option(
        "--limit", type=int, default=_FILTER_DEFAULTS["limit"], show_default=True
    ),
    "offset": click.option(
        "--offset", type=click.IntRange(0, OFFSET_MAX), default=_FILTER_DEFAULTS["offset"]
    ),
}


def _filter_options(
    kind: Kind, *names: str
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The options of these ``MemoryFilter`` fields, in this order; the command gets
    them as one ``where`` of ``kind``."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(command)
        def with_filter(*args: Any, **options: Any) -> None:
            where = filter_from({name: options.pop(name) for name in names}, kind=kind)
            command(*args, where=where, **options)

        for name in reversed(names):  # click lists options in the order they are declared
            with_filter = _FILTER_OPTIONS[name](with_filter)
        return with_filter

    return decorate


def _expires_at(value: str | None) -> datetime | None:
    return parse_when(value, "--expires-at")


#: ``--based-on``, repeatable: what a fact was derived from.
_based_on_option = click.option(
    "--based-on",
    "based_on",
    multiple=True,
    help="What the fact was derived from: a fact key, or a memory id (digits); repeat for "
    "several. When one changes or goes, the fact is marked stale (`facts stale`).",
)


#: ``--happened-at``: the fact's event clock (``FactOptions.happened_at``), on every
#: command that writes a fact's value.
_happened_at_option = click.option(
    "--happened-at",
    help=HAPPENED_AT_HELP + " Left out: read from the content (docs/time.md).",
)


def _sources(values: tuple[str, ...]) -> list[str | int] | None:
    """``--based-on`` values: digits are a memory id, anything else a fact key."""
    return [int(v) if v.isascii() and v.isdigit() else v for v in values] or None


def _moment_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--as-of`` and ``--known-at`` (``RECALL_MOMENTS``), passed on as ``moments``."""

    @functools.wraps(command)
    def with_moments(*args: Any, **options: Any) -> None:
        moments = {name: options.pop(name) for name in RECALL_MOMENTS}
        command(*args, moments={k: v for k, v in moments.items() if v is not None}, **options)

    for name, help in reversed(RECALL_MOMENTS.items()):
        with_moments = click.option("--" + name.replace("_", "-"), name, help=help)(with_moments)
    return with_moments


@click.command()
@click.argument("content")
@click.option("--key", help="Stable semantic key (e.g. ui.theme); replaces that key's fact.")
@click.option("--importance", type=float, default=0.5, show_default=True, help="In [0, 1].")
@click.option("--session-id", help="Originating session.")
@click.option("--expires-at", help=_EXPIRES_HELP)
@_based_on_option
@_happened_at_option
@click.option("--json", "as_json", is_flag=True, help="Print the stored fact as JSON.")
@click.pass_context
def remember(
    ctx: click.Context,
    content: str,
    key: str | None,
    importance: float,
    session_id: str | None,
    expires_at: str | None,
    based_on: tuple[str, ...],
    happened_at: str | None,
    as_json: bool,
) -> None:
    """Store a durable fact (upsert by --key; identical keyless facts are kept once).

    A changed value keeps the one it replaces in the fact's history."""
    expiry = _expires_at(expires_at)
    result = run(
        ctx,
        lambda app, r: app.memory.remember(
            r,
            content,
            key=key,
            importance=importance,
            session_id=session_id,
            expires_at=expiry,
            happened_at=happened_at,
            provenance=CLI,
            based_on=_sources(based_on),
        ),
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
@_moment_options
@click.pass_context
def recall(
    ctx: click.Context,
    query: str,
    limit: int,
    as_json: bool,
    explain: bool,
    budget: int,
    moments: RecallOptions,
) -> None:
    """Recall the memories most relevant to QUERY and print the labelled block.

    Memories stored since the last command may still lack their vectors (the
    server writes them in the background): up to 256 are written here first.
    `--as-of 2021-06-01` answers from the world as it was then."""
    report, empty = run(ctx, lambda app, r: _recall_caught_up(app.memory, r, query, limit, moments))
    results = report.results
    block = render(results, budget=budget)
    if report.pending:
        click.echo(
            f"note: {report.pending:,} memories wait for their vectors and are found by "
            "their words only; `popagent serve` writes them in the background, "
            "`popagent embed` now",
            err=True,
        )
    if as_json:
        emit_json({"results": [r.to_json() for r in results], "rendered": block} | report.to_json())
        return
    if explain:
        click.echo(f"mode: {report.reason}")
        for rank, res in enumerate(results, 1):
            parts = "  ".join(f"{c.name}={c.value:.3f}*{c.weight:g}" for c in res.components)
            why = f"  admitted by {res.evidence}" if res.evidence else ""
            click.echo(f"#{rank} score={res.score:.3f}{why}  {parts}")
            click.echo(f"   {memory_line(res.memory)}")
            click.echo(f"   {provenance_line(res.memory)}")
        click.echo()
    click.echo(block or empty or "No relevant long-term memories.")


async def _recall_caught_up(
    memory: LongTermMemory, resource_id: str, query: str, limit: int, moments: RecallOptions
) -> tuple[RecallReport, str | None]:
    """The recall of ``query``, and when it found nothing because nothing was ever
    written to the resource, the sentence that says so (a miss reads differently)."""
    # A command lives too short for the background worker: a short backlog of pending
    # vectors is written first (``catch_up_vectors``); a longer one is left to serve/embed.
    await memory.catch_up_vectors(resource_id)
    report = await memory.recall_report(resource_id, query, limit=limit, **moments)
    if report.results or await memory.list(resource_id, MemoryFilter(limit=1)):
        return report, None
    return report, (
        f"Resource {resource_id!r} is empty: nothing has been remembered in it yet "
        '(popagent remember "..." stores a fact; --resource-id picks another resource).'
    )


def provenance_line(m: Memory) -> str:
    """Where a memory's current value came from, and (for a fact) its version and expiry."""
    parts = [f"origin={m.origin}", f"session={m.session_id or '-'}"]
    if m.turn_id is not None:
        parts.append(f"turn={m.turn_id}")
    if m.message_ids:
        parts.append("messages=" + ",".join(str(i) for i in m.message_ids))
    if m.tool_call_id is not None:
        parts.append(f"tool_call={m.tool_call_id}")
    if m.kind == "fact":
        parts.append(f"version={m.version}")
        parts.append(f"expires={when(m.expires_at, seconds=True)}")
    return "from " + " ".join(parts)


def version_line(v: FactVersion) -> str:
    """One earlier value of a fact: its span, how it ended, who wrote it, its text."""
    key = f" key={v.key}" if v.key else ""
    by = f"{v.ended_origin}" + (f"/{v.ended_session_id}" if v.ended_session_id else "")
    return (
        f"v{v.version:<4} {when(v.valid_from, seconds=True)} → {when(v.valid_to, seconds=True)}"
        f"  {v.ended} by {by}  origin={v.origin} session={v.session_id or '-'}"
        f"  imp={v.importance:.2f}{key}  {one_line(v.content, 100)}"
    )


def _kind_group(kind: Kind, help: str, *filters: str) -> click.Group:
    """The command group of one kind (``facts``, ``episodes``) with its ``list``
    command, which takes the options of these ``MemoryFilter`` fields."""
    group = click.Group(f"{kind}s", help=help)

    @group.command("list")
    @_filter_options(kind, *filters)
    @click.option("--json", "as_json", is_flag=True)
    @click.pass_context
    def list_kind(ctx: click.Context, where: MemoryFilter, as_json: bool) -> None:
        rows = run(ctx, lambda app, r: app.memory.list(r, where))
        print_rows(rows, as_json, to_json=Memory.to_json, line=memory_line, none="No memories.")

    return group


facts = _kind_group(
    "fact",
    "List, show, add, edit and delete facts; read and restore their earlier values.",
    "key",
    "text",
    "limit",
    "offset",
)


@facts.command("show")
@click.argument("fact")
@click.pass_context
def facts_show(ctx: click.Context, fact: str) -> None:
    """Print FACT (an id, or a current fact's key) as JSON."""
    emit_json(run(ctx, lambda app, r: _current(app.memory, r, fact)).to_json())


@facts.command("add")
@click.argument("content")
@click.option("--key")
@click.option("--importance", type=float, default=0.5, show_default=True)
@click.option("--expires-at", help=_EXPIRES_HELP)
@_based_on_option
@_happened_at_option
@click.pass_context
def facts_add(
    ctx: click.Context,
    content: str,
    key: str | None,
    importance: float,
    expires_at: str | None,
    based_on: tuple[str, ...],
    happened_at: str | None,
) -> None:
    """Strictly create a fact (an existing key is an error; use `remember` to upsert)."""
    expiry = _expires_at(expires_at)
    fact = run(
        ctx,
        lambda app, r: app.memory.create_fact(
            r,
            content,
            key=key,
            importance=importance,
            expires_at=expiry,
            provenance=CLI,
            based_on=_sources(based_on),
            happened_at=happened_at,
        ),
    )
    click.echo(f"created fact {fact.id}")


@facts.command("stale")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def facts_stale(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List the memories marked stale: a source they were based on changed or went.

    `facts confirm ID` clears a mark; `facts delete ID` forgets the fact."""
    rows = run(ctx, lambda app, r: app.memory.stale(r, limit=limit))
    print_rows(rows, as_json, to_json=Memory.to_json, line=_stale_line, none="No stale memories.")


def _stale_line(m: Memory) -> str:
    since = m.stale_since.date().isoformat() if m.stale_since else "-"
    return f"{memory_line(m)}  (based on {m.stale_source}, changed {since})"


@facts.command("confirm")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.pass_context
def facts_confirm(ctx: click.Context, id: int) -> None:
    """Confirm memory ID still holds: clear its stale mark."""
    run(ctx, lambda app, r: app.memory.confirm(r, id))
    click.echo(f"confirmed memory {id}")


@facts.command("edit")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.option("--content")
@click.option("--key")
@click.option("--clear-key", is_flag=True, help="Remove the fact's key.")
@click.option("--importance", type=float)
@click.option("--expires-at", help=_EXPIRES_HELP)
@click.option("--no-expiry", is_flag=True, help="Remove the fact's expiry.")
@_happened_at_option
@click.pass_context
def facts_edit(
    ctx: click.Context,
    id: int,
    content: str | None,
    key: str | None,
    clear_key: bool,
    importance: float | None,
    expires_at: str | None,
    no_expiry: bool,
    happened_at: str | None,
) -> None:
    """Change a fact; the value it replaces stays in its history (`facts history`).

    --happened-at alone changes the event clock in place, without a new version."""
    if (
        content is None
        and key is None
        and not clear_key
        and importance is None
        and expires_at is None
        and not no_expiry
        and happened_at is None
    ):
        raise click.UsageError(
            "give at least one of --content, --key, --clear-key, --importance, "
            "--expires-at, --no-expiry, --happened-at"
        )
    expiry = _expires_at(expires_at)
    fact = run(
        ctx,
        lambda app, r: app.memory.update_fact(
            r,
            id,
            content=content,
            key=key,
            clear_key=clear_key,
            importance=importance,
            expires_at=expiry,
            clear_expiry=no_expiry,
            happened_at=happened_at,
            provenance=CLI,
        ),
    )
    click.echo(f"updated fact {fact.id} (version {fact.version})")


@facts.command("delete")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete every earlier value; without it the last value stays in the history.",
)
@click.pass_context
def facts_delete(ctx: click.Context, id: int, purge: bool) -> None:
    """Delete a fact; `facts restore` can bring it back unless --purge."""
    run(ctx, lambda app, r: app.memory.delete(r, id, kind="fact", purge=purge, origin=CLI.origin))
    click.echo(f"deleted fact {id}" + (" and its history" if purge else ""))


def _as_id(fact: str) -> int | None:
    """``fact`` as a fact id when it is one (digits only, in range); else it is a key."""
    # At most 19 digits: ids are bigints, and int() refuses very long digit strings.
    digits = fact.isascii() and fact.isdigit() and len(fact) <= len(str(ID_MAX))
    return int(fact) if digits and 1 <= int(fact) <= ID_MAX else None


async def _by_key(memory: LongTermMemory, resource_id: str, key: str) -> Memory:
    found = await memory.list(resource_id, MemoryFilter(kind="fact", key=key, limit=1))
    if not found:
        raise NotFoundError(
            f"no fact with key {key!r} in this resource "
            "(a deleted fact is found by its id, with `facts history ID`)"
        )
    return found[0]


async def _current(memory: LongTermMemory, resource_id: str, fact: str) -> Memory:
    """The current value of ``fact``, an id or a key."""
    fact_id = _as_id(fact)
    if fact_id is None:
        return await _by_key(memory, resource_id, fact)
    return await memory.get(resource_id, fact_id, kind="fact")


async def _history(
    memory: LongTermMemory, resource_id: str, fact: str
) -> tuple[Memory | None, list[FactVersion]]:
    """The current value (``None`` when deleted or expired) and earlier values of ``fact``,
    an id or a key."""
    fact_id = _as_id(fact)
    current: Memory | None
    if fact_id is not None:
        try:
            current = await memory.get(resource_id, fact_id, kind="fact")
        except NotFoundError:
            current = None  # its history may still hold it
    else:
        current = await _by_key(memory, resource_id, fact)
        fact_id = current.id
    return current, await memory.fact_history(resource_id, fact_id)


@facts.command("history")
@click.argument("fact")
@click.option("--json", "as_json", is_flag=True, help="The current value and the versions.")
@click.pass_context
def facts_history(ctx: click.Context, fact: str, as_json: bool) -> None:
    """Earlier values of FACT (an id, or a current fact's key), newest first."""
    current, versions = run(ctx, lambda app, r: _history(app.memory, r, fact))
    if as_json:
        emit_json(
            {
                "fact": current.to_json() if current is not None else None,
                "versions": [v.to_json() for v in versions],
            }
        )
        return
    if current is None:
        click.echo("current  (deleted or expired; `facts restore ID VERSION` brings one back)")
    else:
        click.echo(
            f"current  v{current.version} since {when(current.updated_at, seconds=True)}"
            f"  {provenance_line(current)}"
        )
        click.echo(f"   {memory_line(current)}")
    if not versions:
        click.echo("No earlier values.")
    for v in versions:
        click.echo(version_line(v))


@facts.command("restore")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.argument("version", type=click.IntRange(1, VERSION_MAX))
@click.option("--json", "as_json", is_flag=True, help="Print the restored fact as JSON.")
@click.pass_context
def facts_restore(ctx: click.Context, id: int, version: int, as_json: bool) -> None:
    """Make VERSION of fact ID current again (a deleted fact comes back under its id)."""
    fact = run(ctx, lambda app, r: app.memory.restore_fact(r, id, version, provenance=CLI))
    if as_json:
        emit_json(fact.to_json())
    else:
        click.echo(f"restored fact {fact.id} to version {version} (now version {fact.version})")


episodes = _kind_group(
    "episode",
    "List and delete episodes (episodes are immutable).",
    "session_id",
    "text",
    "limit",
    "offset",
)


@episodes.command("delete")
@click.argument("id", type=click.IntRange(1, ID_MAX))
@click.pass_context
def episodes_delete(ctx: click.Context, id: int) -> None:
    run(ctx, lambda app, r: app.memory.delete(r, id, kind="episode"))
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
    deleted = run(ctx, lambda app, r: app.memory.cleanup(r, kind=kind, older_than=cutoff))  # type: ignore[arg-type]
    click.echo(f"deleted {plural(deleted, 'memory', 'memories')}")


@click.command()
@click.pass_context
def maintain(ctx: click.Context) -> None:
    """Apply retention to every resource: 90-day episode age, 5,000 episodes per resource,
    facts past their expiry (their last value stays in their history)."""
    report = run(ctx, lambda app, _r: app.memory.maintain())
    click.echo(
        f"deleted {report.expired_episodes:,} expired and "
        f"{plural(report.capped_episodes, 'over-cap episode')}, "
        f"{plural(report.expired_facts, 'expired fact')}"
    )
