"""``popagent secrets``: set (from a hidden prompt), list names and times, delete.

A value is never an argument (it would stay in the shell's history and the
process list) and is never printed; ``list`` shows names and times only. The
key comes from ``POPAGENT_SECRET_KEY``, ``POPAGENT_SECRET_KEY_FILE`` or the
default key file (see ``common.secret_cipher``).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import click

from ..secrets import SecretInfo, SecretStore
from ..secrets.store import MAX_TTL, NAME_PATTERN
from .common import exit_codes, print_rows, run, secret_cipher, when

__all__ = ["secrets_group"]

T = TypeVar("T")


def _with_store(ctx: click.Context, action: Callable[[SecretStore, str], Awaitable[T]]) -> T:
    """Load the key (before touching the database), then run ``action(store, resource_id)``."""
    with exit_codes():
        cipher = secret_cipher()
    return run(ctx, lambda app, r: action(app.secrets(cipher), r))


def _info_json(info: SecretInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "last_used_at": info.last_used_at.isoformat() if info.last_used_at else None,
        "expires_at": info.expires_at.isoformat() if info.expires_at else None,
    }


def _info_line(info: SecretInfo) -> str:
    return (
        f"{info.name}  updated {when(info.updated_at)}  last used {when(info.last_used_at)}  "
        f"expires {when(info.expires_at)}"
    )


@click.group("secrets")
def secrets_group() -> None:
    """Set, list and delete secrets (encrypted, apart from memory; values never shown)."""


@secrets_group.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="")
@click.option(
    "--ttl-days",
    type=click.IntRange(1, MAX_TTL.days),
    help="Expire the secret this many days from now (default: never).",
)
@click.pass_context
def secrets_set(
    ctx: click.Context, name: str, extra: tuple[str, ...], ttl_days: int | None
) -> None:
    """Create or replace secret NAME; the value is read from a hidden prompt (or stdin)."""
    if extra:
        # Not click's "unexpected extra argument (VALUE)": that would print the value.
        raise click.UsageError(
            "the value is never an argument (it would stay in your shell history): "
            "run `popagent secrets set NAME` and type it at the hidden prompt; nothing was stored"
        )
    if not NAME_PATTERN.fullmatch(name):
        # Checked before asking for the value; the name is not echoed (it may be a pasted value).
        raise click.UsageError(
            "name: must be 1 to 64 characters: a letter, then letters, digits, '_', '.' or '-'"
        )
    value: str = click.prompt(
        f"Value of {name}",
        hide_input=True,
        # Typing blind deserves a second look; piped input comes once.
        confirmation_prompt=sys.stdin.isatty(),
        default="",
        show_default=False,
    )
    ttl = None if ttl_days is None else timedelta(days=ttl_days)
    info = _with_store(ctx, lambda store, r: store.set(r, name, value, ttl=ttl))
    expiry = f", expires {when(info.expires_at)} UTC" if info.expires_at else ""
    click.echo(f"set secret {info.name}{expiry}")


@secrets_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Names and times as JSON.")
@click.pass_context
def secrets_list(ctx: click.Context, as_json: bool) -> None:
    """Names and times of this resource's live secrets, never their values."""
    infos = _with_store(ctx, lambda store, r: store.list(r))
    print_rows(infos, as_json, to_json=_info_json, line=_info_line, none="No secrets.")


@secrets_group.command("delete")
@click.argument("name")
@click.pass_context
def secrets_delete(ctx: click.Context, name: str) -> None:
    """Delete secret NAME."""
    _with_store(ctx, lambda store, r: store.delete(r, name))
    click.echo(f"deleted secret {name}")
