"""The GUI's fact history, provenance, expiry and session revert, as HTML forms over
HTTP (the app in process, lifespan running) on the real database.

Covers: a fact's and an episode's provenance on their pages; the version and
the *expired* mark; the expiry field of the fact forms (inline errors, nothing
written); the history list with a Restore button per version and restoring
through it (also a deleted fact, from its history page); delete with and
without purging the history; a session's writes and reverting them after a
confirmation step. Every refusal (403, 404, 409, 422) writes nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

import popagent
from popagent.models import Provenance
from popagent.threads import ThreadStore
from tests.expiry_support import LATER, pass_expiry
from tests.gui_support import field_error, post_form
from tests.web_support import count_rows, memory_state


def memory_id(location: str) -> int:
    match = re.fullmatch(r"/memories/(\d+)\?notice=[a-z-]+(&version=\d+)?", location)
    assert match, location
    return int(match.group(1))


def form(
    content: str, *, key: str = "", importance: str = "0.5", expires_at: str = ""
) -> dict[str, str]:
    return {"content": content, "key": key, "importance": importance, "expires_at": expires_at}


async def create(gui: httpx.AsyncClient, content: str, **fields: str) -> int:
    response = await post_form(gui, "/facts", form(content, **fields))
    assert response.status_code == 303, response.text
    return memory_id(response.headers["location"])


def restore_buttons(html: str, fact_id: int) -> list[int]:
    """The versions the page offers to restore, in page order (one form each)."""
    forms = re.findall(
        rf'<form method="post" action="/facts/{fact_id}/restore" class="inline">(.*?)</form>',
        html,
        re.S,
    )
    versions = []
    for body in forms:
        match = re.search(r'name="version" value="(\d+)"', body)
        assert match and f"Restore version {match.group(1)}</button>" in body
        versions.append(int(match.group(1)))
    return versions


# --- provenance, version, expiry --------------------------------------------------------------


async def test_fact_and_episode_pages_show_provenance(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    provenance = Provenance(origin="agent", turn_id=4, message_ids=(11, 12), tool_call_id="call_7")
    fact = (
        await memory.remember(resource, "Keeps bees", session_id="s-1", provenance=provenance)
    ).memory
    html = (await gui.get(f"/memories/{fact.id}")).text
    assert '<dd data-testid="origin">agent</dd>' in html
    assert "<dt>Turn</dt><dd>4</dd>" in html
    assert '<a href="/sessions/s-1?after_id=10#msg-11">#11</a>' in html
    assert '<a href="/sessions/s-1?after_id=11#msg-12">#12</a>' in html
    assert "<code>call_7</code>" in html
    assert '<dd data-testid="version">1</dd>' in html
    assert 'data-testid="expired"' not in html
    assert "No earlier versions" in html
    episode = await memory.retain_episode(
        resource, "s-1", "How are the bees?", "Fine.", provenance=Provenance(origin="turn")
    )
    assert episode is not None
    html = (await gui.get(f"/memories/{episode.id}")).text
    assert '<dd data-testid="origin">turn</dd>' in html
    assert 'data-testid="version"' not in html  # episodes have no versions


async def test_gui_writes_record_origin_gui_and_take_an_expiry(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fid = await create(gui, "Is in Lisbon", expires_at="2999-01-01T10:30")
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.origin, fact.expires_at) == ("gui", datetime(2999, 1, 1, 10, 30, tzinfo=UTC))
    html = (await gui.get(f"/memories/{fid}")).text
    assert '<time datetime="2999-01-01T10:30:00+00:00">' in html
    # The edit form shows the expiry as stored (UTC, to the second).
    assert 'value="2999-01-01T10:30:00"' in (await gui.get(f"/facts/{fid}/edit")).text
    moved = await post_form(
        gui, f"/facts/{fid}", form("Is in Porto", expires_at="2999-02-01T08:00")
    )
    assert moved.status_code == 303
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.origin, fact.version) == ("Is in Porto", "gui", 2)
    assert fact.expires_at == datetime(2999, 2, 1, 8, tzinfo=UTC)
    cleared = await post_form(gui, f"/facts/{fid}", form("Is in Porto"))
    assert cleared.status_code == 303
    assert (await memory.get(resource, fid, kind="fact")).expires_at is None


async def test_an_expiry_left_as_shown_stays_as_stored(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    when = datetime.now(UTC) + timedelta(days=2, microseconds=123_456)
    fact = await memory.create_fact(resource, "Visiting Kyoto", expires_at=when)
    shown = (await gui.get(f"/facts/{fact.id}/edit")).text
    value = re.search(r'id="expires_at" name="expires_at" value="([^"]+)"', shown)
    assert value and value.group(1) == when.strftime("%Y-%m-%dT%H:%M:%S")
    before = await memory_state(memory, resource)
    # Submitting the form unchanged is no change at all: no version, same expiry.
    same = await post_form(
        gui, f"/facts/{fact.id}", form("Visiting Kyoto", expires_at=value.group(1))
    )
    assert same.status_code == 303
    assert await memory_state(memory, resource) == before
    assert (await memory.get(resource, fact.id, kind="fact")).expires_at == when


async def test_expired_fact_is_marked(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await memory.create_fact(
        resource, "Parked on level three", expires_at=datetime.now(UTC) + LATER
    )
    async with memory.pool.connection() as conn:
        passed = await pass_expiry(conn, resource, fact.id)
    html = (await gui.get(f"/memories/{fact.id}")).text
    assert '<strong class="expired" data-testid="expired">expired</strong>' in html
    assert "This fact expired" in html
    listed = (await gui.get("/")).text
    assert 'data-testid="expired"' in listed
    # Editing it without touching the (past) expiry is allowed: it stays as stored.
    edited = await post_form(
        gui,
        f"/facts/{fact.id}",
        form("Parked on level four", expires_at=passed.strftime("%Y-%m-%dT%H:%M:%S")),
    )
    assert edited.status_code == 303, edited.text
    assert (await memory.get(resource, fact.id, kind="fact")).expires_at == passed


@pytest.mark.parametrize(
    ("expires_at", "message"),
    [
        ("2020-01-01T00:00", "in the future"),
        ("next tuesday", "a date and time"),
        ("2999-13-01T00:00", "a date and time"),
    ],
)
async def test_bad_expiry_is_inline_and_nothing_is_written(
    gui: httpx.AsyncClient,
    memory: popagent.LongTermMemory,
    resource: str,
    expires_at: str,
    message: str,
) -> None:
    response = await post_form(gui, "/facts", form("ok", expires_at=expires_at))
    assert response.status_code == 422
    assert message in field_error(response.text, "expires_at")
    assert await count_rows(memory, resource) == 0
    fid = await create(gui, "Stays")
    before = await memory_state(memory, resource)
    response = await post_form(gui, f"/facts/{fid}", form("Changed", expires_at=expires_at))
    assert response.status_code == 422
    assert message in field_error(response.text, "expires_at")
    assert await memory_state(memory, resource) == before


# --- history and restore ----------------------------------------------------------------------


async def test_history_lists_versions_and_restores_one(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fid = await create(gui, "Drives a blue car", key="car")
    await post_form(gui, f"/facts/{fid}", form("Drives a red car", key="car"))
    await post_form(gui, f"/facts/{fid}", form("Drives a green car", key="car"))
    html = (await gui.get(f"/memories/{fid}")).text
    assert restore_buttons(html, fid) == [2, 1]  # newest first
    assert "Drives a blue car" in html and "Drives a red car" in html
    assert html.count('<span data-testid="ended">updated</span> by gui') == 2
    restored = await post_form(gui, f"/facts/{fid}/restore", {"version": "1"})
    assert restored.status_code == 303
    assert restored.headers["location"] == f"/memories/{fid}?notice=fact-restored&version=1"
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.content, fact.version, fact.origin) == ("Drives a blue car", 4, "gui")
    shown = (await gui.get(restored.headers["location"])).text
    assert "Version 1 restored." in shown
    assert restore_buttons(shown, fid) == [3, 2, 1]


@pytest.mark.parametrize("version", ["", "abc", "0", "-1", "1.0", "99999999999"])
async def test_restore_needs_a_version_number(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, version: str
) -> None:
    fid = await create(gui, "First")
    await post_form(gui, f"/facts/{fid}", form("Second"))
    before = await memory_state(memory, resource)
    response = await post_form(gui, f"/facts/{fid}/restore", {"version": version})
    assert response.status_code == 422
    assert "version" in response.text
    assert await memory_state(memory, resource) == before


async def test_restore_refusals_write_nothing(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fid = await create(gui, "Likes jazz", key="music")
    await post_form(gui, f"/facts/{fid}", form("Likes jazz", key="music.old"))
    await create(gui, "Likes techno", key="music")
    before = await memory_state(memory, resource)
    conflict = await post_form(gui, f"/facts/{fid}/restore", {"version": "1"})
    assert conflict.status_code == 409
    assert "Conflict" in conflict.text
    unknown = await post_form(gui, f"/facts/{fid}/restore", {"version": "42"})
    assert unknown.status_code == 404
    no_csrf = await post_form(gui, f"/facts/{fid}/restore", {"version": "1"}, csrf=False)
    assert no_csrf.status_code == 403
    extra = await post_form(gui, f"/facts/{fid}/restore", {"version": "1", "resource_id": "x"})
    assert extra.status_code == 422
    assert await memory_state(memory, resource) == before


async def test_delete_keeps_history_and_restores_from_the_history_page(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fid = await create(gui, "Works at the harbour", key="job")
    confirm = (await gui.get(f"/facts/{fid}/delete")).text
    assert 'name="purge" value="yes"' in confirm
    assert f'href="/facts/{fid}/history"' in confirm
    deleted = await post_form(gui, f"/facts/{fid}/delete", {})
    assert deleted.headers["location"] == "/?notice=fact-deleted"
    assert (await gui.get(f"/memories/{fid}")).status_code == 404
    history = await gui.get(f"/facts/{fid}/history")
    assert history.status_code == 200
    assert 'data-testid="gone"' in history.text
    assert '<span data-testid="ended">deleted</span> by gui' in history.text
    assert restore_buttons(history.text, fid) == [1]
    back = await post_form(gui, f"/facts/{fid}/restore", {"version": "1"})
    assert back.headers["location"] == f"/memories/{fid}?notice=fact-restored&version=1"
    assert (await memory.get(resource, fid, kind="fact")).key == "job"
    current = (await gui.get(f"/facts/{fid}/history")).text
    assert 'data-testid="gone"' not in current and "Works at the harbour" in current


async def test_delete_with_purge_leaves_no_history(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fid = await create(gui, "Old address")
    await post_form(gui, f"/facts/{fid}", form("New address"))
    refused = await post_form(gui, f"/facts/{fid}/delete", {"purge": "maybe"})
    assert refused.status_code == 422
    assert await count_rows(memory, resource) == 1
    purged = await post_form(gui, f"/facts/{fid}/delete", {"purge": "yes"})
    assert purged.headers["location"] == "/?notice=fact-purged"
    assert "Fact and its history deleted." in (await gui.get(purged.headers["location"])).text
    assert await memory_state(memory, resource) == ((), ())
    assert (await gui.get(f"/facts/{fid}/history")).status_code == 404


# --- session writes and revert ----------------------------------------------------------------


async def test_session_writes_and_revert_with_confirmation(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await ThreadStore(memory.pool).append_message(
        resource, "s-1", "user", "I moved to Lisbon", create_session=True
    )
    home = await create(gui, "Lives in Porto", key="home")
    agent = Provenance(origin="agent")
    await memory.remember(
        resource, "Lives in Lisbon", key="home", session_id="s-1", provenance=agent
    )
    new = (
        await memory.remember(resource, "Learns Finnish", session_id="s-1", provenance=agent)
    ).memory
    html = (await gui.get("/sessions/s-1")).text
    assert "Writes of this session" in html
    assert f'<a href="/memories/{home}">Lives in Lisbon</a>' in html
    assert f'<a href="/memories/{new.id}">Learns Finnish</a>' in html
    assert f'href="/facts/{home}/history#version-1">history</a>' in html
    assert 'href="/sessions/s-1/revert"' in html

    before = await memory_state(memory, resource)
    confirm = await gui.get("/sessions/s-1/revert")
    assert confirm.status_code == 200
    assert 'name="confirm" value="yes"' in confirm.text
    assert "Learns Finnish" in confirm.text
    unconfirmed = await post_form(gui, "/sessions/s-1/revert", {})
    assert unconfirmed.status_code == 422
    no_csrf = await post_form(gui, "/sessions/s-1/revert", {"confirm": "yes"}, csrf=False)
    assert no_csrf.status_code == 403
    unknown = await post_form(gui, "/sessions/nobody/revert", {"confirm": "yes"})
    assert unknown.status_code == 404
    assert await memory_state(memory, resource) == before  # nothing so far has written

    reverted = await post_form(gui, "/sessions/s-1/revert", {"confirm": "yes"})
    assert reverted.status_code == 303
    location = reverted.headers["location"]
    assert location == "/sessions/s-1?notice=session-reverted&restored=1&deleted=1&skipped=0"
    shown = (await gui.get(location)).text
    assert "1 fact restored, 1 memory deleted, 0 writes skipped" in shown
    fact = await memory.get(resource, home, kind="fact")
    assert (fact.content, fact.origin) == ("Lives in Porto", "gui")
    assert [m.id for m in await memory.list(resource)] == [home]
    assert "Memories it wrote that stand (0)" in shown
    assert 'href="/sessions/s-1/revert"' not in shown  # nothing of it left to undo
