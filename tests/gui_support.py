"""GUI test helpers: the app in process with a CSRF cookie, and form posts that carry it;
the system's Chromium and where screenshots go, for the browser tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from popagent.web.gui.forms import CSRF_COOKIE, CSRF_FIELD

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "SCREENSHOTS", "csrf_token", "field_error", "post_form"]

#: Debian's Chromium (CI installs it with apt); nothing is downloaded.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Screenshots of the browser tests (git-ignored under ``build/``).
SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "test-artifacts" / "screenshots"


async def csrf_token(client: httpx.AsyncClient, path: str = "/") -> str:
    """The CSRF token a page hands out (loading ``path`` sets the cookie if needed)."""
    if CSRF_COOKIE not in client.cookies:
        response = await client.get(path)
        assert response.status_code == 200, response.text
    return str(client.cookies[CSRF_COOKIE])


async def post_form(
    client: httpx.AsyncClient, path: str, data: dict[str, str], *, csrf: bool = True
) -> httpx.Response:
    """POST ``data`` as a browser form would, with the page's CSRF token unless ``csrf`` is off."""
    fields: dict[str, Any] = dict(data)
    if csrf:
        fields[CSRF_FIELD] = await csrf_token(client)
    return await client.post(path, data=fields)


def field_error(html: str, name: str) -> str:
    """The inline error shown next to field ``name``; fails when there is none."""
    match = re.search(rf'<p class="field-error" id="{re.escape(name)}-error">([^<]*)</p>', html)
    assert match, f"no inline error for {name}"
    assert f'aria-describedby="{name}-error' in html, f"{name} does not point at its error"
    return match.group(1)
