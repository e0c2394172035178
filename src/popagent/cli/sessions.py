"""``popagent sessions``: list, show (the exact history), rename and delete chat sessions.

Deleting a session deletes its messages and thread-scoped state; long-term
memories (facts and episodes) are kept, and only ``popagent cleanup`` removes them.
A chat turn that ended without its reply is marked by a ``[turn N ...]`` line
after its last message (``history_lines``).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from ..models import Message, Session, turn_marker, unfinished_turn_ends
from ..threads import ThreadStore
from .common import emit_json, message_lines, print_rows, run, session_line, when

__all__ = ["first_user_messages", "history_lines", "sessions_group"]


def history_lines(messages: Sequence[Message], *, last_page: bool) -> list[str]:
    """Stored messages as shown, each turn that is not completed marked after its
    last message (a turn left mid-way by a crash, a failure or Ctrl-C)."""
    ends = unfinished_turn_ends(messages, last_page=last_page)
    lines: list[str] = []
    for message in messages:
        lines.extend(message_lines(message))
        status = ends.get(message.id)
        if status is not None and message.turn_id is not None:
            lines.append(f"    [{turn_marker(message.turn_id, status)}]")
    return lines


async def first_user_messages(
    threads: ThreadStore, resource_id: str, sessions: Sequence[Session]
) -> dict[str, str]:
    """Each session's first user message (as stored), for labelling untitled sessions."""
    previews: dict[str, str] = {}
    for session in sessions:
        if session.title:
            continue
        page = await threads.list_messages(resource_id, session.session_id, limit=5)
        first = next((m.content for m in page if m.role == "user"), None)
        if first:
            previews[session.session_id] = first
    return previews


@click.group("sessions")
def sessions_group() -> None:
    """List, show, rename and delete chat sessions (long-term memory is kept)."""


@sessions_group.command("list")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--offset", type=int, default=0)
@click.option("--json", "as_json", is_flag=True, help="The sessions as JSON.")
@click.pass_context
def sessions_list(ctx: click.Context, limit: int, offset: int, as_json: bool) -> None:
    """Sessions, most recently active first: ID, last activity (UTC), title."""

    async def action(threads: ThreadStore, r: str) -> tuple[list[Session], dict[str, str]]:
        rows = await threads.list_sessions(r, limit=limit, offset=offset)
        return rows, {} if as_json else await first_user_messages(threads, r, rows)

    rows, previews = run(ctx, lambda app, r: action(app.threads, r))
    print_rows(
        rows,
        as_json,
        to_json=Session.to_json,
        line=lambda s: session_line(s, previews.get(s.session_id)),
        none="No sessions.",
    )


@sessions_group.command("show")
@click.argument("session_id")
@click.option("--limit", type=int, default=50, show_default=True, help="Messages per page.")
@click.option(
    "--after-id",
    # The API's bounds: a message id is a positive bigint, 0 means "from the start".
    type=click.IntRange(0, 2**63 - 1),
    help="Start after this message (the next page).",
)
@click.option("--json", "as_json", is_flag=True, help="The session and the page as JSON.")
@click.pass_context
def sessions_show(
    ctx: click.Context, session_id: str, limit: int, after_id: int | None, as_json: bool
) -> None:
    """The exact messages of a session, oldest first, with tool calls and results."""

    async def action(threads: ThreadStore, r: str) -> tuple[Session, list[Message], bool]:
        session = await threads.get_session(r, session_id)
        page = await threads.list_messages(r, session_id, after_id=after_id, limit=limit)
        more = bool(page) and bool(
            await threads.list_messages(r, session_id, after_id=page[-1].id, limit=1)
        )
        return session, page, more

    session, page, more = run(ctx, lambda app, r: action(app.threads, r))
    next_after_id = page[-1].id if more else None
    if as_json:
        emit_json(
            {
                "session": session.to_json(),
                "messages": [m.to_json() for m in page],
                "next_after_id": next_after_id,
            }
        )
        return
    click.echo(
        f"session {session.session_id}  title: {session.title or '(untitled)'}  "
        f"created {when(session.created_at)}  last activity {when(session.updated_at)}"
    )
    if not page:
        click.echo("No messages." if after_id is None else "No more messages.")
    for line in history_lines(page, last_page=next_after_id is None):
        click.echo(line)
    if next_after_id is not None:
        click.echo(f"More: popagent sessions show {session_id} --after-id {next_after_id}")


@sessions_group.command("rename")
@click.argument("session_id")
@click.argument("title")
@click.pass_context
def sessions_rename(ctx: click.Context, session_id: str, title: str) -> None:
    """Set a session's title ('' clears it)."""
    renamed = run(ctx, lambda app, r: app.threads.rename_session(r, session_id, title))
    if renamed.title is None:
        click.echo(f"cleared the title of session {session_id}")
    else:
        click.echo(f"renamed session {session_id} to {renamed.title!r}")


@sessions_group.command("delete")
@click.argument("session_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def sessions_delete(ctx: click.Context, session_id: str, yes: bool) -> None:
    """Delete a session and its messages; its long-term memories are kept."""
    if not yes and not click.confirm(
        f"Delete session {session_id!r} and its messages? "
        "Long-term memories (facts and episodes) are kept"
    ):
        raise click.Abort()
    run(ctx, lambda app, r: app.threads.delete_session(r, session_id))
    click.echo(
        f"deleted session {session_id} and its messages; long-term memories (facts and "
        "episodes) are kept (`popagent cleanup` removes those)"
    )
