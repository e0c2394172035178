"""Page rendering: the Jinja2 environment, the CSRF cookie, redirects and notices.

Invariants:
- Autoescaping is on for every template: memory content, session titles and
  settings text are escaped wherever they appear.
- Every rendered page carries a CSRF token in its context and makes sure the
  browser holds the matching ``popagent_csrf`` cookie (set once, reused).
- Pages name the resource from the server's services, never from the request.
- Characters that change how text around them reads without showing
  themselves (bidirectional overrides, embeddings, isolates and marks;
  zero-width spaces and joiners' kin, the word joiner, the BOM, soft hyphens,
  tag characters) are shown as visible escapes, ``⟨U+202E⟩``, wherever a
  value is printed (``_visible``, the environment's ``finalize``): an unclosed
  U+202E in a memory, a title or an ID cannot reverse the rest of a row.
  Values a form sends back (``|exact``) keep them, so editing never changes
  them. The zero-width joiner (U+200D) is left alone: emoji sequences need it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from ..services import Services, principal_of, shown_resource
from .forms import CSRF_COOKIE, csrf_cookie, new_csrf_token

__all__ = ["TEMPLATES_DIR", "error_page", "notice_of", "page", "redirect"]

TEMPLATES_DIR = Path(__file__).parent / "templates"

#: Messages a redirect may ask a page to show (``?notice=NAME``): fixed texts,
#: so a crafted link cannot put words on the page.
NOTICES = {
    "fact-created": "Fact created.",
    "fact-updated": "Fact saved.",
    "fact-deleted": "Fact deleted.",
    "fact-purged": "Fact and its history deleted.",
    "fact-restored": "Version {version} restored.",
    "episode-deleted": "Episode deleted.",
    "memory-confirmed": "Confirmed: the memory is no longer marked stale.",
    "cleanup": "Cleanup done: {n:memory/memories} deleted.",
    "purge": "Purge done: {n:row/rows} deleted; nothing of this resource remains.",
    "maintenance": "Maintenance done: {expired:expired episode/expired episodes} and "
    "{capped:over-cap episode/over-cap episodes} deleted, {facts:expired fact/expired facts} ended.",
    "settings-saved": "Settings saved (version {version}). They apply from the next turn.",
    "settings-unchanged": "Nothing changed: every value was already set.",
    "session-renamed": "Session renamed.",
    "session-deleted": "Session deleted; its long-term memories stay.",
    "session-reverted": "Session's writes reverted: {restored:fact/facts} restored, "
    "{deleted:memory/memories} deleted, {skipped:write/writes} skipped.",
    "logged-out": "Logged out.",
    "key-revoked": "Key revoked: it is refused from now on, and its logins have ended.",
}


def _when(value: datetime | None) -> str:
    if value is None:
        return "never"
    return _unbroken(value.strftime("%Y-%m-%d %H:%M:%S %Z").strip())


def _when_short(value: datetime | None) -> str:
    """To the minute, for a table cell (the full time is in the ``<time>`` element)."""
    if value is None:
        return "never"
    return _unbroken(value.strftime("%Y-%m-%d %H:%M"))


def _unbroken(text: str) -> Markup:
    """A date and time as one unbreakable phrase (``.when``): a narrow screen moves it to
    the next line whole instead of splitting it at a hyphen ("2026-" / "12-07")."""
    return Markup('<span class="when">{}</span>').format(text)


def _past(value: datetime | None) -> bool:
    """Whether ``value`` (an expiry) has passed: such a fact is no longer recalled."""
    return value is not None and value <= datetime.now(UTC)


def _path(value: object) -> str:
    """One URL path segment (a session ID may hold anything but ``/``)."""
    return quote(str(value), safe="")


def _query(params: dict[str, Any]) -> str:
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})


# Shown as visible escapes: the bidirectional controls (U+061C, U+200E/F, U+202A-E,
# U+2066-9), zero-width and invisible characters (U+200B/C, U+2060-4, U+FEFF, U+180E,
# U+00AD, the Hangul fillers) and the tag characters (U+E0000-7F).
_HIDDEN = re.compile(
    "[\u00ad\u061c\u115f\u1160\u180e\u200b\u200c\u200e\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u2069\u3164\ufeff\uffa0\U000e0000-\U000e007f]"
)


class _Exact(str):
    """A value printed exactly as it is (a form field's value, sent back on submit)."""

    __slots__ = ()


def _exact(value: object) -> _Exact:
    return _Exact("" if value is None else value)


def _escape_hidden(match: re.Match[str]) -> str:
    return f"\u27e8U+{ord(match.group(0)):04X}\u27e9"


def _visible(value: object) -> object:
    """Every printed value, with its hidden characters shown (``⟨U+202E⟩``)."""
    if isinstance(value, str) and not isinstance(value, (_Exact, Markup)):
        return _HIDDEN.sub(_escape_hidden, value)
    return value


_env = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=True,
    finalize=_visible,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    auto_reload=False,  # the templates ship with the package; no stat() per render
)
_env.filters["when"] = _when
_env.filters["when_short"] = _when_short
_env.filters["path"] = _path
_env.filters["past"] = _past
_env.filters["query"] = _query
_env.filters["exact"] = _exact


def notice_of(request: Request) -> str | None:
    """The message a redirect asked for, with its whole-number arguments filled in."""
    template = NOTICES.get(request.query_params.get("notice", ""))
    if template is None:
        return None
    numbers = {}
    for name in ("n", "expired", "capped", "facts", "version", "restored", "deleted", "skipped"):
        raw = request.query_params.get(name, "")
        numbers[name] = _Count(int(raw)) if raw.isdigit() and len(raw) < 19 else _Count(None)
    return template.format(**numbers)


class _Count:
    """A notice's number; ``{n:memory/memories}`` formats as ``1 memory``, ``3 memories``."""

    def __init__(self, value: int | None) -> None:
        self.value = value

    def __format__(self, spec: str) -> str:
        number = "?" if self.value is None else f"{self.value:,}"
        if "/" not in spec:
            return number
        one, many = spec.split("/", 1)
        return f"{number} {one if self.value == 1 else many}"


def page(
    request: Request, template: str, *, active: str = "", status_code: int = 200, **context: Any
) -> HTMLResponse:
    """Render ``template`` with the shared header context; set the CSRF cookie when missing."""
    s = cast(Services, request.app.state.services)
    token = csrf_cookie(request)
    fresh = token is None
    if token is None:
        token = new_csrf_token()
    context.setdefault("notice", notice_of(request))
    html = _env.get_template(template).render(
        resource_id=shown_resource(request),
        csrf_token=token,
        active=active,
        token_configured=s.config.token is not None or s.config.multi_resource,
        multi_resource=s.config.multi_resource,
        manages_keys=_manages_keys(request, s),
        **context,
    )
    response = HTMLResponse(html, status_code=status_code)
    if fresh:
        response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def _manages_keys(request: Request, s: Services) -> bool:
    """Whether the nav links ``/keys``: a login with an admin key, multi-resource mode."""
    if not s.config.multi_resource:
        return False
    principal = principal_of(request)
    return principal is not None and principal.resource_id is not None and principal.allows("admin")


def error_page(request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
    return page(
        request, "error.html", status_code=status_code, title=title, message=message, notice=None
    )


def redirect(path: str, **params: Any) -> RedirectResponse:
    """303 to a local ``path`` (redirect after POST), with ``params`` as its query."""
    query = _query(params)
    return RedirectResponse(f"{path}?{query}" if query else path, status_code=303)
