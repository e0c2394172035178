"""``/recall``: preview what a turn would recall for a query.

Shows the ranked memories with every score component (value, weight,
contribution) and exactly the block a turn would put in the model's context,
and which mode ran and why (the embedding model and its state, how many
memories still wait for their vectors and how many this server has written).
A preview is not a use: the memories' access time and count stay as they
were. It is still a POST with a CSRF token (a query is memory content, kept
out of URLs, history and logs).
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ValidationError
from ...memory.recall import PENDING_COUNT_CAP
from ...memory.recall_report import RecallReport
from ...memory.render import render
from ...memory.validation import QUERY_CAP, check_query
from ...memory.versions import check_moment
from ...models import RECALL_MOMENTS, RecallOptions
from ..services import Services, services
from .forms import read_form
from .rendering import page
from .routing import HtmlRoute

__all__ = ["LIMIT_CAP", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

LIMIT_CAP = 100
DEFAULT_LIMIT = 8


async def _vectors(s: Services, report: RecallReport | None) -> dict[str, object]:
    """What the page says about semantic recall, before or with a preview."""
    memory = s.root.memory
    health = memory.model_health()
    progress = memory.vector_progress(s.resource_id)
    if report is not None:
        pending = report.pending
    elif memory.embedder is not None:
        pending = await memory.pending_vectors(s.resource_id, cap=PENDING_COUNT_CAP)
    else:
        pending = 0
    return {
        "model": health.model if health is not None else None,
        "state": health.state if health is not None else None,
        "error": health.error if health is not None else None,
        "pending": pending,
        "pending_cap": PENDING_COUNT_CAP,
        "embedded": progress.embedded if progress is not None else 0,
        "working": progress.working if progress is not None else False,
    }


async def _page(
    request: Request,
    form: dict[str, str],
    errors: dict[str, str],
    report: RecallReport | None = None,
    rendered: str | None = None,
) -> Response:
    return page(
        request,
        "recall.html",
        active="recall",
        status_code=422 if errors else 200,
        form=form,
        errors=errors,
        results=report.results if report is not None else None,
        report=report,
        vectors=await _vectors(services(request), report),
        rendered=rendered,
        query_cap=QUERY_CAP,
        limit_cap=LIMIT_CAP,
        moments=RECALL_MOMENTS,
    )


@router.get("/recall")
async def recall_form(request: Request) -> Response:
    return await _page(request, {"query": "", "limit": str(DEFAULT_LIMIT)}, {})


@router.post("/recall")
async def recall(request: Request) -> Response:
    raw = await read_form(request, ("query", "limit", *RECALL_MOMENTS))
    form = {"query": raw.get("query", ""), "limit": raw.get("limit", "").strip()}
    form |= {name: raw.get(name, "").strip() for name in RECALL_MOMENTS}
    errors: dict[str, str] = {}
    moments: RecallOptions = {}
    for name in RECALL_MOMENTS:
        try:
            if form[name]:
                moments[name] = check_moment(name, form[name])  # type: ignore[literal-required]
        except ValidationError as exc:
            errors[name] = exc.message
    query = ""
    try:
        query = check_query(form["query"])
    except ValidationError as exc:
        errors["query"] = exc.message
    limit = DEFAULT_LIMIT
    if form["limit"]:
        if form["limit"].isdigit() and 1 <= int(form["limit"]) <= LIMIT_CAP:
            limit = int(form["limit"])
        else:
            errors["limit"] = f"must be a whole number from 1 to {LIMIT_CAP}"
    if errors:
        return await _page(request, form, errors)
    s = services(request)
    report = await s.root.memory.recall_report(
        s.resource_id, query, limit=limit, touch=False, **moments
    )
    return await _page(request, form, errors, report, render(report.results))
