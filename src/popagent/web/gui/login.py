"""``/login`` and ``/logout``: the bearer token as a cookie, for browsers.

With a token configured, the token gate sends a browser without it here
(``/login?next=/where/it/was``). A correct token sets the ``popagent_token``
cookie (HttpOnly, SameSite=Strict, Path=/) that the gate accepts, and the
browser goes on to ``next``.

Invariants:
- The token is compared in constant time (``bearer_matches``) and never
  written to a page or a log.
- ``next`` is followed only when it is a local path (``/...``, not ``//host``
  and no backslash); anything else goes to ``/``.
- Without a configured token there is nothing to log in to: the page says so.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...access import bearer_matches
from ..middleware import TOKEN_COOKIE
from ..services import services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["local_path", "router"]

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
    s = services(request)
    form = await read_form(request, ("token", "next"))
    target = local_path(form.get("next"))
    if s.config.token is None:
        return redirect(target)
    token = form.get("token", "").strip()
    if not bearer_matches(f"Bearer {token}", s.config.token):
        return page(
            request,
            "login.html",
            active="login",
            status_code=401,
            next=target,
            error="That is not this server's token.",
        )
    response = redirect(target)
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    await read_form(request, ())
    response = redirect("/login", notice="logged-out")
    response.delete_cookie(TOKEN_COOKIE, path="/", httponly=True, samesite="strict")
    return response
