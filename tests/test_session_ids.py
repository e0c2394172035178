"""One rule for a new session's ID on every surface: it must be one segment of a URL path.

A session is named in the GUI's and the API's paths, so an ID with ``/`` (or
``.``/``..``, which clients resolve away) could be made but never viewed,
renamed or deleted over HTTP. Creating one is refused everywhere (the library,
adapters, import, the API over real HTTP, the CLI's chat in a real process;
MCP records IDs of its own making); a session made before the rule stays
usable through the library.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from click.testing import CliRunner

import popagent
from popagent import Popagent
from popagent.adapters.openai_agents import PopagentSession
from popagent.checks import check_new_session_id
from popagent.cli import main
from popagent.errors import ValidationError
from popagent.threads import SessionItems, ThreadStore
from popagent.web import ServerConfig
from tests.scripted_model import ScriptedModelServer
from tests.web_support import scripted_settings, uvicorn_server

BAD = ["a/b", "/", "trips/2026", ".", ".."]


@pytest.mark.parametrize("bad", BAD)
def test_the_rule_names_the_field(bad: str) -> None:
    with pytest.raises(ValidationError, match="one segment") as refused:
        check_new_session_id(bad)
    assert refused.value.field == "session_id"
    for good in ("a.b", "...", "a%2Fb", "trip-2026_05", "ünï"):
        assert check_new_session_id(good) == good


async def test_no_surface_creates_a_session_http_cannot_reach(
    root: Popagent, memory: popagent.LongTermMemory, database_url: str, tmp_path: Path
) -> None:
    resource = f"ids-{uuid.uuid4().hex[:8]}"
    threads = ThreadStore(memory.pool)
    for bad in BAD:
        for create in (
            lambda b=bad: threads.create_session(resource, b),
            lambda b=bad: threads.ensure_session(resource, b),
            lambda b=bad: threads.append_message(resource, b, "user", "Hi", create_session=True),
            lambda b=bad: SessionItems(memory.pool).append(
                resource, b, [{"role": "user", "content": "Hi"}]
            ),
            lambda b=bad: PopagentSession.local(b, root, resource).add_items(
                [{"role": "user", "content": "Hi"}]
            ),
        ):
            with pytest.raises(ValidationError) as refused:
                await create()
            assert refused.value.field == "session_id"
    with psycopg.connect(database_url) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM popagent_sessions WHERE resource_id = %s", (resource,)
        ).fetchone() or (None,)
    assert count == 0

    # Import: a session record with such an ID is refused (exit 2), nothing written.
    records = [
        {"type": "header", "format": "popagent-export", "version": 1, "resource_id": resource},
        {
            "type": "session",
            "session_id": "a/b",
            "title": None,
            "metadata": {},
            "created_at": "2026-01-01T00:00:00+00:00",
            "updated_at": "2026-01-01T00:00:00+00:00",
        },
    ]
    file = tmp_path / "bad.jsonl"
    file.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    out = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        ["--database-url", database_url, "import", str(file), "--resource-id", resource],
    )
    assert out.exit_code == 2 and "session_id: must not contain" in out.output, out.output


async def test_a_session_made_before_the_rule_stays_usable_through_the_library(
    memory: popagent.LongTermMemory, database_url: str
) -> None:
    resource = f"ids-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO popagent_sessions (resource_id, session_id) VALUES (%s, 'old/one')",
            (resource,),
        )
    threads = ThreadStore(memory.pool)
    assert (await threads.get_session(resource, "old/one")).session_id == "old/one"
    await threads.append_message(resource, "old/one", "user", "Still here", create_session=True)
    await threads.ensure_session(resource, "old/one")
    await SessionItems(memory.pool).append(resource, "old/one", [{"role": "user", "content": "x"}])
    renamed = await threads.rename_session(resource, "old/one", "Renamed")
    assert renamed.title == "Renamed"
    assert len(await threads.list_messages(resource, "old/one")) == 2
    await threads.delete_session(resource, "old/one")
    assert await threads.list_sessions(resource) == []


def _post_raw(base: str, path: str, body: object) -> tuple[int, str]:
    """POST ``path`` exactly as written (``http.client`` keeps ``.``/``..`` segments and
    ``%2F``, which httpx and browsers would resolve or keep apart)."""
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    try:
        conn.request(
            "POST", path, body=json.dumps(body), headers={"content-type": "application/json"}
        )
        answer = conn.getresponse()
        return answer.status, answer.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _sessions(database_url: str, resource: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT session_id FROM popagent_sessions WHERE resource_id = %s", (resource,)
        ).fetchall()
    return [str(r[0]) for r in rows]


def test_http_creates_no_session_its_urls_cannot_name(
    database_url: str, scripted: ScriptedModelServer
) -> None:
    """Over real HTTP, the routes that create a session by naming it in their path
    (items, chat) refuse ``.``/``..`` with 422 naming the field, and a ``%2F`` never
    arrives as one segment (404): nothing is created."""
    resource = f"ids-{uuid.uuid4().hex[:8]}"
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    items = {"items": [{"role": "user", "content": "Hi"}]}
    with uvicorn_server(
        config, database_url=database_url, model_settings=scripted_settings(scripted)
    ) as base:
        for segment in (".", ".."):
            for route, body in (("items", items), ("chat", {"message": "Hi"})):
                status, text = _post_raw(base, f"/api/sessions/{segment}/{route}", body)
                assert status == 422, (segment, route, status, text)
                assert json.loads(text)["field"] == "session_id", text
        for route, body in (("items", items), ("chat", {"message": "Hi"})):
            status, text = _post_raw(base, f"/api/sessions/a%2Fb/{route}", body)
            assert status == 404, (route, status, text)
        # The control: an ordinary ID is created by the same request.
        status, text = _post_raw(base, "/api/sessions/a-b/items", items)
        assert status == 201, text
    assert scripted.requests == []  # no refused chat reached the model
    assert _sessions(database_url, resource) == ["a-b"]


def test_the_cli_chat_refuses_a_new_session_its_urls_cannot_name(
    database_url: str, scripted: ScriptedModelServer
) -> None:
    """``popagent chat --session-id a/b`` (a real process) exits 2 naming the rule before
    any turn; nothing is created."""
    resource = f"ids-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POPAGENT_", "OPENAI_"))}
    env.update(
        POPAGENT_DATABASE_URL=database_url,
        POPAGENT_MODEL_BASE_URL=scripted.base_url,
        POPAGENT_MODEL="scripted-1",
        POPAGENT_MODEL_MAX_RETRIES="0",
    )
    for bad in ("a/b", ".."):
        command = [sys.executable, "-m", "popagent.cli", "--resource-id", resource]
        done = subprocess.run(
            [*command, "chat", "--session-id", bad],
            input="Hello\n/exit\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "session_id: must not contain '/'" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert scripted.requests == []
    assert _sessions(database_url, resource) == []


async def test_mcp_writes_name_a_session_the_urls_can_reach(database_url: str) -> None:
    """MCP clients never choose a session ID: a real ``popagent mcp`` records its own
    (``mcp-<uuid>``), one URL segment, on what it writes."""
    from mcp import Client
    from mcp.client.stdio import stdio_client

    from tests.mcp_support import stdio_params

    resource = f"ids-{uuid.uuid4().hex[:8]}"
    async with Client(stdio_client(stdio_params(database_url, resource))) as client:
        answer = await client.call_tool("remember", {"content": "Likes quiet trains"})
        assert not answer.is_error
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT session_id FROM popagent_memories WHERE resource_id = %s", (resource,)
        ).fetchall()
    (session_id,) = [str(r[0]) for r in rows]
    assert session_id.startswith("mcp-") and check_new_session_id(session_id) == session_id
