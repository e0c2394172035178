"""``/stale``: the memories of the resource marked stale, to confirm or forget.

A memory is marked when a source it was based on (``based_on``) changed, expired
or went (migration 0022). Confirm says it still holds and clears the mark (a
POST with the CSRF token, then back here); forget goes to the memory's delete
confirmation, the same page as anywhere else.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ..services import services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute, MemoryId

__all__ = ["STALE_PAGE_CAP", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: The most stale memories the page lists, most recently marked first.
STALE_PAGE_CAP = 200


@router.get("/stale")
async def stale(request: Request) -> Response:
    s = services(request)
    memories = await s.root.memory.stale(s.resource_id, limit=STALE_PAGE_CAP)
    return page(request, "stale.html", active="memories", memories=memories)


@router.post("/memories/{id}/confirm")
async def confirm(request: Request, id: MemoryId) -> Response:
    """Clear memory ``id``'s stale mark; 404 page when the resource has no such memory."""
    await read_form(request, ())
    s = services(request)
    await s.root.memory.confirm(s.resource_id, id)
    return redirect("/stale", notice="memory-confirmed")
