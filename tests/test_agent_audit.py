"""Hooks and the audit trail: a row per hook firing, and never any content."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import UTC, datetime

import pytest

import popagent
from popagent.agent import (
    AuditHook,
    AuditLog,
    HookSet,
    ModelCallEnd,
    ModelCallStart,
    ToolCallEnd,
    ToolCallStart,
)
from popagent.agent.hooks import new_call_id
from popagent.errors import TurnFailedError
from popagent.store.database import open_pool
from tests.agent_support import AgentRig, CountingTool, audit_text
from tests.scripted_model import CallTools, Fail, Reply

FACT = "Allergic to hazelnuts since childhood"
RECALLED = "Keeps bees on the allotment near Utrecht"
USER = "Do my bees on the allotment need anything? Also note my hazelnut allergy."
REPLY = "Your bees are fine; I noted the hazelnut allergy."


class Recorder:
    """A hook that keeps every event it is given."""

    def __init__(self) -> None:
        self.events: list[object] = []

    async def before_model_call(self, event: ModelCallStart) -> None:
        self.events.append(event)

    async def after_model_call(self, event: ModelCallEnd) -> None:
        self.events.append(event)

    async def before_tool_call(self, event: ToolCallStart) -> None:
        self.events.append(event)

    async def after_tool_call(self, event: ToolCallEnd) -> None:
        self.events.append(event)


class Broken(Recorder):
    async def before_model_call(self, event: ModelCallStart) -> None:
        raise RuntimeError(f"broken hook saw {event}")

    async def after_tool_call(self, event: ToolCallEnd) -> None:
        raise RuntimeError("broken")


async def _turn_with_a_fact_and_a_recall(
    rig: AgentRig, resource: str, **kw: object
) -> popagent.TurnResult:
    memory, _, _, scripted = rig
    await memory.remember(resource, RECALLED, key="hobby.bees")
    scripted.script(
        CallTools(
            [("remember", {"content": FACT, "key": "health.allergy", "importance": 0.9})],
            text="Noting that.",
        ),
        Reply(REPLY),
    )
    agent = rig.agent(**kw)
    return await agent.run_turn(resource, "garden-chat", USER)


async def test_every_model_and_tool_call_has_audit_rows(rig: AgentRig, resource: str) -> None:
    memory = rig.memory
    result = await _turn_with_a_fact_and_a_recall(rig, resource)
    assert any(r.memory.content == RECALLED for r in result.recalled)
    rows = list(reversed(await AuditLog(memory.pool).list_audit(resource)))
    assert [(r.hook, r.tool) for r in rows] == [
        ("before_model_call", None),
        ("after_model_call", None),
        ("before_tool_call", "remember"),
        ("after_tool_call", "remember"),
        ("before_model_call", None),
        ("after_model_call", None),
    ]
    for before, after in zip(rows[::2], rows[1::2], strict=True):
        assert before.call_id == after.call_id
        assert before.started_at == after.started_at
        assert (before.outcome, before.duration_ms, before.output_chars) == (None, None, None)
        assert after.outcome == "ok" and after.error_type is None
        assert after.duration_ms is not None and after.duration_ms >= 0
        assert after.output_chars is not None and after.output_chars > 0
    assert len({r.call_id for r in rows}) == 3
    assert {(r.resource_id, r.session_id) for r in rows} == {(resource, "garden-chat")}
    first_model, tool, second_model = rows[1], rows[3], rows[5]
    assert (first_model.model, first_model.message_count) == ("scripted-1", 3)
    assert second_model.message_count == 5  # + the assistant's call and its result
    assert second_model.input_chars is not None and first_model.input_chars is not None
    assert second_model.input_chars > first_model.input_chars
    assert second_model.output_chars == len(REPLY)
    assert tool.model is None and tool.message_count is None
    assert tool.argument_names == ("content", "key", "importance")
    assert first_model.argument_names is None


async def test_audit_rows_hold_no_content(rig: AgentRig, resource: str) -> None:
    memory = rig.memory
    result = await _turn_with_a_fact_and_a_recall(rig, resource)
    assert RECALLED in result.memory_block
    text = await audit_text(memory, resource)
    assert text.count("\n") == 5  # six rows
    for content in (
        FACT,
        "hazelnut",  # any fragment of the fact, the user text or the reply
        RECALLED,
        "allotment",
        USER,
        REPLY,
        "Noting that",
        "health.allergy",  # an argument value (the key)
        popagent.HEADER,
        "Stored: created",  # the tool result
        "Relevant long-term",
    ):
        assert content.lower() not in text.lower(), content
    # A number cannot be searched for in the text (timestamps and durations hold
    # digits); the rows' only argument field holds names.
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert {frozenset(r.argument_names or ()) for r in rows} <= {
        frozenset(),
        frozenset({"content", "importance", "key"}),
    }


async def test_failed_model_calls_are_audited_with_the_error_type_only(
    rig: AgentRig, resource: str
) -> None:
    memory, _, _, scripted = rig
    scripted.script(Fail(400, body={"error": {"message": "bad request about hazelnuts"}}))
    with pytest.raises(TurnFailedError, match="hazelnuts"):
        await rig.agent().run_turn(resource, "s1", "hazelnuts?")
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert [(r.hook, r.outcome, r.error_type) for r in rows] == [
        ("after_model_call", "error", "ModelError"),
        ("before_model_call", None, None),
    ]
    assert "hazelnut" not in await audit_text(memory, resource)


async def test_hooks_get_paired_content_free_events_and_a_broken_hook_changes_nothing(
    rig: AgentRig, resource: str, caplog: pytest.LogCaptureFixture
) -> None:
    memory = rig.memory
    recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="popagent.agent.hooks"):
        result = await _turn_with_a_fact_and_a_recall(
            rig,
            resource,
            hooks=[Broken(), recorder, AuditHook(memory.pool)],
        )
    assert result.reply == REPLY
    assert [type(e).__name__ for e in recorder.events] == [
        "ModelCallStart",
        "ModelCallEnd",
        "ToolCallStart",
        "ToolCallEnd",
        "ModelCallStart",
        "ModelCallEnd",
    ]
    assert len(await AuditLog(memory.pool).list_audit(resource)) == 6
    failures = [r.getMessage() for r in caplog.records]
    assert failures == [
        "hook Broken.before_model_call failed: RuntimeError",
        "hook Broken.after_tool_call failed: RuntimeError",
        "hook Broken.before_model_call failed: RuntimeError",
    ]
    # The events have no field that could carry content.
    assert {f.name for f in dataclasses.fields(ModelCallStart)} == {
        "call_id",
        "resource_id",
        "session_id",
        "model",
        "round",
        "message_count",
        "input_chars",
        "tool_count",
        "started_at",
    }
    assert {f.name for f in dataclasses.fields(ToolCallStart)} == {
        "call_id",
        "resource_id",
        "session_id",
        "tool",
        "argument_names",
        "input_chars",
        "started_at",
    }
    assert {f.name for f in dataclasses.fields(ModelCallEnd)} == {
        "start",
        "outcome",
        "duration_ms",
        "output_chars",
        "tool_call_count",
        "error_type",
    }
    assert {f.name for f in dataclasses.fields(ToolCallEnd)} == {
        "start",
        "outcome",
        "duration_ms",
        "output_chars",
        "error_type",
    }


async def test_audit_write_failures_never_fail_a_turn(
    rig: AgentRig, resource: str, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    memory = rig.memory
    async with open_pool(database_url, max_size=1) as closed_pool:
        pass  # closed on exit: every audit write through it fails
    with caplog.at_level(logging.WARNING, logger="popagent.agent.audit"):
        result = await _turn_with_a_fact_and_a_recall(rig, resource, hooks=[AuditHook(closed_pool)])
    assert result.reply == REPLY
    assert result.episode is not None
    assert await AuditLog(memory.pool).list_audit(resource) == []
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert all(m.startswith("audit rows for after_") for m in messages)
    assert all("DatabaseError" in m for m in messages)  # the pool speaks popagent's errors


async def test_model_supplied_names_are_recorded_only_when_they_are_identifiers(
    rig: AgentRig, resource: str
) -> None:
    memory, _, _, scripted = rig
    scripted.script(
        CallTools(
            [
                ("my hazelnut allergy is severe", {"x": 1}),
                ("ping", {"hazelnut allergy": 1, "ok_name": 2}),
            ]
        ),
        Reply("Done."),
    )
    await rig.agent(tools=[CountingTool()]).run_turn(resource, "s1", "go")
    rows = [r for r in await AuditLog(memory.pool).list_audit(resource) if r.tool]
    assert {(r.tool, r.argument_names) for r in rows} == {
        ("<invalid>", ("x",)),
        ("ping", ("<invalid>", "ok_name")),
    }
    assert {r.outcome for r in rows if r.hook == "after_tool_call"} == {"error", "ok"}
    assert "hazelnut" not in await audit_text(memory, resource)


async def test_list_audit_is_scoped_and_limited(
    rig: AgentRig, resource: str, other_resource: str
) -> None:
    memory, _, _, scripted = rig
    agent = rig.agent()
    scripted.script(Reply("one"), Reply("two"), Reply("three"))
    await agent.run_turn(resource, "a", "first")
    await agent.run_turn(resource, "b", "second")
    await agent.run_turn(other_resource, "a", "third")
    log = AuditLog(memory.pool)
    assert len(await log.list_audit(resource)) == 4
    assert {r.session_id for r in await log.list_audit(resource, "b")} == {"b"}
    newest = await log.list_audit(resource, limit=1)
    assert [(r.session_id, r.hook) for r in newest] == [("b", "after_model_call")]
    assert {r.resource_id for r in await log.list_audit(other_resource)} == {other_resource}
    assert newest[0].to_json()["call_id"] == newest[0].call_id


# --- under load: group commits, and a drain that waits for its own calls ------------------


def _tool_events(resource: str, n: int) -> tuple[ToolCallStart, ToolCallEnd]:
    start = ToolCallStart(
        call_id=new_call_id(),
        resource_id=resource,
        session_id="load",
        tool="remember",
        argument_names=("content",),
        input_chars=n,
        started_at=datetime.now(UTC),
    )
    return start, ToolCallEnd(start=start, outcome="ok", duration_ms=1.0, output_chars=n)


async def _audited_call(hooks: HookSet, resource: str, n: int) -> None:
    start, end = _tool_events(resource, n)
    await hooks.before_tool_call(start)
    await hooks.after_tool_call(end)
    await hooks.drain([start.call_id])


async def test_a_burst_of_calls_keeps_every_row_in_a_few_transactions(
    database_url: str, resource: str
) -> None:
    # 600 concurrent calls on a pool of 2 whose checkout timeout is half a second: each
    # call once wrote its rows in a transaction of its own, and under this queue lost them.
    async with popagent.connect(database_url, max_size=2, checkout_timeout=0.5) as root:
        memory = root.memory
        hooks = HookSet([AuditHook(memory.pool)])
        await asyncio.gather(*(_audited_call(hooks, resource, n) for n in range(600)))
        async with memory.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n, count(DISTINCT xmin::text) AS transactions"
                " FROM popagent_audit WHERE resource_id = %s",
                (resource,),
            )
            row = await cur.fetchone()
    assert row is not None and row["n"] == 1_200
    assert row["transactions"] <= 20


async def test_drain_waits_for_its_own_calls_not_for_everyone_elses(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    hook = AuditHook(memory.pool)
    hooks = HookSet([hook])
    stop = asyncio.Event()

    async def others() -> None:  # other callers hand rows in without pause for 3 s
        n = 0
        while not stop.is_set():
            start, end = _tool_events(resource, n)
            await hook.before_tool_call(start)
            await hook.after_tool_call(end)
            n += 1
            await asyncio.sleep(0.001)

    producer = asyncio.ensure_future(others())
    started = time.monotonic()
    try:
        await asyncio.sleep(0.1)
        # The others stop only after these return: a drain that waited for their rows
        # too would never end, and the bounds below (far above a drain's time on a
        # busy machine) turn that into a failure.
        await asyncio.wait_for(_audited_call(hooks, resource, 7), 30)  # its own call only
        await asyncio.wait_for(hooks.drain(), 30)  # the rows handed so far, no later ones
    finally:
        await asyncio.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
        stop.set()
        await producer
        await hooks.drain()
    rows = await AuditLog(memory.pool).list_audit(resource, "load", limit=10_000)
    assert len(rows) % 2 == 0 and len(rows) >= 2 * 100
