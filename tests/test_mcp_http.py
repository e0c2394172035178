"""``popagent mcp --transport http``: real servers on 127.0.0.1, the SDK's streamable-HTTP client."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import popagent
from popagent import Popagent
from popagent.agent import AuditLog
from popagent.cli import main
from popagent.errors import ValidationError
from popagent.mcp import SESSION_PREFIX, MemoryServer, http_app
from popagent.mcp.server import RESOURCE_HINT
from popagent.models import MemoryFilter
from tests.agent_support import audit_text
from tests.mcp_support import TOOLS, http_server, text_of

THEME = "Prefers dark mode in every app"
TOKEN = "correct-horse-battery-staple-42"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}


@pytest.fixture
def url(database_url: str, resource: str, tmp_path: Path) -> Iterator[str]:
    with http_server(database_url, resource, tmp_path / "server.log") as found:
        yield found


@pytest.fixture
def other_url(database_url: str, other_resource: str, tmp_path: Path) -> Iterator[str]:
    with http_server(database_url, other_resource, tmp_path / "other.log") as found:
        yield found


@pytest.fixture
def token_url(database_url: str, resource: str, tmp_path: Path) -> Iterator[str]:
    with http_server(database_url, resource, tmp_path / "token.log", POPAGENT_TOKEN=TOKEN) as found:
        yield found


async def test_http_serves_on_loopback_and_remembers_across_connections(
    url: str, root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", url)
    async with Client(url) as first:
        listed = (await first.list_tools()).tools
        assert [t.name for t in listed] == TOOLS
        # Over HTTP exactly what the server lists (test_mcp.py checks the schemas themselves).
        assert [t.model_dump() for t in listed] == [
            t.model_dump() for t in MemoryServer(root, resource, hooks=[]).tools
        ]
        stored = await first.call_tool("remember", {"content": THEME, "key": "ui.theme"})
        updated = await first.call_tool(
            "remember", {"content": "Prefers light mode", "key": "ui.theme"}
        )
    [fact] = await memory.list(resource, MemoryFilter(kind="fact"))
    assert text_of(stored) == f"Stored: created fact #{fact.id} with key 'ui.theme': {THEME}"
    assert text_of(updated) == (
        f"Stored: updated fact #{fact.id} with key 'ui.theme'; it replaces the previous value: "
        "Prefers light mode"
    )
    # A second connection, over the handshake era (MCP sessions, as desktop clients use).
    async with Client(url, mode="legacy") as second:
        found = await second.call_tool("recall", {"query": "light mode"})
    label = rf"- \[fact #{fact.id}, said [^\]]+\]"
    assert re.fullmatch(
        rf"{re.escape(popagent.HEADER)}\n{label} Prefers light mode", text_of(found)
    )
    assert found.structured_content is not None
    [result] = found.structured_content["results"]
    assert result["memory"]["id"] == fact.id and result["score"] > 0

    rows = await AuditLog(memory.pool).list_audit(resource)
    assert len(rows) == 6
    sessions = {r.tool: r.session_id for r in rows}
    assert sessions["remember"] is not None and sessions["recall"] is not None
    assert sessions["remember"] != sessions["recall"]
    # The handshake-era connection is audited under its MCP session ID.
    assert re.fullmatch(f"{SESSION_PREFIX}[0-9a-f]{{32}}", sessions["recall"])
    assert fact.session_id == sessions["remember"]


async def test_http_refusals_are_tool_errors_and_audit_holds_no_content(
    url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    async with Client(url) as c:
        secret = await c.call_tool("remember", {"content": "my password is Tr0ub4dor&3xyz"})
        invalid = await c.call_tool("remember", {"content": THEME, "importance": 7})
        chosen = await c.call_tool("recall", {"query": "dark", "resource_id": "popagent-user"})
    assert secret.is_error and invalid.is_error and chosen.is_error
    assert text_of(secret).startswith(
        "Refused, nothing was stored: content: looks like it contains a credential (password)"
    )
    assert text_of(invalid) == (
        "Refused, the tool did not run: argument 'importance' must be at most 1."
    )
    assert text_of(chosen) == (
        "Refused, the tool did not run: unknown argument 'resource_id' "
        "(this tool accepts: query, limit, as_of, known_at)." + RESOURCE_HINT
    )
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert [(r.tool, r.outcome) for r in rows if r.hook == "after_tool_call"] == [
        ("recall", "refused"),
        ("remember", "refused"),
        ("remember", "refused"),
    ]
    text = (await audit_text(memory, resource)).lower()
    for content in ("tr0ub4dor", "password is", "dark mode", "popagent-user", "refused, "):
        assert content not in text, content


async def test_two_http_servers_for_two_resources_never_see_each_other(
    url: str,
    other_url: str,
    memory: popagent.LongTermMemory,
    resource: str,
    other_resource: str,
) -> None:
    async with Client(url) as mine, Client(other_url) as theirs:
        await mine.call_tool("remember", {"content": THEME})
        await theirs.call_tool("remember", {"content": "Prefers light mode"})
        mine_recall = await mine.call_tool("recall", {"query": "which mode"})
        theirs_list = await theirs.call_tool("list_facts", {})
    assert "dark mode" in text_of(mine_recall) and "light" not in text_of(mine_recall)
    assert theirs_list.structured_content is not None
    assert [f["content"] for f in theirs_list.structured_content["facts"]] == ["Prefers light mode"]
    assert [f.content for f in await memory.list(resource, MemoryFilter(kind="fact"))] == [THEME]
    assert [f.content for f in await memory.list(other_resource, MemoryFilter(kind="fact"))] == [
        "Prefers light mode"
    ]


async def test_a_configured_token_is_required_on_every_request(token_url: str) -> None:
    headers = {"accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(timeout=10) as plain:
        missing = await plain.post(token_url, json=INITIALIZE, headers=headers)
        wrong = await plain.post(
            token_url,
            json=INITIALIZE,
            headers={**headers, "authorization": "Bearer not-the-token-at-all"},
        )
        right = await plain.post(
            token_url, json=INITIALIZE, headers={**headers, "authorization": f"Bearer {TOKEN}"}
        )
    assert (missing.status_code, wrong.status_code) == (401, 401)
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json() == {"detail": "missing or wrong bearer token"}
    assert right.status_code == 200

    async with (
        httpx2.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as http,
        Client(streamable_http_client(token_url, http_client=http)) as c,
    ):
        assert [t.name for t in (await c.list_tools()).tools] == TOOLS
    # Without the token the SDK's client cannot even connect (it reports the 401 as an
    # error response from inside its task group).
    with pytest.raises(BaseExceptionGroup) as refused:
        async with Client(token_url) as c:
            await c.list_tools()
    assert refused.value.subgroup(lambda e: isinstance(e, MCPError)) is not None


def test_a_non_loopback_bind_without_a_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPAGENT_TOKEN", raising=False)
    monkeypatch.delenv("POPAGENT_TOKEN_FILE", raising=False)
    # No database is opened: the refusal comes first (an unreachable URL proves it).
    monkeypatch.setenv("POPAGENT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    for host in ("0.0.0.0", "192.0.2.10", "::"):
        result = CliRunner().invoke(main, ["mcp", "--transport", "http", "--host", host])
        assert result.exit_code == 2, result.output
        assert f"binding {host} needs a bearer token" in result.output
    monkeypatch.setenv("POPAGENT_TOKEN", "short")
    result = CliRunner().invoke(main, ["mcp", "--transport", "http", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "the token must be at least 16 characters" in result.output


async def test_http_app_refuses_a_non_loopback_host_without_a_token(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    with pytest.raises(ValidationError, match=r"binding 0\.0\.0\.0 needs a bearer token"):
        http_app(MemoryServer(root, resource), host="0.0.0.0", token=None)
