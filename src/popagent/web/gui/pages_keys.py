"""``/keys``: an admin key manages its own resource's API keys (multi-resource mode).

``/keys`` lists the resource's keys, live and revoked (name, scope, prefix,
created, last used, uses, expiry, revocation), with a form to create one, and
what the resource stores against the server's storage quotas (its memories,
their bytes and its chats' bytes: ``popagent.keys.Usage``).
Creating answers with the new key on the page itself, once, with a warning to
copy it now; ``/keys/{id}/revoke`` (GET, no effect) asks for confirmation and
only its POST form revokes.

Invariants:
- Served in multi-resource mode only, to a login made with an admin key: in
  single-resource mode every route here is a 404 page, and the token gate
  refuses read and write keys and the operator (403, audited) before a route
  runs (``middleware.needed_scope``: ``/keys`` needs ``admin``).
- A key is created in and revoked from the login's resource only, through
  ``KeyStore`` (which audits both); a key of another resource is "not found",
  as if it did not exist. No form has a resource field.
- The new key is in the one response to its creation (``Cache-Control:
  no-store``, as every page) and nowhere else: not in a redirect, a cookie or a log.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ConflictError, NotFoundError, ValidationError
from ...keys import SCOPES, ApiKey, KeyStore, Usage
from ...store.tenant import bypass
from ..services import Services, principal_of
from ._expiry import parse_expiry
from .forms import FormRefused, read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["KEY_FIELDS", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: The create form's fields.
KEY_FIELDS = ("name", "scope", "expires_at")


def _admin(request: Request) -> tuple[KeyStore, str]:
    """The key store and the admin login's resource; a 404 outside multi-resource mode."""
    s: Services = request.app.state.services
    if not s.config.multi_resource:
        raise NotFoundError("there is no such page")
    principal = principal_of(request)
    # The token gate already refused anything but an admin key; kept as a second lock.
    if principal is None or principal.resource_id is None or not principal.allows("admin"):
        raise FormRefused(403, "Forbidden", "managing keys needs a login with an admin key")
    return s.root.keys, principal.resource_id


async def _keys(store: KeyStore, resource_id: str) -> list[ApiKey]:
    with bypass("keys"):  # credential tables are not the tenant's (store.tenant)
        return await store.list_keys(resource_id, include_revoked=True)


def _list_page(
    request: Request,
    keys: list[ApiKey],
    usage: Usage,
    form: dict[str, str],
    errors: dict[str, str],
    status_code: int = 200,
) -> Response:
    principal = principal_of(request)
    config = request.app.state.services.config
    return page(
        request,
        "keys.html",
        active="keys",
        status_code=status_code,
        keys=keys,
        usage=usage,
        quota_memories=config.quota_memories,
        quota_bytes=config.quota_bytes,
        scopes=SCOPES,
        own_key_id=principal.key_id if principal else None,
        now=datetime.now(UTC),
        form=form,
        errors=errors,
    )


@router.get("/keys")
async def list_keys(request: Request) -> Response:
    store, resource_id = _admin(request)
    keys = await _keys(store, resource_id)
    usage = await store.usage(resource_id)
    blank = {"name": "", "scope": "write", "expires_at": ""}
    return _list_page(request, keys, usage, blank, {})


@router.post("/keys")
async def create_key(request: Request) -> Response:
    store, resource_id = _admin(request)
    form = {name: "" for name in KEY_FIELDS} | await read_form(request, KEY_FIELDS)
    form["scope"] = form["scope"] or "write"
    errors: dict[str, str] = {}
    expires_at = None
    if form["expires_at"].strip():
        try:
            expires_at = parse_expiry(form["expires_at"].strip())
        except ValidationError as exc:
            errors["expires_at"] = exc.message
    if not errors:
        try:
            with bypass("keys"):
                row, key = await store.create(
                    resource_id, form["name"].strip(), form["scope"], expires_at=expires_at
                )
        except ValidationError as exc:
            errors[exc.field if exc.field in KEY_FIELDS else "name"] = exc.message
        except ConflictError:
            errors["name"] = "this resource already has a live key of that name"
        else:
            return page(request, "keys_created.html", active="keys", row=row, key=key)
    keys = await _keys(store, resource_id)
    usage = await store.usage(resource_id)
    return _list_page(request, keys, usage, form, errors, status_code=422)


async def _live_key(store: KeyStore, resource_id: str, key_id: int) -> ApiKey:
    found = next((k for k in await _keys(store, resource_id) if k.id == key_id), None)
    if found is None or found.revoked_at is not None:
        raise NotFoundError(f"key {key_id}: no such live key")
    return found


@router.get("/keys/{key_id}/revoke")
async def revoke_confirm(request: Request, key_id: int) -> Response:
    store, resource_id = _admin(request)
    row = await _live_key(store, resource_id, key_id)
    principal = principal_of(request)
    own = principal is not None and principal.key_id == row.id
    return page(request, "keys_revoke.html", active="keys", row=row, own=own)


@router.post("/keys/{key_id}/revoke")
async def revoke(request: Request, key_id: int) -> Response:
    store, resource_id = _admin(request)
    form = await read_form(request, ("confirm",))
    if form.get("confirm") != "yes":
        raise FormRefused(422, "Not confirmed", "confirm: revoking needs the explicit confirmation")
    with bypass("keys"):
        await store.revoke(key_id, resource_id=resource_id)
    return redirect("/keys", notice="key-revoked")
