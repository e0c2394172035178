"""One concept, one spelling, on every surface: the resource flag, fact lookup by key,
the API's upsert by key, the identifier rule, and the plurals of what the CLI prints."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import popagent
from popagent import Popagent
from popagent.cli import main
from popagent.client import Client
from popagent.errors import ConflictError, ValidationError
from popagent.models import MemoryFilter
from popagent.threads import ThreadStore
from popagent.web import ServerConfig
from tests.mcp_support import http_server
from tests.web_support import api_client, uvicorn_server


def _cli(database_url: str, *args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(
        main, ["--database-url", database_url, *args], env=env, catch_exceptions=False
    )


def test_resource_id_goes_before_or_after_the_command(database_url: str) -> None:
    before, after = f"before-{uuid.uuid4().hex}", f"after-{uuid.uuid4().hex}"
    assert _cli(database_url, "--resource-id", before, "remember", "Owns a red bike").exit_code == 0
    out = _cli(database_url, "remember", "Owns a blue kayak", "--resource-id", after)
    assert out.exit_code == 0, out.output
    # Nested groups take it at either level; after the command it wins over before.
    listed = _cli(database_url, "--resource-id", before, "facts", "list", "--resource-id", after)
    assert "blue kayak" in listed.output and "red bike" not in listed.output
    listed = _cli(database_url, "facts", "--resource-id", before, "list", "--json")
    assert [f["content"] for f in json.loads(listed.output)] == ["Owns a red bike"]
    recalled = _cli(database_url, "recall", "kayak", "--resource-id", after)
    assert "blue kayak" in recalled.output
    # backup, restore and maintain act on the whole database: they do not take it.
    refused = _cli(database_url, "maintain", "--resource-id", after)
    assert refused.exit_code == 2 and "No such option" in refused.output


def test_export_and_import_take_the_same_flag(database_url: str, tmp_path: Path) -> None:
    source, target = f"src-{uuid.uuid4().hex}", f"dst-{uuid.uuid4().hex}"
    assert _cli(database_url, "--resource-id", source, "remember", "Grows tomatoes").exit_code == 0
    assert _cli(database_url, "--resource-id", source, "remember", "Keeps hens").exit_code == 0
    out = tmp_path / "export.jsonl"
    exported = _cli(database_url, "export", "--resource-id", source, "-o", str(out))
    assert exported.exit_code == 0, exported.output
    assert f"exported {source}: 2 facts" in exported.output  # a plural, not "2 fact"
    imported = _cli(database_url, "import", str(out), "--resource-id", target)
    assert imported.exit_code == 0 and f"imported into {target}:" in imported.output
    # The environment names a resource as well as the flag does.
    again = _cli(database_url, "import", str(out), env={"POPAGENT_RESOURCE_ID": target})
    assert f"imported into {target}:" in again.output and "2 unchanged" in again.output
    # Without either, a popagent export goes back to its own resource.
    home = _cli(database_url, "import", str(out))
    assert f"imported into {source}:" in home.output


def test_facts_show_takes_an_id_or_a_key(database_url: str) -> None:
    res = f"show-{uuid.uuid4().hex}"
    stored = _cli(database_url, "--resource-id", res, "remember", "Dark mode", "--key", "ui.theme")
    fact_id = stored.output.split()[-1]
    by_key = json.loads(
        _cli(database_url, "--resource-id", res, "facts", "show", "UI.Theme").output
    )
    by_id = json.loads(_cli(database_url, "--resource-id", res, "facts", "show", fact_id).output)
    assert by_key == by_id and by_key["key"] == "ui.theme"
    missing = _cli(database_url, "--resource-id", res, "facts", "show", "ui.font")
    assert missing.exit_code == 1 and "no fact with key 'ui.font'" in missing.output
    bad = _cli(database_url, "--resource-id", res, "facts", "show", "ui theme")
    assert bad.exit_code == 2 and "key:" in bad.output


def test_cli_counts_are_plural_only_when_they_should_be(database_url: str) -> None:
    res = f"plural-{uuid.uuid4().hex}"
    for text in ("Likes figs", "Likes dates", "Likes plums"):
        _cli(database_url, "--resource-id", res, "remember", text)
    one = _cli(database_url, "--resource-id", res, "cleanup", "--yes", "--older-than", "2000-01-01")
    assert one.output == "deleted 0 memories\n"
    deleted = _cli(database_url, "--resource-id", res, "cleanup", "--yes")
    assert deleted.output == "deleted 3 memories\n"
    _cli(database_url, "--resource-id", res, "remember", "Likes kiwis")
    assert _cli(database_url, "--resource-id", res, "cleanup", "--yes").output == (
        "deleted 1 memory\n"
    )


@pytest.mark.parametrize("bad", ["alice smith", "tab\there", "zero\u200bwidth", " lead"])
async def test_an_id_with_blanks_is_refused_everywhere(
    database_url: str, memory: popagent.LongTermMemory, bad: str
) -> None:
    with pytest.raises(ValidationError, match="resource_id"):
        await memory.remember(bad, "Likes tea")
    with pytest.raises(ValidationError, match="resource_id"):
        await memory.recall(bad, "tea")
    with pytest.raises(ValidationError, match="session_id"):
        await ThreadStore(memory.pool).append_message(
            "fine-resource", bad, "user", "hi", create_session=True
        )
    for args in (["remember", "Likes tea"], ["serve"], ["mcp"], ["facts", "list"]):
        out = CliRunner().invoke(
            main, ["--database-url", database_url, "--resource-id", bad, *args]
        )
        assert out.exit_code == 2, (args, out.output)
        assert "resource_id: must not contain" in out.output, (args, out.output)
    after = _cli(database_url, "recall", "tea", "--resource-id", bad)
    assert after.exit_code == 2 and "resource_id: must not contain" in after.output


# --- the API: strict create beside an upsert by key -----------------------------------------


@pytest.fixture
async def api(root: Popagent, memory: popagent.LongTermMemory, resource: str) -> Any:
    async with api_client(root, resource) as client:
        yield client


async def test_put_by_key_is_an_idempotent_upsert(api: httpx.AsyncClient) -> None:
    body = {"content": "Prefers dark mode", "importance": 0.8}
    first = await api.put("/api/facts/by-key/ui.theme", json=body)
    assert first.status_code == 201, first.text
    again = await api.put("/api/facts/by-key/ui.theme", json=body)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert again.json()["version"] == 1  # the same value: nothing changed
    changed = await api.put("/api/facts/by-key/UI.Theme", json={"content": "Prefers light mode"})
    assert changed.status_code == 200
    assert (changed.json()["id"], changed.json()["version"]) == (first.json()["id"], 2)
    assert changed.json()["importance"] == 0.5
    read = await api.get("/api/facts/by-key/ui.theme")
    assert read.json()["content"] == "Prefers light mode"
    versions = (await api.get(f"/api/facts/{first.json()['id']}/versions")).json()
    assert [v["content"] for v in versions["versions"]] == ["Prefers dark mode"]
    # Keys may hold a slash: the path takes the rest of the URL.
    slashed = await api.put("/api/facts/by-key/work/editor", json={"content": "Uses vim"})
    assert slashed.status_code == 201 and slashed.json()["key"] == "work/editor"
    assert (await api.get("/api/facts/by-key/work/editor")).json()["content"] == "Uses vim"
    missing = await api.get("/api/facts/by-key/ui.font")
    assert missing.status_code == 404 and "ui.font" in missing.json()["message"]
    strict = await api.put("/api/facts/by-key/ui.theme", json={"content": "x", "key": "y"})
    assert strict.status_code == 422 and strict.json()["field"] == "key"
    bad_key = await api.put("/api/facts/by-key/a%20b", json={"content": "x"})
    assert bad_key.status_code == 422 and bad_key.json()["field"] == "key"


async def test_a_strict_create_names_the_fact_it_collides_with(api: httpx.AsyncClient) -> None:
    created = await api.post("/api/facts", json={"content": "Lives in Lyon", "key": "home.city"})
    fact_id = created.json()["id"]
    taken = await api.post("/api/facts", json={"content": "Lives in Nice", "key": "Home.City"})
    assert taken.status_code == 409
    message = taken.json()["message"]
    assert f"fact {fact_id}" in message and "PUT /api/facts/by-key/home.city" in message
    keyless = await api.post("/api/facts", json={"content": "Speaks  Basque"})
    twin = await api.post("/api/facts", json={"content": "Speaks Basque"})
    assert twin.status_code == 409
    assert f"fact {keyless.json()['id']} is identical" in twin.json()["message"]


def test_the_client_covers_the_routes_by_key(database_url: str, resource: str) -> None:
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    with (
        uvicorn_server(config, database_url=database_url, model_from_env=False) as base,
        Client(base) as client,
    ):
        first = client.put_fact("pet/name", "The cat is called Miso", importance=0.7)
        again = client.put_fact("pet/name", "The cat is called Miso", importance=0.7)
        assert (again.id, again.version, again.key) == (first.id, 1, "pet/name")
        # Reading by key is the list's key filter, as in the library (normalized too).
        (named,) = client.list(MemoryFilter(kind="fact", key="Pet/Name")).items
        assert (named.id, named.content) == (first.id, "The cat is called Miso")
        assert client.list(MemoryFilter(kind="fact", key="pet/age")).items == ()
        with pytest.raises(ConflictError) as taken:
            client.create_fact("The cat is called Tofu", key="pet/name")
        # The client's error names the client's methods, not the HTTP routes behind them.
        assert str(taken.value) == (
            f"fact {first.id} already has the key 'pet/name': put_fact('pet/name', content) "
            f"sets its value, update_fact({first.id}, ...) changes it"
        )
        client.create_fact("Feeds the cat at seven")
        with pytest.raises(ConflictError) as twin:
            client.create_fact("Feeds the cat at seven")
        assert "is identical and has no key: update_fact(" in str(twin.value)
        assert "/api/" not in str(twin.value)


async def test_no_doubled_words_where_a_model_or_token_is_missing(
    api: httpx.AsyncClient, database_url: str, resource: str, tmp_path: Path
) -> None:
    page = (await api.get("/chat/web-0123456789abcdef")).text
    assert "No model is configured: set POPAGENT_MODEL" in page
    assert "No model: no model" not in page
    log = tmp_path / "mcp.log"
    with http_server(database_url, resource, log):
        notice = log.read_text()
    assert "/mcp (no token: loopback only)" in notice and "((" not in notice
