"""``/api/memories``, ``/api/facts``, ``/api/episodes``, ``/api/cleanup`` (``/api/recall``
is in ``web.api.recall``).

Every call acts on the server's resource. Episodes are immutable: they can be
read and deleted, and there is no route that changes one. Lists are newest
first, paged by ``limit``/``offset``; ``next_offset`` is ``null`` on the last page.

``POST /api/facts`` is a strict create (a taken key is a 409 naming the fact
that holds it); ``PUT /api/facts/by-key/{key}`` is the upsert by key that the
CLI's and MCP's ``remember`` do, so the same request may be sent twice.

Every write records ``origin="api"`` as its provenance. Changing or deleting a
fact keeps the replaced value as a version (``/api/facts/{id}/versions``),
which ``/api/facts/{id}/restore`` makes current again; ``?purge=true`` on
delete removes the history too.
"""

from __future__ import annotations

import inspect
from dataclasses import fields, replace
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from ...errors import ConflictError, NotFoundError, ValidationError
from ...memory.validation import (
    FILTER_FIELDS,
    KEY_CAP,
    filter_from,
    normalize_fact_content,
    normalize_key,
)
from ...models import FactHistory, Kind, Memory, MemoryFilter, Page, Provenance
from ..schemas import (
    CleanupReport,
    CleanupRequest,
    ErrorOut,
    FactCreate,
    FactPut,
    FactRestore,
    FactUpdate,
)
from ..services import services

__all__ = ["PAGE_LIMIT", "router"]

#: The most memories one page holds.
PAGE_LIMIT = 200
_ERRORS: dict[int | str, dict[str, object]] = {
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
    422: {"model": ErrorOut},
}

router = APIRouter(prefix="/api", tags=["memories"], responses=_ERRORS)

#: The provenance of every write through this API.
API_WRITE = Provenance(origin="api")

MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The memory's id.")]
FactKey = Annotated[
    str,
    Path(
        min_length=1,
        max_length=KEY_CAP,
        description="The fact's key (trimmed and lower-cased, as stored); percent-encode "
        "what a URL path cannot hold.",
    ),
]
Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT)]
Offset = Annotated[int, Query(ge=0, le=10_000_000)]
KeyFilter = Annotated[str | None, Query(min_length=1, max_length=KEY_CAP)]
TextFilter = Annotated[
    str | None, Query(min_length=1, max_length=200, description="Case-insensitive substring.")
]
SessionFilter = Annotated[str | None, Query(min_length=1, max_length=256)]
When = Annotated[datetime | None, Query(description="ISO 8601 with a time zone.")]

#: The query parameter of each ``MemoryFilter`` field (in the order the routes list them).
_FILTER_QUERY: dict[str, Any] = {
    "kind": Literal["fact", "episode"] | None,
    "key": KeyFilter,
    "text": TextFilter,
    "session_id": SessionFilter,
    "created_after": When,
    "created_before": When,
    "limit": Limit,
    "offset": Offset,
}
_FILTER_DEFAULTS = {f.name: f.default for f in fields(MemoryFilter)}


def _filter_query(kind: Kind | None = None, *, without: tuple[str, ...] = ()) -> Any:
    """A FastAPI dependency: the ``MemoryFilter`` of a list route's query parameters,
    one per field but ``without`` (and ``kind``, when the route's own kind is given)."""
    left_out = {*without, "kind"} if kind is not None else set(without)

    async def where(**query: Any) -> MemoryFilter:  # async: no thread hop per request
        return filter_from(query, kind=kind)

    where.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=annotation,
                default=_FILTER_DEFAULTS[name],
            )
            # In the routes' order; a field with no query parameter fails at import.
            for name in sorted(FILTER_FIELDS, key=list(_FILTER_QUERY).index)
            if name not in left_out
            for annotation in (_FILTER_QUERY[name],)
        ]
    )
    return Depends(where)


#: Each list route's filter: every field; a fact's; an episode's.
AnyFilter = Annotated[MemoryFilter, _filter_query()]
FactFilter = Annotated[
    MemoryFilter, _filter_query("fact", without=("session_id", "created_after", "created_before"))
]
EpisodeFilter = Annotated[MemoryFilter, _filter_query("episode", without=("key",))]


def _page(rows: list[Memory], limit: int, offset: int) -> Page[Memory]:
    more = len(rows) > limit
    next_offset = offset + limit if more else None
    return Page(items=tuple(rows[:limit]), limit=limit, offset=offset, next_offset=next_offset)


async def _list_page(request: Request, where: MemoryFilter) -> Page[Memory]:
    """The page of the server's resource that ``where`` selects; every list route's one
    call. One memory more than the page is read to tell whether another page follows."""
    s = services(request)
    rows = await s.root.memory.list(s.resource_id, replace(where, limit=where.limit + 1))
    return _page(rows, where.limit, where.offset)


@router.get(
    "/memories/stale",
    response_model=list[Memory],
    summary="Memories marked stale: a source they were based on changed or went",
)
async def list_stale(
    request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[Memory]:
    """Most recently marked first; each names its ``stale_source`` and ``stale_since``.
    ``POST /api/memories/{id}/confirm`` clears a mark, ``DELETE`` forgets the memory."""
    s = services(request)
    return await s.root.memory.stale(s.resource_id, limit=limit)


@router.post(
    "/memories/{id}/confirm",
    response_model=Memory,
    summary="Confirm a stale memory still holds (clears its mark)",
)
async def confirm_memory(request: Request, id: MemoryId) -> Memory:
    s = services(request)
    return await s.root.memory.confirm(s.resource_id, id)


@router.get("/memories", response_model=Page[Memory], summary="List or search facts and episodes")
async def list_memories(request: Request, where: AnyFilter) -> Page[Memory]:
    return await _list_page(request, where)


@router.get("/memories/{id}", response_model=Memory, summary="Read a fact or an episode")
async def get_memory(request: Request, id: MemoryId) -> Memory:
    s = services(request)
    return await s.root.memory.get(s.resource_id, id)


# --- facts ------------------------------------------------------------------------------------


@router.get("/facts", response_model=Page[Memory], summary="List or search facts")
async def list_facts(request: Request, where: FactFilter) -> Page[Memory]:
    return await _list_page(request, where)


@router.post("/facts", response_model=Memory, status_code=201, summary="Create a fact")
async def create_fact(request: Request, body: FactCreate) -> Memory:
    """Strict create: a key that another fact holds, or a keyless fact identical to
    another, is a 409 whose message names that fact's id. To set a key's value
    whether or not it exists, ``PUT /api/facts/by-key/{key}``."""
    s = services(request)
    try:
        fact = await s.root.memory.create_fact(
            s.resource_id, **body.model_dump(), provenance=API_WRITE
        )
    except ConflictError as exc:
        raise await _named_conflict(request, body, exc) from None
    return fact


async def _named_conflict(request: Request, body: FactCreate, exc: ConflictError) -> ConflictError:
    """``exc`` with the id of the fact the create collided with, and what to do instead."""
    s = services(request)
    if body.key is not None:
        key = normalize_key(body.key)
        found = await s.root.memory.list(s.resource_id, MemoryFilter(kind="fact", key=key, limit=1))
        if not found:
            return exc  # deleted since: the client may simply try again
        return ConflictError(
            f"fact {found[0].id} already has the key {key!r}: PUT /api/facts/by-key/{key} "
            f"sets its value, PATCH /api/facts/{found[0].id} changes it"
        )
    content = normalize_fact_content(body.content)
    where = MemoryFilter(kind="fact", text=content[:200], limit=PAGE_LIMIT)
    for fact in await s.root.memory.list(s.resource_id, where):
        if fact.key is None and fact.content == content:
            return ConflictError(
                f"fact {fact.id} is identical and has no key: PATCH /api/facts/{fact.id} changes it"
            )
    return exc


@router.get("/facts/by-key/{key:path}", response_model=Memory, summary="Read a fact by key")
async def get_fact_by_key(request: Request, key: FactKey) -> Memory:
    """The current fact of ``key``; 404 when no fact has it."""
    s = services(request)
    wanted = normalize_key(key)
    found = await s.root.memory.list(s.resource_id, MemoryFilter(kind="fact", key=wanted, limit=1))
    if not found:
        raise NotFoundError(f"no fact with key {wanted!r} in this resource")
    return found[0]


@router.put(
    "/facts/by-key/{key:path}",
    response_model=Memory,
    status_code=200,
    responses={201: {"model": Memory, "description": "Created"}},
    summary="Set the value of a key: create or replace its fact (upsert)",
)
async def put_fact(request: Request, key: FactKey, body: FactPut, response: Response) -> Memory:
    """What the CLI's and MCP's ``remember`` do with a key: 201 when the key was new,
    200 when its fact was replaced (the old value kept as a version) or already
    held this value. Idempotent: the same request twice leaves one fact."""
    s = services(request)
    result = await s.root.memory.remember(
        s.resource_id, key=key, **body.model_dump(), provenance=API_WRITE
    )
    if result.action == "created":
        response.status_code = 201
    return result.memory


@router.get("/facts/{id}", response_model=Memory, summary="Read a fact")
async def get_fact(request: Request, id: MemoryId) -> Memory:
    s = services(request)
    return await s.root.memory.get(s.resource_id, id, kind="fact")


@router.patch("/facts/{id}", response_model=Memory, summary="Change a fact")
async def update_fact(request: Request, id: MemoryId, body: FactUpdate) -> Memory:
    given = body.model_fields_set
    if not given:
        raise ValidationError(
            "body",
            "name at least one of content, key, importance, expires_at, based_on, happened_at",
        )
    for name in ("content", "importance"):
        if name in given and getattr(body, name) is None:
            raise ValidationError(name, "may not be null (leave it out to keep it)")
    s = services(request)
    fact = await s.root.memory.update_fact(
        s.resource_id,
        id,
        content=body.content,
        key=body.key,
        clear_key="key" in given and body.key is None,
        importance=body.importance,
        expires_at=body.expires_at,
        clear_expiry="expires_at" in given and body.expires_at is None,
        based_on=body.based_on,
        happened_at=body.happened_at,
        provenance=API_WRITE,
    )
    return fact


@router.delete("/facts/{id}", status_code=204, summary="Delete a fact")
async def delete_fact(
    request: Request,
    id: MemoryId,
    purge: Annotated[
        Literal["true", "false"],
        Query(description="``true`` also removes every earlier version: no restore."),
    ] = "false",
) -> Response:
    """Delete fact ``id``; its last value stays in its history (restorable)
    unless ``purge=true`` (exactly ``true`` or ``false``)."""
    s = services(request)
    await s.root.memory.delete(s.resource_id, id, kind="fact", purge=purge == "true", origin="api")
    return Response(status_code=204)


@router.get(
    "/facts/{id}/versions",
    response_model=FactHistory,
    summary="A fact's history: its current value and every earlier one",
)
async def fact_versions(request: Request, id: MemoryId) -> FactHistory:
    """``current`` is the fact as it stands (``null`` once deleted or expired);
    ``versions`` its earlier values, newest first, each with ``valid_from``,
    ``valid_to``, how it ended and who wrote and ended it. 404 when the fact
    never existed or was purged."""
    s = services(request)
    versions = await s.root.memory.fact_history(s.resource_id, id)
    try:
        current: Memory | None = await s.root.memory.get(s.resource_id, id, kind="fact")
    except NotFoundError:  # deleted (or expired and removed): only its history is left
        current = None
    return FactHistory(fact_id=id, current=current, versions=tuple(versions))


@router.post(
    "/facts/{id}/restore",
    response_model=Memory,
    summary="Make an earlier version of a fact current again",
)
async def restore_fact(request: Request, id: MemoryId, body: FactRestore) -> Memory:
    """The value it replaces becomes a version in turn; a deleted fact comes back
    under its id. 404 for an unknown version, 409 when its key or content is
    now another fact's."""
    s = services(request)
    fact = await s.root.memory.restore_fact(s.resource_id, id, body.version, provenance=API_WRITE)
    return fact


# --- episodes ---------------------------------------------------------------------------------


@router.get("/episodes", response_model=Page[Memory], summary="List or search episodes")
async def list_episodes(request: Request, where: EpisodeFilter) -> Page[Memory]:
    return await _list_page(request, where)


@router.get("/episodes/{id}", response_model=Memory, summary="Read an episode")
async def get_episode(request: Request, id: MemoryId) -> Memory:
    s = services(request)
    return await s.root.memory.get(s.resource_id, id, kind="episode")


@router.delete("/episodes/{id}", status_code=204, summary="Delete an episode (they are immutable)")
async def delete_episode(request: Request, id: MemoryId) -> Response:
    s = services(request)
    await s.root.memory.delete(s.resource_id, id, kind="episode")
    return Response(status_code=204)


# --- cleanup ----------------------------------------------------------------------------------


@router.post("/cleanup", response_model=CleanupReport, summary="Delete long-term memory")
async def cleanup(request: Request, body: CleanupRequest) -> CleanupReport:
    """Explicit cleanup: every memory of the resource, or those of ``kind`` and/or
    created before ``older_than``. ``confirm`` must be ``true``."""
    s = services(request)
    deleted = await s.root.memory.cleanup(s.resource_id, kind=body.kind, older_than=body.older_than)
    return CleanupReport(deleted=deleted)
