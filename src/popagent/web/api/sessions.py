"""``/api/sessions``: chat sessions of the server's resource, their exact history,
and their observational-memory state (read-only).

Deleting a session deletes its messages and observations; long-term memory
stays (only an explicit cleanup removes it).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from ...threads.service import PAGE_CAP
from ..schemas import (
    ErrorOut,
    MessagePage,
    ObservationsOut,
    SessionOut,
    SessionPage,
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


@router.get("", response_model=SessionPage, summary="List sessions, most recently active first")
async def list_sessions(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> SessionPage:
    s = services(request)
    rows = await s.threads.list_sessions(s.resource_id, limit=limit + 1, offset=offset)
    more = len(rows) > limit
    return SessionPage.model_validate(
        {
            "items": [r.to_json() for r in rows[:limit]],
            "limit": limit,
            "offset": offset,
            "next_offset": offset + limit if more else None,
        }
    )


@router.get("/{session_id}", response_model=SessionOut, summary="Read a session")
async def get_session(request: Request, session_id: SessionId) -> dict[str, object]:
    s = services(request)
    return (await s.threads.get_session(s.resource_id, session_id)).to_json()


@router.patch("/{session_id}", response_model=SessionOut, summary="Rename a session")
async def rename_session(
    request: Request, session_id: SessionId, body: SessionRename
) -> dict[str, object]:
    s = services(request)
    return (await s.threads.rename_session(s.resource_id, session_id, body.title)).to_json()


@router.delete("/{session_id}", status_code=204, summary="Delete a session and its messages")
async def delete_session(request: Request, session_id: SessionId) -> Response:
    s = services(request)
    await s.threads.delete_session(s.resource_id, session_id)
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
    rows = await s.threads.list_messages(s.resource_id, session_id, after_id=after_id, limit=limit)
    return MessagePage.model_validate(
        {
            "items": [m.to_json() for m in rows],
            "next_after_id": rows[-1].id if len(rows) == limit else None,
        }
    )


@router.get(
    "/{session_id}/observations",
    response_model=ObservationsOut,
    summary="Observational-memory state of a session",
)
async def observations(request: Request, session_id: SessionId) -> dict[str, Any]:
    """Every generation of the session's observation log and the active
    generation's groups, whose message ids point at the exact source messages."""
    s = services(request)
    await s.threads.get_session(s.resource_id, session_id)  # 404 for an unknown session
    logs, groups = await s.observation_state(session_id)
    return {
        "session_id": session_id,
        "generations": [
            {**_fields(log), "covered_group_ids": list(log.covered_group_ids)} for log in logs
        ],
        "groups": [_fields(g) for g in groups],
    }


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}
