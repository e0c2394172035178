"""``popagent keys``: create, list and revoke the API keys of multi-resource mode.

A key belongs to one resource (``--resource-id``) and has a scope (read, write,
admin of that resource) and an optional expiry. ``create`` prints the key once,
on stdout alone (so that ``KEY=$(popagent keys create ...)`` works); it is
stored only as a hash and cannot be shown again. ``list`` shows names, scopes,
times and use counts, never a key, and what each listed resource stores against
the storage quotas (``popagent.keys.Usage``). ``revoke`` takes effect at once for every
server process. These commands act on the database directly, as the operator
(``popagent serve --multi-resource`` serves the keys; docs/server.md).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import click

from ..keys import ApiKey, KeyStore, Usage
from .common import Settings, connected, emit_json, exit_codes, parse_when, print_rows, when

__all__ = ["keys_group"]

T = TypeVar("T")

_DURATION = re.compile(r"(\d{1,5})([dh])")


def _run(ctx: click.Context, action: Callable[[KeyStore], Awaitable[T]]) -> T:
    """Open the database (no embedding model: keys need none) and run ``action(store)``."""
    settings: Settings = ctx.obj

    async def main() -> T:
        async with connected(settings, max_size=2, embedder=None) as app:
            return await action(app.keys)

    with exit_codes():
        return asyncio.run(main())


def _expiry(value: str | None) -> datetime | None:
    """``--expires``: ``30d`` or ``12h`` from now, or an ISO-8601 date or time."""
    if value is None:
        return None
    match = _DURATION.fullmatch(value.strip())
    if match:
        amount = int(match.group(1))
        unit = timedelta(days=1) if match.group(2) == "d" else timedelta(hours=1)
        return datetime.now(UTC) + amount * unit
    return parse_when(value, "--expires")


@click.group("keys")
def keys_group() -> None:
    """Create, list and revoke API keys (multi-resource mode; a key is shown once)."""


@keys_group.command("create")
@click.option(
    "--scope",
    type=click.Choice(["read", "write", "admin"]),
    default="write",
    show_default=True,
    help="read: look only; write: memory, sessions and chat; admin: also the resource's keys.",
)
@click.option("--name", help="A name to tell keys apart (default: key-DATE-TIME).")
@click.option("--expires", help="30d, 12h, or an ISO-8601 date or time (default: never).")
@click.option("--json", "as_json", is_flag=True, help="Print the key and its row as JSON.")
@click.pass_context
def keys_create(
    ctx: click.Context,
    scope: str,
    name: str | None,
    expires: str | None,
    as_json: bool,
) -> None:
    """Create a key for the resource named by --resource-id and print it, once."""
    settings: Settings = ctx.obj
    if not settings.resource_on_command_line:
        raise click.UsageError(
            "name the key's resource on the command line: popagent keys create "
            "--resource-id RESOURCE (the default and POPAGENT_RESOURCE_ID are not used here)"
        )
    resource_id = settings.resource_id
    expires_at = _expiry(expires)
    key_name = name or datetime.now(UTC).strftime("key-%Y%m%d-%H%M%S")

    async def action(store: KeyStore) -> tuple[ApiKey, str]:
        return await store.create(resource_id, key_name, scope, expires_at=expires_at)

    row, key = _run(ctx, action)
    if as_json:
        emit_json({"key": key, **row.to_json()})
        return
    click.echo(key)
    click.echo(
        f"key {row.id} {row.name!r} for {row.resource_id} ({row.scope}), "
        f"expires {when(row.expires_at)}: shown once, store it now",
        err=True,
    )


@keys_group.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Include revoked keys.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def keys_list(ctx: click.Context, include_revoked: bool, as_json: bool) -> None:
    """List keys: id, resource, name, scope, prefix, times and use count (never a key),
    then what each resource stores (memories, their bytes, its chats' bytes: what the
    storage quotas count); only one resource's with --resource-id. With --json each
    key carries its resource's usage."""
    settings: Settings = ctx.obj
    resource_id = settings.resource_id if settings.resource_on_command_line else None

    async def action(store: KeyStore) -> tuple[list[ApiKey], dict[str, Usage]]:
        keys = await store.list_keys(resource_id, include_revoked=include_revoked)
        resources = list(dict.fromkeys(k.resource_id for k in keys))
        if resource_id is not None and resource_id not in resources:
            resources.append(resource_id)
        return keys, {r: await store.usage(r) for r in resources}

    keys, usage = _run(ctx, action)

    def to_json(k: ApiKey) -> dict[str, object]:
        return k.to_json() | {"usage": usage[k.resource_id].to_json()}

    print_rows(keys, as_json, to_json=to_json, line=_key_line, none="No keys.")
    if not as_json:
        for used in usage.values():
            click.echo(f"{used.resource_id} stores {used.describe()}: {used.bytes:,} bytes")


def _key_line(r: ApiKey) -> str:
    state = f" revoked {when(r.revoked_at)}" if r.revoked_at else ""
    return (
        f"{r.id:>5}  {r.resource_id}  {r.name}  {r.scope:<5}  {r.prefix}…  "
        f"created {when(r.created_at)}  expires {when(r.expires_at)}  "
        f"used {r.use_count:,}x, last {when(r.last_used_at)}{state}"
    )


@keys_group.command("revoke")
@click.argument("key_id", type=int)
@click.pass_context
def keys_revoke(ctx: click.Context, key_id: int) -> None:
    """Revoke key KEY_ID (from `keys list`): refused at once by every server process."""

    async def action(store: KeyStore) -> ApiKey:
        return await store.revoke(key_id)

    row = _run(ctx, action)
    click.echo(f"Revoked key {row.id} {row.name!r} of {row.resource_id}.")
