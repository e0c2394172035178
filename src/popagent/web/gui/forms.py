"""Strict HTML form handling for the GUI: CSRF tokens and form bodies.

CSRF is a double submit: every page sets a random ``popagent_csrf`` cookie
(HttpOnly, SameSite=Strict) and puts the same value in each form's hidden
``csrf_token`` field; a POST is honoured only when both are present and equal
(compared in constant time). The request guard already refuses cross-origin
POSTs; this is the second lock, and it also covers the login form.

Invariants:
- ``read_form`` checks the CSRF token before anything else and raises
  ``FormRefused`` (403) without the handler having read or written anything.
- A form body is ``application/x-www-form-urlencoded`` UTF-8, each field at
  most once, and only the handler's known fields: an unknown field (say
  ``resource_id``) is refused with 422, never ignored.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Collection
from urllib.parse import parse_qsl

from starlette.requests import Request

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "FormRefused",
    "csrf_cookie",
    "new_csrf_token",
    "read_form",
]

CSRF_COOKIE = "popagent_csrf"
CSRF_FIELD = "csrf_token"
#: ``secrets.token_urlsafe(32)``: 43 characters of the URL-safe alphabet.
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")
_MAX_FIELDS = 64
_FORM_TYPE = "application/x-www-form-urlencoded"


class FormRefused(Exception):
    """A request the GUI refuses as a whole; rendered as an error page with ``status``."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(f"{status} {title}: {message}")
        self.status = status
        self.title = title
        self.message = message


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_cookie(request: Request) -> str | None:
    """The request's CSRF cookie when it has the shape ``new_csrf_token`` gives, else ``None``."""
    value = request.cookies.get(CSRF_COOKIE)
    if value is not None and _TOKEN_SHAPE.fullmatch(value):
        return value
    return None


async def read_form(request: Request, fields: Collection[str]) -> dict[str, str]:
    """The submitted ``fields`` (those present) after the CSRF check; ``FormRefused`` otherwise.

    400 for a body that is not a readable form, 415 for another content type,
    403 for a missing or wrong CSRF token, 422 for a repeated or unknown field.
    """
    body = await request.body()
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and media_type != _FORM_TYPE:
        raise FormRefused(415, "Unsupported form", f"send the form as {_FORM_TYPE}")
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=_MAX_FIELDS)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormRefused(400, "Unreadable form", "the form body is not valid") from exc
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise FormRefused(422, "Invalid form", f"{name[:80]}: given more than once")
        form[name] = value
    cookie = csrf_cookie(request)
    sent = form.pop(CSRF_FIELD, "")
    if cookie is None or not hmac.compare_digest(sent.encode(), cookie.encode()):
        raise FormRefused(
            403,
            "Form refused",
            "the form's security token is missing or does not match; reload the page and "
            "submit it again",
        )
    unknown = sorted(set(form) - set(fields))
    if unknown:
        raise FormRefused(422, "Invalid form", f"{unknown[0][:80]}: is not a field of this form")
    return form
