"""``popagent.adapters.openai_agents``: the SDK's ``Session`` on popagent threads, and
the memory tools, driven by the SDK's real ``Runner`` and ``Agent``.

The model is ``OpenAIChatCompletionsModel`` with an ``AsyncOpenAI`` pointed at the
suite's scripted Chat Completions server (real HTTP on 127.0.0.1); the sessions and
facts live in the suite's PostgreSQL; the remote session talks to the server app.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, TResponseInputItem
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from openai import AsyncOpenAI

import popagent
from popagent import Popagent
from popagent.adapters.backend import LocalBackend
from popagent.adapters.openai_agents import PopagentSession, memory_tools
from popagent.agent import AuditLog
from popagent.memory.render import HEADER
from popagent.models import MemoryFilter
from popagent.threads import SessionItems, ThreadStore
from popagent.web.config import ServerConfig
from tests.adapter_support import assert_import_hint, run_example
from tests.agent_support import audit_text, tool_results
from tests.scripted_model import CallTools, Reply, ScriptedModelServer
from tests.web_support import api_client, count_rows, uvicorn_server

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"

#: One item of every kind the SDK keeps in a session.
EVERY_KIND: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": [{"type": "input_text", "text": "Answer in English."}]},
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this picture?"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
                "detail": "low",
            },
            {
                "type": "input_file",
                "file_data": "data:application/pdf;base64,JVBERi0x",
                "filename": "a.pdf",
            },
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
        "encrypted_content": "gAAAAABnT0pqYXZhc2NyaXB0OnNrLXByb2otYWJjZGVm",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Oslo", "units": "metric"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "Rain, 7 °C"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "structured"}],
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "Oslo weather"},
    },
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_3",
        "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_3",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {"type": "item_reference", "id": "msg_0"},
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "Rain, 7 °C in Oslo.",
                "annotations": [],
                "logprobs": [],
            },
            {"type": "refusal", "refusal": "No forecast beyond today."},
        ],
    },
]


def chat_model(scripted: ScriptedModelServer) -> OpenAIChatCompletionsModel:
    client = AsyncOpenAI(base_url=scripted.base_url, api_key="scripted", max_retries=0)
    return OpenAIChatCompletionsModel(model="scripted-1", openai_client=client)


NO_TRACING = RunConfig(tracing_disabled=True)


def agent_for(scripted: ScriptedModelServer, tools: list[Any]) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions="Use your memory tools.",
        model=chat_model(scripted),
        tools=tools,
    )


def items(values: list[dict[str, Any]]) -> list[TResponseInputItem]:
    return cast("list[TResponseInputItem]", values)


# --- the Session ------------------------------------------------------------------------------


async def test_round_trip_of_every_item_kind(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, threads: ThreadStore
) -> None:
    session = PopagentSession.local("chat-1", root, resource)
    assert await session.get_items() == []
    await session.add_items(items(EVERY_KIND[:5]))
    await session.add_items(items(EVERY_KIND[5:]))
    assert await session.get_items() == EVERY_KIND
    assert await session.get_items(limit=3) == EVERY_KIND[-3:]
    assert await session.get_items(limit=0) == []
    # popagent's own view of the same messages: what the GUI and the API show.
    view = await threads.list_messages(resource, "chat-1")
    assert [(m.role, m.content) for m in view][:3] == [
        ("system", "Be brief."),
        ("system", "Answer in English."),
        ("user", "What is the weather in Oslo?"),
    ]
    assert view[5].role == "assistant" and view[5].parts[0]["type"] == "tool_call"
    assert view[5].parts[0]["name"] == "get_weather"
    assert (view[6].role, view[6].content) == ("tool", "Rain, 7 °C")
    assert view[-1].content == "Rain, 7 °C in Oslo.\nNo forecast beyond today."


async def test_pop_and_clear(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, threads: ThreadStore
) -> None:
    session = PopagentSession.local("chat-pop", root, resource)
    assert await session.pop_item() is None
    await session.add_items(items(EVERY_KIND))
    assert await session.pop_item() == EVERY_KIND[-1]
    assert await session.pop_item() == EVERY_KIND[-2]
    assert await session.get_items() == EVERY_KIND[:-2]
    await threads.rename_session(resource, "chat-pop", "Weather")
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    kept = await threads.get_session(resource, "chat-pop")
    assert kept.title == "Weather"  # the session stays; only its history goes
    await session.add_items(items(EVERY_KIND[:1]))
    assert await session.get_items() == EVERY_KIND[:1]
    await PopagentSession.local("never-made", root, resource).clear_session()  # a no-op


async def test_sessions_are_per_resource(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    mine = PopagentSession.local("same-id", root, resource)
    theirs = PopagentSession.local("same-id", root, other_resource)
    await mine.add_items(items(EVERY_KIND[:2]))
    assert await theirs.get_items() == []
    await theirs.clear_session()
    assert await mine.get_items() == EVERY_KIND[:2]


async def test_credentials_in_items_are_redacted(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    session = PopagentSession.local("chat-secret", root, resource)
    await session.add_items(
        items(
            [
                {"role": "user", "content": f"my key is {KEY}"},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "login",
                    "arguments": json.dumps({"password": "hunter2-Xy9!", "user": "ann"}),
                },
                # Opaque payloads are not text: kept byte for byte.
                {"type": "reasoning", "summary": [], "encrypted_content": KEY},
            ]
        )
    )
    stored = await session.get_items()
    dumped = json.dumps(stored[:2])
    assert KEY not in dumped and "hunter2" not in dumped
    assert "[REDACTED:" in cast("dict[str, Any]", stored[0])["content"]
    assert json.loads(cast("dict[str, Any]", stored[1])["arguments"])["user"] == "ann"
    assert cast("dict[str, Any]", stored[2])["encrypted_content"] == KEY


async def test_a_bad_batch_writes_nothing(memory: popagent.LongTermMemory, resource: str) -> None:
    store = SessionItems(memory.pool)
    with pytest.raises(popagent.ValidationError) as caught:
        await store.append(resource, "chat-bad", [{"role": "user", "content": "ok"}, "not an item"])
    assert caught.value.field == "items[1]"
    with pytest.raises(popagent.ValidationError):
        await store.append(resource, "chat-bad", [{"role": "user", "content": "nul \x00"}])
    with pytest.raises(popagent.ValidationError):
        await store.append(resource, "chat-bad", [{"role": "user", "content": "\ud800"}])
    assert await store.get(resource, "chat-bad") == []


async def test_messages_popagent_wrote_read_as_items(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, threads: ThreadStore
) -> None:
    await threads.append_message(resource, "mixed", "user", "hello", create_session=True)
    await threads.append_message(resource, "mixed", "assistant", "hi there")
    session = PopagentSession.local("mixed", root, resource)
    await session.add_items(items(EVERY_KIND[2:3]))
    assert await session.get_items() == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi there"},
        EVERY_KIND[2],
    ]


# --- the Runner with a real Agent ---------------------------------------------------------------


async def test_runner_keeps_history_and_a_second_session_recalls(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, scripted: ScriptedModelServer
) -> None:
    first = PopagentSession.local("trip-1", root, resource)
    scripted.script(
        CallTools([("remember", {"content": "Prefers aisle seats", "key": "travel.seat"})]),
        Reply("Noted: aisle seats."),
    )
    agent = agent_for(scripted, memory_tools(root, resource, session_id="trip-1"))
    result = await Runner.run(
        agent, "I always take an aisle seat.", session=first, run_config=NO_TRACING
    )
    assert result.final_output == "Noted: aisle seats."
    assert tool_results(scripted.requests[1])[0].startswith("Stored: created fact #")
    facts = await memory.list(resource, MemoryFilter(kind="fact"))
    assert [(f.key, f.content, f.session_id) for f in facts] == [
        ("travel.seat", "Prefers aisle seats", "trip-1")
    ]
    kept = [cast("dict[str, Any]", i) for i in await first.get_items()]
    assert kept[0] == {"content": "I always take an aisle seat.", "role": "user"}
    assert [i.get("type") for i in kept[1:]] == ["function_call", "function_call_output", "message"]

    # The same session again: the runner sends the stored history back to the model.
    scripted.script(Reply("Still aisle."))
    await Runner.run(agent, "Remind me?", session=first, run_config=NO_TRACING)
    sent = [m.get("content") for m in scripted.requests[2]["messages"]]
    assert "I always take an aisle seat." in sent and "Remind me?" in sent

    # Another session of the same resource recalls the fact.
    second = PopagentSession.local("trip-2", root, resource)
    scripted.script(CallTools([("recall", {"query": "which seat?"})]), Reply("Aisle."))
    agent2 = agent_for(scripted, memory_tools(root, resource, session_id="trip-2"))
    await Runner.run(agent2, "Book my seat.", session=second, run_config=NO_TRACING)
    recalled = tool_results(scripted.requests[4])[0]
    assert recalled.startswith(HEADER) and "Prefers aisle seats" in recalled
    assert "I always take an aisle seat." not in json.dumps(scripted.requests[3])  # its own history


async def test_tools_are_audited_without_content(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        # One step, two calls: the scripted server numbers call ids per step, and the
        # SDK refuses an id reused for another call.
        CallTools(
            [("remember", {"content": "Owns a red bicycle"}), ("recall", {"query": "bicycle"})]
        ),
        Reply("ok"),
    )
    agent = agent_for(scripted, memory_tools(LocalBackend(root, resource), session_id="s-a"))
    await Runner.run(agent, "remember my bike", run_config=NO_TRACING)
    rows = await AuditLog(memory.pool).list_audit(resource)
    tools = sorted((r.hook, r.tool, r.outcome, r.session_id) for r in rows)
    assert tools == [
        ("after_tool_call", "recall", "ok", "s-a"),
        ("after_tool_call", "remember", "ok", "s-a"),
        ("before_tool_call", "recall", None, "s-a"),
        ("before_tool_call", "remember", None, "s-a"),
    ]
    text = await audit_text(memory, resource)
    assert "bicycle" not in text and "red" not in text.replace("refused", "")


async def test_the_resource_is_fixed_by_configuration(
    root: Popagent,
    memory: popagent.LongTermMemory,
    resource: str,
    other_resource: str,
    scripted: ScriptedModelServer,
) -> None:
    scripted.script(
        CallTools(
            [
                ("remember", {"content": "Likes tea", "resource_id": other_resource}),
                ("recall", {"query": "tea", "resource_id": other_resource}),
            ]
        ),
        Reply("ok"),
    )
    tools = memory_tools(root, resource)
    assert "resource" not in json.dumps([t.params_json_schema for t in tools])
    agent = agent_for(scripted, list(tools))
    await Runner.run(agent, "hi", run_config=NO_TRACING)
    refusals = tool_results(scripted.requests[1])
    assert len(refusals) == 2
    for text in refusals:
        assert text.startswith("Refused, nothing was done: unknown argument 'resource_id'")
    assert await count_rows(memory, resource) == 0
    assert await count_rows(memory, other_resource) == 0
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert {r.outcome for r in rows if r.hook == "after_tool_call"} == {"refused"}


async def test_a_credential_is_refused_readably(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        CallTools(
            [("remember", {"content": f"My OpenAI API key is {KEY}"}), ("remember", "not json")]
        ),
        Reply("ok"),
    )
    agent = agent_for(scripted, memory_tools(root, resource))
    await Runner.run(agent, "keep my key", run_config=NO_TRACING)
    refusal, not_json = tool_results(scripted.requests[1])
    assert refusal.startswith("Refused, nothing was stored:")
    assert "sk-proj" not in refusal
    assert not_json == "Refused: the arguments must be a JSON object"
    assert await count_rows(memory, resource) == 0


# --- a remote popagent server ------------------------------------------------------------------


@pytest.fixture
async def remote(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> AsyncIterator[Any]:
    async with api_client(root, resource) as client:
        yield client


async def test_remote_session_round_trip(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, remote: Any
) -> None:
    session = PopagentSession.remote("remote-1", http=remote)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items(items(EVERY_KIND))
    assert await session.get_items() == EVERY_KIND
    assert await session.get_items(limit=2) == EVERY_KIND[-2:]
    # The server's resource: the same rows a local session of it reads.
    assert await PopagentSession.local("remote-1", root, resource).get_items() == EVERY_KIND
    assert await session.pop_item() == EVERY_KIND[-1]
    await session.clear_session()
    assert await session.get_items() == []


async def test_remote_session_batches_and_pages(remote: Any) -> None:
    """More items than one request may carry, by count and by size, and than one page holds."""
    session = PopagentSession.remote("remote-many", http=remote)
    many = [{"role": "user", "content": f"message {i}"} for i in range(1_203)]
    big = [{"role": "user", "content": "x" * 100_000} for _ in range(3)]  # > 256 KiB together
    await session.add_items(items(many + big))
    assert await session.get_items() == many + big
    assert await session.get_items(limit=1_100) == (many + big)[-1_100:]
    assert await session.get_items(limit=5) == (many + big)[-5:]


async def test_item_routes(remote: Any) -> None:
    path = "/api/sessions/r-2/items"
    added = await remote.post(path, json={"items": EVERY_KIND[:3]})
    assert added.status_code == 201 and len(added.json()["ids"]) == 3
    page = (await remote.get(path, params={"limit": 2})).json()
    assert [row["item"] for row in page["items"]] == EVERY_KIND[:2]
    rest = (await remote.get(path, params={"after_id": page["next_after_id"]})).json()
    assert [row["item"] for row in rest["items"]] == EVERY_KIND[2:3] and rest[
        "next_after_id"
    ] is None
    assert (await remote.get(path, params={"last": 1})).json()["items"][0]["item"] == EVERY_KIND[2]
    bad = await remote.post(path, json={"items": [{"role": "user", "content": "x"}, 3]})
    assert bad.status_code == 422
    assert (await remote.post(path, json={"items": []})).status_code == 422
    assert (await remote.delete(f"{path}/last")).json() == {"item": EVERY_KIND[2]}
    assert (await remote.delete(path)).status_code == 204
    assert (await remote.get(path)).json() == {"items": [], "next_after_id": None}
    assert (await remote.get("/api/sessions/r-2")).status_code == 200  # the session stays
    assert (await remote.get("/api/sessions/nobody/items")).json()["items"] == []


def test_remote_session_over_real_http_with_a_token(
    database_url: str, resource: str, scripted: ScriptedModelServer
) -> None:
    config = ServerConfig(
        resource_id=resource, token="t0k3n-for-tests", maintenance_interval_s=None
    )

    async def run(base: str) -> None:
        session = PopagentSession.remote("remote-http", base, token="t0k3n-for-tests")
        scripted.script(Reply("hello"))
        agent = agent_for(scripted, [])
        try:
            await Runner.run(agent, "hi over http", session=session, run_config=NO_TRACING)
            kept = [cast("dict[str, Any]", i) for i in await session.get_items()]
            assert kept[0] == {"content": "hi over http", "role": "user"}
            assert kept[1]["type"] == "message" and kept[1]["role"] == "assistant"
        finally:
            await session.close()
        wrong = PopagentSession.remote("remote-http", base, token="wrong")
        try:
            with pytest.raises(popagent.PopagentError, match="401"):
                await wrong.get_items()
        finally:
            await wrong.close()

    with uvicorn_server(config, database_url=database_url, model_from_env=False) as base:
        asyncio.run(run(base))


# --- packaging and the example -----------------------------------------------------------------


def test_without_the_sdk_the_import_error_says_what_to_install() -> None:
    assert_import_hint(
        ["agents"],
        "popagent.adapters.openai_agents",
        "openai-agents",
        prelude="import popagent, popagent.adapters.backend\n",
    )


def test_example_runs_offline(tmp_path: Path) -> None:
    summary = run_example("openai_agents_memory.py", tmp_path)
    assert summary == {
        "stored": True,
        "recalled_in_second_session": True,
        "first_session_items": [
            "message",
            *["function_call"] * 3,
            *["function_call_output"] * 3,
            "message",
        ],
        "refused_credential": True,
        "refused_resource": True,
    }


# --- session settings, and sessions used from other event loops ------------------------------


async def test_session_settings_are_normalized_like_the_sdks(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    default = PopagentSession.local("s-default", root, resource)
    assert default.session_settings == SessionSettings()
    given = PopagentSession.local("s-given", root, resource, session_settings={"limit": 0})
    assert isinstance(given.session_settings, SessionSettings)
    assert given.session_settings == SessionSettings(limit=0)
    assert given.session_settings.resolve({"limit": 4}).limit == 4
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        PopagentSession.local("s-bad", root, resource, session_settings={"limitt": 1})
    remote = PopagentSession.remote("s-remote", "http://127.0.0.1:9", session_settings={"limit": 3})
    assert remote.session_settings == SessionSettings(limit=3)
    await remote.close()


async def test_run_config_session_settings_override_the_sessions(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, scripted: ScriptedModelServer
) -> None:
    # The session's settings as a dict and the run's at once (this crashed on 'resolve').
    session = PopagentSession.local("s-run", root, resource, session_settings={"limit": 100})
    await session.add_items(items([{"role": "user", "content": f"Turn {i}"} for i in range(10)]))
    scripted.script(Reply("Got it"))
    await Runner.run(
        agent_for(scripted, []),
        "New question",
        session=session,
        run_config=RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=2)),
    )
    sent = [m.get("content") for m in scripted.requests[0]["messages"] if m["role"] == "user"]
    assert sent == ["Turn 8", "Turn 9", "New question"]


def test_a_session_from_threads_running_their_own_loops(database_url: str, resource: str) -> None:
    """The SDK's ``test_sqlite_session_concurrent_access``: five threads, each running a
    loop of its own, add items while the loop that opened popagent waits for them."""

    async def main() -> list[object]:
        async with popagent.connect(database_url, max_size=2) as root:
            session = PopagentSession.local("concurrent", root, resource)
            failures: list[object] = []

            def add_item(item: dict[str, Any]) -> None:
                loop = asyncio.new_event_loop()
                try:
                    loop.run_until_complete(session.add_items(items([item])))
                except BaseException as exc:
                    failures.append(exc)
                finally:
                    loop.close()

            queue = [{"role": "user", "content": f"Message {i}"} for i in range(10)]

            def add_two() -> None:
                for _ in range(2):
                    add_item(queue.pop())

            workers = [threading.Thread(target=add_two, daemon=True) for _ in range(5)]
            for worker in workers:  # the owner loop is blocked until they are done
                worker.start()
            for worker in workers:
                worker.join(timeout=30)
            stored = await session.get_items()
            contents = {cast("dict[str, Any]", i).get("content") for i in stored}
            assert failures == [] and contents == {f"Message {i}" for i in range(10)}
            return failures

    began = time.monotonic()
    # asyncio.run returns only once the pool closed: nothing hangs at teardown.
    assert asyncio.run(main()) == []
    assert time.monotonic() - began < 60
