"""GUI test helpers: the app in process with a CSRF cookie, and form posts that carry it;
the system's Chromium and where screenshots go, for the browser tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page

from popagent.web.gui.forms import CSRF_COOKIE, CSRF_FIELD

__all__ = [
    "CHROMIUM",
    "CHROMIUM_ARGS",
    "SCREENSHOTS",
    "assert_fits",
    "broken_words",
    "csrf_token",
    "field_error",
    "post_form",
]

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


#: Every word (a run of non-space characters in a shown text node) that the page breaks
#: across lines although it is narrower than ``share`` of the viewport: such a word would
#: fit a line of its own, so breaking it inside is the layout's fault (a table column
#: squeezed to one letter), not the word's. A word's lines are its Range's client rects
#: (one per line fragment); its width is their sum. A compound may break after its hyphen
#: ("all-" / "MiniLM"), as print does, but a date or number never does ("2026-" / "12-07"):
#: for a broken word each character's line is found to see where it broke. Text in boxes
#: under 2 px (visually hidden labels for screen readers) and in form controls is not
#: shown as text.
_BROKEN_WORDS_JS = """
(share) => {
  const limit = document.documentElement.clientWidth * share;
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  const topOf = (node, start, end) => {
    range.setStart(node, start);
    range.setEnd(node, end);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
    return rects.length ? rects[0].top : null;
  };
  const hyphenBreaksOnly = (node, start, word) => {
    let line = topOf(node, start, start + 1);
    for (let i = 1; i < word.length; i++) {
      const top = topOf(node, start + i, start + i + 1);
      if (top === null || line === null || Math.abs(top - line) < 2) continue;
      line = top;
      const before = word[i - 1], after = word[i];
      if (before !== "-" || (/[0-9]/.test(word[i - 2] || "") && /[0-9]/.test(after))) {
        return false;
      }
    }
    return true;
  };
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const element = node.parentElement;
    if (!element || element.closest("script, style, template, textarea, select")) continue;
    const box = element.getBoundingClientRect();
    if (box.width < 2 || box.height < 2) continue;
    for (const match of node.data.matchAll(/\\S+/g)) {
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
      if (rects.length < 2) continue;
      const first = rects[0];
      const lines = rects.filter((r) => Math.abs(r.top - first.top) >= first.height / 2);
      const width = rects.reduce((sum, r) => sum + r.width, 0);
      if (lines.length === 0 || width >= limit) continue;
      if (hyphenBreaksOnly(node, match.index, match[0])) continue;
      found.push(`${match[0]} (in <${element.tagName.toLowerCase()}>, ${rects.length} pieces)`);
    }
  }
  return found;
}
"""


async def broken_words(page: Page, *, share: float = 0.6) -> list[str]:
    """The words ``page`` breaks inside although each would fit a line (see above)."""
    found = await page.evaluate(_BROKEN_WORDS_JS, share)
    return [str(word) for word in found]


async def assert_fits(page: Page, where: str) -> None:
    """``page`` neither scrolls sideways nor breaks a word inside that would fit a line."""
    sizes = await page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    broken = await broken_words(page)
    if broken or sizes[0] > sizes[1]:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "does-not-fit.png"), full_page=True)
    assert sizes[0] <= sizes[1], f"{where} scrolls sideways: {sizes} (see does-not-fit.png)"
    assert broken == [], f"{where} breaks words inside (see does-not-fit.png)"


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
