"""Tools in turns: ``remember`` wiring and refusals, unknown tools, bad arguments, the loop bound."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

import popagent
from popagent.agent import (
    SUPERVISOR_GUIDANCE,
    AuditHook,
    AuditLog,
    RememberTool,
    ToolCallRecord,
    ToolContext,
    ToolRunner,
    check_arguments,
)
from popagent.agent.remember import REMEMBER_SPEC
from popagent.agent.turn import recorded_call_id
from popagent.errors import TurnFailedError, ValidationError
from popagent.models import MemoryFilter, Provenance
from popagent.secrets import SecretStore
from tests.agent_support import AgentRig, CountingTool, offered_tools, tool_results
from tests.scripted_model import CallTools, Reply

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


async def test_remember_ignores_a_model_supplied_resource_and_writes_nothing(
    rig: AgentRig, resource: str, other_resource: str
) -> None:
    memory, _, _, scripted = rig
    agent = rig.agent()
    scripted.script(
        CallTools([("remember", {"content": "Likes jazz", "resource_id": other_resource})]),
        Reply("Sorry, that did not work."),
    )
    result = await agent.run_turn(resource, "s1", "I like jazz")
    assert result.tool_calls == (ToolCallRecord("remember", "refused"),)
    (text,) = tool_results(scripted.requests[-1])
    assert text.startswith("Refused, the tool did not run: unknown argument 'resource_id'")
    assert "content, key, importance" in text
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []


async def test_remember_writes_to_the_turns_resource_and_session(
    rig: AgentRig, resource: str
) -> None:
    memory, _, _, scripted = rig
    agent = rig.agent()
    scripted.script(
        CallTools([("remember", {"content": "Prefers dark mode", "key": "UI.Theme"})]),
        Reply("Saved."),
        CallTools([("remember", {"content": "Prefers light mode", "key": "ui.theme"})]),
        Reply("Updated."),
        CallTools([("remember", {"content": "Prefers   light mode ", "key": "ui.theme"})]),
        Reply("Already known."),
    )
    await agent.run_turn(resource, "first-chat", "I prefer dark mode")
    (created,) = await memory.list(resource, MemoryFilter(kind="fact"))
    assert (created.key, created.session_id) == ("ui.theme", "first-chat")
    assert tool_results(scripted.requests[-1]) == [
        f"Stored: created fact #{created.id} with key 'ui.theme': Prefers dark mode"
    ]

    await agent.run_turn(resource, "second-chat", "Actually, light mode")
    (updated,) = await memory.list(resource, MemoryFilter(kind="fact"))
    assert updated.id == created.id
    assert (updated.content, updated.session_id) == ("Prefers light mode", "second-chat")
    assert tool_results(scripted.requests[-1]) == [
        f"Stored: updated fact #{created.id} with key 'ui.theme'; it replaces the previous "
        "value: Prefers light mode"
    ]

    await agent.run_turn(resource, "second-chat", "Light mode, as I said")
    assert tool_results(scripted.requests[-1])[-1] == (
        f"Unchanged: fact #{created.id} with key 'ui.theme' already holds this: Prefers light mode"
    )
    assert len(await memory.list(resource, MemoryFilter(kind="fact"))) == 1


async def test_remember_refuses_a_credential_and_says_why(rig: AgentRig, resource: str) -> None:
    memory, _, _, scripted = rig
    scripted.script(
        CallTools([("remember", {"content": f"GitHub token is {TOKEN}"})]),
        Reply("I will not store that as a memory."),
    )
    result = await rig.agent().run_turn(resource, "s1", "Remember my GitHub token please")
    assert result.tool_calls == (ToolCallRecord("remember", "refused"),)
    (text,) = tool_results(scripted.requests[-1])
    assert text.startswith("Refused, nothing was stored: content: looks like it contains a")
    assert "credential (api_key)" in text and "secret store" in text
    assert TOKEN not in text
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"content": ""}, "argument 'content' must be at least 1 characters"),
        ({"content": "x" * 2001}, "argument 'content' must be at most 2000 characters (got 2001)"),
        ({"content": "Likes tea", "importance": 1.5}, "argument 'importance' must be at most 1"),
        ({"content": "Likes tea", "importance": True}, "argument 'importance' must be a number"),
        ({"content": 42}, "argument 'content' must be a string"),
        ({"key": "drink"}, "missing required argument 'content'"),
    ],
)
async def test_remember_arguments_are_checked_before_it_runs(
    rig: AgentRig, resource: str, arguments: dict[str, Any], reason: str
) -> None:
    memory, _, _, scripted = rig
    scripted.script(CallTools([("remember", arguments)]), Reply("Hm."))
    result = await rig.agent().run_turn(resource, "s1", "I like tea")
    assert result.tool_calls == (ToolCallRecord("remember", "refused"),)
    assert tool_results(scripted.requests[-1]) == [f"Refused, the tool did not run: {reason}."]
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


async def test_validation_beyond_the_schema_is_the_write_paths_own(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    # Whitespace-only content passes the schema but not the fact rules.
    scripted.script(CallTools([("remember", {"content": "   ", "key": "a key"})]), Reply("Hm."))
    await rig.agent().run_turn(resource, "s1", "I like tea")
    assert tool_results(scripted.requests[-1]) == [
        "Refused, nothing was stored: content: is required and must not be empty"
    ]


async def test_remember_takes_an_expiry_and_refuses_a_bad_one_naming_it(
    rig: AgentRig, resource: str
) -> None:
    memory, _, _, scripted = rig
    refusal = (
        "Refused, nothing was stored: expires_at: must be an ISO 8601 time with a time zone, "
        "e.g. 2030-06-30T18:00:00+00:00"
    )
    cases = [
        ("2030-06-30", refusal),  # no time zone
        ("next friday", refusal),
        ("2001-01-01T00:00:00Z", "Refused, nothing was stored: expires_at: must be in the future"),
    ]
    for n, (value, expected) in enumerate(cases):
        scripted.script(
            CallTools([("remember", {"content": "In Lisbon", "expires_at": value})]), Reply("Hm.")
        )
        result = await rig.agent().run_turn(resource, f"s{n}", "I'm away")
        assert result.tool_calls == (ToolCallRecord("remember", "refused"),), value
        assert tool_results(scripted.requests[-1]) == [expected], value
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []

    scripted.script(
        CallTools(
            [
                (
                    "remember",
                    {"content": "In Lisbon", "key": "trip", "expires_at": "2099-06-30T18:00+02:00"},
                )
            ]
        ),
        Reply("Noted."),
    )
    await rig.agent().run_turn(resource, "s9", "I'm in Lisbon until June")
    (fact,) = await memory.list(resource, MemoryFilter(kind="fact"))
    assert fact.expires_at == datetime(2099, 6, 30, 16, tzinfo=UTC)
    assert tool_results(scripted.requests[-1]) == [
        f"Stored: created fact #{fact.id} with key 'trip', expiring 2099-06-30T16:00:00+00:00: "
        "In Lisbon"
    ]
    assert REMEMBER_SPEC.parameters["properties"]["expires_at"]["type"] == "string"
    assert "expires_at" in SUPERVISOR_GUIDANCE


async def test_unknown_tool_and_invalid_json_become_results_not_failures(
    rig: AgentRig, resource: str
) -> None:
    memory, _, _, scripted = rig
    scripted.script(
        CallTools(
            [
                ("fly_to_moon", {"when": "now"}),
                ("remember", '{"content": "Likes tea"'),
                ("remember", "[1, 2]"),
            ]
        ),
        Reply("Those did not work."),
    )
    result = await rig.agent().run_turn(resource, "s1", "I like tea")
    assert result.reply == "Those did not work."
    assert result.tool_calls == (
        ToolCallRecord("fly_to_moon", "error"),
        ToolCallRecord("remember", "refused"),
        ToolCallRecord("remember", "refused"),
    )
    unknown, invalid, not_object = tool_results(scripted.requests[-1])
    assert unknown == "Error: there is no tool named 'fly_to_moon' (available tools: remember)."
    assert invalid.startswith("Refused, the tool did not run: the arguments are not valid JSON")
    assert not_object == (
        "Refused, the tool did not run: the arguments must be a JSON object, not list."
    )
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    assert result.episode is not None


async def test_tool_loop_is_bounded(rig: AgentRig, resource: str) -> None:
    memory, threads, _, scripted = rig
    ping = CountingTool()
    agent = rig.agent(tools=[ping], max_tool_rounds=3)
    scripted.script(*[CallTools([("ping", {})]) for _ in range(3)])
    with pytest.raises(TurnFailedError, match="still calling tools after 3 model calls") as caught:
        await agent.run_turn(resource, "s1", "ping forever")
    assert caught.value.cause is None
    assert len(scripted.requests) == 3 and scripted.pending == 0
    assert ping.calls == 2  # the last round's calls are not run: no model call would read them
    assert await memory.list(resource, MemoryFilter(kind="episode")) == []
    stored = await threads.list_messages(resource, "s1")
    assert [m.role for m in stored] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]

    # The next turn of the session still sends a valid conversation: the
    # unanswered calls of the last round are left out of its history.
    scripted.script(Reply("Fine."))
    await rig.agent(tools=[ping]).run_turn(resource, "s1", "stop")
    messages = [m for m in scripted.requests[-1]["messages"] if m["role"] != "system"]
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
    ]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ["call_0", "call_0"]


async def test_default_rounds_allow_eight_model_calls(rig: AgentRig, resource: str) -> None:
    scripted = rig.scripted
    ping = CountingTool()
    agent = rig.agent(tools=[ping])
    scripted.script(*[CallTools([("ping", {})]) for _ in range(7)], Reply("Done pinging."))
    result = await agent.run_turn(resource, "s1", "ping seven times")
    assert (result.model_calls, ping.calls, result.reply) == (8, 7, "Done pinging.")


async def test_secret_tools_are_offered_only_with_a_secret_store(
    rig: AgentRig, secret_store: SecretStore, resource: str
) -> None:
    scripted = rig.scripted
    scripted.script(Reply("a"), Reply("b"))
    await rig.agent(tools=[CountingTool()]).run_turn(resource, "s1", "hi")
    await rig.agent(secrets=secret_store).run_turn(resource, "s1", "hi")
    without, with_store = (offered_tools(r) for r in scripted.requests)
    assert without == ["remember", "ping"]
    assert with_store == ["remember", "set_secret", "list_secrets", "delete_secret"]
    remember_spec = scripted.requests[0]["tools"][0]["function"]
    assert remember_spec["parameters"]["additionalProperties"] is False
    assert remember_spec["parameters"]["required"] == ["content"]
    assert set(remember_spec["parameters"]["properties"]) == {
        "content",
        "key",
        "importance",
        "expires_at",
        "based_on",
        "happened_at",
    }


async def test_tool_runner_works_outside_a_turn(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    runner = ToolRunner([RememberTool()], [AuditHook(memory.pool)])
    ctx = ToolContext(resource, None, memory)
    outcome = await runner.call(ctx, "remember", json.dumps({"content": "Speaks Dutch"}))
    assert outcome.outcome == "ok"
    (fact,) = await memory.list(resource, MemoryFilter(kind="fact"))
    assert (fact.content, fact.session_id) == ("Speaks Dutch", None)
    # Outside a turn there is no turn, message or call to name: origin agent alone.
    assert (fact.origin, fact.turn_id, fact.message_ids, fact.tool_call_id) == (
        "agent",
        None,
        (),
        None,
    )
    with pytest.raises(ValidationError) as caught:
        ToolContext(resource, None, memory, provenance=Provenance(origin="elsewhere"))
    assert caught.value.field == "origin"
    parsed = await runner.call(ctx, "remember", {"content": "Speaks Dutch"})
    assert parsed.text.startswith("Unchanged:")
    await runner.drain()
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert [r.hook for r in rows] == ["after_tool_call", "before_tool_call"] * 2
    assert {r.session_id for r in rows} == {None}


def test_a_tool_call_id_no_write_could_record_is_left_out() -> None:
    assert recorded_call_id("call_0") == "call_0"
    assert recorded_call_id("x" * 256) == "x" * 256
    for unusable in ("", "x" * 257, "a\x00b", "\ud800"):
        assert recorded_call_id(unusable) is None, repr(unusable)


def test_check_arguments_names_the_argument_never_the_value() -> None:
    schema = REMEMBER_SPEC.parameters
    assert check_arguments(schema, {"content": "x"}) is None
    assert check_arguments(schema, {"content": "x", "importance": 0}) is None
    problem = check_arguments(schema, {"content": "x", "password": "hunter22"})
    assert problem == (
        "unknown argument 'password' (this tool accepts: content, key, importance, expires_at, based_on, happened_at)"
    )
    assert check_arguments(schema, {"content": "x", "importance": float("nan")}) == (
        "argument 'importance' must be a finite number"
    )
    assert check_arguments(schema, {"content": "hunter22", "key": 7}) == (
        "argument 'key' must be a string"
    )
