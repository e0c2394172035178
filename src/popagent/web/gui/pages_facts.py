"""Fact and episode writes: create and edit fact forms, delete with a confirmation step.

Episodes are immutable records: the GUI offers no way to change one, only to
delete it (after a confirmation page), as the spec requires.

Invariants:
- Every field is checked by the library's own rules (``popagent.memory.validation``)
  before the write, so all problems of one submission are shown at once, each next
  to its field, and nothing is written while any remains.
- A successful write answers 303 to the fact's page (redirect after POST).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Path
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ConflictError, ValidationError
from ...memory.validation import (
    FACT_CONTENT_CAP,
    KEY_CAP,
    check_importance,
    normalize_fact_content,
    normalize_key,
)
from ...models import Memory
from ..services import services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["FACT_FIELDS", "FactForm", "check_fact_form", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

FACT_FIELDS = ("content", "key", "importance")
DEFAULT_IMPORTANCE = 0.5

MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@dataclass(slots=True)
class FactForm:
    """A fact form as typed, its checked values, and its problems by field."""

    form: dict[str, str]
    content: str = ""
    key: str | None = None
    importance: float = DEFAULT_IMPORTANCE
    errors: dict[str, str] = field(default_factory=dict)


def _importance(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise ValidationError("importance", "must be a number from 0 to 1, like 0.5") from None
    if not math.isfinite(number):
        raise ValidationError("importance", "must be a finite number from 0 to 1")
    return check_importance(number)


def check_fact_form(form: dict[str, str]) -> FactForm:
    """Check every field of a submitted fact form; an empty key means no key."""
    typed = {name: form.get(name, "") for name in FACT_FIELDS}
    # Browsers send textarea line breaks as CRLF; the library collapses whitespace anyway.
    typed["content"] = typed["content"].replace("\r\n", "\n")
    f = FactForm(form=typed)
    try:
        f.content = normalize_fact_content(typed["content"])
    except ValidationError as exc:
        f.errors["content"] = exc.message
    try:
        f.key = normalize_key(typed["key"]) if typed["key"].strip() else None
    except ValidationError as exc:
        f.errors["key"] = exc.message
    if typed["importance"].strip():
        try:
            f.importance = _importance(typed["importance"].strip())
        except ValidationError as exc:
            f.errors["importance"] = exc.message
    else:
        f.errors["importance"] = "is required: a number from 0 to 1"
    return f


def _form_page(
    request: Request, f: FactForm, *, fact: Memory | None, status_code: int = 200
) -> Response:
    return page(
        request,
        "fact_form.html",
        active="memories",
        status_code=status_code,
        fact=fact,
        f=f,
        content_cap=FACT_CONTENT_CAP,
        key_cap=KEY_CAP,
    )


def _show_refusal(f: FactForm, exc: ValidationError | ConflictError) -> None:
    """Put the library's refusal next to the field it concerns."""
    if isinstance(exc, ValidationError):
        f.errors[exc.field if exc.field in FACT_FIELDS else "content"] = exc.message
    else:
        f.errors["key" if f.key is not None else "content"] = str(exc)


@router.get("/facts/new")
async def new_fact(request: Request) -> Response:
    f = FactForm(form={"content": "", "key": "", "importance": str(DEFAULT_IMPORTANCE)})
    return _form_page(request, f, fact=None)


@router.post("/facts")
async def create_fact(request: Request) -> Response:
    s = services(request)
    f = check_fact_form(await read_form(request, FACT_FIELDS))
    if not f.errors:
        try:
            fact = await s.memory.create_fact(
                s.resource_id, f.content, key=f.key, importance=f.importance
            )
        except (ValidationError, ConflictError) as exc:
            _show_refusal(f, exc)
        else:
            return redirect(f"/memories/{fact.id}", notice="fact-created")
    return _form_page(request, f, fact=None, status_code=422)


@router.get("/facts/{id}/edit")
async def edit_fact(request: Request, id: MemoryId) -> Response:
    s = services(request)
    fact = await s.memory.get_fact(s.resource_id, id)
    f = FactForm(
        form={"content": fact.content, "key": fact.key or "", "importance": f"{fact.importance:g}"}
    )
    return _form_page(request, f, fact=fact)


@router.post("/facts/{id}")
async def update_fact(request: Request, id: MemoryId) -> Response:
    s = services(request)
    fact = await s.memory.get_fact(s.resource_id, id)
    f = check_fact_form(await read_form(request, FACT_FIELDS))
    if not f.errors:
        try:
            await s.memory.update_fact(
                s.resource_id,
                id,
                content=f.content,
                key=f.key,
                clear_key=f.key is None,
                importance=f.importance,
            )
        except (ValidationError, ConflictError) as exc:
            _show_refusal(f, exc)
        else:
            return redirect(f"/memories/{id}", notice="fact-updated")
    return _form_page(request, f, fact=fact, status_code=422)


@router.get("/facts/{id}/delete")
async def confirm_delete_fact(request: Request, id: MemoryId) -> Response:
    s = services(request)
    memory = await s.memory.get_fact(s.resource_id, id)
    return page(request, "confirm_delete.html", active="memories", memory=memory)


@router.post("/facts/{id}/delete")
async def delete_fact(request: Request, id: MemoryId) -> Response:
    await read_form(request, ())
    s = services(request)
    await s.memory.delete_fact(s.resource_id, id)
    return redirect("/", notice="fact-deleted")


@router.get("/episodes/{id}/delete")
async def confirm_delete_episode(request: Request, id: MemoryId) -> Response:
    s = services(request)
    memory = await s.memory.get_episode(s.resource_id, id)
    return page(request, "confirm_delete.html", active="memories", memory=memory)


@router.post("/episodes/{id}/delete")
async def delete_episode(request: Request, id: MemoryId) -> Response:
    await read_form(request, ())
    s = services(request)
    await s.memory.delete_episode(s.resource_id, id)
    return redirect("/", notice="episode-deleted")
