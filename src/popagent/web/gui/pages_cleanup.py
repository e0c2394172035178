"""Explicit cleanup of long-term memory, purge of the whole resource, and retention
maintenance on demand.

Cleanup takes three steps and deletes only at the last: ``/cleanup`` chooses
what (a kind, created before a date), ``/cleanup/confirm`` (GET, no effect)
shows how many memories that is, and only its POST form deletes them. Purge
(everything of the resource, not only its memory) is linked from ``/cleanup``:
``/purge`` (GET, no effect) shows the rows per table, and its POST form needs
the resource ID typed out as well.

Invariants:
- Nothing is deleted by a GET, and the POSTs need the explicit ``confirm=yes``
  field beside the CSRF token; a purge also needs ``confirm_resource`` equal
  to the server's resource ID.
- The count shown is the same filter the delete uses (``created_at`` strictly
  before the start of the chosen UTC day).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...memory.purge import count_resource_rows
from ...models import Kind, MemoryFilter
from ...store.tenant import bypass
from ..services import services
from .forms import FormRefused, read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["COUNT_CAP", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: The confirmation page counts up to this many (the list cap) and says "at least" there.
COUNT_CAP = 1_000
_KINDS: dict[str, Kind | None] = {"": None, "fact": "fact", "episode": "episode"}


def _choice(form: dict[str, str]) -> tuple[Kind | None, datetime | None, dict[str, str]]:
    """The kind and cutoff of a cleanup choice, with problems by field."""
    errors: dict[str, str] = {}
    kind_text = form.get("kind", "").strip()
    if kind_text not in _KINDS:
        errors["kind"] = "must be fact, episode, or empty for both"
    cutoff = None
    day = form.get("older_than", "").strip()
    if day:
        try:
            cutoff = datetime.combine(date.fromisoformat(day), time(), tzinfo=UTC)
        except ValueError:
            errors["older_than"] = "must be a date like 2026-01-31"
    return _KINDS.get(kind_text), cutoff, errors


@router.get("/cleanup")
async def choose(request: Request) -> Response:
    return page(
        request, "cleanup.html", active="memories", form={"kind": "", "older_than": ""}, errors={}
    )


@router.get("/cleanup/confirm")
async def confirm(request: Request) -> Response:
    form = {name: request.query_params.get(name, "") for name in ("kind", "older_than")}
    kind, cutoff, errors = _choice(form)
    if errors:
        return page(
            request, "cleanup.html", active="memories", status_code=422, form=form, errors=errors
        )
    s = services(request)
    rows = await s.root.memory.list(
        s.resource_id, MemoryFilter(kind=kind, created_before=cutoff, limit=COUNT_CAP)
    )
    return page(
        request,
        "cleanup_confirm.html",
        active="memories",
        form=form,
        kind=kind,
        cutoff=cutoff,
        count=len(rows),
        at_least=len(rows) >= COUNT_CAP,
    )


@router.post("/cleanup")
async def cleanup(request: Request) -> Response:
    form = await read_form(request, ("kind", "older_than", "confirm"))
    if form.get("confirm") != "yes":
        raise FormRefused(422, "Not confirmed", "confirm: cleanup needs the explicit confirmation")
    kind, cutoff, errors = _choice(form)
    if errors:
        name, message = next(iter(errors.items()))
        raise FormRefused(422, "Invalid cleanup", f"{name}: {message}")
    s = services(request)
    deleted = await s.root.memory.cleanup(s.resource_id, kind=kind, older_than=cutoff)
    return redirect("/", notice="cleanup", n=deleted)


@router.get("/purge")
async def purge_confirm(request: Request) -> Response:
    s = services(request)
    counts = await count_resource_rows(s.root.pool, s.resource_id)
    return page(
        request,
        "purge_confirm.html",
        active="memories",
        counts=counts,
        total=sum(n for _, n in counts),
    )


@router.post("/purge")
async def purge(request: Request) -> Response:
    form = await read_form(request, ("confirm", "confirm_resource"))
    s = services(request)
    if form.get("confirm") != "yes":
        raise FormRefused(422, "Not confirmed", "confirm: purge needs the explicit confirmation")
    if form.get("confirm_resource") != s.resource_id:
        raise FormRefused(
            422,
            "Not confirmed",
            "confirm_resource: type the resource ID exactly to confirm the purge",
        )
    with bypass("purge"):  # the owner's connection: VACUUM needs it (store.tenant)
        report = await s.root.memory.purge(s.resource_id)
    return redirect("/", notice="purge", n=report.total)


@router.post("/maintenance")
async def maintenance(request: Request) -> Response:
    await read_form(request, ())
    s = services(request)
    report = await s.root.memory.maintain(resource_id=s.resource_id)
    return redirect(
        "/",
        notice="maintenance",
        expired=str(report.expired_episodes),
        capped=str(report.capped_episodes),
        facts=str(report.expired_facts),
    )
