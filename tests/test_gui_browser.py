"""The web GUI in a real browser: Playwright drives Debian's Chromium (``/usr/bin/chromium``,
headless) against a real uvicorn on 127.0.0.1 serving the test database.

Covers, as a person would do them: creating, editing and deleting a fact;
deleting an episode; a settings change refused inline, then saved; a chat turn
whose reply streams onto the page from the scripted model server; creating a
fact with the keyboard alone; and, on every page at 390 px, no horizontal scrolling and
no word broken inside that would fit a line. Every page
is also watched for script errors and CSP refusals. Screenshots are saved to
``build/test-artifacts/screenshots/``.

The browser is the system's (CI installs it with apt); nothing is downloaded.
A missing browser fails these tests, it never skips them.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import (
    Browser,
    ConsoleMessage,
    Page,
    Response,
    async_playwright,
    expect,
)

import popagent
from popagent.models import MemoryFilter
from popagent.observe.settings_store import MemorySettingsStore
from popagent.threads import ThreadStore
from popagent.web import ServerConfig
from tests.gui_support import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, assert_fits
from tests.scripted_model import CallTools, Fail, Reply, ScriptedModelServer
from tests.web_support import count_rows, scripted_settings, uvicorn_server

TIMEOUT_MS = 15_000


@pytest.fixture(scope="session")
def chromium() -> str:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    return str(CHROMIUM)


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """The artifacts folder for screenshots (git-ignored under ``build/``)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture
async def browser(chromium: str) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def server(database_url: str, resource: str) -> Iterator[str]:
    """A real uvicorn on 127.0.0.1 for ``resource``, without a model."""
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    with uvicorn_server(config, database_url=database_url, model_from_env=False) as base:
        yield base


class Watched:
    """A page whose script errors, console errors (CSP refusals among them) and failed
    assets (stylesheet, script, icon) are kept. A page or API answer with an error
    status is the test's to check, so the console line it causes is not kept."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        page.on("console", self._console)
        page.on("response", self._response)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.problems.append(f"console: {message.text}")

    def _response(self, response: Response) -> None:
        kind = response.request.resource_type
        if response.status >= 400 and kind not in ("document", "fetch"):
            self.problems.append(f"{kind} {response.url}: {response.status}")

    def assert_clean(self) -> None:
        assert self.problems == []


async def open_page(browser: Browser, *, width: int = 1100, height: int = 900) -> Watched:
    context = await browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(TIMEOUT_MS)
    return Watched(await context.new_page())


async def screenshot(page: Page, folder: Path, name: str) -> None:
    image = await page.screenshot(path=str(folder / name), full_page=True)
    assert image.startswith(b"\x89PNG")


# --- facts and episodes -----------------------------------------------------------------------


async def test_create_edit_delete_fact(
    browser: Browser,
    server: str,
    memory: popagent.LongTermMemory,
    resource: str,
    screenshots: Path,
) -> None:
    await memory.retain_episode(resource, "garden", "Did I water the basil?", "Yes, on Monday.")
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/")
    await expect(page.get_by_test_id("resource")).to_have_text(resource)
    await page.get_by_role("link", name="New fact").click()

    # A credential is refused next to the field, and nothing is stored.
    await page.get_by_label("Content").fill("my password is hunter2hunter2")
    await page.get_by_role("button", name="Create fact").click()
    await expect(page.locator("#content-error")).to_contain_text("secret")
    await expect(page.get_by_label("Content")).to_have_attribute("aria-invalid", "true")
    assert await count_rows(memory, resource) == 1

    await page.get_by_label("Content").fill("Waters the basil every Monday")
    await page.get_by_label("Key").fill("garden.basil")
    await page.get_by_label("Importance").fill("0.7")
    await page.get_by_role("button", name="Create fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact created.")
    fid = int(re.findall(r"/memories/(\d+)", page.url)[0])
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.key, fact.importance) == (
        "Waters the basil every Monday",
        "garden.basil",
        0.7,
    )

    await page.get_by_role("link", name="Edit fact").click()
    await page.get_by_label("Content").fill("Waters the basil every Tuesday")
    await page.get_by_label("Key").fill("")
    await page.get_by_role("button", name="Save fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact saved.")
    await expect(page.get_by_test_id("content")).to_have_text("Waters the basil every Tuesday")
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.key) == ("Waters the basil every Tuesday", None)

    await page.get_by_role("link", name="Recall").click()
    await page.get_by_label("Query").fill("when do I water the basil")
    await page.get_by_role("button", name="Preview recall").click()
    await expect(page.get_by_test_id("rendered")).to_contain_text(
        re.compile(r"\[fact, said [^\]]+\] Waters the basil every Tuesday")
    )
    await expect(page.locator("table.components").first).to_contain_text("Contribution")
    await screenshot(page, screenshots, "recall.png")

    await page.goto(server + "/")
    await expect(page.locator("tr.memory")).to_have_count(2)
    await screenshot(page, screenshots, "memories.png")

    await page.get_by_role("link", name=f"Delete fact {fid}").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(f"Delete fact {fid}?")
    assert await count_rows(memory, resource) == 2  # the confirmation page deletes nothing
    await page.get_by_role("button", name="Delete this fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact deleted.")
    assert [m.kind for m in await memory.list(resource)] == ["episode"]
    w.assert_clean()


async def test_delete_episode(
    browser: Browser, server: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    episode = await memory.retain_episode(resource, "s-1", "What is my cat called?", "Miso.")
    assert episode is not None
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/?kind=episode")
    await page.get_by_role("link", name=f"Delete episode {episode.id}").click()
    await expect(page.get_by_text("This deletes the episode for good")).to_be_visible()
    await page.get_by_role("button", name="Delete this episode").click()
    await expect(page.locator(".notice")).to_have_text("Episode deleted.")
    assert await count_rows(memory, resource) == 0
    w.assert_clean()


# --- settings ---------------------------------------------------------------------------------


async def test_setting_refused_inline_then_saved(
    browser: Browser,
    server: str,
    memory: popagent.LongTermMemory,
    resource: str,
    screenshots: Path,
) -> None:
    store = MemorySettingsStore(memory.pool)
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/settings")
    threshold = page.locator("#observation_threshold_tokens")
    await expect(threshold).to_be_hidden()  # folded under Advanced
    await page.get_by_text("Advanced: observational memory").click()
    await expect(threshold).to_have_value("30000")

    await threshold.fill("50")
    await page.get_by_role("button", name="Save settings").click()
    error = page.locator("#observation_threshold_tokens-error")
    await expect(error).to_be_visible()
    await expect(error).to_contain_text("from 100")
    await expect(threshold).to_have_attribute("aria-invalid", "true")
    await expect(threshold).to_have_value("50")
    await expect(page.get_by_role("alert")).to_contain_text("Nothing was saved")
    await error.scroll_into_view_if_needed()
    await page.screenshot(path=str(screenshots / "settings-error.png"))
    assert (await store.read(resource)).version == 0

    await threshold.fill("25000")
    await page.locator("#temporal_markers").select_option("true")
    await page.get_by_role("button", name="Save settings").click()
    await expect(page.locator(".notice")).to_contain_text("Settings saved (version 1)")
    await expect(page.locator("#observation_threshold_tokens")).to_have_value("25000")
    stored = await store.read(resource)
    assert stored.version == 1
    assert stored.settings.observation_threshold_tokens == 25_000
    assert stored.settings.temporal_markers is True
    w.assert_clean()


# --- chat -------------------------------------------------------------------------------------


#: Run in the page (through the DevTools protocol, so the CSP does not apply): keep each
#: text an assistant bubble showed. chat.js sets ``textContent`` once per event, which
#: puts a new text node in the bubble, so the added nodes hold every intermediate text.
RECORD_ASSISTANT_TEXTS = """
window.assistantTexts = [];
new MutationObserver((records) => {
  for (const record of records) {
    if (record.target.nodeType !== Node.ELEMENT_NODE) continue;
    if (!record.target.closest("li.assistant")) continue;
    for (const node of record.addedNodes) {
      if (node.nodeType === Node.TEXT_NODE) window.assistantTexts.push(node.data);
    }
  }
}).observe(document.getElementById("chat-log"), { childList: true, subtree: true });
"""


async def test_chat_turn_streams_onto_the_page(
    browser: Browser,
    database_url: str,
    memory: popagent.LongTermMemory,
    resource: str,
    scripted: ScriptedModelServer,
    screenshots: Path,
) -> None:
    await memory.create_fact(resource, "The user's cat is called Miso", key="pet.cat")
    settings = scripted_settings(scripted)
    reply = "Your cat is called Miso, and she likes the sunny window."
    scripted.script(Reply(reply))
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    with uvicorn_server(config, database_url=database_url, model_settings=settings) as base:
        w = await open_page(browser)
        page = w.page
        await page.goto(base + "/chat")
        await expect(page).to_have_url(re.compile(r"/chat/web-[0-9a-f]{16}$"))
        session_id = page.url.rsplit("/", 1)[1]
        await expect(page.get_by_test_id("session-id")).to_have_text(session_id)

        # Record every text the assistant's bubble shows, to see the deltas arrive.
        await page.evaluate(RECORD_ASSISTANT_TEXTS)
        await page.get_by_label("Message").fill("What is my cat called?")
        async with page.expect_response(
            lambda r: r.url.endswith(f"/api/sessions/{session_id}/chat")
        ) as answered:
            await page.get_by_role("button", name="Send").click()
        response = await answered.value
        assert response.status == 200
        assert response.headers["content-type"].startswith("text/event-stream")

        assistant = page.locator("#chat-log li.message.assistant .message-content")
        await expect(assistant).to_have_text(reply)
        await expect(page.locator("#chat-status")).to_have_text("Reply complete.")
        await expect(page.locator("#chat-log li.message.user")).to_have_text(
            re.compile("What is my cat called?")
        )
        await expect(page.locator("#recalled")).to_contain_text("The user's cat is called Miso")
        await expect(page.locator("#tool-calls")).to_have_text("none")
        await expect(page.locator("#chat-error")).to_be_hidden()
        shown = [t for t in await page.evaluate("window.assistantTexts") if t]
        assert len(set(shown)) >= 2, shown  # partial text first: the deltas were rendered
        assert all(reply.startswith(t) for t in shown), shown
        assert shown[-1] == reply
        await screenshot(page, screenshots, "chat.png")
        w.assert_clean()

    assert scripted.requests[0]["stream"] is True  # the model streamed, and so did the page
    stored = await ThreadStore(memory.pool).list_messages(resource, session_id)
    assert [(m.role, m.content) for m in stored] == [
        ("user", "What is my cat called?"),
        ("assistant", reply),
    ]


async def test_chat_shows_what_remember_stored(
    browser: Browser,
    database_url: str,
    memory: popagent.LongTermMemory,
    resource: str,
    scripted: ScriptedModelServer,
) -> None:
    content = "The user prefers dark mode"
    scripted.script(
        CallTools([("remember", {"content": content, "key": "ui.theme"})]),
        Reply("Noted."),
    )
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    settings = scripted_settings(scripted)
    with uvicorn_server(config, database_url=database_url, model_settings=settings) as base:
        w = await open_page(browser)
        page = w.page
        await page.goto(base + "/chat/s-remember")
        await page.get_by_label("Message").fill("I like dark mode.")
        await page.get_by_role("button", name="Send").click()
        await expect(page.locator("#chat-status")).to_have_text("Reply complete.")
        (fact,) = await memory.list(resource, MemoryFilter(kind="fact"))
        await expect(page.locator("#tool-calls")).to_have_text(
            f"remember: Stored: created fact #{fact.id} with key 'ui.theme': {content}"
        )
        w.assert_clean()


async def test_chat_model_failure_is_shown_readably(
    browser: Browser,
    database_url: str,
    resource: str,
    scripted: ScriptedModelServer,
) -> None:
    scripted.script(Fail(500))
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    settings = scripted_settings(scripted)
    with uvicorn_server(config, database_url=database_url, model_settings=settings) as base:
        w = await open_page(browser)
        page = w.page
        await page.goto(base + "/chat/failing")
        await page.get_by_label("Message").fill("hello?")
        await page.get_by_label("Message").press("Enter")  # Enter sends
        await expect(page.locator("#chat-error")).to_contain_text(
            "The model failed, so there is no reply."
        )
        await expect(page.locator("#chat-log li.message.assistant")).to_have_count(0)
        await expect(page.get_by_role("button", name="Send")).to_be_enabled()
        w.assert_clean()


async def test_chat_without_model_shows_a_readable_error(browser: Browser, server: str) -> None:
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/chat/s-1")
    await expect(page.get_by_test_id("no-model")).to_contain_text("POPAGENT_MODEL")
    # Said once, not "No model is available. no model is configured ...".
    no_model = await page.get_by_test_id("no-model").text_content() or ""
    assert no_model.lower().count("no model") == 1
    # Send is off, and says why; Enter in the message sends nothing either.
    send = page.get_by_role("button", name="Send")
    await expect(send).to_be_disabled()
    await expect(send).to_have_accessible_description(re.compile("Sending is off: this server"))
    await page.get_by_label("Message").fill("hello")
    await page.get_by_label("Message").press("Enter")
    await expect(page.locator("#chat-error")).to_be_hidden()
    await expect(page.locator("#chat-log li.message")).to_have_count(0)
    w.assert_clean()


# --- keyboard and narrow screens ---------------------------------------------------------------


async def tab_to(page: Page, predicate: str, *, limit: int = 40) -> None:
    """Press Tab until ``predicate`` (JavaScript on ``el``) holds for the focused element."""
    for _ in range(limit):
        await page.keyboard.press("Tab")
        if await page.evaluate(
            f"(() => {{ const el = document.activeElement; return {predicate}; }})()"
        ):
            return
    raise AssertionError(f"Tab never reached an element where {predicate}")


async def test_keyboard_only_fact_creation(
    browser: Browser, server: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/")
    await tab_to(page, "el.textContent.trim() === 'New fact'")
    outline = await page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # the focus is visible
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(server + "/facts/new")

    await tab_to(page, "el.id === 'content'")
    await page.keyboard.type("Takes the train to work")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "key"
    await page.keyboard.type("commute")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "importance"
    await page.keyboard.press("Control+A")
    await page.keyboard.type("0.6")
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.id") == "expires_at"
    # The expiry stays empty; Tab walks its date and time parts, then to the button.
    await tab_to(page, "el.textContent.trim() === 'Create fact'", limit=10)
    await page.keyboard.press("Enter")
    await expect(page.locator(".notice")).to_have_text("Fact created.")
    facts = await memory.list(resource, MemoryFilter(kind="fact"))
    assert [(f.content, f.key, f.importance) for f in facts] == [
        ("Takes the train to work", "commute", 0.6)
    ]
    w.assert_clean()


async def test_every_page_at_390px_neither_scrolls_sideways_nor_breaks_a_word(
    browser: Browser,
    server: str,
    memory: popagent.LongTermMemory,
    resource: str,
    screenshots: Path,
) -> None:
    long_word = "Supercalifragilistic" * 15
    fact = await memory.create_fact(resource, f"{long_word} is a long word", key="k" * 128)
    await memory.create_fact(resource, "Waters the basil every Monday morning", key="basil")
    await memory.retain_episode(resource, "s" * 200, f"Say {long_word}", "Done.")
    threads = ThreadStore(memory.pool)
    await threads.append_message(resource, "narrow", "user", long_word, create_session=True)
    # A version of the fact, written by the session: its history and writes have long words too.
    await memory.update_fact(resource, fact.id, importance=0.9, session_id="narrow")
    w = await open_page(browser, width=390, height=800)
    page = w.page

    for path in (
        "/",
        f"/memories/{fact.id}",
        f"/facts/{fact.id}/edit",
        f"/facts/{fact.id}/history",
        f"/facts/{fact.id}/delete",
        "/facts/new",
        "/recall",
        "/settings",
        "/sessions",
        "/sessions/narrow",
        "/sessions/narrow/revert",
        "/sessions/narrow/delete",
        "/chat",
        "/chat/narrow",
        "/cleanup",
        "/purge",
        "/docs",
        "/login",
    ):
        response = await page.goto(server + path)
        assert response is not None and response.status == 200, path
        await assert_fits(page, path)
        if path in ("/", "/sessions/narrow"):
            name = "memories" if path == "/" else "session"
            await screenshot(page, screenshots, f"{name}-390px.png")
    # The recall preview's answer: each memory's table of score components.
    await page.goto(server + "/recall")
    await page.get_by_label("Query").fill("when are the basil plants watered")
    await page.get_by_role("button", name="Preview recall").click()
    await expect(page.locator("table.components").first).to_be_visible()
    await assert_fits(page, "the recall preview")
    await screenshot(page, screenshots, "recall-390px.png")
    # The cleanup's confirmation page, and the GUI's error page.
    await page.goto(server + "/cleanup/confirm?kind=episode&older_than=2999-01-01")
    await assert_fits(page, "the cleanup's confirmation")
    missing = await page.goto(server + "/memories/987654321")
    assert missing is not None and missing.status == 404
    await assert_fits(page, "the error page")
    w.assert_clean()


async def test_a_page_of_memories_fits_one_screen(
    browser: Browser,
    server: str,
    memory: popagent.LongTermMemory,
    resource: str,
    screenshots: Path,
) -> None:
    for i in range(30):
        await memory.create_fact(
            resource, f"Fact number {i}: the user waters plant {i} every week", key=f"plant.{i}"
        )
    w = await open_page(browser, width=1280, height=900)
    page = w.page
    await page.goto(server + "/")
    rows = page.locator("tr.memory")
    await expect(rows).to_have_count(25)
    await screenshot(page, screenshots, "memories-page.png")
    # One line per memory: the 25 rows of a page fit in a laptop screen's height.
    table = await page.locator("table.memory-table tbody").bounding_box()
    assert table is not None and table["height"] <= 800, table
    first = await rows.first.bounding_box()
    assert first is not None and first["height"] <= 32, first
    await expect(rows.first).not_to_contain_text("Access count")
    w.assert_clean()


# --- history and revert -----------------------------------------------------------------------


async def test_restore_an_old_version_and_revert_a_session(
    browser: Browser,
    server: str,
    memory: popagent.LongTermMemory,
    resource: str,
    screenshots: Path,
) -> None:
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/facts/new")
    await page.get_by_label("Content").fill("Drives a blue car")
    await page.get_by_label("Key").fill("car")
    await page.get_by_role("button", name="Create fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact created.")
    fid = int(re.findall(r"/memories/(\d+)", page.url)[0])

    await page.get_by_role("link", name="Edit fact").click()
    await page.get_by_label("Content").fill("Drives a red car")
    await page.get_by_label("Expires").fill("2999-01-01T10:30")
    await page.get_by_role("button", name="Save fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact saved.")
    await expect(page.get_by_test_id("version")).to_have_text("2")
    await expect(page.get_by_test_id("origin")).to_have_text("gui")
    fact = await memory.get(resource, fid, kind="fact")
    assert fact.expires_at is not None and fact.expires_at.year == 2999
    await expect(page.get_by_test_id("versions")).to_contain_text("Drives a blue car")
    await screenshot(page, screenshots, "fact-history.png")

    await page.get_by_role("button", name="Restore version 1").click()
    await expect(page.locator(".notice")).to_have_text("Version 1 restored.")
    await expect(page.get_by_test_id("content")).to_have_text("Drives a blue car")
    await expect(page.get_by_role("button", name="Restore version 2")).to_be_visible()
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.version, fact.origin) == ("Drives a blue car", 3, "gui")

    # A session that changed the fact and added one: revert both after confirming.
    await ThreadStore(memory.pool).append_message(
        resource, "s-rev", "user", "I bought a bike", create_session=True
    )
    await memory.remember(resource, "Rides a bike", key="car", session_id="s-rev")
    added = (await memory.remember(resource, "Cycles to work", session_id="s-rev")).memory
    await page.goto(server + "/sessions/s-rev")
    writes = page.get_by_test_id("session-memories")
    await expect(writes).to_contain_text("Rides a bike")
    await expect(writes).to_contain_text("Cycles to work")
    await page.get_by_role("link", name="Revert this session's writes…").click()
    await expect(page.get_by_test_id("revert-summary")).to_contain_text("2 memories")
    assert (await memory.get(resource, fid, kind="fact")).content == "Rides a bike"  # not yet
    await page.get_by_role("button", name="Revert these writes").click()
    await expect(page.locator(".notice")).to_have_text(
        "Session's writes reverted: 1 fact restored, 1 memory deleted, 0 writes skipped."
    )
    assert (await memory.get(resource, fid, kind="fact")).content == "Drives a blue car"
    assert [m.id for m in await memory.list(resource)] == [fid]
    assert added.id not in {m.id for m in await memory.list(resource)}
    await screenshot(page, screenshots, "session-reverted.png")
    w.assert_clean()


async def test_the_fact_form_takes_when_it_happened(
    browser: Browser, server: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    w = await open_page(browser)
    page = w.page
    await page.goto(server + "/facts/new")
    await page.get_by_label("Content").fill("Plays the cello")
    await page.get_by_label("Happened at").fill("someday")
    await page.get_by_role("button", name="Create fact").click()
    await expect(page.locator("#happened_at-error")).to_contain_text("names no time")
    assert await memory.list(resource) == []

    await page.get_by_label("Happened at").fill("spring 2021")
    await page.get_by_role("button", name="Create fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact created.")
    (fact,) = await memory.list(resource)
    assert fact.happened_precision == "season" and fact.happened_start is not None
    assert fact.happened_start.month == 3 and fact.happened_start.year == 2021

    # Editing shows the clock and keeps it when the field is left empty.
    await page.get_by_role("link", name="Edit fact").click()
    await expect(page.get_by_test_id("event-clock")).to_have_text(
        "2021-03-01 to 2021-06-01 (season)"
    )
    await page.get_by_label("Importance").fill("0.7")
    await page.get_by_role("button", name="Save fact").click()
    await expect(page.locator(".notice")).to_have_text("Fact saved.")
    fact = await memory.get(resource, fact.id, kind="fact")
    assert fact.importance == 0.7 and fact.happened_precision == "season"
    w.assert_clean()
