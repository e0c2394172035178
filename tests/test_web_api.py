"""The server's JSON API in process (httpx over ASGI, lifespan running) on the real database.

Covers: fact create/read/update/delete with strict bodies, episodes read and
delete only, lists and filters with paging, recall preview, cleanup and
maintenance, sessions with their history and observations, settings with the
library's validation, refusal of a client-named resource, error bodies, and
isolation: nothing a request does touches another resource.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import TypeAdapter

import popagent
from popagent import Popagent
from popagent.memory.render import render
from popagent.models import MemoryFilter, Provenance, RecallPreview
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from popagent.web.api.recall import recall_json
from popagent.web.openapi_text import markdown_text, marked
from tests.observe_support import insert_observed
from tests.web_support import api_client, count_rows


@pytest.fixture
async def api(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(root, resource) as client:
        yield client


# --- facts ------------------------------------------------------------------------------------


async def test_fact_lifecycle(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    created = await api.post(
        "/api/facts", json={"content": "Prefers dark mode", "key": "ui.theme", "importance": 0.8}
    )
    assert created.status_code == 201, created.text
    fact = created.json()
    assert (fact["kind"], fact["key"], fact["importance"], fact["resource_id"]) == (
        "fact",
        "ui.theme",
        0.8,
        resource,
    )
    assert (await memory.get(resource, fact["id"], kind="fact")).content == "Prefers dark mode"

    read = await api.get(f"/api/facts/{fact['id']}")
    assert read.json()["content"] == "Prefers dark mode"

    changed = await api.patch(f"/api/facts/{fact['id']}", json={"content": "Prefers light mode"})
    assert changed.status_code == 200
    assert (changed.json()["content"], changed.json()["key"]) == ("Prefers light mode", "ui.theme")

    cleared = await api.patch(f"/api/facts/{fact['id']}", json={"key": None, "importance": 0.2})
    assert (cleared.json()["key"], cleared.json()["importance"]) == (None, 0.2)

    assert (await api.delete(f"/api/facts/{fact['id']}")).status_code == 204
    gone = await api.get(f"/api/facts/{fact['id']}")
    assert gone.status_code == 404
    assert gone.json()["error"] == "not_found"


async def test_duplicate_key_is_a_conflict(api: httpx.AsyncClient) -> None:
    assert (await api.post("/api/facts", json={"content": "a", "key": "k"})).status_code == 201
    second = await api.post("/api/facts", json={"content": "b", "key": "k"})
    assert second.status_code == 409
    assert second.json()["error"] == "conflict"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "x" * 2001}, "content"),
        ({"content": "ok", "key": ""}, "key"),
        ({"content": "ok", "key": "k" * 129}, "key"),
        ({"content": "ok", "importance": 1.5}, "importance"),
        ({"content": "ok", "importance": -0.1}, "importance"),
        ({"content": "ok", "importance": "0.5"}, "importance"),
        ({"content": "ok", "importance": True}, "importance"),
        ({"content": 42}, "content"),
        ({"content": "ok", "colour": "red"}, "colour"),
        ({"content": "ok", "resource_id": "someone-else"}, "resource_id"),
        ({"content": "   "}, "content"),
        ({"content": "my password is hunter2hunter2"}, "content"),
    ],
)
async def test_strict_fact_bodies(
    api: httpx.AsyncClient,
    memory: popagent.LongTermMemory,
    resource: str,
    body: dict[str, object],
    field: str,
) -> None:
    response = await api.post("/api/facts", json=body)
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["error"] == "validation_error"
    assert error["field"] == field
    assert field in error["message"]
    assert await count_rows(memory, resource) == 0


@pytest.mark.parametrize(
    "raw",
    [
        b'{"content": "x", "importance": NaN}',
        b'{"content": "x", "importance": Infinity}',
        b'{"content": "x", "importance": -Infinity}',
        b'{"content": "x", "importance": 1e999}',
    ],
)
async def test_non_finite_numbers_are_refused(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, raw: bytes
) -> None:
    response = await api.post(
        "/api/facts", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "importance"
    assert await count_rows(memory, resource) == 0


async def test_bad_json_and_oversized_bodies(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    bad = await api.post(
        "/api/facts", content=b'{"content": ', headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400
    assert bad.json()["error"] == "invalid_json"
    huge = await api.post("/api/facts", json={"content": "x" * 300_000})
    assert huge.status_code == 413
    assert "limit" in huge.json()["message"]
    assert await count_rows(memory, resource) == 0


async def test_a_body_that_is_not_a_json_object_says_to_send_json(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    form = await api.post("/api/facts", data={"content": "Prefers tea"})
    assert form.status_code == 422, form.text
    assert form.json() == {
        "error": "validation_error",
        "message": "body: send a JSON object, with the header content-type: application/json "
        "(this request's is 'application/x-www-form-urlencoded')",
        "field": "body",
    }
    listed = await api.post("/api/facts", json=["Prefers tea"])
    assert listed.status_code == 422
    assert listed.json()["message"] == "body: must be a JSON object ({...}), not another JSON value"
    assert "dictionary" not in form.text + listed.text
    assert await count_rows(memory, resource) == 0


async def test_fact_update_rules(api: httpx.AsyncClient) -> None:
    fact = (await api.post("/api/facts", json={"content": "Lives in Lisbon"})).json()
    empty = await api.patch(f"/api/facts/{fact['id']}", json={})
    assert empty.status_code == 422
    null_content = await api.patch(f"/api/facts/{fact['id']}", json={"content": None})
    assert (null_content.status_code, null_content.json()["field"]) == (422, "content")
    unknown = await api.patch(f"/api/facts/{fact['id']}", json={"kind": "episode"})
    assert (unknown.status_code, unknown.json()["field"]) == (422, "kind")
    missing = await api.patch("/api/facts/999999999", json={"content": "x"})
    assert missing.status_code == 404
    still = await api.get(f"/api/facts/{fact['id']}")
    assert still.json()["content"] == "Lives in Lisbon"


# --- episodes ---------------------------------------------------------------------------------


async def test_episodes_are_read_and_deleted_never_updated(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    episode = await memory.retain_episode(resource, "s1", "Plan Kyoto", "Five days in Kyoto")
    assert episode is not None
    read = await api.get(f"/api/episodes/{episode.id}")
    assert read.json()["kind"] == "episode"
    for method in ("PUT", "PATCH"):
        refused = await api.request(method, f"/api/episodes/{episode.id}", json={"content": "x"})
        assert refused.status_code == 405
    # An episode is not a fact: the fact routes do not reach it.
    assert (await api.patch(f"/api/facts/{episode.id}", json={"content": "x"})).status_code == 404
    assert (await api.delete(f"/api/facts/{episode.id}")).status_code == 404
    assert (await api.delete(f"/api/episodes/{episode.id}")).status_code == 204
    assert (await api.get(f"/api/memories/{episode.id}")).status_code == 404


# --- lists, filters, paging -------------------------------------------------------------------


async def test_lists_filter_and_page(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    old = datetime(2025, 1, 1, tzinfo=UTC)
    for i in range(5):
        await memory.retain_episode(
            resource,
            "s1",
            f"question {i} about gardens",
            f"answer {i}",
            created_at=old + timedelta(days=i),
        )
    await memory.remember(resource, "Grows tomatoes in the garden", key="hobby.garden")
    await memory.remember(resource, "Drinks green tea")

    facts = (await api.get("/api/memories", params={"kind": "fact"})).json()
    assert {m["kind"] for m in facts["items"]} == {"fact"} and len(facts["items"]) == 2
    keyed = (await api.get("/api/facts", params={"key": "hobby.garden"})).json()
    assert [m["key"] for m in keyed["items"]] == ["hobby.garden"]
    text = (await api.get("/api/memories", params={"text": "GARDEN"})).json()
    assert len(text["items"]) == 6

    first = (await api.get("/api/episodes", params={"limit": 2})).json()
    assert (len(first["items"]), first["next_offset"]) == (2, 2)
    last = (await api.get("/api/episodes", params={"limit": 2, "offset": 4})).json()
    assert (len(last["items"]), last["next_offset"]) == (1, None)
    seen = [m["id"] for page in (first, last) for m in page["items"]]
    assert len(set(seen)) == 3

    window = (
        await api.get(
            "/api/episodes",
            params={
                "created_after": "2025-01-02T00:00:00Z",
                "created_before": "2025-01-04T00:00:00+00:00",
            },
        )
    ).json()
    assert len(window["items"]) == 2

    naive = await api.get("/api/episodes", params={"created_after": "2025-01-02T00:00:00"})
    assert (naive.status_code, naive.json()["field"]) == (422, "created_after")
    bad_kind = await api.get("/api/memories", params={"kind": "secret"})
    assert bad_kind.status_code == 422
    too_many = await api.get("/api/memories", params={"limit": 201})
    assert too_many.status_code == 422


# --- recall, cleanup, maintenance ------------------------------------------------------------


async def test_recall_preview_explains_and_renders(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(
        resource, "Prefers dark mode in every editor", key="ui.theme", importance=0.9
    )
    await memory.retain_episode(resource, "s1", "Which editor theme?", "Dark mode, as you prefer")
    response = await api.post("/api/recall", json={"query": "dark mode editor", "limit": 5})
    assert response.status_code == 200
    body = response.json()
    assert [r["memory"]["kind"] for r in body["results"]] == ["fact", "episode"]
    top = body["results"][0]
    assert set(top["components"]) >= {"text", "trigram", "importance", "recency"}
    total = sum(c["contribution"] for c in top["components"].values())
    assert total == pytest.approx(top["score"])
    expected = popagent.render(await memory.recall(resource, "dark mode editor", limit=5))
    assert body["rendered"] == expected
    assert body["rendered"].startswith(popagent.HEADER)
    # The preview is not a use; only the library recall above counted as one.
    assert [m.access_count for m in await memory.list(resource)] == [1, 1]


async def test_recall_preview_writes_what_its_response_model_would(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    """The preview's JSON is written from the results directly (``recall_json``): it must
    be, byte for byte, what its response model (``RecallPreview``, through pydantic as
    FastAPI writes it) writes, for every kind of field a result holds."""
    preview = TypeAdapter(RecallPreview)
    await memory.remember(resource, "Keeps bees on the roof", key="hobby", importance=1.0)
    await memory.remember(
        resource,
        "Bee club meets on Tuesdays",
        expires_at=datetime.now(UTC) + timedelta(days=30),
        provenance=Provenance(origin="cli", tool_call_id="call-1"),
    )
    await memory.retain_episode(resource, "s1", "Any bees news? \u00e9\U0001f41d", 'Yes: "honey"')
    await memory.retain_episode(
        resource, "s2", "bees last week", "ok", created_at=datetime.now(UTC) - timedelta(days=5)
    )
    assert await memory.wait_for_vectors(resource) == 0  # the same ranking for both recalls
    for query in ("bees", "bees last week", "bee club tuesday", "nothing matches this"):
        response = await api.post("/api/recall", json={"query": query, "limit": 10})
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        # What the response model writes of what the response says is the response.
        parsed = preview.validate_json(response.content)
        assert preview.dump_json(parsed) == response.content
        # And of the library's results (recency moves with time, so the same results).
        report = await memory.recall_report(resource, query, limit=10, touch=False)
        results = report.results
        expected = preview.validate_python(
            {
                "query": query,
                "results": [r.to_json() for r in results],
                "rendered": render(results),
                **report.to_json(),
            }
        )
        assert recall_json(query, report) == preview.dump_json(expected)
        assert parsed.mode == report.mode == "fused" and parsed.model == report.model
        assert [r.memory.id for r in parsed.results] == [r.memory.id for r in results]
        assert len(results) >= (4 if query == "bees" else 0)
    # No result at all (a resource with no memory), written the same way.
    empty = await memory.recall_report(f"{resource}-empty", "bees", touch=False)
    assert empty.results == [] and empty.pending == 0
    expected = preview.validate_python(
        {"query": "bees", "results": [], "rendered": "", **empty.to_json()}
    )
    assert recall_json("bees", empty) == preview.dump_json(expected)


async def test_cleanup_needs_confirmation(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Keeps bees")
    await memory.retain_episode(
        resource, "s1", "hello", "hi", created_at=datetime(2024, 1, 1, tzinfo=UTC)
    )
    unconfirmed = await api.post("/api/cleanup", json={})
    assert (unconfirmed.status_code, unconfirmed.json()["field"]) == (422, "confirm")
    false = await api.post("/api/cleanup", json={"confirm": False})
    assert false.status_code == 422
    assert await count_rows(memory, resource) == 2
    old = await api.post(
        "/api/cleanup",
        json={"confirm": True, "kind": "episode", "older_than": "2025-01-01T00:00:00Z"},
    )
    assert old.json() == {"deleted": 1}
    everything = await api.post("/api/cleanup", json={"confirm": True})
    assert everything.json() == {"deleted": 1}
    assert await count_rows(memory, resource) == 0


async def test_maintenance_now_covers_this_resource_only(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    long_ago = datetime.now(UTC) - timedelta(days=400)
    for owner in (resource, other_resource):
        await memory.retain_episode(owner, "s1", "ancient", "history", created_at=long_ago)
    await memory.remember(resource, "A fact is never pruned")
    report = await api.post("/api/maintenance")
    assert report.status_code == 200
    assert report.json() == {"expired_episodes": 1, "capped_episodes": 0, "expired_facts": 0}
    assert [m.kind for m in await memory.list(resource)] == ["fact"]
    assert (
        len(await memory.list(other_resource, MemoryFilter(kind="episode"))) == 1
    )  # the schedule's job, not ours


# --- sessions ---------------------------------------------------------------------------------


async def test_sessions_history_and_observations(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    threads = ThreadStore(memory.pool)
    for i in range(5):
        await threads.append_message(
            resource, "chat-1", "user", f"message {i}", create_session=True
        )
    await memory.remember(resource, "Survives session deletion")

    sessions = (await api.get("/api/sessions")).json()
    assert [s["session_id"] for s in sessions["items"]] == ["chat-1"]
    page = (await api.get("/api/sessions/chat-1/messages", params={"limit": 3})).json()
    assert [m["content"] for m in page["items"]] == ["message 0", "message 1", "message 2"]
    rest = (
        await api.get("/api/sessions/chat-1/messages", params={"after_id": page["next_after_id"]})
    ).json()
    assert [m["content"] for m in rest["items"]] == ["message 3", "message 4"]
    assert rest["next_after_id"] is None

    observed = (await api.get("/api/sessions/chat-1/observations")).json()
    assert observed == {"session_id": "chat-1", "generations": [], "groups": []}

    renamed = await api.patch("/api/sessions/chat-1", json={"title": "Garden talk"})
    assert renamed.json()["title"] == "Garden talk"
    assert (await api.delete("/api/sessions/chat-1")).status_code == 204
    assert (await api.get("/api/sessions/chat-1")).status_code == 404
    assert (await api.get("/api/sessions/chat-1/observations")).status_code == 404
    assert await count_rows(memory, resource) == 1  # long-term memory stays


# --- settings ---------------------------------------------------------------------------------


async def test_settings_read_update_reset(api: httpx.AsyncClient) -> None:
    initial = (await api.get("/api/settings")).json()
    by_name = {s["name"]: s for s in initial["settings"]}
    assert initial["version"] == 0
    assert by_name["observation_threshold_tokens"]["value"] == 30_000
    assert by_name["observation_threshold_tokens"]["help"]

    bad = await api.patch("/api/settings", json={"observation_threshold_tokens": 5})
    assert (bad.status_code, bad.json()["field"]) == (422, "observation_threshold_tokens")
    unknown = await api.patch("/api/settings", json={"colour": 1})
    assert (unknown.status_code, unknown.json()["field"]) == (422, "colour")
    assert (await api.get("/api/settings")).json()["version"] == 0

    good = await api.patch("/api/settings", json={"observation_threshold_tokens": 20_000})
    assert good.status_code == 200
    assert good.json()["version"] == 1
    values = {s["name"]: s["value"] for s in good.json()["settings"]}
    assert values["observation_threshold_tokens"] == 20_000

    reset = (await api.post("/api/settings/reset")).json()
    assert {s["name"]: s["value"] for s in reset["settings"]}[
        "observation_threshold_tokens"
    ] == 30_000


# --- the resource is the server's ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/api/memories", {"params": {"resource_id": "other"}}),
        ("GET", "/api/facts", {"params": {"resourceId": "other"}}),
        ("GET", "/api/sessions", {"params": {"resource": "other"}}),
        ("GET", "/api/memories", {"headers": {"X-Resource-Id": "other"}}),
        ("POST", "/api/recall", {"json": {"query": "x"}, "headers": {"Resource-Id": "other"}}),
        ("POST", "/api/facts", {"json": {"content": "x", "resource_id": "other"}}),
        ("POST", "/api/recall", {"json": {"query": "x", "resource_id": "other"}}),
        ("PATCH", "/api/settings", {"json": {"resource_id": "other"}}),
    ],
)
async def test_client_named_resource_is_refused(
    api: httpx.AsyncClient,
    memory: popagent.LongTermMemory,
    resource: str,
    method: str,
    path: str,
    kwargs: dict[str, object],
) -> None:
    response = await api.request(method, path, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 422, response.text
    assert "resource" in response.json()["field"].lower()
    assert await count_rows(memory, resource) == 0


async def test_routes_never_reach_another_resource(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, other_resource: str
) -> None:
    theirs = await memory.create_fact(other_resource, "Someone else's secret garden", key="k")
    episode = await memory.retain_episode(other_resource, "s9", "theirs", "not yours")
    assert episode is not None
    for path in (
        f"/api/facts/{theirs.id}",
        f"/api/memories/{theirs.id}",
        f"/api/episodes/{episode.id}",
    ):
        assert (await api.get(path)).status_code == 404
    assert (await api.patch(f"/api/facts/{theirs.id}", json={"content": "mine"})).status_code == 404
    assert (await api.delete(f"/api/facts/{theirs.id}")).status_code == 404
    assert (await api.delete(f"/api/episodes/{episode.id}")).status_code == 404
    assert (await api.get("/api/memories", params={"text": "garden"})).json()["items"] == []
    assert (await api.post("/api/recall", json={"query": "secret garden"})).json()["results"] == []
    assert (await api.post("/api/cleanup", json={"confirm": True})).json() == {"deleted": 0}
    assert (await api.get("/api/sessions/s9")).status_code == 404
    assert (
        await memory.get(other_resource, theirs.id, kind="fact")
    ).content == "Someone else's secret garden"
    assert await count_rows(memory, other_resource) == 2


# --- protocol details -------------------------------------------------------------------------


async def test_security_headers_and_cross_origin_refusal(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    response = await api.get("/api/facts")
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["cache-control"] == "no-store"
    cross = await api.post(
        "/api/facts", json={"content": "x"}, headers={"origin": "http://evil.example"}
    )
    assert cross.status_code == 403
    same = await api.post(
        "/api/facts", json={"content": "same origin"}, headers={"origin": "http://127.0.0.1:8787"}
    )
    assert same.status_code == 201
    assert await count_rows(memory, resource) == 1


async def test_healthz_and_openapi(api: httpx.AsyncClient) -> None:
    health = await api.get("/healthz")
    assert health.json() == {"status": "ok", "database": "ok"}
    spec = (await api.get("/openapi.json")).json()
    paths = set(spec["paths"])
    assert {
        "/api/facts",
        "/api/facts/{id}",
        "/api/episodes/{id}",
        "/api/recall",
        "/api/settings",
    } <= paths
    assert (
        "put" not in spec["paths"]["/api/episodes/{id}"]
        and "patch" not in spec["paths"]["/api/episodes/{id}"]
    )
    create = spec["components"]["schemas"]["FactCreate"]
    assert create["additionalProperties"] is False
    assert create["properties"]["content"]["maxLength"] == 2000
    for path, item in spec["paths"].items():
        for operation in item.values():
            names = [p["name"].lower() for p in operation.get("parameters", [])]
            assert not any("resource" in n for n in names), path
    assert json.dumps(spec).count("resource_id") >= 1  # only in responses


def test_the_fact_bodies_share_one_field_list() -> None:
    """A settable fact field is declared once: create and put inherit it, and the
    patch body names every field of a create (all optional there). Each name is a
    keyword argument of the library write the route forwards it to."""
    import inspect

    from popagent.memory.longterm import LongTermMemory
    from popagent.web.schemas import FactCreate, FactPut, FactUpdate

    assert set(FactUpdate.model_fields) == set(FactCreate.model_fields)
    assert set(FactCreate.model_fields) - set(FactPut.model_fields) == {"key"}
    assert all(not f.is_required() for f in FactUpdate.model_fields.values())
    for method, body in (
        (LongTermMemory.create_fact, FactCreate),
        (LongTermMemory.remember, FactPut),
    ):
        assert set(body.model_fields) <= set(inspect.signature(method).parameters), method


async def test_chat_without_model_is_503(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    response = await api.post("/api/sessions/s1/chat", json={"message": "hello"})
    assert response.status_code == 503
    assert "POPAGENT_MODEL" in response.json()["message"]
    assert (await api.get("/api/sessions/s1")).status_code == 404


def test_every_route_is_documented() -> None:
    """docs/server.md lists every API route of the OpenAPI document."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "server.md").read_text()
    spec = create_app(ServerConfig(maintenance_interval_s=None), model_from_env=False).openapi()
    missing = [
        f"{method.upper()} {path}"
        for path, item in spec["paths"].items()
        for method in item
        if f"| {method.upper()} | `{path}` |" not in doc
    ]
    assert missing == []


async def test_the_openapi_document_reads_as_text_with_code_marked(
    api: httpx.AsyncClient, resource: str
) -> None:
    spec = (await api.get("/openapi.json")).json()
    text = json.dumps(spec)
    # No RST markup, no Python None, no int64 bound: one rewrite where the document is made.
    assert "``" not in text and str(2**63 - 1) not in text
    recall = spec["paths"]["/api/recall"]["post"]["description"]
    assert recall.startswith("The ranked memories a turn would recall for `query`, each with")
    assert "\n" not in recall  # a docstring's wrapped lines are one paragraph
    history = spec["components"]["schemas"]["FactVersion"]["description"]
    assert "from `valid_from` until `valid_to`" in history and "\n\n`ended` says" in history
    fact = spec["components"]["schemas"]["Memory"]["description"]
    assert "`accessed_at` is `null` until" in fact
    (memory_id,) = (p for p in spec["paths"]["/api/facts/{id}"]["get"]["parameters"])
    assert memory_id["schema"]["format"] == "int64" and "maximum" not in memory_id["schema"]
    # The route still checks the bound the document no longer shows.
    too_big = await api.get(f"/api/facts/{2**63}")
    assert too_big.status_code == 422 and too_big.json()["field"] == "id", too_big.text
    assert (await api.get(f"/api/facts/{2**63 - 1}")).status_code == 404


def test_docstring_text_becomes_markdown_and_marked_html() -> None:
    doc = "Delete fact ``id``; ``None`` when\nnone.\n\n- ``a``: one\n- b <two>"
    assert markdown_text(doc) == "Delete fact `id`; `null` when none.\n\n- `a`: one\n- b <two>"
    assert markdown_text(markdown_text(doc)) == markdown_text(doc)
    assert str(marked(doc)) == (
        "<p>Delete fact <code>id</code>; <code>null</code> when none.</p>"
        "<p>- <code>a</code>: one<br>- b &lt;two&gt;</p>"
    )
    assert str(marked("one `<b>`")) == "one <code>&lt;b&gt;</code>"


async def test_observations_point_at_their_source_messages(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    threads = ThreadStore(memory.pool)
    stored = [
        await threads.append_message(resource, "om", "user", f"turn {i}", create_session=True)
        for i in range(4)
    ]
    async with memory.pool.connection() as conn:
        await insert_observed(
            conn,
            resource,
            "om",
            stored[0].id,
            stored[2].id,
            "* 2026-12-02: the user counted to four",
            tokens=9,
            message_tokens=12,
            generation=1,
        )
    body = (await api.get("/api/sessions/om/observations")).json()
    assert [g["generation"] for g in body["generations"]] == [1]
    assert body["generations"][0]["last_observed_message_id"] == stored[2].id
    (group,) = body["groups"]
    assert (group["first_message_id"], group["last_message_id"]) == (stored[0].id, stored[2].id)
    # The pointers resolve to the exact messages through the history route.
    page = (
        await api.get(
            "/api/sessions/om/messages",
            params={"after_id": group["first_message_id"] - 1, "limit": 3},
        )
    ).json()
    assert [m["content"] for m in page["items"]] == ["turn 0", "turn 1", "turn 2"]
