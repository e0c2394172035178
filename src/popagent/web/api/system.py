"""``/healthz`` (no token needed), ``/api/info`` and ``/api/maintenance``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ... import __version__
from ..schemas import ErrorOut, Health, MaintenanceOut
from ..services import services

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
    s = services(request)
    if s.memory.pool.down_since is not None:
        # Known to be away (a lost connection, or the embedded server restarting):
        # say so now rather than after waiting for a connection, and have the pool
        # look again in the background, which clears the mark once it answers.
        s.memory.pool.recheck_soon()
        return JSONResponse({"status": "unavailable", "database": "down"}, status_code=503)
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with s.memory.pool.connection() as conn:
                await conn.execute("SELECT 1")
    except Exception as exc:  # any failure to reach the database is "unavailable"
        return JSONResponse(
            {"status": "unavailable", "database": type(exc).__name__}, status_code=503
        )
    return JSONResponse({"status": "ok", "database": "ok"})


@router.get("/api/info", summary="The server's resource, version, model and schedule")
async def info(request: Request) -> dict[str, Any]:
    s = services(request)
    schedule = s.scheduler.state() if s.scheduler is not None else None
    return {
        "version": __version__,
        "resource_id": s.resource_id,
        "model": None if s.agent is None else s.agent.model.model,
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
    response_model=MaintenanceOut,
    responses={422: {"model": ErrorOut}},
    summary="Run retention maintenance now for this resource (90 days, 5,000 episodes, "
    "expired facts)",
)
async def maintain(request: Request) -> dict[str, int]:
    """This resource only, as every management route; the server's schedule (and
    ``popagent maintain``) cover every resource."""
    s = services(request)
    report = await s.memory.maintain(resource_id=s.resource_id)
    return {
        "expired_episodes": report.expired_episodes,
        "capped_episodes": report.capped_episodes,
        "expired_facts": report.expired_facts,
    }
