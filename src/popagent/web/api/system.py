"""``/healthz`` (no token needed), ``/api/info`` and ``/api/maintenance``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ... import __version__
from ...memory.recall import PENDING_COUNT_CAP
from ...models import Health, MaintenanceReport
from ..schemas import ErrorOut
from ..services import Services, services

__all__ = ["HEALTH_TIMEOUT_S", "router"]

HEALTH_TIMEOUT_S = 2.0

router = APIRouter(tags=["system"])


@router.get(
    "/healthz",
    response_model=Health,
    responses={503: {"model": Health}},
    summary="Whether the server can reach its database",
)
async def healthz(request: Request) -> JSONResponse:
    # The server's own services: health has no resource (and no credential) in any mode.
    s: Services = request.app.state.services
    if s.root.pool.down_since is not None:
        # Known to be away (a lost connection, or the embedded server restarting):
        # say so now rather than after waiting for a connection, and have the pool
        # look again in the background, which clears the mark once it answers.
        s.root.pool.recheck_soon()
        return JSONResponse({"status": "unavailable", "database": "down"}, status_code=503)
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with s.root.pool.connection() as conn:
                await conn.execute("SELECT 1")
    except Exception as exc:  # any failure to reach the database is "unavailable"
        if isinstance(exc, TimeoutError) and s.root.pool.busy():
            # Waiting in line behind a burst while connections keep coming back:
            # the database answers, it is only busy.
            return JSONResponse({"status": "ok", "database": "busy"})
        return JSONResponse(
            {"status": "unavailable", "database": type(exc).__name__}, status_code=503
        )
    return JSONResponse({"status": "ok", "database": "ok"})


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
