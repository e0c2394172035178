"""What every ``popagent`` command shares: its settings, the database, exit codes, output.

Exit codes: bad input (``ValidationError``) exits with 2 through
``click.UsageError``, naming the field; any other ``PopagentError`` (a missing
memory, session or secret, a conflict, an unusable secret key, a database that
cannot be started, reached or used) exits with 1, printing one line and no
traceback.
``asyncio.run`` is called here and in ``chat`` only: the CLI is the edge.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import platformdirs

from ..defaults import DEFAULT_KEY_RATE, DEFAULT_RESOURCE, TOKEN_FILE_ENV
from ..errors import PopagentError, ValidationError

if TYPE_CHECKING:
    from ..keys import Limits
    from ..models import Memory, Message, Session
    from ..root import Popagent
    from ..secrets import SecretCipher

__all__ = [
    "DEFAULT_RESOURCE",
    "LimitFlags",
    "Settings",
    "connected",
    "default_key_file",
    "emit_json",
    "exit_codes",
    "limit_options",
    "memory_line",
    "message_lines",
    "one_line",
    "parse_when",
    "plural",
    "print_rows",
    "run",
    "secret_cipher",
    "session_line",
    "token_file_option",
    "when",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Settings:
    """The group's options, passed to every command as ``ctx.obj``.

    ``resource_given``: the resource came from ``--resource-id`` (before or after
    the command) or ``POPAGENT_RESOURCE_ID``, not from the default;
    ``resource_on_command_line``: from ``--resource-id`` itself.
    """

    database_url: str | None
    data_dir: str | None
    resource_id: str
    resource_given: bool = False
    resource_on_command_line: bool = False


@contextmanager
def exit_codes() -> Iterator[None]:
    """Turn popagent's errors into click's: ``ValidationError`` exits 2, the rest 1."""
    try:
        yield
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc
    except PopagentError as exc:
        raise click.ClickException(" ".join(str(exc).split())) from exc


@asynccontextmanager
async def connected(settings: Settings, **options: Any) -> AsyncIterator[Popagent]:
    """``connect()`` for a short command: the group's database, with ``options``.

    Without a database URL, a cluster another process already runs in the data
    directory (``popagent serve``) is used as it is, found without the embedded
    server's start-up lock (``store.embedded.running_url``), and left to that
    process; when none runs, or it stopped before this command connected, the
    command starts (or joins) it the usual way, under the lock. Long-running
    commands (``chat``, ``mcp``, ``serve``) keep a handle of their own instead.
    """
    # Imported here, not at the top: ``popagent --help`` must not pay for them.
    from ..connection import connect
    from ..errors import DatabaseError
    from ..store.embedded import running_url

    async with AsyncExitStack() as stack:
        app: Popagent | None = None
        running = None if settings.database_url else running_url(settings.data_dir)
        if running is not None:
            with suppress(DatabaseError):  # stopped meanwhile: start or join it below
                app = await stack.enter_async_context(connect(running, **options))
        if app is None:
            app = await stack.enter_async_context(
                connect(settings.database_url, data_dir=settings.data_dir, **options)
            )
        yield app


def run(ctx: click.Context, action: Callable[[Popagent, str], Awaitable[T]]) -> T:
    """Open the database (``connected``), run ``action(app, resource_id)`` (``app``:
    ``connect()``'s ``Popagent``), map errors to exit codes."""
    from ..embed import configured_embedder

    settings: Settings = ctx.obj

    async def main() -> T:
        async with connected(settings, max_size=4, embedder=configured_embedder()) as app:
            return await action(app, settings.resource_id)

    with exit_codes():
        return asyncio.run(main())


def default_key_file() -> Path:
    """The CLI's default secret key file: in popagent's default data folder, beside (not
    inside) the embedded cluster."""
    return Path(platformdirs.user_data_dir("popagent")) / "secret.key"


def secret_cipher() -> SecretCipher:
    """The configured secret key: ``POPAGENT_SECRET_KEY``, ``POPAGENT_SECRET_KEY_FILE``,
    else ``default_key_file()``, created on first use. Raises ``SecretKeyError``."""
    from ..secrets import load_cipher

    return load_cipher(default_key_file=default_key_file())


# --- output -------------------------------------------------------------------------------


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 fact``, ``3 facts`` (``nouns``: the plural when it is not ``noun + "s"``)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def when(value: datetime | None, *, seconds: bool = False) -> str:
    """A timestamp in UTC, to the minute (or second); ``never`` for ``None``."""
    if value is None:
        return "never"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def one_line(text: str, width: int) -> str:
    """``text`` on one line (newlines shown as ⏎), at most ``width`` characters."""
    flat = text.replace("\n", " ⏎ ")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def memory_line(m: Memory) -> str:
    key = f" key={m.key}" if m.key else ""
    expires = f" expires={when(m.expires_at)}" if m.expires_at else ""
    return (
        f"{m.id:>7}  {m.kind:<7} {when(m.created_at)}  imp={m.importance:.2f}{key}{expires}  "
        f"{one_line(m.content, 100)}"
    )


def print_rows(
    rows: Sequence[T],
    as_json: bool,
    *,
    to_json: Callable[[T], Any],
    line: Callable[[T], str],
    none: str,
) -> None:
    """What a ``list`` command prints: ``rows`` as one JSON array with ``--json``, else
    one ``line`` each, or ``none`` (``No memories.``) when there are none."""
    if as_json:
        emit_json([to_json(row) for row in rows])
    elif not rows:
        click.echo(none)
    else:
        for row in rows:
            click.echo(line(row))


def session_line(session: Session, preview: str | None) -> str:
    """ID, last activity and title; an untitled session shows its first user message."""
    if session.title:
        label = session.title
    elif preview:
        label = f'"{one_line(preview.strip(), 60)}"'
    else:
        label = "(no messages)"
    return f"{session.session_id}  {when(session.updated_at)}  {label}"


def message_lines(m: Message) -> list[str]:
    """One stored message as shown: a header line, its text, its tool calls and attachments."""
    head = f"#{m.id} {m.role}  {when(m.created_at, seconds=True)}"
    body: list[str] = []
    for part in m.parts:
        kind = part.get("type")
        if kind == "tool_result":
            head += (
                f"  result of {part.get('name')} [{part.get('tool_call_id')}]: "
                f"{part.get('outcome', '?')}"
            )
        elif kind == "tool_call":
            body.append(f"→ call {part.get('name')} [{part.get('id')}] {part.get('arguments')}")
        elif kind == "attachment":
            body.append(f"attachment: {part.get('name')} ({part.get('media_type', '?')})")
    text = m.content.splitlines() if m.content else []
    return [head, *(f"    {line}" for line in [*text, *body])]


def parse_when(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(
            f"not an ISO-8601 date or time: {value!r}", param_hint=field
        ) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# --- the flags serve and mcp share: the token file, multi-resource limits ---------------


def token_file_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--token-file`` (or ``POPAGENT_TOKEN_FILE``): the file whose first line is the
    bearer token (``popagent.access.load_token``); the command gets it as ``token_file``."""
    return click.option(
        "--token-file", envvar=TOKEN_FILE_ENV, type=click.Path(dir_okay=False), help=help
    )


def limit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags of ``popagent.keys.Limits`` (``--key-rate``, ``--key-burst``,
    ``--quota-memories``, ``--quota-bytes``); the command gets them as ``limits``."""
    options = [
        click.option(
            "--key-rate",
            type=click.IntRange(min=0),
            default=DEFAULT_KEY_RATE,
            show_default=True,
            help="Multi-resource mode: requests one API key may make per minute "
            "(429 with Retry-After past it); 0: no limit.",
        ),
        click.option(
            "--key-burst",
            type=click.IntRange(min=1),
            help="Multi-resource mode: requests one key may send at once before the rate "
            "applies (default: 10 seconds of --key-rate).",
        ),
        click.option(
            "--quota-memories",
            type=click.IntRange(min=1),
            help="Multi-resource mode: memories one resource may store (a write past it gets 429).",
        ),
        click.option(
            "--quota-bytes",
            type=click.IntRange(min=1),
            help="Multi-resource mode: bytes one resource may store in memories and chats "
            "together (a write past it gets 429).",
        ),
    ]

    def with_limits(
        *args: Any,
        key_rate: int,
        key_burst: int | None,
        quota_memories: int | None,
        quota_bytes: int | None,
        **kwargs: Any,
    ) -> Any:
        kwargs["limits"] = LimitFlags(key_rate or None, key_burst, quota_memories, quota_bytes)
        return command(*args, **kwargs)

    functools.update_wrapper(with_limits, command)
    decorated: Callable[..., Any] = with_limits
    for option in reversed(options):
        decorated = option(decorated)
    return decorated


@dataclass(frozen=True, slots=True)
class LimitFlags:
    """The limit flags as given (``popagent.keys.Limits.of`` checks and builds them:
    the CLI's start imports no driver)."""

    key_rate: int | None
    key_burst: int | None
    quota_memories: int | None
    quota_bytes: int | None

    def limits(self) -> Limits:
        from ..keys import Limits

        return Limits.of(
            requests_per_minute=self.key_rate,
            burst=self.key_burst,
            max_memories=self.quota_memories,
            max_bytes=self.quota_bytes,
        )
