"""One rule for a new session's ID on every surface: it must be one segment of a URL path.

A session is named in the GUI's and the API's paths, so an ID with ``/`` (or
``.``/``..``, which clients resolve away) could be made but never viewed,
renamed or deleted over HTTP. Creating one is refused everywhere; a session
made before the rule stays usable through the library.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

import popagent
from popagent.adapters.openai_agents import PopagentSession
from popagent.checks import check_new_session_id
from popagent.cli import main
from popagent.errors import ValidationError
from popagent.threads import SessionItems, ThreadStore

BAD = ["a/b", "/", "trips/2026", ".", ".."]


@pytest.mark.parametrize("bad", BAD)
def test_the_rule_names_the_field(bad: str) -> None:
    with pytest.raises(ValidationError, match="one segment") as refused:
        check_new_session_id(bad)
    assert refused.value.field == "session_id"
    for good in ("a.b", "...", "a%2Fb", "trip-2026_05", "ünï"):
        assert check_new_session_id(good) == good


async def test_no_surface_creates_a_session_http_cannot_reach(
    memory: popagent.LongTermMemory, database_url: str, tmp_path: Path
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
            lambda b=bad: PopagentSession.local(b, memory, resource).add_items(
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
