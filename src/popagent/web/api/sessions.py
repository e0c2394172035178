"""``/api/sessions``: chat sessions of the server's resource, their exact history,
and their observational-memory state (read-only).

Deleting a session deletes its messages and observations; long-term memory
stays (only an explicit cleanup removes it). ``/writes`` lists what a session
wrote to long-term memory and ``/revert`` undoes it (every undone value stays
in its fact's history). ``/items`` keeps a framework session's items exactly
(``popagent.threads.items``: the OpenAI Agents SDK ``Session`` of a remote app).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from ...models import (
    ItemPage,
    ItemPopped,
    ItemsAdded,
    MessagePage,
    Observations,
    Page,
    RevertReport,
    Session,
    SessionItem,
    SessionWrites,
)
from ...threads.service import PAGE_CAP
from ..schemas import (
    ErrorOut,
    ItemsAppend,
    RevertRequest,
    SessionRename,
)
from ..services import services

__all__ = ["router"]

router = APIRouter(
    prefix="/api/sessions",
    tags=["sessions"],
    responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)

SessionId = Annotated[str, Path(min_length=1, max_length=256, description="The session's id.")]


@router.get("", response_model=Page[Session], summary="List sessions, most recently active first")
async def list_sessions(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Page[Session]:
    s = services(request)
    rows = await s.root.threads.list_sessions(s.resource_id, limit=limit + 1, offset=offset)
    more = len(rows) > limit
    next_offset = offset + limit if more else None
    return Page(items=tuple(rows[:limit]), limit=limit, offset=offset, next_offset=next_offset)


@router.get("/{session_id}", response_model=Session, summary="Read a session")
async def get_session(request: Request, session_id: SessionId) -> Session:
    s = services(request)
    return await s.root.threads.get_session(s.resource_id, session_id)


@router.patch("/{session_id}", response_model=Session, summary="Rename a session")
async def rename_session(request: Request, session_id: SessionId, body: SessionRename) -> Session:
    s = services(request)
    return await s.root.threads.rename_session(s.resource_id, session_id, body.title)


@router.delete("/{session_id}", status_code=204, summary="Delete a session and its messages")
async def delete_session(request: Request, session_id: SessionId) -> Response:
    s = services(request)
    await s.root.threads.delete_session(s.resource_id, session_id)
    return Response(status_code=204)


@router.get("/{session_id}/messages", response_model=MessagePage, summary="Read the exact history")
async def list_messages(
    request: Request,
    session_id: SessionId,
    after_id: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_CAP)] = 100,
) -> MessagePage:
    """A page of messages, oldest first, as stored; pass ``next_after_id`` for the next."""
    s = services(request)
    rows = await s.root.threads.list_messages(
        s.resource_id, session_id, after_id=after_id, limit=limit
    )
    return MessagePage(tuple(rows), rows[-1].id if len(rows) == limit else None)


@router.get(
    "/{session_id}/items", response_model=ItemPage, summary="Read a framework session's items"
)
async def list_items(
    request: Request,
    session_id: SessionId,
    after_id: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_CAP)] = 100,
    last: Annotated[int | None, Query(ge=1, le=PAGE_CAP)] = None,
) -> ItemPage:
    """Items exactly as added (``popagent.threads.items``), oldest first: a page after
    ``after_id``, or with ``last`` the newest ``last``. An unknown session has none."""
    s = services(request)
    store = s.root.items
    if last is not None:
        rows = await store.page(s.resource_id, session_id, last=last)
        return ItemPage(tuple(SessionItem(i, item) for i, item in rows), None)
    # One more than asked says whether there is a next page.
    rows = await store.page(s.resource_id, session_id, after_id=after_id, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    items = tuple(SessionItem(i, item) for i, item in rows)
    return ItemPage(items, rows[-1][0] if more else None)


@router.post(
    "/{session_id}/items",
    status_code=201,
    response_model=ItemsAdded,
    summary="Append framework session items (creates the session)",
)
async def append_items(request: Request, session_id: SessionId, body: ItemsAppend) -> ItemsAdded:
    """All items or none; each is screened for credentials as every message is."""
    s = services(request)
    ids = await s.root.items.append(s.resource_id, session_id, body.items)
    return ItemsAdded(ids=tuple(ids))


@router.delete(
    "/{session_id}/items/last", response_model=ItemPopped, summary="Remove the newest item"
)
async def pop_item(request: Request, session_id: SessionId) -> ItemPopped:
    s = services(request)
    return ItemPopped(item=await s.root.items.pop(s.resource_id, session_id))


@router.delete(
    "/{session_id}/items", status_code=204, summary="Remove every item (the session stays)"
)
async def clear_items(request: Request, session_id: SessionId) -> Response:
    """Empties the session's history and thread-scoped state; a no-op for an unknown session."""
    s = services(request)
    await s.root.items.clear(s.resource_id, session_id)
    return Response(status_code=204)


@router.get(
    "/{session_id}/observations",
    response_model=Observations,
    summary="Observational-memory state of a session",
)
async def observations(request: Request, session_id: SessionId) -> Observations:
    """Every generation of the session's observation log and the active
    generation's groups, whose message ids point at the exact source messages."""
    s = services(request)
    await s.root.threads.get_session(s.resource_id, session_id)  # 404 for an unknown session
    logs, groups = await s.observation_state(session_id)
    # Stored generations and groups are the API's with their resource and session,
    # which the response leaves out.
    return Observations(session_id, tuple(logs), tuple(groups))


@router.get(
    "/{session_id}/writes",
    response_model=SessionWrites,
    summary="What a session wrote to long-term memory",
)
async def session_writes(request: Request, session_id: SessionId) -> SessionWrites:
    """The facts and episodes whose current value the session wrote, and the fact
    values it replaced or deleted. Any session id may have writes (a library
    write names its session freely), so an unknown one lists nothing, not 404."""
    s = services(request)
    return await s.root.memory.session_writes(s.resource_id, session_id)


@router.post(
    "/{session_id}/revert",
    response_model=RevertReport,
    summary="Undo a session's long-term writes",
)
async def revert_session(
    request: Request, session_id: SessionId, body: RevertRequest
) -> RevertReport:
    """Each fact the session changed goes back to its value before the session (or
    is deleted when the session created it), its episodes are deleted and the
    facts it deleted come back, in one transaction. A fact whose old key or
    content is now another fact's is skipped and reported. ``confirm`` must be true."""
    s = services(request)
    return await s.root.memory.revert_session(s.resource_id, session_id, origin="api")
