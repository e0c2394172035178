"""``as_of``, ``known_at`` and ``based_on`` through every surface, on the real
database: the HTTP API (in process), the CLI (click's runner), MCP (the SDK's
client, in process) and the GUI (pages and forms). The library's own behaviour is
``test_recall_as_of.py`` and ``test_derived.py``; the client's is in
``test_client.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from mcp import Client

import popagent
from popagent import Popagent
from popagent.cli import main
from popagent.mcp import MemoryServer
from popagent.models import MemoryFilter
from tests.gui_support import field_error, post_form
from tests.mcp_support import text_of
from tests.time_support import moved_house
from tests.web_support import api_client

QUESTION = "where do I live?"


@pytest.fixture
async def api(root: Popagent, resource: str) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(root, resource) as client:
        yield client


# --- the HTTP API -----------------------------------------------------------------------------


async def test_api_recall_as_of_and_known_at(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    fact_id = await moved_house(memory, resource)
    for field in ("as_of", "known_at"):
        response = await api.post("/api/recall", json={"query": QUESTION, field: "2021-06-01"})
        assert response.status_code == 200, response.text
        data = response.json()
        facts = [r for r in data["results"] if r["memory"]["kind"] == "fact"]
        assert [(f["memory"]["id"], f["memory"]["content"]) for f in facts] == [
            (fact_id, "Lives in Paris")
        ]
        assert facts[0]["until"].startswith("2022-03-01")
        assert "past value 2021-01-10 to 2022-03-01" in data["rendered"]
    present = (await api.post("/api/recall", json={"query": QUESTION})).json()
    facts = [r for r in present["results"] if r["memory"]["kind"] == "fact"]
    assert [(f["memory"]["content"], f["until"]) for f in facts] == [("Lives in Lyon", None)]
    for field, bad in (("as_of", "last year"), ("known_at", "2021-06-01T10:00:00")):
        refused = await api.post("/api/recall", json={"query": QUESTION, field: bad})
        assert refused.status_code == 422
        assert refused.json()["field"] == field
    wrong_type = await api.post("/api/recall", json={"query": QUESTION, "as_of": 20210601})
    assert wrong_type.status_code == 422


async def test_api_based_on_marks_and_confirms(
    api: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    city = await api.put("/api/facts/by-key/home.city", json={"content": "Lives in Lyon"})
    assert city.status_code == 201
    airport = await api.put(
        "/api/facts/by-key/home.airport",
        json={"content": "Nearest airport: LYS", "based_on": ["home.city"]},
    )
    assert airport.status_code == 201 and airport.json()["based_on"] == ["home.city"]
    airport_id = airport.json()["id"]
    lounge = await api.post(
        "/api/facts", json={"content": "Lounge access at LYS", "based_on": [airport_id]}
    )
    assert lounge.status_code == 201, lounge.text
    cycle = await api.patch(f"/api/facts/{city.json()['id']}", json={"based_on": ["home.airport"]})
    assert cycle.status_code == 422 and cycle.json()["field"] == "based_on"
    unknown = await api.post("/api/facts", json={"content": "X", "based_on": ["nope"]})
    assert unknown.status_code == 422 and unknown.json()["field"] == "based_on"
    assert (await api.get("/api/memories/stale")).json() == []

    await api.put("/api/facts/by-key/home.city", json={"content": "Lives in Paris"})
    stale = (await api.get("/api/memories/stale")).json()
    assert {m["id"] for m in stale} == {airport_id, lounge.json()["id"]}
    assert {m["stale_source"] for m in stale} == {"home.city"}
    recalled = (await api.post("/api/recall", json={"query": "nearest airport"})).json()
    assert "may be stale: based on home.city (changed " in recalled["rendered"]
    assert recalled["results"][0]["memory"]["stale_source"] == "home.city"

    confirmed = await api.post(f"/api/memories/{airport_id}/confirm")
    assert confirmed.status_code == 200 and confirmed.json()["stale_since"] is None
    assert [m["id"] for m in (await api.get("/api/memories/stale")).json()] == [lounge.json()["id"]]
    assert (await api.post("/api/memories/999999999/confirm")).status_code == 404
    cleared = await api.patch(f"/api/facts/{airport_id}", json={"based_on": []})
    assert cleared.status_code == 200 and cleared.json()["based_on"] == []


# --- the CLI ----------------------------------------------------------------------------------


def _cli(url: str, resource: str, *args: str) -> Any:
    return CliRunner().invoke(
        main, ["--database-url", url, "--resource-id", resource, *args], catch_exceptions=False
    )


def test_cli_recall_as_of_and_facts_stale(database_url: str, resource: str) -> None:
    async def on_memory(step: Callable[[popagent.LongTermMemory], Awaitable[Any]]) -> Any:
        async with popagent.connect(database_url) as root:
            return await step(root.memory)

    asyncio.run(on_memory(lambda m: moved_house(m, resource)))
    out = _cli(database_url, resource, "recall", QUESTION, "--as-of", "2021-06-01")
    assert out.exit_code == 0, out.output
    assert "- [fact, past value 2021-01-10 to 2022-03-01] Lives in Paris" in out.output
    assert "Lyon" not in out.output
    known = _cli(database_url, resource, "recall", QUESTION, "--known-at", "2021-06-01", "--json")
    assert json.loads(known.output)["results"][0]["memory"]["content"] == "Lives in Paris"
    bad = CliRunner().invoke(
        main, ["--database-url", database_url, "--resource-id", resource, "recall", QUESTION,
               "--as-of", "soon"],
    )  # fmt: skip
    assert bad.exit_code != 0 and "as_of" in bad.output

    out = _cli(database_url, resource, "remember", "Nearest airport: LYS", "--key",
               "home.airport", "--based-on", "home.city")  # fmt: skip
    assert out.exit_code == 0, out.output
    listed = json.loads(_cli(database_url, resource, "facts", "list", "--json").output)
    airport_id = next(m["id"] for m in listed if m["key"] == "home.airport")
    out = _cli(database_url, resource, "facts", "add", "Lounge at LYS", "--based-on",
               str(airport_id))  # fmt: skip
    assert out.exit_code == 0, out.output
    assert _cli(database_url, resource, "facts", "stale").output.strip() == "No stale memories."
    _cli(database_url, resource, "remember", "Lives in Nice", "--key", "home.city")
    listed_stale = _cli(database_url, resource, "facts", "stale").output
    assert "Nearest airport: LYS" in listed_stale and "Lounge at LYS" in listed_stale
    assert "based on home.city" in listed_stale
    out = _cli(database_url, resource, "facts", "confirm", str(airport_id))
    assert out.exit_code == 0 and f"confirmed memory {airport_id}" in out.output
    data = json.loads(_cli(database_url, resource, "facts", "stale", "--json").output)
    assert [m["content"] for m in data] == ["Lounge at LYS"]


# --- MCP ----------------------------------------------------------------------------------------


async def test_mcp_recall_as_of_and_remember_based_on(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    await moved_house(memory, resource)
    async with Client(MemoryServer(root, resource).lowlevel) as client:
        past = await client.call_tool("recall", {"query": QUESTION, "as_of": "2021-06-01"})
        known = await client.call_tool("recall", {"query": QUESTION, "known_at": "2021-06-01"})
        bad = await client.call_tool("recall", {"query": QUESTION, "as_of": "soon"})
        stored = await client.call_tool(
            "remember",
            {"content": "Nearest airport: LYS", "key": "home.airport", "based_on": ["home.city"]},
        )
        cycle = await client.call_tool(
            "remember",
            {"content": "Lives in Lyon", "key": "home.city", "based_on": ["home.airport"]},
        )
    assert not past.is_error and "past value 2021-01-10 to 2022-03-01] Lives in Paris" in text_of(
        past
    )
    assert "Lyon" not in text_of(known)
    assert bad.is_error and "as_of" in text_of(bad)
    assert not stored.is_error and "based on home.city" in text_of(stored)
    assert cycle.is_error and "cycle" in text_of(cycle)
    await memory.remember(resource, "Lives in Nice", key="home.city")
    assert [m.key for m in await memory.stale(resource)] == ["home.airport"]


# --- the GUI ------------------------------------------------------------------------------------


async def test_gui_recall_preview_as_of_and_the_stale_page(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    await moved_house(memory, resource)
    page = await gui.get("/recall")
    assert 'name="as_of"' in page.text and 'name="known_at"' in page.text
    for field in ("as_of", "known_at"):
        shown = await post_form(gui, "/recall", {"query": QUESTION, field: "2021-06-01"})
        assert shown.status_code == 200
        assert "past value 2021-01-10 to 2022-03-01" in shown.text
        assert "Lives in Lyon" not in shown.text
    refused = await post_form(gui, "/recall", {"query": QUESTION, "as_of": "tomorrow-ish"})
    assert refused.status_code == 422 and field_error(refused.text, "as_of")

    await memory.remember(resource, "Nearest airport: LYS", key="home.airport",
                          based_on=["home.city"])  # fmt: skip
    (airport,) = await memory.list(resource, MemoryFilter(key="home.airport"))
    assert "No memory is marked stale." in (await gui.get("/stale")).text
    await memory.remember(resource, "Lives in Nice", key="home.city")
    listed = await gui.get("/stale")
    assert (
        "Nearest airport: LYS" in listed.text and "based on <code>home.city</code>" in listed.text
    )
    assert f'href="/facts/{airport.id}/delete"' in listed.text  # the forget button
    shown = await gui.get(f"/memories/{airport.id}")
    assert 'data-testid="stale-mark"' in shown.text
    confirmed = await post_form(gui, f"/memories/{airport.id}/confirm", {})
    assert confirmed.status_code == 303
    assert (await memory.get(resource, airport.id)).stale_since is None
    assert "No memory is marked stale." in (await gui.get("/stale")).text
