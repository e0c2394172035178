"""Fact and episode writes: create and edit fact forms, delete with a confirmation step,
a fact's history and restoring one of its versions.

Episodes are immutable records: the GUI offers no way to change one, only to
delete it (after a confirmation page), as the spec requires. Deleting a fact
keeps its last value in its history unless the confirmation's "purge" box is
ticked; ``/facts/{id}/history`` shows the history even of a deleted fact, and
each version's Restore button makes it current again.

An expiry is typed as a date and time in UTC (a ``datetime-local`` field; a
time with an offset is taken as given). On edit, the expiry shown is the
fact's own: left as it is, it stays exactly as stored, even once past.

Invariants:
- Every field is checked by the library's own rules (``popagent.memory.validation``)
  before the write, so all problems of one submission are shown at once, each next
  to its field, and nothing is written while any remains.
- A successful write answers 303 to the fact's page (redirect after POST).
- Every write records ``origin="gui"`` as its provenance.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fastapi import APIRouter
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ConflictError, NotFoundError, ValidationError
from ...memory.validation import (
    FACT_CONTENT_CAP,
    KEY_CAP,
    check_expires_at,
    check_happened_at,
    check_importance,
    normalize_fact_content,
    normalize_key,
)
from ...models import HAPPENED_AT_CAP, HAPPENED_AT_HELP, Kind, Memory, Provenance
from ..services import Services, services
from ._expiry import parse_expiry
from .forms import FormRefused, read_form
from .rendering import page, redirect
from .routing import HtmlRoute, MemoryId

__all__ = ["FACT_FIELDS", "GUI_WRITE", "FactForm", "check_fact_form", "expiry_text", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

FACT_FIELDS = ("content", "key", "importance", "expires_at", "happened_at")
DEFAULT_IMPORTANCE = 0.5
#: The provenance of every write through the GUI.
GUI_WRITE = Provenance(origin="gui")
_VERSION_MAX = 2**31 - 1


@dataclass(slots=True)
class FactForm:
    """A fact form as typed, its checked values, and its problems by field."""

    form: dict[str, str]
    content: str = ""
    key: str | None = None
    importance: float = DEFAULT_IMPORTANCE
    #: ``None``: no expiry (on edit: remove it).
    expires_at: datetime | None = None
    #: The expiry field still shows the fact's own expiry: leave it as stored.
    expiry_unchanged: bool = False
    #: The event clock as typed (``FactOptions.happened_at``), checked; ``None``: left
    #: empty (read from the content, as ``create_fact`` and ``update_fact`` do).
    happened_at: str | None = None
    errors: dict[str, str] = field(default_factory=dict)


def expiry_text(value: datetime | None) -> str:
    """An expiry as the form's ``datetime-local`` field shows it: UTC, to the second."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S") if value is not None else ""


def _importance(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise ValidationError("importance", "must be a number from 0 to 1, like 0.5") from None
    if not math.isfinite(number):
        raise ValidationError("importance", "must be a finite number from 0 to 1")
    return check_importance(number)


def check_fact_form(form: dict[str, str], current_expiry: datetime | None = None) -> FactForm:
    """Check every field of a submitted fact form; an empty key means no key and an
    empty expiry none. ``current_expiry``: the edited fact's, kept when resubmitted."""
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
    if typed["expires_at"].strip():
        try:
            expires_at = parse_expiry(typed["expires_at"].strip())
            if current_expiry is not None and expires_at == current_expiry.replace(microsecond=0):
                f.expires_at, f.expiry_unchanged = current_expiry, True
            else:
                f.expires_at = check_expires_at(expires_at)
        except ValidationError as exc:
            f.errors["expires_at"] = exc.message
    if typed["happened_at"].strip():
        try:
            check_happened_at(typed["happened_at"], datetime.now(UTC))
            f.happened_at = typed["happened_at"].strip()
        except ValidationError as exc:
            f.errors["happened_at"] = exc.message
    return f


_DATE = re.compile(r"\d{4}(?:-\d{2}){1,2}")


def _dates_unbroken(text: str) -> Markup:
    """``text`` escaped, each date in it one unbreakable phrase (``.when``): a narrow
    screen moves it whole instead of splitting it at a hyphen."""
    return Markup(_DATE.sub(lambda m: f'<span class="when">{m.group(0)}</span>', str(escape(text))))


def event_text(fact: Memory) -> str:
    """A fact's event clock as the edit form states it (``""``: unknown)."""
    if fact.happened_start is None or fact.happened_end is None:
        return ""
    span = f"{fact.happened_start.date().isoformat()} to {fact.happened_end.date().isoformat()}"
    return f"{span} ({fact.happened_precision})"


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
        happened_at_cap=HAPPENED_AT_CAP,
        happened_at_help=_dates_unbroken(HAPPENED_AT_HELP),
        event=_dates_unbroken(event_text(fact)) if fact is not None else "",
    )


def _show_refusal(f: FactForm, exc: ValidationError | ConflictError) -> None:
    """Put the library's refusal next to the field it concerns."""
    if isinstance(exc, ValidationError):
        f.errors[exc.field if exc.field in FACT_FIELDS else "content"] = exc.message
    else:
        f.errors["key" if f.key is not None else "content"] = str(exc)


async def _memory(request: Request, id: int, kind: Kind) -> tuple[Services, Memory]:
    """The request's services and this resource's memory ``id`` of ``kind`` (404 without)."""
    s = services(request)
    return s, await s.root.memory.get(s.resource_id, id, kind=kind)


async def _submit(
    request: Request,
    f: FactForm,
    write: Callable[[], Awaitable[Memory]],
    *,
    fact: Memory | None,
    notice: str,
) -> Response:
    """A checked form's write: only when no field has a problem; then 303 to the fact
    written, or the form again (422) with the library's refusal next to its field."""
    if not f.errors:
        try:
            written = await write()
        except (ValidationError, ConflictError) as exc:
            _show_refusal(f, exc)
        else:
            return redirect(f"/memories/{written.id}", notice=notice)
    return _form_page(request, f, fact=fact, status_code=422)


@router.get("/facts/new")
async def new_fact(request: Request) -> Response:
    f = FactForm(form={**dict.fromkeys(FACT_FIELDS, ""), "importance": str(DEFAULT_IMPORTANCE)})
    return _form_page(request, f, fact=None)


@router.post("/facts")
async def create_fact(request: Request) -> Response:
    s = services(request)
    f = check_fact_form(await read_form(request, FACT_FIELDS))
    create = functools.partial(
        s.root.memory.create_fact,
        s.resource_id,
        f.content,
        key=f.key,
        importance=f.importance,
        expires_at=f.expires_at,
        happened_at=f.happened_at,
        provenance=GUI_WRITE,
    )
    return await _submit(request, f, create, fact=None, notice="fact-created")


@router.get("/facts/{id}/edit")
async def edit_fact(request: Request, id: MemoryId) -> Response:
    _s, fact = await _memory(request, id, "fact")
    f = FactForm(
        form={
            "content": fact.content,
            "key": fact.key or "",
            "importance": f"{fact.importance:g}",
            "expires_at": expiry_text(fact.expires_at),
            # Empty: the fact keeps its event clock while its content stays (the hint
            # says it); a phrase such as "last Friday" would be read again against
            # the time of saving.
            "happened_at": "",
        }
    )
    return _form_page(request, f, fact=fact)


@router.post("/facts/{id}")
async def update_fact(request: Request, id: MemoryId) -> Response:
    s, fact = await _memory(request, id, "fact")
    f = check_fact_form(await read_form(request, FACT_FIELDS), fact.expires_at)
    update = functools.partial(
        s.root.memory.update_fact,
        s.resource_id,
        id,
        content=f.content,
        key=f.key,
        clear_key=f.key is None,
        importance=f.importance,
        expires_at=None if f.expiry_unchanged else f.expires_at,
        clear_expiry=f.expires_at is None,
        happened_at=f.happened_at,
        provenance=GUI_WRITE,
    )
    return await _submit(request, f, update, fact=fact, notice="fact-updated")


def _confirm_delete(kind: Kind) -> Callable[[Request, int], Awaitable[Response]]:
    """The confirmation page before deleting a memory of ``kind``."""

    async def confirm_delete(request: Request, id: MemoryId) -> Response:
        _s, memory = await _memory(request, id, kind)
        return page(request, "confirm_delete.html", active="memories", memory=memory)

    return confirm_delete


for _kind in ("fact", "episode"):
    router.get(f"/{_kind}s/{{id}}/delete")(_confirm_delete(_kind))


@router.post("/facts/{id}/delete")
async def delete_fact(request: Request, id: MemoryId) -> Response:
    """Delete the fact; with ``purge=yes`` (the confirmation's box) its history too."""
    form = await read_form(request, ("purge",))
    if form.get("purge", "yes") != "yes":
        raise FormRefused(422, "Invalid form", "purge: must be yes, or left out")
    purge = "purge" in form
    s = services(request)
    await s.root.memory.delete(s.resource_id, id, kind="fact", purge=purge, origin="gui")
    return redirect("/", notice="fact-purged" if purge else "fact-deleted")


@router.get("/facts/{id}/history")
async def fact_history(request: Request, id: MemoryId) -> Response:
    """The fact's earlier values, also once it is deleted (404 once purged)."""
    s = services(request)
    versions = await s.root.memory.fact_history(s.resource_id, id)
    try:
        current: Memory | None = await s.root.memory.get(s.resource_id, id, kind="fact")
    except NotFoundError:
        current = None
    return page(
        request,
        "fact_history.html",
        active="memories",
        fact_id=id,
        current=current,
        versions=versions,
    )


@router.post("/facts/{id}/restore")
async def restore_fact(request: Request, id: MemoryId) -> Response:
    """Make the submitted ``version`` current (409 page when its key or content is taken)."""
    form = await read_form(request, ("version",))
    text = form.get("version", "")
    if not text.isdigit() or len(text) > 10 or not 1 <= int(text) <= _VERSION_MAX:
        raise FormRefused(422, "Invalid form", "version: must be a version number")
    s = services(request)
    fact = await s.root.memory.restore_fact(s.resource_id, id, int(text), provenance=GUI_WRITE)
    return redirect(f"/memories/{fact.id}", notice="fact-restored", version=text)


@router.post("/episodes/{id}/delete")
async def delete_episode(request: Request, id: MemoryId) -> Response:
    await read_form(request, ())
    s = services(request)
    await s.root.memory.delete(s.resource_id, id, kind="episode")
    return redirect("/", notice="episode-deleted")
