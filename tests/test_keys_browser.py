"""The GUI's Keys page in a real browser (Playwright driving the system's Chromium)
against a real uvicorn in multi-resource mode, on the test database.

A person logs in with an admin key of one resource by typing it into the login
form, follows the nav link to the Keys page, sees that resource's keys and none
of another's, creates a read key with the form, copies it off the answer page
(the one place it is shown) and revokes it behind the confirmation page; the key
is checked over real HTTP in between: it reads only its resource, cannot write,
and is refused (401) the moment it is revoked. A read key's login has no Keys
link and gets 403 at ``/keys``, as the GUI's error page (not a JSON body).
Every page is watched for script errors, CSP refusals and failed assets; the
Keys page is saved as a screenshot (``build/test-artifacts/screenshots/keys.png``).
"""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

import popagent
from popagent.keys import KeyStore, looks_like_key
from popagent.models import MemoryFilter
from tests.gui_support import assert_fits
from tests.test_gui_browser import (  # noqa: F401 (fixtures, used by name)
    browser,
    chromium,
    open_page,
    screenshot,
    screenshots,
)
from tests.test_keys_gui import bearer, multi_server


async def log_in(page: Page, base: str, credential: str) -> None:
    """Type ``credential`` into the login form as a person would and submit it."""
    await page.goto(base + "/login")
    # A multi-resource server asks for an API key (or the operator's token), by that name.
    await expect(page.get_by_text("log in with an API key")).to_be_visible()
    await page.get_by_label("API key").type(credential)
    await page.get_by_role("button", name="Log in").click()
    await expect(page).to_have_url(base + "/")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG file's IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    width, height = struct.unpack(">II", header[16:24])
    return int(width), int(height)


@pytest.mark.plain_postgresql
async def test_an_admin_login_creates_uses_and_revokes_a_key_in_the_browser(
    browser: Browser,  # noqa: F811 (the imported fixture)
    database_url: str,
    memory: popagent.LongTermMemory,
    screenshots: Path,  # noqa: F811 (the imported fixture)
) -> None:
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    _, boss = await store.create(one, "boss", "admin")
    await store.create(one, "worker", "write")
    await store.create(two, "theirs-only", "admin")
    ours = await memory.create_fact(one, "Resource one waters the basil on Mondays")
    await memory.create_fact(two, "Resource two keeps bees on the roof")

    with multi_server(database_url) as base:
        w = await open_page(browser)
        page = w.page
        await log_in(page, base, boss)
        await expect(page.get_by_test_id("resource")).to_have_text(one)

        # The nav link leads to the resource's keys, and only to them.
        await page.get_by_role("navigation", name="Main").get_by_role("link", name="Keys").click()
        await expect(page).to_have_url(base + "/keys")
        await expect(page.get_by_role("heading", level=1)).to_have_text(f"API keys of {one}")
        rows = page.get_by_test_id("key-row")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_contain_text("boss")
        await expect(rows.nth(0)).to_contain_text("(this login)")
        await expect(rows.nth(1)).to_contain_text("worker")
        text = await page.locator("main").inner_text()
        assert "theirs-only" not in text and two not in text
        assert boss not in await page.content()  # only prefixes are shown

        # Create a read key with the form: it is shown once, on the answer page.
        await page.get_by_label("Name").type("laptop")
        await page.get_by_label("Scope").select_option("read")
        await page.get_by_role("button", name="Create key").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Key laptop created")
        await expect(page.get_by_test_id("shown-once")).to_contain_text("it is shown once")
        key = await page.get_by_test_id("new-key").input_value()
        assert looks_like_key(key)
        laptop = next(k for k in await store.list_keys(one) if k.name == "laptop")
        assert (laptop.scope, laptop.resource_id) == ("read", one)

        # The key works over real HTTP: it reads its own resource only, and may not write.
        async with httpx.AsyncClient(base_url=base, timeout=30) as api:
            listed = await api.get("/api/facts", headers=bearer(key))
            assert listed.status_code == 200, listed.text
            items = listed.json()["items"]
            assert [(m["id"], m["resource_id"]) for m in items] == [(ours.id, one)]
            wrote = await api.post("/api/facts", json={"content": "x"}, headers=bearer(key))
            assert wrote.status_code == 403, wrote.text
        assert [f.id for f in await memory.list(one, MemoryFilter(kind="fact"))] == [ours.id]

        # Back on the list, the key is there by name and prefix, never in full.
        await page.get_by_role("link", name="Back to the keys").click()
        await expect(rows).to_have_count(3)
        laptop_row = page.locator(f"#key-{laptop.id}")
        await expect(laptop_row).to_contain_text("laptop")
        await expect(laptop_row).to_contain_text(laptop.prefix)
        await expect(laptop_row.locator("td").nth(1)).to_have_text("read")
        assert key not in await page.content()
        shot = screenshots / "keys.png"
        await screenshot(page, screenshots, "keys.png")
        width, height = png_size(shot)
        assert width == 1100 and height >= 900  # the whole page, at the viewport's width
        page_text = await page.locator("body").inner_text()
        assert "laptop" in page_text and one in page_text and "Create a key" in page_text

        # "Log out" (a form's button) sits in line with the nav's links.
        nav = page.get_by_role("navigation", name="Main")
        keys_link = await nav.get_by_role("link", name="Keys").bounding_box()
        log_out = await nav.get_by_role("button", name="Log out").bounding_box()
        assert keys_link is not None and log_out is not None
        middle = [box["y"] + box["height"] / 2 for box in (keys_link, log_out)]
        assert abs(middle[0] - middle[1]) <= 2, (keys_link, log_out)

        # At 390 px the table scrolls in its box; no word in it breaks inside.
        await page.set_viewport_size({"width": 390, "height": 800})
        await assert_fits(page, "/keys")
        await screenshot(page, screenshots, "keys-390px.png")
        await page.goto(f"{base}/keys/{laptop.id}/revoke")
        await assert_fits(page, "the revoke page")
        await page.goto(base + "/keys")
        await page.set_viewport_size({"width": 1100, "height": 900})

        # Revoke it behind the confirmation page; it is refused at once.
        await laptop_row.get_by_role("link", name="Revoke laptop").click()
        await expect(page.get_by_role("heading", level=1)).to_have_text("Revoke key laptop?")
        await expect(page.get_by_text("your own login")).to_have_count(0)
        assert (await store.list_keys(one, include_revoked=True))[-1].revoked_at is None
        await page.get_by_role("button", name="Revoke this key").click()
        await expect(page).to_have_url(base + "/keys?notice=key-revoked")
        await expect(page.locator(".notice")).to_contain_text("Key revoked")
        async with httpx.AsyncClient(base_url=base, timeout=30) as api:
            refused = await api.get("/api/facts", headers=bearer(key))
            assert refused.status_code == 401, refused.text
        await expect(laptop_row.get_by_role("link", name="Revoke laptop")).to_have_count(0)
        await expect(laptop_row.locator("td").nth(7)).not_to_have_text("no")
        w.assert_clean()


@pytest.mark.plain_postgresql
async def test_a_read_key_login_has_no_keys_page_in_the_browser(
    browser: Browser,  # noqa: F811 (the imported fixture)
    database_url: str,
    memory: popagent.LongTermMemory,
) -> None:
    one = f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    _, reader = await store.create(one, "reader", "read")
    with multi_server(database_url) as base:
        w = await open_page(browser)
        page = w.page
        await log_in(page, base, reader)
        await expect(page.get_by_test_id("resource")).to_have_text(one)
        nav = page.get_by_role("navigation", name="Main")
        await expect(nav.get_by_role("link", name="Settings")).to_be_visible()
        await expect(nav.get_by_role("link", name="Keys")).to_have_count(0)
        answer = await page.goto(base + "/keys")
        assert answer is not None and answer.status == 403
        # A page for a person, with the nav, not a JSON body.
        assert answer.headers["content-type"].startswith("text/html")
        await expect(page.get_by_role("heading", level=1)).to_have_text("Forbidden")
        await expect(page.get_by_role("alert")).to_have_text(
            "this key's scope (read) does not allow this request"
        )
        await expect(page.get_by_test_id("resource")).to_have_text(one)
        await expect(page.get_by_role("button", name="Create key")).to_have_count(0)
        w.assert_clean()
    assert [k.name for k in await store.list_keys(one)] == ["reader"]
