"""``/sessions``: the resource's chat sessions, each with its exact history (paged,
oldest first) and its observational-memory state, and rename and delete.

The state shows every generation of the observation log, the active
observations, and the active generation's groups; each group links to the
exact messages it observed (``#msg-ID`` on the history page that holds them).
A turn that ended without its reply (interrupted, failed) or is still running
is marked after its last message.
Deleting a session deletes its messages and observations, after a
confirmation page; long-term memory stays.

"Writes of this session" lists the facts and episodes the session wrote that
stand, and the fact values it replaced or deleted. Reverting them takes a
confirmation page (GET, no effect) and its POST form with ``confirm=yes``;
every undone value stays in its fact's history.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ValidationError
from ...models import turn_marker, unfinished_turn_ends
from ...threads.service import TITLE_CAP
from ..services import services
from .forms import FormRefused, read_form
from .rendering import page, redirect
from .routing import HtmlRoute, SessionId

__all__ = ["MESSAGES_PER_PAGE", "SESSIONS_PER_PAGE", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

SESSIONS_PER_PAGE = 50
MESSAGES_PER_PAGE = 50
_ID_MAX = 2**63 - 1


def _number(text: str | None, cap: int = _ID_MAX) -> int | None:
    if text is None or not text.isdigit() or len(text) > 19 or int(text) > cap:
        return None
    return int(text)


def session_path(session_id: str) -> str:
    return "/sessions/" + quote(session_id, safe="")


@router.get("/sessions")
async def list_sessions(request: Request) -> Response:
    s = services(request)
    offset = _number(request.query_params.get("offset"), 10_000_000) or 0
    rows = await s.root.threads.list_sessions(
        s.resource_id, limit=SESSIONS_PER_PAGE + 1, offset=offset
    )
    more = len(rows) > SESSIONS_PER_PAGE
    shown = rows[:SESSIONS_PER_PAGE]
    previews: dict[str, str] = {}
    for session in shown:  # an untitled session is named by its first user message
        if not session.title:
            first = await s.root.threads.list_messages(s.resource_id, session.session_id, limit=5)
            text = next((m.content for m in first if m.role == "user" and m.content.strip()), "")
            if text:
                previews[session.session_id] = text
    return page(
        request,
        "sessions.html",
        active="sessions",
        sessions=shown,
        previews=previews,
        next_offset=offset + SESSIONS_PER_PAGE if more else None,
        previous_offset=max(offset - SESSIONS_PER_PAGE, 0) if offset else None,
    )


async def _session_page(
    request: Request,
    session_id: str,
    *,
    title_form: str | None = None,
    title_error: str | None = None,
) -> Response:
    s = services(request)
    session = await s.root.threads.get_session(s.resource_id, session_id)
    after_id = _number(request.query_params.get("after_id"))
    messages = await s.root.threads.list_messages(
        s.resource_id, session_id, after_id=after_id, limit=MESSAGES_PER_PAGE
    )
    logs, groups = await s.observation_state(session_id)
    writes = await s.root.memory.session_writes(s.resource_id, session_id)
    next_after_id = messages[-1].id if len(messages) == MESSAGES_PER_PAGE else None
    ends = unfinished_turn_ends(messages, last_page=next_after_id is None)
    by_id = {m.id: m for m in messages}
    return page(
        request,
        "session.html",
        active="sessions",
        status_code=422 if title_error else 200,
        session=session,
        messages=messages,
        turn_ends={
            id: (status, turn_marker(by_id[id].turn_id or 0, status)) for id, status in ends.items()
        },
        after_id=after_id,
        next_after_id=next_after_id,
        generations=logs,
        active_log=logs[-1] if logs else None,
        groups=groups,
        title_form=session.title or "" if title_form is None else title_form,
        title_error=title_error,
        title_cap=TITLE_CAP,
        writes=writes,
        base=session_path(session_id),
    )


@router.get("/sessions/{session_id}")
async def show_session(request: Request, session_id: SessionId) -> Response:
    return await _session_page(request, session_id)


@router.post("/sessions/{session_id}/rename")
async def rename_session(request: Request, session_id: SessionId) -> Response:
    s = services(request)
    form = await read_form(request, ("title",))
    title = form.get("title", "")
    try:
        await s.root.threads.rename_session(s.resource_id, session_id, title or None)
    except ValidationError as exc:
        return await _session_page(request, session_id, title_form=title, title_error=exc.message)
    return redirect(session_path(session_id), notice="session-renamed")


@router.get("/sessions/{session_id}/delete")
async def confirm_delete(request: Request, session_id: SessionId) -> Response:
    return await _confirmation(request, session_id, "session_delete.html")


@router.post("/sessions/{session_id}/delete")
async def delete_session(request: Request, session_id: SessionId) -> Response:
    await read_form(request, ())
    s = services(request)
    await s.root.threads.delete_session(s.resource_id, session_id)
    return redirect("/sessions", notice="session-deleted")


@router.get("/sessions/{session_id}/revert")
async def confirm_revert(request: Request, session_id: SessionId) -> Response:
    """What reverting would undo; changes nothing."""
    return await _confirmation(request, session_id, "session_revert.html", with_writes=True)


async def _confirmation(
    request: Request, session_id: str, template: str, *, with_writes: bool = False
) -> Response:
    """The page that asks to confirm an action on a session (404 for an unknown one),
    with the session's writes when the action concerns them."""
    s = services(request)
    session = await s.root.threads.get_session(s.resource_id, session_id)
    writes = await s.root.memory.session_writes(s.resource_id, session_id) if with_writes else None
    return page(
        request,
        template,
        active="sessions",
        session=session,
        writes=writes,
        base=session_path(session_id),
    )


@router.post("/sessions/{session_id}/revert")
async def revert_session(request: Request, session_id: SessionId) -> Response:
    form = await read_form(request, ("confirm",))
    if form.get("confirm") != "yes":
        raise FormRefused(
            422, "Not confirmed", "confirm: reverting needs the explicit confirmation"
        )
    s = services(request)
    await s.root.threads.get_session(s.resource_id, session_id)  # 404 for an unknown session
    report = await s.root.memory.revert_session(s.resource_id, session_id, origin="gui")
    return redirect(
        session_path(session_id),
        notice="session-reverted",
        restored=str(len(report.restored)),
        deleted=str(len(report.deleted)),
        skipped=str(len(report.skipped)),
    )
