"""The memory browser: ``/`` lists and filters facts and episodes, ``/memories/{id}``
shows one with every piece of metadata, its provenance and, for a fact, its
earlier versions (each with a Restore button, ``pages_facts``).

Filters arrive as a GET query (bookmarkable, no side effects): ``text``
(case-insensitive substring), ``kind``, ``key``, ``session_id``, ``from`` and
``to`` (dates, UTC, both inclusive) and ``offset``. A bad filter is shown next
to its field and lists nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...checks import ID_CAP
from ...errors import ValidationError
from ...memory.validation import KEY_CAP, filter_from, normalize_key
from ...models import MemoryFilter
from ..services import services
from .rendering import page
from .routing import HtmlRoute, MemoryId

__all__ = ["PAGE_SIZE", "Filters", "parse_filters", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: Memories per page of the browser.
PAGE_SIZE = 25
_TEXT_CAP = 200
_OFFSET_CAP = 10_000_000


@dataclass(frozen=True, slots=True)
class Filters:
    """The browser's filters as typed (``form``) and as the store takes them (``where``,
    one page and one memory more, to tell whether another page follows)."""

    form: dict[str, str]
    where: MemoryFilter
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def offset(self) -> int:
        return self.where.offset


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValidationError("date", "must be a date like 2026-01-31") from None


def parse_filters(query: dict[str, str]) -> Filters:
    """The filters of a browser query; problems land in ``errors`` by field name."""
    names = ("text", "kind", "key", "session_id", "from", "to", "offset")
    form = {name: query.get(name, "").strip() for name in names}
    given: dict[str, Any] = {}
    errors: dict[str, str] = {}
    if form["text"]:
        if len(form["text"]) > _TEXT_CAP:
            errors["text"] = f"must be at most {_TEXT_CAP} characters"
        else:
            given["text"] = form["text"]
    kinds: dict[str, Literal["fact", "episode"]] = {"fact": "fact", "episode": "episode"}
    if form["kind"] and form["kind"] not in kinds:
        errors["kind"] = "must be fact or episode"
    given["kind"] = kinds.get(form["kind"])
    if form["key"]:
        try:
            given["key"] = normalize_key(form["key"])
        except ValidationError as exc:
            errors["key"] = exc.message
    if form["session_id"]:
        if len(form["session_id"]) > ID_CAP:
            errors["session_id"] = f"must be at most {ID_CAP} characters"
        else:
            given["session_id"] = form["session_id"]
    for name in ("from", "to"):
        if form[name]:
            try:
                day = _day(form[name])
            except ValidationError as exc:
                errors[name] = exc.message
                continue
            start = datetime.combine(day, time(), tzinfo=UTC)
            if name == "from":
                given["created_after"] = start
            else:
                given["created_before"] = start + timedelta(days=1)
    if form["offset"]:
        if form["offset"].isdigit() and int(form["offset"]) <= _OFFSET_CAP:
            given["offset"] = int(form["offset"])
        else:
            errors["offset"] = f"must be a whole number up to {_OFFSET_CAP:,}"
    return Filters(form, filter_from(given, limit=PAGE_SIZE + 1), errors)


def _link_params(f: Filters, offset: int) -> dict[str, Any]:
    return {**{k: v for k, v in f.form.items() if k != "offset"}, "offset": offset or None}


@router.get("/")
async def browse(request: Request) -> Response:
    s = services(request)
    f = parse_filters(dict(request.query_params))
    rows = []
    if not f.errors:
        rows = await s.root.memory.list(s.resource_id, f.where)
    more = len(rows) > PAGE_SIZE
    return page(
        request,
        "memories.html",
        active="memories",
        status_code=422 if f.errors else 200,
        filters=f,
        key_cap=KEY_CAP,
        text_cap=_TEXT_CAP,
        memories=rows[:PAGE_SIZE],
        first=f.offset + 1,
        next_params=_link_params(f, f.offset + PAGE_SIZE) if more else None,
        previous_params=_link_params(f, max(f.offset - PAGE_SIZE, 0)) if f.offset else None,
    )


@router.get("/memories/{id}")
async def detail(request: Request, id: MemoryId) -> Response:
    s = services(request)
    memory = await s.root.memory.get(s.resource_id, id)
    versions = await s.root.memory.fact_history(s.resource_id, id) if memory.kind == "fact" else []
    return page(request, "memory.html", active="memories", memory=memory, versions=versions)
