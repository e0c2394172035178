"""``POST /api/purge``: remove everything of the server's resource.

The route acts on the server's own resource (the body has no room for another:
unknown fields are refused) and only with ``{"confirm": true}``, the JSON
boolean. It deletes what cleanup does and everything else of the resource too:
sessions, messages, observations, settings, secrets and audit rows; then it
vacuums the emptied tables. MCP has no such tool: a model must never be able
to purge.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from ...models import PurgeReport
from ...store.tenant import bypass
from ..schemas import ErrorOut, PurgeRequest
from ..services import services

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["memories"], responses={422: {"model": ErrorOut}})


@router.post("/purge", response_model=PurgeReport, summary="Purge everything of the resource")
async def purge(request: Request, body: PurgeRequest) -> PurgeReport:
    """Delete every row of the server's resource in every table, in one transaction,
    then ``VACUUM`` the tables it deleted from. ``confirm`` must be ``true``."""
    s = services(request)
    # The owner's connection: VACUUM needs it, and the purge names its resource itself.
    with bypass("purge"):
        return await s.root.memory.purge(s.resource_id)
