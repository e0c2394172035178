"""Fact versions, provenance, expiry and session revert through the HTTP API, in
process (httpx over ASGI, lifespan running) on the real database.

Covers every route issue 14 adds (``/api/facts/{id}/versions``,
``/api/facts/{id}/restore``, ``DELETE /api/facts/{id}?purge=true``,
``/api/sessions/{id}/writes``, ``/api/sessions/{id}/revert``), the new fields
of every memory body, ``expires_at`` on create and update, and the maintenance
report's ``expired_facts``: each refusal (404, 409, 422 naming the field)
leaves the database exactly as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import popagent
from popagent import Popagent
from popagent.models import Provenance
from tests.expiry_support import pass_expiry
from tests.web_support import api_client, count_rows, memory_state


@pytest.fixture
async def api(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(root, resource) as client:
        yield client


def later(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


async def version_rows(memory: popagent.LongTermMemory, resource_id: str, fact_id: int) -> int:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM popagent_fact_versions"
            " WHERE resource_id = %s AND fact_id = %s",
            (resource_id, fact_id),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def create(api: httpx.AsyncClient, **body: object) -> dict[str, Any]:
    response = await api.post("/api/facts", json=body)
    assert response.status_code == 201, response.text
    fact: dict[str, Any] = response.json()
    return fact


# --- provenance and the new fields ------------------------------------------------------------


async def test_api_writes_record_origin_api(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Prefers tea", key="drink")
    assert (fact["origin"], fact["version"], fact["expires_at"]) == ("api", 1, None)
    assert (fact["turn_id"], fact["message_ids"], fact["tool_call_id"]) == (None, [], None)
    assert (await memory.get(resource, fact["id"], kind="fact")).origin == "api"
    changed = (
        await api.patch(f"/api/facts/{fact['id']}", json={"content": "Prefers coffee"})
    ).json()
    assert (changed["origin"], changed["version"]) == ("api", 2)
    await api.delete(f"/api/facts/{fact['id']}")
    history = (await api.get(f"/api/facts/{fact['id']}/versions")).json()
    assert [(v["version"], v["ended"], v["ended_origin"]) for v in history["versions"]] == [
        (2, "deleted", "api"),
        (1, "updated", "api"),
    ]


async def test_library_provenance_shows_in_reads_and_recall(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    provenance = Provenance(origin="agent", turn_id=7, message_ids=(11, 12), tool_call_id="call_1")
    fact = (
        await memory.remember(
            resource, "Keeps bees on the roof", session_id="s1", provenance=provenance
        )
    ).memory
    episode = await memory.retain_episode(
        resource, "s1", "How are the bees?", "Thriving.", provenance=Provenance(origin="turn")
    )
    assert episode is not None
    body = (await api.get(f"/api/facts/{fact.id}")).json()
    assert (body["origin"], body["session_id"], body["turn_id"]) == ("agent", "s1", 7)
    assert (body["message_ids"], body["tool_call_id"]) == ([11, 12], "call_1")
    assert (await api.get(f"/api/episodes/{episode.id}")).json()["origin"] == "turn"
    recall = (await api.post("/api/recall", json={"query": "bees roof"})).json()
    by_id = {r["memory"]["id"]: r["memory"] for r in recall["results"]}
    assert by_id[fact.id]["message_ids"] == [11, 12]
    assert by_id[episode.id]["origin"] == "turn"
    listed = (await api.get("/api/memories")).json()["items"]
    assert {m["origin"] for m in listed} == {"agent", "turn"}


# --- expiry -----------------------------------------------------------------------------------


async def test_expires_at_on_create_and_update(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    when = datetime.now(UTC) + timedelta(days=3)
    fact = await create(api, content="Is in Lisbon this week", expires_at=when.isoformat())
    assert datetime.fromisoformat(fact["expires_at"]) == when
    moved = when + timedelta(days=1)
    changed = await api.patch(f"/api/facts/{fact['id']}", json={"expires_at": moved.isoformat()})
    assert changed.status_code == 200, changed.text
    assert datetime.fromisoformat(changed.json()["expires_at"]) == moved
    assert changed.json()["version"] == 2
    cleared = (await api.patch(f"/api/facts/{fact['id']}", json={"expires_at": None})).json()
    assert (cleared["expires_at"], cleared["version"]) == (None, 3)
    assert (await memory.get(resource, fact["id"], kind="fact")).expires_at is None
    versions = (await api.get(f"/api/facts/{fact['id']}/versions")).json()["versions"]
    assert [datetime.fromisoformat(v["expires_at"]) for v in versions] == [moved, when]


@pytest.mark.parametrize(
    "expires_at",
    ["2020-01-01T00:00:00+00:00", "2999-01-01T00:00:00", "tomorrow", 1_900_000_000, True, ""],
)
async def test_bad_expires_at_is_refused_naming_the_field(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, expires_at: object
) -> None:
    response = await api.post("/api/facts", json={"content": "x", "expires_at": expires_at})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "expires_at"
    assert await count_rows(memory, resource) == 0
    fact = await create(api, content="Stays as it is")
    before = await memory_state(memory, resource)
    response = await api.patch(
        f"/api/facts/{fact['id']}", json={"content": "changed", "expires_at": expires_at}
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "expires_at"
    assert await memory_state(memory, resource) == before


async def test_expired_fact_is_not_recalled_but_readable_until_maintenance(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Parked on level three", expires_at=later(hours=1))
    await create(api, content="Parked the bike by the river")
    recalled = (await api.post("/api/recall", json={"query": "parked"})).json()["results"]
    assert fact["id"] in {r["memory"]["id"] for r in recalled}
    async with memory.pool.connection() as conn:
        passed = await pass_expiry(conn, resource, fact["id"])
    recalled = (await api.post("/api/recall", json={"query": "parked"})).json()
    assert [r["memory"]["content"] for r in recalled["results"]] == ["Parked the bike by the river"]
    assert "level three" not in recalled["rendered"]
    read = await api.get(f"/api/facts/{fact['id']}")
    assert read.status_code == 200
    assert datetime.fromisoformat(read.json()["expires_at"]) == passed
    report = (await api.post("/api/maintenance")).json()
    assert report == {"expired_episodes": 0, "capped_episodes": 0, "expired_facts": 1}
    assert (await api.get(f"/api/facts/{fact['id']}")).status_code == 404
    history = (await api.get(f"/api/facts/{fact['id']}/versions")).json()
    assert history["current"] is None
    assert [(v["ended"], v["ended_origin"]) for v in history["versions"]] == [
        ("expired", "maintenance")
    ]
    # Restoring an expired value brings it back without its past expiry.
    restored = await api.post(f"/api/facts/{fact['id']}/restore", json={"version": 1})
    assert restored.status_code == 200, restored.text
    assert (restored.json()["content"], restored.json()["expires_at"]) == (
        "Parked on level three",
        None,
    )


# --- versions and restore ---------------------------------------------------------------------


async def test_versions_newest_first_with_the_current_value(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Lives in Porto", key="home")
    fid = fact["id"]
    assert (await api.get(f"/api/facts/{fid}/versions")).json() == {
        "fact_id": fid,
        "current": fact,
        "versions": [],
    }
    await api.patch(f"/api/facts/{fid}", json={"content": "Lives in Braga"})
    await api.patch(f"/api/facts/{fid}", json={"content": "Lives in Faro", "importance": 0.9})
    # No real change writes nothing: no version, same version number.
    same = (await api.patch(f"/api/facts/{fid}", json={"content": "Lives in Faro"})).json()
    assert same["version"] == 3
    history = (await api.get(f"/api/facts/{fid}/versions")).json()
    assert (history["current"]["content"], history["current"]["version"]) == ("Lives in Faro", 3)
    versions = history["versions"]
    assert [(v["version"], v["content"]) for v in versions] == [
        (2, "Lives in Braga"),
        (1, "Lives in Porto"),
    ]
    assert all(v["ended"] == "updated" and v["origin"] == "api" for v in versions)
    assert all(v["fact_id"] == fid and v["resource_id"] == resource for v in versions)
    # Each value was current from valid_from until valid_to, one after another.
    first, second = versions[1], versions[0]
    assert datetime.fromisoformat(first["valid_from"]) == datetime.fromisoformat(fact["updated_at"])
    assert datetime.fromisoformat(first["valid_to"]) == datetime.fromisoformat(second["valid_from"])
    assert datetime.fromisoformat(second["valid_to"]) == datetime.fromisoformat(
        history["current"]["updated_at"]
    )
    # Listing shows current values only.
    listed = (await api.get("/api/facts")).json()["items"]
    assert [m["content"] for m in listed] == ["Lives in Faro"]


async def test_restore_an_old_version(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Drives a blue car", key="car", importance=0.4)
    fid = fact["id"]
    await api.patch(f"/api/facts/{fid}", json={"content": "Drives a red car", "importance": 0.7})
    restored = await api.post(f"/api/facts/{fid}/restore", json={"version": 1})
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert (body["id"], body["content"], body["key"], body["importance"]) == (
        fid,
        "Drives a blue car",
        "car",
        0.4,
    )
    assert (body["version"], body["origin"]) == (3, "api")
    versions = (await api.get(f"/api/facts/{fid}/versions")).json()["versions"]
    assert [(v["version"], v["content"]) for v in versions] == [
        (2, "Drives a red car"),
        (1, "Drives a blue car"),
    ]
    recalled = (await api.post("/api/recall", json={"query": "car"})).json()["results"]
    assert [r["memory"]["content"] for r in recalled] == ["Drives a blue car"]


async def test_deleted_fact_keeps_history_and_comes_back_under_its_id(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Works at the harbour", key="job")
    fid = fact["id"]
    assert (await api.delete(f"/api/facts/{fid}")).status_code == 204
    assert (await api.get(f"/api/facts/{fid}")).status_code == 404
    history = (await api.get(f"/api/facts/{fid}/versions")).json()
    assert history["current"] is None
    assert [(v["version"], v["ended"]) for v in history["versions"]] == [(1, "deleted")]
    back = await api.post(f"/api/facts/{fid}/restore", json={"version": 1})
    assert back.status_code == 200, back.text
    assert (back.json()["id"], back.json()["key"], back.json()["content"]) == (
        fid,
        "job",
        "Works at the harbour",
    )
    assert (await api.get(f"/api/facts/{fid}")).json()["content"] == "Works at the harbour"


async def test_purge_leaves_no_version(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Old address", key="address")
    fid = fact["id"]
    await api.patch(f"/api/facts/{fid}", json={"content": "New address"})
    assert await version_rows(memory, resource, fid) == 1
    assert (await api.delete(f"/api/facts/{fid}", params={"purge": "true"})).status_code == 204
    assert await version_rows(memory, resource, fid) == 0
    assert await count_rows(memory, resource) == 0
    for response in (
        await api.get(f"/api/facts/{fid}"),
        await api.get(f"/api/facts/{fid}/versions"),
        await api.post(f"/api/facts/{fid}/restore", json={"version": 1}),
    ):
        assert response.status_code == 404, response.text


async def test_purge_false_keeps_history(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Kept")
    assert (
        await api.delete(f"/api/facts/{fact['id']}", params={"purge": "false"})
    ).status_code == 204
    assert await version_rows(memory, resource, fact["id"]) == 1


@pytest.mark.parametrize("purge", ["1", "yes", "True", "on", ""])
async def test_purge_must_be_a_strict_boolean(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, purge: str
) -> None:
    fact = await create(api, content="Not to be deleted by a loose flag")
    before = await memory_state(memory, resource)
    response = await api.delete(f"/api/facts/{fact['id']}", params={"purge": purge})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "purge"
    assert await memory_state(memory, resource) == before


async def test_restore_unknown_fact_or_version_is_404(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="One value only")
    await api.patch(f"/api/facts/{fact['id']}", json={"content": "Second value"})
    before = await memory_state(memory, resource)
    for path, version in (
        (f"/api/facts/{fact['id']}/restore", 2),  # the current one is not a kept version
        (f"/api/facts/{fact['id']}/restore", 99),
        ("/api/facts/987654321/restore", 1),
    ):
        response = await api.post(path, json={"version": version})
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"
    assert (await api.get("/api/facts/987654321/versions")).status_code == 404
    assert await memory_state(memory, resource) == before


async def test_episode_has_no_fact_history(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    episode = await memory.retain_episode(resource, "s", "hi", "hello")
    assert episode is not None
    assert (await api.get(f"/api/facts/{episode.id}/versions")).status_code == 404
    assert (
        await api.post(f"/api/facts/{episode.id}/restore", json={"version": 1})
    ).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "version"),
        ({"version": "1"}, "version"),
        ({"version": 1.0}, "version"),
        ({"version": True}, "version"),
        ({"version": 0}, "version"),
        ({"version": 2**31}, "version"),
        ({"version": None}, "version"),
        ({"version": 1, "resource_id": "other"}, "resource_id"),
    ],
)
async def test_restore_body_is_strict(
    api: httpx.AsyncClient,
    memory: popagent.LongTermMemory,
    resource: str,
    body: dict[str, object],
    field: str,
) -> None:
    fact = await create(api, content="First")
    await api.patch(f"/api/facts/{fact['id']}", json={"content": "Second"})
    before = await memory_state(memory, resource)
    response = await api.post(f"/api/facts/{fact['id']}/restore", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert await memory_state(memory, resource) == before


async def test_restore_conflict_is_409_and_writes_nothing(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Likes jazz", key="music")
    await api.patch(f"/api/facts/{fact['id']}", json={"key": "music.old"})
    await create(api, content="Likes techno", key="music")
    before = await memory_state(memory, resource)
    response = await api.post(f"/api/facts/{fact['id']}/restore", json={"version": 1})
    assert response.status_code == 409, response.text
    assert response.json()["error"] == "conflict"
    assert await memory_state(memory, resource) == before


# --- sessions: writes and revert --------------------------------------------------------------


async def test_session_writes_and_revert(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    agent = Provenance(origin="agent", turn_id=3, message_ids=(5,), tool_call_id="call_9")
    kept = await create(api, content="Lives in Porto", key="home")
    doomed = await create(api, content="Has a dog named Rex")
    await memory.remember(
        resource, "Lives in Lisbon", key="home", session_id="s1", provenance=agent
    )
    new = (
        await memory.remember(resource, "Learns Finnish", session_id="s1", provenance=agent)
    ).memory
    await memory.delete(resource, doomed["id"], kind="fact", origin="agent", session_id="s1")
    episode = await memory.retain_episode(
        resource, "s1", "I moved", "Noted", provenance=Provenance(origin="turn")
    )
    assert episode is not None
    await memory.remember(resource, "Unrelated, from another session", session_id="s2")

    writes = await api.get("/api/sessions/s1/writes")
    assert writes.status_code == 200, writes.text
    body = writes.json()
    assert body["session_id"] == "s1"
    assert {m["id"] for m in body["memories"]} == {kept["id"], new.id, episode.id}
    assert all(m["session_id"] == "s1" for m in body["memories"])
    assert {(v["fact_id"], v["ended"]) for v in body["ended"]} == {
        (kept["id"], "updated"),
        (doomed["id"], "deleted"),
    }
    assert all(v["ended_session_id"] == "s1" for v in body["ended"])
    # A session with no writes (or no row at all) lists nothing.
    assert (await api.get("/api/sessions/nobody/writes")).json() == {
        "session_id": "nobody",
        "memories": [],
        "ended": [],
    }

    reverted = await api.post("/api/sessions/s1/revert", json={"confirm": True})
    assert reverted.status_code == 200, reverted.text
    report = reverted.json()
    assert sorted(report["restored"]) == sorted([kept["id"], doomed["id"]])
    assert sorted(report["deleted"]) == sorted([new.id, episode.id])
    assert report["skipped"] == []
    home = (await api.get(f"/api/facts/{kept['id']}")).json()
    assert (home["content"], home["origin"]) == ("Lives in Porto", "api")
    assert (await api.get(f"/api/facts/{doomed['id']}")).json()["content"] == "Has a dog named Rex"
    assert (await api.get(f"/api/facts/{new.id}")).status_code == 404
    assert (await api.get(f"/api/episodes/{episode.id}")).status_code == 404
    remaining = [m["content"] for m in (await api.get("/api/memories")).json()["items"]]
    assert sorted(remaining) == sorted(
        ["Lives in Porto", "Has a dog named Rex", "Unrelated, from another session"]
    )
    # What was undone stays in history: the session's value of "home" among them.
    versions = (await api.get(f"/api/facts/{kept['id']}/versions")).json()["versions"]
    assert versions[0]["content"] == "Lives in Lisbon"
    assert versions[0]["ended_origin"] == "api"
    # Nothing of s1 stands any more.
    assert (await api.get("/api/sessions/s1/writes")).json()["memories"] == []


async def test_revert_skips_a_fact_whose_old_key_is_taken(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = await create(api, content="Plays chess", key="game")
    await memory.update_fact(resource, fact["id"], key="game.old", session_id="s1")
    await create(api, content="Plays go", key="game")
    report = (await api.post("/api/sessions/s1/revert", json={"confirm": True})).json()
    assert report == {"restored": [], "deleted": [], "skipped": [fact["id"]]}
    assert (await api.get(f"/api/facts/{fact['id']}")).json()["key"] == "game.old"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "confirm"),
        ({"confirm": False}, "confirm"),
        ({"confirm": 1}, "confirm"),
        ({"confirm": "true"}, "confirm"),
        ({"confirm": True, "resource_id": "other"}, "resource_id"),
    ],
)
async def test_revert_needs_strict_confirmation(
    api: httpx.AsyncClient,
    memory: popagent.LongTermMemory,
    resource: str,
    body: dict[str, object],
    field: str,
) -> None:
    await memory.remember(resource, "Written by s1", session_id="s1")
    before = await memory_state(memory, resource)
    response = await api.post("/api/sessions/s1/revert", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    assert await memory_state(memory, resource) == before


async def test_history_routes_never_reach_another_resource(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    theirs = await memory.create_fact(other_resource, "Their first value", key="k")
    await memory.update_fact(other_resource, theirs.id, content="Their second value")
    await memory.remember(other_resource, "Their session's fact", session_id="s1")
    before = await memory_state(memory, other_resource)
    assert (await api.get(f"/api/facts/{theirs.id}/versions")).status_code == 404
    restore = await api.post(f"/api/facts/{theirs.id}/restore", json={"version": 1})
    assert restore.status_code == 404
    purge = await api.delete(f"/api/facts/{theirs.id}", params={"purge": "true"})
    assert purge.status_code == 404
    assert (await api.get("/api/sessions/s1/writes")).json()["memories"] == []
    report = (await api.post("/api/sessions/s1/revert", json={"confirm": True})).json()
    assert report == {"restored": [], "deleted": [], "skipped": []}
    assert await memory_state(memory, other_resource) == before
    assert await count_rows(memory, resource) == 0
