"""``/healthz`` (no token needed), ``/api/info`` and ``/api/maintenance``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ... import __version__
from ...memory.recall import PENDING_COUNT_CAP
from ...models import Health, MaintenanceReport
from ..schemas import ErrorOut
from ..services import Services, services

__all__ = ["router"]

router = APIRouter(tags=["system"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health}},
    summary="Whether the server can reach its database",
)
async def healthz(request: Request) -> JSONResponse:
    # The server's own probe (``web.health``): health has no resource and no
    # credential in any mode, and waits in no queue.
    s: Services = request.app.state.services
    status, body = await s.health.check()
    return JSONResponse(body, status_code=status)


@router.get(
    "/api/info",
    summary="The server's resource, version, model, embedding model (and vectors still "
    "pending) and schedule",
)
async def info(request: Request) -> dict[str, Any]:
    s = services(request)
    schedule = s.scheduler.state() if s.scheduler is not None else None
    return {
        "version": __version__,
        "resource_id": s.resource_id,
        "model": None if s.agent is None else s.agent.model.model,
        "embeddings": await _embeddings(s),
        "maintenance": None
        if schedule is None
        else {
            "interval_s": schedule.interval_s,
            "next_run_at": schedule.next_run_at,
            "last_run_at": schedule.last_run_at,
            "last_outcome": schedule.last_outcome,
        },
    }


@router.post(
    "/api/maintenance",
    response_model=MaintenanceReport,
    responses={422: {"model": ErrorOut}},
    summary="Run retention maintenance now for this resource (90 days, 5,000 episodes, "
    "expired facts)",
)
async def maintain(request: Request) -> MaintenanceReport:
    """This resource only, as every management route; the server's schedule (and
    ``popagent maintain``) cover every resource."""
    s = services(request)
    return await s.root.memory.maintain(resource_id=s.resource_id)


async def _embeddings(s: Services) -> dict[str, Any] | None:
    """Semantic recall's state: ``null`` when it is off (no embedding model)."""
    memory = s.root.memory
    health = memory.model_health()
    progress = memory.vector_progress(s.resource_id)
    if health is None or progress is None:
        return None
    return {
        "model": health.model,
        "state": health.state,
        "error": health.error,
        # Memories of the resource still waiting for their vectors (counted up to 10,000).
        "pending_vectors": await memory.pending_vectors(s.resource_id, cap=PENDING_COUNT_CAP),
        # Vectors this server process has written since it started, and whether it is now.
        "written": progress.embedded,
        "working": progress.working,
    }
