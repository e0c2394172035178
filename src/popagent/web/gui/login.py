"""``/login`` and ``/logout``: a server-side login session, for browsers.

With a token configured (or in multi-resource mode), the token gate sends a
browser without a login here (``/login?next=/where/it/was``). A correct
credential (the server's token; in multi-resource mode an API key, or the
operator token) makes a login (``web.logins``): the ``popagent_login`` cookie
(HttpOnly, SameSite=Strict, Path=/, Max-Age the login's lifetime, Secure when
served over HTTPS) holds its random id, never the credential. ``/logout``
deletes the login, so the cookie is worthless from then on, in every process.

Invariants:
- The token is compared in constant time (``bearer_matches``), a key by its
  hash, and neither is written to a page, a cookie or a log.
- Past ``login_failures`` failed logins of one credential from one address, or
  ``login_address_failures`` of any from that address, in ``login_window_s``
  (``web.logins``), ``/login`` answers 429 with ``Retry-After`` without comparing
  anything.
- ``next`` is followed only when it is a local path (``/...``, not ``//host``
  and no backslash); anything else goes to ``/``.
- Without a configured token there is nothing to log in to: the page says so.
"""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...access import bearer_matches
from ...keys import Principal
from ...store.tenant import bypass
from ..logins import LOGIN_COOKIE
from ..services import Services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["local_path", "router"]


def services_of_app(request: Request) -> Services:
    """The server's services, not a resource's view: the login page runs before a
    request has a resource."""
    return cast(Services, request.app.state.services)


router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

_NEXT_CAP = 2_000


def local_path(target: str | None) -> str:
    """``target`` when it is a path on this server, else ``/``."""
    if (
        not target
        or len(target) > _NEXT_CAP
        or not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in target)
    ):
        return "/"
    return target


@router.get("/login")
async def login_form(request: Request) -> Response:
    return page(
        request,
        "login.html",
        active="login",
        next=local_path(request.query_params.get("next")),
        error=None,
    )


@router.post("/login")
async def login(request: Request) -> Response:
    s = services_of_app(request)
    form = await read_form(request, ("token", "next"))
    target = local_path(form.get("next"))
    multi = s.config.multi_resource
    if s.config.token is None and not multi:
        return redirect(target)
    address = request.client.host if request.client else "unknown"
    credential = form.get("token", "").strip()
    wait_s = await s.logins.retry_after(address, credential)
    if wait_s is not None:
        response = page(
            request,
            "login.html",
            active="login",
            status_code=429,
            next=target,
            error=f"Too many failed logins from this address; try again in {wait_s} seconds.",
        )
        response.headers["retry-after"] = str(wait_s)
        return response
    principal = await _principal(s, credential)
    if principal is None:
        await s.logins.failed(address, credential)
        return page(
            request,
            "login.html",
            active="login",
            status_code=401,
            next=target,
            error="That is not a key of this server."
            if multi
            else "That is not this server's token.",
        )
    await s.logins.succeeded(address, credential)
    login_id, _ = await s.logins.open(principal)
    done = redirect(target)
    done.set_cookie(
        LOGIN_COOKIE,
        login_id,
        max_age=int(s.config.login_ttl_s),
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
    )
    return done


async def _principal(s: Services, credential: str) -> Principal | None:
    """Whom ``credential`` names: the server's token (single-resource mode), the
    operator token or an API key (multi-resource mode); ``None`` when nobody."""
    if not credential:
        return None
    token = s.config.token
    if token is not None and bearer_matches(f"Bearer {credential}", token):
        if s.config.multi_resource:
            return Principal(None, "operator")
        return Principal(s.config.resource_id, "admin")
    if s.config.multi_resource:
        return await s.root.keys.authenticate(credential, method="POST", path="/login")
    return None


@router.post("/logout")
async def logout(request: Request) -> Response:
    await read_form(request, ())
    login_id = request.cookies.get(LOGIN_COOKIE)
    if login_id:
        with bypass("logout"):  # the logins table is not a tenant's (store.tenant)
            await services_of_app(request).logins.close(login_id)
    response = redirect("/login", notice="logged-out")
    response.delete_cookie(
        LOGIN_COOKIE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response
