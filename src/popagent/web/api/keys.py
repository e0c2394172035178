"""``/api/keys``: the API keys of multi-resource mode (served only in that mode).

An admin key manages the keys of its own resource; the operator token manages
every resource's keys and reads no memory. The key is in the response to its
creation and nowhere else, ever.

Invariants:
- A key's resource is its creator's (an admin key's), never a body's: the one
  body that may name a resource is the operator's ``POST``, which has no
  resource of its own to default to.
- Listing and revoking are confined to the admin key's resource; a key of another
  resource is "not found", as if it did not exist.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from ...errors import ValidationError
from ...keys import Principal
from ...store.tenant import bypass
from ..schemas import ErrorOut
from ..services import Services, principal_of

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["keys"], responses={422: {"model": ErrorOut}})


class KeyCreate(BaseModel):
    """A new key: its name, scope and optional expiry; ``resource_id`` only from the
    operator (an admin key's keys are of its own resource)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, Field(min_length=1, max_length=100)]
    scope: Literal["read", "write", "admin"] = "write"
    expires_at: Annotated[datetime | None, Field(strict=False)] = None
    resource_id: str | None = None


def _who(request: Request) -> tuple[Services, Principal]:
    principal = principal_of(request)
    if principal is None or not (principal.is_operator or principal.allows("admin")):
        raise HTTPException(403, "managing keys needs an admin key or the operator token")
    return request.app.state.services, principal


@router.get("/keys", summary="The keys of the admin key's resource (the operator: all)")
async def list_keys(request: Request) -> list[dict[str, Any]]:
    s, principal = _who(request)
    with bypass("keys"):  # credential tables are not the tenant's (store.tenant)
        rows = await s.root.keys.list_keys(principal.resource_id, include_revoked=True)
    return [r.to_json() for r in rows]


@router.post("/keys", status_code=201, summary="Create a key; the response holds it, once")
async def create_key(request: Request, body: KeyCreate) -> dict[str, Any]:
    s, principal = _who(request)
    if principal.is_operator:
        if body.resource_id is None:
            raise ValidationError("resource_id", "the operator names the key's resource")
        resource_id = body.resource_id
    else:
        if body.resource_id is not None and body.resource_id != principal.resource_id:
            raise ValidationError("resource_id", "a key creates keys of its own resource only")
        assert principal.resource_id is not None
        resource_id = principal.resource_id
    with bypass("keys"):
        row, key = await s.root.keys.create(
            resource_id, body.name, body.scope, expires_at=body.expires_at
        )
    return {"key": key, **row.to_json()}


@router.delete("/keys/{key_id}", summary="Revoke a key, at once for every server process")
async def revoke_key(request: Request, key_id: int) -> dict[str, Any]:
    s, principal = _who(request)
    with bypass("keys"):
        row = await s.root.keys.revoke(key_id, resource_id=principal.resource_id)
    return row.to_json()
