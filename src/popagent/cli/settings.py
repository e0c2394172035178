"""``popagent settings``: show, set and reset the resource's observational-memory settings.

Values are typed as ``NAME=VALUE`` (``off`` turns a setting off where that is a
value; see ``popagent.observe.settings.parse_setting``) and validated exactly as
the library validates them: bad input exits 2 naming the setting (every value
that does not parse, all in one message), and nothing is written. A change applies from the next agent turn.
"""

from __future__ import annotations

import click

from ..errors import ValidationError
from ..observe.settings import SETTINGS, format_setting, parse_setting
from ..observe.settings_store import StoredSettings
from .common import Settings, emit_json, one_line, run, when

__all__ = ["settings_group"]


def _shown(name: str, value: object) -> str:
    text = format_setting(name, value)
    return one_line(text, 60) if name.endswith("_guidance") else text


def _print(stored: StoredSettings, *, verbose: bool) -> None:
    click.echo(
        f"resource {stored.resource_id}  version {stored.version}  "
        f"updated {when(stored.updated_at)}"
    )
    width = max(len(s.name) for s in SETTINGS)
    for s in SETTINGS:
        value = getattr(stored.settings, s.name)
        changed = value != s.default
        line = f"{'*' if changed else ' '} {s.name:<{width}}  {_shown(s.name, value)}"
        if s.unit and isinstance(value, int) and not isinstance(value, bool):
            line += s.unit if s.unit.startswith("%") else f" {s.unit}"
        if changed:
            line += f"  [default {_shown(s.name, s.default)}]"
        click.echo(line)
        if verbose:
            click.echo(f"      {s.help}")
            click.echo(f"      accepts: {s.accepts}")


@click.group("settings")
def settings_group() -> None:
    """Show, set and reset the observational-memory settings (they apply on the next turn)."""


@settings_group.command("show")
@click.option(
    "--json", "as_json", is_flag=True, help="Every setting, the version and time as JSON."
)
@click.option("--verbose", "-v", is_flag=True, help="Also what each setting means and accepts.")
@click.pass_context
def settings_show(ctx: click.Context, as_json: bool, verbose: bool) -> None:
    """Every setting with its value; '*' marks one changed from its default."""
    stored = run(ctx, lambda app, r: app.settings.read(r))
    if as_json:
        emit_json(
            {
                "resource_id": stored.resource_id,
                "version": stored.version,
                "updated_at": stored.updated_at.isoformat() if stored.updated_at else None,
                "settings": stored.settings.to_json(),
            }
        )
    else:
        _print(stored, verbose=verbose)


@settings_group.command("set")
@click.argument("assignments", nargs=-1, required=True, metavar="NAME=VALUE...")
@click.pass_context
def settings_set(ctx: click.Context, assignments: tuple[str, ...]) -> None:
    """Change one or more settings at once, validated together (`show -v` lists them)."""
    changes: dict[str, object] = {}
    problems: list[str] = []  # every bad value is reported at once, not the first one only
    seen: set[str] = set()
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name = name.strip()
        if not sep or not name:
            problems.append(f"expected NAME=VALUE, got {one_line(assignment, 60)!r}")
            continue
        if name in seen:
            problems.append(f"{name}: given twice")
            continue
        seen.add(name)
        try:
            changes[name] = parse_setting(name, text)
        except ValidationError as exc:
            problems.append(str(exc))
    if len(problems) == 1:
        raise click.UsageError(problems[0])
    if problems:
        raise click.UsageError(
            f"{len(problems)} problems, nothing was written:\n  " + "\n  ".join(problems)
        )
    stored = run(ctx, lambda app, r: app.settings.update_stored(r, changes))
    for name in changes:
        click.echo(f"{name} = {_shown(name, getattr(stored.settings, name))}")
    click.echo(f"version {stored.version}; applies from the next turn")


@settings_group.command("reset")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def settings_reset(ctx: click.Context, yes: bool) -> None:
    """Put every setting back to its default."""
    settings: Settings = ctx.obj
    if not yes and not click.confirm(
        f"Reset every memory setting of resource {settings.resource_id!r} to its default?"
    ):
        raise click.Abort()
    run(ctx, lambda app, r: app.settings.reset(r))
    click.echo("memory settings reset to their defaults; applies from the next turn")
