"""The web GUI in process (httpx over ASGI, lifespan running) on the real database.

Covers: every page renders with the resource and the nav under the strict CSP
(no inline script or style); fact create/edit/delete and episode delete through
forms with redirect after POST; CSRF refusal and unknown-field refusal writing
nothing; validation errors shown next to their fields; filters and paging;
cleanup's confirmation step; recall preview; the settings editor; sessions
with history and observations; the chat page without a model and its no-script
fallback with one; login with a configured token.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import httpx
import pytest
from fastapi.routing import APIRoute
from markupsafe import escape

import popagent
from popagent import Popagent
from popagent.llm import OpenAIChatModel
from popagent.models import MemoryFilter
from popagent.observe.settings import SETTINGS
from popagent.observe.settings_store import MemorySettingsStore
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from popagent.web.gui import ROUTERS
from popagent.web.gui.forms import CSRF_COOKIE
from popagent.web.gui.login import local_path
from popagent.web.gui.pages_settings import group_settings
from popagent.web.middleware import LOGIN_COOKIE
from tests.gui_support import csrf_token, field_error, post_form
from tests.observe_support import insert_observed
from tests.scripted_model import CallTools, Reply, ScriptedModelServer
from tests.web_support import api_client, count_rows, in_process

TOKEN = "gui-test-token-0123456789"


def memory_id(location: str) -> int:
    match = re.fullmatch(r"/memories/(\d+)\?notice=[a-z-]+", location)
    assert match, location
    return int(match.group(1))


# --- pages ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/", "/facts/new", "/cleanup", "/recall", "/settings", "/sessions", "/chat/s-1", "/docs"],
)
async def test_every_page_shows_resource_and_nav_without_inline_code(
    gui: httpx.AsyncClient, resource: str, path: str
) -> None:
    response = await gui.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    html = response.text
    assert f'<code data-testid="resource">{resource}</code>' in html
    for label in ("Memories", "Recall", "Sessions", "Chat", "Settings", "API"):
        assert f">{label}</a>" in html
    assert 'aria-current="page"' in html
    # Under no-referrer a browser sends "Origin: null" with a form POST, which the
    # request guard refuses; the server's policy is same-origin instead.
    assert response.headers["referrer-policy"] == "same-origin"
    # The CSP forbids inline code: every script and style must be a static file.
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert "<style" not in html
    assert " style=" not in html
    assert re.search(r"\son[a-z]+=", html) is None


async def test_static_assets_are_served_locally(gui: httpx.AsyncClient) -> None:
    css = await gui.get("/static/app.css")
    js = await gui.get("/static/chat.js")
    assert css.status_code == js.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert "javascript" in js.headers["content-type"]
    assert "innerHTML" not in js.text  # text goes in with textContent only
    assert "http" not in css.text.replace("http-equiv", "")  # nothing from a CDN


async def test_csrf_cookie_is_strict_and_httponly(gui: httpx.AsyncClient) -> None:
    response = await gui.get("/")
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{CSRF_COOKIE}=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/" in cookie
    token = gui.cookies[CSRF_COOKIE]
    assert f'name="csrf_token" value="{token}"' in (await gui.get("/facts/new")).text
    # Once set, the cookie is reused, not replaced.
    assert "set-cookie" not in (await gui.get("/recall")).headers


async def test_unknown_memory_is_an_html_404(gui: httpx.AsyncClient) -> None:
    for path in ("/memories/987654321", "/memories/not-a-number", "/facts/987654321/edit"):
        response = await gui.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("text/html")
        assert "Not found" in response.text


async def test_unknown_gui_path_is_the_html_404_page_and_api_paths_stay_json(
    gui: httpx.AsyncClient,
) -> None:
    for path in ("/nowhere", "/memories", "/facts/1/nothing", "/sessions/a/b/c"):
        response = await gui.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("text/html"), path
        assert "<h1>Not found</h1>" in response.text
        assert ">Memories</a>" in response.text  # the nav, to go on from there
    for path in ("/api/nowhere", "/api", "/static/nothing.css"):
        response = await gui.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("application/json"), path


async def test_api_reference_is_browsable_without_a_cdn(gui: httpx.AsyncClient) -> None:
    response = await gui.get("/docs")
    assert response.status_code == 200
    html = response.text
    document = (await gui.get("/openapi.json")).json()
    # Every operation of the document is on the page, under its method and path.
    for path, item in document["paths"].items():
        for method in item:
            assert f"{method.upper()}</span> <code>{escape(path)}</code>" in html, (method, path)
    for name in document["components"]["schemas"]:
        assert f'id="schema-{name}"' in html
    # Types link to their schemas; a body names its schema.
    assert 'Body: <a href="#schema-FactCreate">FactCreate</a>' in html
    # Docstrings read as text with their code marked, never as markup or an int64 bound.
    assert "recall for <code>query</code>, each with its score components" in html
    assert "``" not in html and "9,223,372,036,854,775,807" not in html
    assert "<td>integer (int64), ≥ 1</td>" in html
    # Nothing from elsewhere: every src and href is local or an anchor.
    for ref in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert ref.startswith(("/", "#")) and not ref.startswith("//"), ref


async def test_empty_states_say_what_to_do_next(gui: httpx.AsyncClient) -> None:
    memories = (await gui.get("/")).text
    assert "Nothing is stored yet" in memories
    assert 'href="/facts/new">add a fact</a>' in memories
    assert "popagent remember" in memories
    sessions = (await gui.get("/sessions")).text
    assert 'No sessions yet. A session is one conversation with the agent: <a href="/chat">' in (
        sessions
    )
    filtered = (await gui.get("/", params={"text": "nothing like this"})).text
    assert "No memories match these filters" in filtered and 'href="/">clear them</a>' in filtered


# --- facts and episodes -----------------------------------------------------------------------


async def test_fact_create_edit_delete(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    created = await post_form(
        gui, "/facts", {"content": "Prefers dark mode", "key": "ui.theme", "importance": "0.8"}
    )
    assert created.status_code == 303
    fid = memory_id(created.headers["location"])
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.key, fact.importance) == ("Prefers dark mode", "ui.theme", 0.8)

    shown = await gui.get(created.headers["location"])
    assert "Fact created." in shown.text
    assert "Prefers dark mode" in shown.text

    form = (await gui.get(f"/facts/{fid}/edit")).text
    assert ">Prefers dark mode</textarea>" in form
    assert 'value="ui.theme"' in form

    edited = await post_form(
        gui, f"/facts/{fid}", {"content": "Prefers light mode", "key": "", "importance": "0.3"}
    )
    assert edited.status_code == 303
    assert edited.headers["location"] == f"/memories/{fid}?notice=fact-updated"
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.key, fact.importance) == ("Prefers light mode", None, 0.3)

    confirm = await gui.get(f"/facts/{fid}/delete")
    assert confirm.status_code == 200, confirm.text[-1500:]
    assert f'action="/facts/{fid}/delete"' in confirm.text
    assert await count_rows(memory, resource) == 1  # the confirmation page deletes nothing
    deleted = await post_form(gui, f"/facts/{fid}/delete", {})
    assert deleted.status_code == 303
    assert deleted.headers["location"] == "/?notice=fact-deleted"
    assert await count_rows(memory, resource) == 0


async def test_episode_delete_with_confirmation(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    episode = await memory.retain_episode(resource, "s-1", "What is my cat called?", "Miso.")
    assert episode is not None
    page = (await gui.get(f"/memories/{episode.id}")).text
    assert "Episodes are immutable" in page
    assert f"/facts/{episode.id}/edit" not in page  # no way to change an episode
    assert (await gui.get(f"/facts/{episode.id}/edit")).status_code == 404
    confirm = await gui.get(f"/episodes/{episode.id}/delete")
    assert "Delete this episode" in confirm.text
    assert await count_rows(memory, resource) == 1
    deleted = await post_form(gui, f"/episodes/{episode.id}/delete", {})
    assert deleted.headers["location"] == "/?notice=episode-deleted"
    assert await count_rows(memory, resource) == 0


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"content": "", "key": "", "importance": "0.5"}, "content", "is required"),
        ({"content": "x" * 2001, "key": "", "importance": "0.5"}, "content", "limited to 2000"),
        ({"content": "ok", "key": "two words", "importance": "0.5"}, "key", "whitespace"),
        ({"content": "ok", "key": "k" * 129, "importance": "0.5"}, "key", "at most 128"),
        ({"content": "ok", "key": "", "importance": "1.5"}, "importance", "[0, 1]"),
        ({"content": "ok", "key": "", "importance": "nan"}, "importance", "finite"),
        ({"content": "ok", "key": "", "importance": "high"}, "importance", "a number"),
        ({"content": "ok", "key": ""}, "importance", "is required"),
        ({"content": "my password is hunter2hunter2", "importance": "0.5"}, "content", "secret"),
    ],
)
async def test_fact_validation_errors_are_inline_and_nothing_is_written(
    gui: httpx.AsyncClient,
    memory: popagent.LongTermMemory,
    resource: str,
    data: dict[str, str],
    field: str,
    message: str,
) -> None:
    response = await post_form(gui, "/facts", data)
    assert response.status_code == 422
    assert message in field_error(response.text, field)
    assert f'id="{field}"' in response.text
    assert 'aria-invalid="true"' in response.text
    assert "Nothing was saved" in response.text
    assert await count_rows(memory, resource) == 0


async def test_every_problem_is_shown_at_once_with_the_typed_values(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    typed = {"content": "<b>bold</b> & more", "key": "a b", "importance": "7"}
    response = await post_form(gui, "/facts", typed)
    assert response.status_code == 422
    field_error(response.text, "key")
    field_error(response.text, "importance")
    assert str(escape("<b>bold</b> & more")) in response.text
    assert "<b>bold</b>" not in response.text
    assert await count_rows(memory, resource) == 0


async def test_taken_key_is_shown_at_the_key(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.create_fact(resource, "Lives in Lyon", key="home.city")
    response = await post_form(
        gui, "/facts", {"content": "Lives in Porto", "key": "home.city", "importance": "0.5"}
    )
    assert response.status_code == 422
    assert field_error(response.text, "key")
    assert await count_rows(memory, resource) == 1


async def test_memory_content_is_escaped(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await memory.create_fact(resource, '<script>alert("x")</script> <img src=x onerror=y>')
    for path in ("/", f"/memories/{fact.id}", f"/facts/{fact.id}/edit"):
        html = (await gui.get(path)).text
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;alert" in html


# --- CSRF and strict forms --------------------------------------------------------------------

FACT = {"content": "Likes tea", "key": "", "importance": "0.5"}


async def test_post_without_csrf_token_is_refused(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await csrf_token(gui)  # the cookie is there, the field is not
    response = await post_form(gui, "/facts", FACT, csrf=False)
    assert response.status_code == 403
    assert "security token" in response.text
    assert await count_rows(memory, resource) == 0


async def test_post_with_wrong_csrf_token_is_refused(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await csrf_token(gui)
    wrong = {**FACT, "csrf_token": "A" * 43}
    assert (await post_form(gui, "/facts", wrong, csrf=False)).status_code == 403
    assert await count_rows(memory, resource) == 0


async def test_post_without_csrf_cookie_is_refused(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    token = await csrf_token(gui)
    gui.cookies.clear()
    response = await post_form(gui, "/facts", {**FACT, "csrf_token": token}, csrf=False)
    assert response.status_code == 403
    assert await count_rows(memory, resource) == 0


@pytest.mark.parametrize(
    "path", ["/facts/1/delete", "/episodes/1/delete", "/cleanup", "/maintenance", "/settings"]
)
async def test_every_write_needs_the_csrf_token(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, path: str
) -> None:
    fact = await memory.create_fact(resource, "Keep me")
    await csrf_token(gui)
    data = {"confirm": "yes"} if path == "/cleanup" else {}
    response = await post_form(gui, path.replace("/1/", f"/{fact.id}/"), data, csrf=False)
    assert response.status_code == 403
    assert await count_rows(memory, resource) == 1


async def test_unknown_form_field_is_refused_not_ignored(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    response = await post_form(gui, "/facts", {**FACT, "resource_id": "someone-else"})
    assert response.status_code == 422
    assert "resource_id: is not a field of this form" in response.text
    assert await count_rows(memory, resource) == 0
    settings = await post_form(gui, "/settings", {"resource_id": "someone-else"})
    assert settings.status_code == 422


async def test_repeated_field_and_other_content_types_are_refused(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    token = await csrf_token(gui)
    body = f"csrf_token={token}&content=a&content=b&importance=0.5"
    repeated = await gui.post(
        "/facts", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert repeated.status_code == 422
    as_json = await gui.post("/facts", json={**FACT, "csrf_token": token})
    assert as_json.status_code == 415
    assert await count_rows(memory, resource) == 0


# --- browsing ---------------------------------------------------------------------------------


async def test_filters_and_paging(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    for i in range(27):
        await memory.create_fact(resource, f"Plant number {i} needs water", key=f"plant.{i}")
    await memory.retain_episode(resource, "garden", "How are the plants?", "Thirsty.")

    first = (await gui.get("/")).text
    assert first.count('<tr class="memory ') == 25
    # A compact table: no per-row boilerplate about access counts and versions.
    assert "Access count" not in first and "Version 1" not in first
    assert "Showing 1\u201325" in first
    assert "offset=25" in first
    second = (await gui.get("/", params={"offset": "25"})).text
    assert second.count('<tr class="memory ') == 3
    assert "Previous page" in second
    assert "Next page" not in second

    episodes = (await gui.get("/", params={"kind": "episode"})).text
    assert episodes.count('<tr class="memory episode"') == 1
    by_key = (await gui.get("/", params={"key": "PLANT.3"})).text
    assert by_key.count('<tr class="memory ') == 1
    assert "Plant number 3 needs" in by_key
    by_text = (await gui.get("/", params={"text": "number 1"})).text
    assert by_text.count('<tr class="memory ') == 11  # 1 and 10-19
    by_session = (await gui.get("/", params={"session_id": "garden"})).text
    assert by_session.count('<tr class="memory ') == 1

    today = datetime.now(UTC).date()
    dated = await gui.get("/", params={"from": today.isoformat(), "to": today.isoformat()})
    assert "Showing 1\u201325" in dated.text
    future = (today + timedelta(days=2)).isoformat()
    assert "No memories match" in (await gui.get("/", params={"from": future})).text

    bad = await gui.get("/", params={"from": "31/12/2026", "kind": "note"})
    assert bad.status_code == 422
    assert "date like" in field_error(bad.text, "from")
    assert "fact or episode" in field_error(bad.text, "kind")


async def test_cleanup_needs_a_confirmation_step(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.create_fact(resource, "A fact that stays")
    for i in range(3):
        await memory.retain_episode(resource, "s", f"question {i}", f"answer {i}")
    tomorrow = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()

    assert (await gui.get("/cleanup")).status_code == 200
    confirm = await gui.get("/cleanup/confirm", params={"kind": "episode", "older_than": tomorrow})
    assert confirm.status_code == 200, confirm.text[-1500:]
    assert re.search(r"This deletes\s+<strong>3</strong>\s+episodes", confirm.text)
    assert await count_rows(memory, resource) == 4  # reviewing deletes nothing

    unconfirmed = await post_form(gui, "/cleanup", {"kind": "episode", "older_than": tomorrow})
    assert unconfirmed.status_code == 422
    assert await count_rows(memory, resource) == 4

    done = await post_form(
        gui, "/cleanup", {"kind": "episode", "older_than": tomorrow, "confirm": "yes"}
    )
    assert done.status_code == 303
    assert done.headers["location"] == "/?notice=cleanup&n=3"
    assert "Cleanup done: 3 memories deleted." in (await gui.get(done.headers["location"])).text
    assert await count_rows(memory, resource) == 1

    bad = await gui.get("/cleanup/confirm", params={"older_than": "yesterday"})
    assert bad.status_code == 422
    assert field_error(bad.text, "older_than")


async def test_maintenance_runs_and_reports(gui: httpx.AsyncClient) -> None:
    response = await post_form(gui, "/maintenance", {})
    assert response.status_code == 303
    assert response.headers["location"].startswith("/?notice=maintenance&expired=")
    assert "Maintenance done:" in (await gui.get(response.headers["location"])).text


async def test_recall_preview_shows_components_and_block(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    # An empty store recalls nothing, and the page says what to do (with memories, the
    # nearest by meaning comes back even for an unrelated query: docs/embeddings.md).
    nothing = await post_form(gui, "/recall", {"query": "zebra xylophone quartet"})
    assert "Nothing was recalled for this query" in nothing.text
    assert 'href="/facts/new">add a fact</a>' in nothing.text

    await memory.create_fact(resource, "The user's cat is called Miso", key="pet.cat")
    await memory.create_fact(resource, "The user works as a baker")
    # Both recalls below must see the same vectors (written in the background).
    assert await memory.wait_for_vectors(resource) == 0
    response = await post_form(gui, "/recall", {"query": "what is my cat called", "limit": "5"})
    assert response.status_code == 200
    html = response.text
    expected = popagent.render(await memory.recall(resource, "what is my cat called", limit=5))
    assert f'data-testid="rendered">{escape(expected)}</pre>' in html
    assert "The user&#39;s cat is called Miso" in html
    for header in ("Component", "Value", "Weight", "Contribution"):
        assert f'<th scope="col">{header}</th>' in html
    assert '<th scope="row">' in html
    assert 'data-testid="empty"' not in html
    # A preview is not an access, and the page says so (not "counts as an access").
    assert "A preview is not an access" in html and "counts as an access" not in html

    empty = await post_form(gui, "/recall", {"query": "  ", "limit": "500"})
    assert empty.status_code == 422
    assert field_error(empty.text, "query")
    assert "1 to 100" in field_error(empty.text, "limit")


# --- settings ---------------------------------------------------------------------------------


def test_every_gui_route_is_documented() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "gui.md").read_text("utf-8")
    documented = set(re.findall(r"^\| (GET|POST) \| `([^`]+)` \|", docs, re.MULTILINE))
    routes = {
        (method, route.path)
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }
    assert routes == documented


def test_every_setting_is_in_exactly_one_group() -> None:
    shown = [s.name for g in group_settings() for s in g.settings]
    assert sorted(shown) == sorted(s.name for s in SETTINGS)
    assert len(shown) == len(set(shown))
    assert "Other" not in [g.title for g in group_settings()]


async def test_settings_page_documents_every_setting(gui: httpx.AsyncClient) -> None:
    html = (await gui.get("/settings")).text
    for s in SETTINGS:
        assert f'<label for="{s.name}">' in html
        assert str(escape(s.help)) in html
    legends = re.findall(r"<legend>([^<]+)</legend>", html)
    # The everyday groups first; the observational-memory knobs folded under Advanced.
    assert legends == [
        "Looking up earlier messages",
        "Retention",
        "Model instructions",
        "Observation",
        "Reflection",
        "Buffering",
    ]
    folded = html.split('<details class="advanced" data-testid="advanced">', 1)[1]
    assert "<legend>Observation</legend>" in folded and "<legend>Looking up" not in folded
    # The one everyday observational-memory knob says what it does in plain words, and
    # that it is not long-term recall (no group of the form is called "Recall").
    assert "<legend>Recall</legend>" not in html
    assert (
        '<p class="plain">Once a long chat has been condensed into notes, the model can ask '
        "for the exact messages a note was made from. off: it cannot;"
    ) in html
    assert "This is not long-term memory, which every turn recalls" in html
    # Plain labels, with the name the CLI and API use beside each.
    assert (
        '<label for="observation_threshold_tokens">Take notes once a conversation has grown by '
        '<span class="hint">(tokens)</span> '
        '<code class="name">observation_threshold_tokens</code></label>'
    ) in html
    # What the environment sets, read-only, first.
    assert "Chat model</dt><dd>none configured: set POPAGENT_MODEL" in html
    assert "episodes older than 90 days go, at most 5,000 per resource" in html
    assert 'data-testid="version">0<' in html


async def test_settings_errors_inline_and_nothing_written(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = MemorySettingsStore(memory.pool)
    bad = await post_form(
        gui,
        "/settings",
        {
            "observation_threshold_tokens": "lots",
            "temporal_markers": "true",
            "retained_context_percent": "half",
        },
    )
    assert bad.status_code == 422
    # Every invalid value at once, not the first one only.
    assert "whole number of tokens" in field_error(bad.text, "observation_threshold_tokens")
    assert "whole percent" in field_error(bad.text, "retained_context_percent")
    assert '<details class="advanced" data-testid="advanced" open>' in bad.text
    assert 'value="lots"' in bad.text  # what was typed stays to be fixed
    assert (await store.read(resource)).version == 0

    # Valid one by one but not together: the library's merged check names the setting.
    rule = await post_form(gui, "/settings", {"retained_context_tokens": "50000"})
    assert rule.status_code == 422
    assert "below observation_threshold_tokens" in field_error(rule.text, "retained_context_tokens")
    assert (await store.read(resource)).version == 0

    good = await post_form(
        gui,
        "/settings",
        {"observation_threshold_tokens": "20,000", "temporal_markers": "true"},
    )
    assert good.status_code == 303
    assert good.headers["location"] == "/settings?notice=settings-saved&version=1"
    stored = await store.read(resource)
    assert stored.version == 1
    assert stored.settings.observation_threshold_tokens == 20_000
    assert stored.settings.temporal_markers is True
    assert "Settings saved (version 1)" in (await gui.get(good.headers["location"])).text

    # The whole form sent back unchanged writes nothing.
    page = (await gui.get("/settings")).text
    form = {
        name: value
        for name, value in re.findall(
            r'<input type="text" id="(\w+)" name="\w+" value="([^"]*)"', page
        )
    }
    unchanged = await post_form(gui, "/settings", form)
    assert unchanged.headers["location"] == "/settings?notice=settings-unchanged"
    assert (await store.read(resource)).version == 1


# --- sessions ---------------------------------------------------------------------------------


async def test_session_history_observations_rename_delete(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    threads = ThreadStore(memory.pool)
    ids = []
    for i in range(60):
        role: Literal["user", "assistant"] = "user" if i % 2 == 0 else "assistant"
        message = await threads.append_message(
            resource, "chat&1", role, f"message <{i}>", create_session=True
        )
        ids.append(message.id)
    async with memory.pool.connection() as conn:
        await insert_observed(
            conn,
            resource,
            "chat&1",
            ids[0],
            ids[9],
            "* User counts messages",
            tokens=5,
            message_tokens=50,
        )
    await memory.remember(resource, "Survives the session")

    listing = (await gui.get("/sessions")).text
    assert 'href="/sessions/chat%261"' in listing
    # An untitled session is named by its first user message, not only its id.
    assert "“message &lt;0&gt;”</a>" in listing

    page = (await gui.get("/sessions/chat%261")).text
    assert page.count('<li class="message ') == 50
    assert f'id="msg-{ids[0]}"' in page
    assert "message &lt;0&gt;" in page
    assert f"?after_id={ids[49]}" in page
    assert "* User counts messages" in page
    assert f'href="/sessions/chat%261?after_id={ids[0] - 1}#msg-{ids[0]}"' in page
    rest = (await gui.get("/sessions/chat%261", params={"after_id": str(ids[49])})).text
    assert rest.count('<li class="message ') == 10

    too_long = await post_form(gui, "/sessions/chat%261/rename", {"title": "t" * 201})
    assert too_long.status_code == 422
    assert "at most 200" in field_error(too_long.text, "title")
    renamed = await post_form(gui, "/sessions/chat%261/rename", {"title": "Counting"})
    assert renamed.headers["location"] == "/sessions/chat%261?notice=session-renamed"
    assert (await threads.get_session(resource, "chat&1")).title == "Counting"
    assert ">Counting</a>" in (await gui.get("/sessions")).text

    confirm = await gui.get("/sessions/chat%261/delete")
    assert "Delete this session" in confirm.text
    deleted = await post_form(gui, "/sessions/chat%261/delete", {})
    assert deleted.headers["location"] == "/sessions?notice=session-deleted"
    assert (await gui.get("/sessions/chat%261")).status_code == 404
    assert await count_rows(memory, resource) == 1  # long-term memory stays


# --- chat -------------------------------------------------------------------------------------


async def test_chat_without_a_model_says_how_to_configure_one(gui: httpx.AsyncClient) -> None:
    new = await gui.get("/chat")
    assert new.status_code == 303
    assert re.fullmatch(r"/chat/web-[0-9a-f]{16}", new.headers["location"])
    page = await gui.get(new.headers["location"])
    assert 'data-testid="no-model"' in page.text
    assert "POPAGENT_MODEL" in page.text
    # Send is off, and the page says why, next to it.
    assert '<button type="submit" id="send" disabled aria-describedby="send-off">' in page.text
    assert 'id="send-off" data-testid="send-off">Sending is off: this server has no model' in (
        page.text
    )
    assert '<script src="/static/chat.js" defer></script>' in page.text
    assert 'aria-live="polite"' in page.text
    fallback = await post_form(gui, "/chat/s-1", {"message": "hello"})
    assert fallback.status_code == 503


async def test_chat_form_fallback_runs_a_turn(
    root: Popagent,
    memory: popagent.LongTermMemory,
    resource: str,
    scripted: ScriptedModelServer,
    chat_model: OpenAIChatModel,
) -> None:
    scripted.script(Reply("Hello from the model."))
    async with api_client(root, resource, chat_model) as client:
        response = await post_form(client, "/chat/s-1", {"message": "Hi there"})
        assert response.status_code == 303
        assert response.headers["location"] == "/chat/s-1"
        page = (await client.get("/chat/s-1")).text
    assert "Hello from the model." in page
    stored = await ThreadStore(memory.pool).list_messages(resource, "s-1")
    assert [(m.role, m.content) for m in stored] == [
        ("user", "Hi there"),
        ("assistant", "Hello from the model."),
    ]


async def test_chat_reply_says_what_remember_stored(
    root: Popagent,
    memory: popagent.LongTermMemory,
    resource: str,
    scripted: ScriptedModelServer,
    chat_model: OpenAIChatModel,
) -> None:
    scripted.script(
        CallTools([("remember", {"content": "The user prefers tea", "key": "drink"})]),
        Reply("Noted."),
    )
    async with api_client(root, resource, chat_model) as client:
        response = await client.post("/api/sessions/s-tea/chat", json={"message": "I like tea"})
    assert response.status_code == 200, response.text
    (fact,) = await memory.list(resource, MemoryFilter(kind="fact"))
    assert response.json()["tool_calls"] == [
        {
            "name": "remember",
            "outcome": "ok",
            "result": f"Stored: created fact #{fact.id} with key 'drink': The user prefers tea",
        }
    ]


# --- login ------------------------------------------------------------------------------------


@pytest.fixture
async def gated(root: Popagent, resource: str) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        ServerConfig(resource_id=resource, maintenance_interval_s=None, token=TOKEN),
        root=root,
        model_from_env=False,
    )
    async with in_process(app) as client:
        yield client


async def test_login_sets_a_login_cookie_and_returns(
    gated: httpx.AsyncClient, resource: str
) -> None:
    away = await gated.get("/settings")
    assert away.status_code == 303
    assert away.headers["location"] == "/login?next=/settings"
    login = await gated.get(away.headers["location"])
    assert login.status_code == 200
    assert resource not in login.text  # nothing about the server before the token
    assert 'name="next" value="/settings"' in login.text

    await csrf_token(gated, "/login")
    wrong = await post_form(gated, "/login", {"token": "not-the-token", "next": "/settings"})
    assert wrong.status_code == 401
    assert "not this server" in wrong.text
    assert LOGIN_COOKIE not in gated.cookies

    right = await post_form(gated, "/login", {"token": TOKEN, "next": "/settings"})
    assert right.status_code == 303
    assert right.headers["location"] == "/settings"
    cookie = right.headers["set-cookie"]
    assert cookie.startswith(f"{LOGIN_COOKIE}=")
    assert TOKEN not in cookie  # a random login id, never the token itself
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=43200"):
        assert attribute in cookie
    assert "Secure" not in cookie  # served over plain HTTP here
    assert (await gated.get("/settings")).status_code == 200

    out = await post_form(gated, "/logout", {})
    assert out.headers["location"] == "/login?notice=logged-out"
    assert (await gated.get("/settings")).status_code == 303


async def test_login_follows_only_local_paths(gated: httpx.AsyncClient) -> None:
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        await csrf_token(gated, "/login")
        response = await post_form(gated, "/login", {"token": TOKEN, "next": target})
        assert response.headers["location"] == "/"


def test_local_path() -> None:
    assert local_path("/sessions/a?b=1") == "/sessions/a?b=1"
    for target in (None, "", "x", "//h", "/\\h", "https://h/", "/a\nb"):
        assert local_path(target) == "/"


async def test_login_without_a_token_needs_nothing(gui: httpx.AsyncClient) -> None:
    assert "needs no token" in (await gui.get("/login")).text
    response = await post_form(gui, "/login", {"token": "", "next": "/recall"})
    assert response.headers["location"] == "/recall"
    assert LOGIN_COOKIE not in response.headers.get("set-cookie", "")
