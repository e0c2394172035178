"""Observational memory through the real turn pipeline: real PostgreSQL, the real
client, the scripted model server answering as Observer, Reflector and actor."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import popagent
from popagent.agent import (
    OBSERVATIONS_LABEL,
    SUPERVISOR_GUIDANCE,
    Agent,
    ObservationalHistory,
)
from popagent.models import ObservationLog
from popagent.observe.engine import ObservationalMemory
from popagent.observe.tokens import count_message, count_text
from popagent.store import observations as obs_sql
from popagent.threads import ThreadStore
from tests.agent_support import AgentRig, CountingTool, offered_tools, system_texts
from tests.observe_support import (
    OBSERVE,
    is_observer,
    is_reflector,
    observed_section,
    reflecting,
    reflector_input,
    seed,
    update_settings,
    user_text,
)
from tests.scripted_model import CallTools, Fail, Hang, Reply, Respond

BIG = 1_000_000
#: Observation from 200 pending tokens on, reflection not due: most tests' starting point.
AT_200: dict[str, Any] = {
    "observation_threshold_tokens": 200,
    "reflection_threshold_tokens": BIG // 100,
}


def _agent(rig: AgentRig, history: ObservationalHistory, **kw: Any) -> Agent:
    return rig.agent(history=history, hooks=[], **kw)


def _actor_history(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The actor request's messages between the guidance and the new user message."""
    messages = body["messages"]
    assert messages[0]["content"] == SUPERVISOR_GUIDANCE
    history = list(messages[1:-1])
    # Recalled long-term memories come first when there are any (semantic recall finds
    # the earlier turns' episodes); these tests are about what follows them.
    if history and history[0]["content"].startswith(popagent.HEADER):
        history = history[1:]
    return history


async def _stored(
    threads: ThreadStore, resource: str, session: str
) -> list[popagent.models.Message]:
    return await threads.list_messages(resource, session, limit=1000)


async def test_observation_at_threshold_gives_observations_plus_retained_tail(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, chat_model, scripted = rig
    await update_settings(memory, resource, **AT_200, retained_context_percent=30)
    history = ObservationalHistory(chat_model)
    agent = _agent(rig, history)

    # Below the threshold: no Observer call, the raw messages are the context.
    ids = await seed(threads, resource, "s", 4)
    scripted.script(Reply("first answer"))
    await agent.run_turn(resource, "s", "hello")
    assert len(scripted.requests) == 1
    assert not is_observer(scripted.requests[0])
    assert [m["content"] for m in _actor_history(scripted.requests[0])] == [
        m.content for m in await _stored(threads, resource, "s")
    ][:4]

    ids += await seed(threads, resource, "s", 6, tag="n")
    stored = await _stored(threads, resource, "s")
    pending = sum(count_message(m) for m in stored)
    assert pending >= 200
    scripted.script(OBSERVE, Reply("second answer"))
    result = await agent.run_turn(resource, "s", "what did I say?")
    assert result.reply == "second answer"
    observer, actor = scripted.requests[1:]
    assert is_observer(observer)

    head = history.last
    assert head is not None and head.log is not None and head.observed
    cursor = head.log.last_observed_message_id
    assert cursor is not None
    observed = [m for m in stored if m.id <= cursor]
    tail = [m for m in stored if m.id > cursor]
    # The retained tail is the shortest suffix holding 30% of 200 tokens.
    floor = 60
    assert sum(count_message(m) for m in tail) >= floor
    assert sum(count_message(m) for m in tail[1:]) < floor
    assert observed and tail
    # The Observer saw exactly the observed messages.
    section = observed_section(observer)
    assert all(m.content in section for m in observed)
    assert not any(m.content in section for m in tail)
    # The context: the labelled observations, then the tail, raw and exact.
    context = _actor_history(actor)
    assert context[0]["role"] == "system"
    assert context[0]["content"].startswith(OBSERVATIONS_LABEL)
    assert all(f"User: {m.content}" in context[0]["content"] for m in observed if m.role == "user")
    assert [m["content"] for m in context[1:]] == [m.content for m in tail]
    # State: generation 0, one group pointing at the exact observed messages; raw messages kept.
    (log,) = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
    assert (log.generation, log.origin, log.last_observed_message_id) == (0, "observation", cursor)
    assert log.observation_tokens == count_text(log.observations)
    (group,) = head.groups
    assert (group.first_message_id, group.last_message_id) == (observed[0].id, observed[-1].id)
    assert len(await _stored(threads, resource, "s")) == len(stored) + 2


async def test_retained_context_size_follows_the_setting(rig: AgentRig, resource: str) -> None:
    memory, threads, chat_model, scripted = rig
    history = ObservationalHistory(chat_model)
    agent = _agent(rig, history)
    tails: dict[int, int] = {}
    for percent in (0, 20, 60):
        session = f"s{percent}"
        await update_settings(memory, resource, **AT_200, retained_context_percent=percent)
        await seed(threads, resource, session, 12)
        scripted.script(OBSERVE, Reply("ok"))
        await agent.run_turn(resource, session, "go on")
        context = _actor_history(scripted.requests[-1])
        raw = [m for m in context if m["role"] != "system"]
        assert history.last is not None
        tail = history.last.recent
        assert [m["content"] for m in raw] == [m.content for m in tail]
        tokens = sum(count_message(m) for m in tail)
        floor = 200 * percent // 100
        assert tokens >= floor
        if tail:
            assert tokens - count_message(tail[0]) < floor
        tails[percent] = len(tail)
    assert tails[0] == 0
    assert 0 < tails[20] < tails[60]


async def test_a_settings_change_applies_on_the_next_turn_only(
    rig: AgentRig, resource: str, database_url: str
) -> None:
    memory, threads, chat_model, scripted = rig
    await update_settings(memory, resource, observation_threshold_tokens=BIG)
    history = ObservationalHistory(chat_model)
    ping = CountingTool()
    agent = _agent(rig, history, tools=[history.retrieval_tool(rig.memory.pool), ping])
    await seed(threads, resource, "s", 10)

    def change_settings(body: dict[str, Any]) -> CallTools:
        # Mid-turn, from another connection: lower the threshold and turn retrieval on.
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE popagent_memory_settings SET observation_threshold_tokens = 100, "
                "retained_context_percent = 10, retrieval_scope = 'thread', "
                "version = version + 1 WHERE resource_id = %s",
                (resource,),
            )
        return CallTools([("ping", {})])

    scripted.script(Respond(change_settings), Reply("done"))
    await agent.run_turn(resource, "s", "first")
    first, second = scripted.requests
    # Neither this turn's history step nor its second model call saw the change.
    assert not is_observer(first) and not is_observer(second)
    assert offered_tools(first) == offered_tools(second) == ["remember", "ping"]
    assert all(not t.startswith(OBSERVATIONS_LABEL) for t in system_texts(second))

    scripted.script(OBSERVE, Reply("next"))
    await agent.run_turn(resource, "s", "second")
    observer, actor = scripted.requests[2:]
    assert is_observer(observer)
    assert offered_tools(actor) == ["remember", "read_history", "ping"]
    assert any(t.startswith(OBSERVATIONS_LABEL) for t in system_texts(actor))


def _lines(prefix: str, count: int, width: int = 12) -> str:
    return "\n".join(
        f"* 🔴 (10:{i:02d}) {prefix} {i} " + " ".join(f"w{i}x{j}" for j in range(width))
        for i in range(count)
    )


async def _observed_once(
    rig: AgentRig, resource: str, history: ObservationalHistory | None = None
) -> tuple[Agent, ObservationLog]:
    """Session "s" of ``resource`` observed once at a 200-token threshold (10% kept raw),
    no reflection due yet: the agent (over ``history``, a default one unless given) and
    generation 0."""
    memory, threads, chat_model, scripted = rig
    await update_settings(memory, resource, **AT_200, retained_context_percent=10)
    history = history or ObservationalHistory(chat_model)
    agent = _agent(rig, history)
    await seed(threads, resource, "s", 12)
    scripted.script(OBSERVE, Reply("observed"))
    await agent.run_turn(resource, "s", "observe please")
    (gen0,) = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
    return agent, gen0


async def test_reflection_replaces_the_log_with_a_new_generation_and_keeps_the_old(
    rig: AgentRig, resource: str
) -> None:
    memory, _, chat_model, scripted = rig
    agent, gen0 = await _observed_once(rig, resource)
    assert gen0.observation_tokens > 100

    await update_settings(memory, resource, reflection_threshold_tokens=100)
    summary = "* 🔴 (10:00) User keeps notes about a painted garden shed and its key."
    scripted.script(reflecting(summary), Reply("reflected"))
    await agent.run_turn(resource, "s", "and now?")
    reflector, actor = scripted.requests[-2:]
    assert is_reflector(reflector)
    assert reflector_input(reflector) == gen0.observations
    assert "level 1" in reflector["messages"][-1]["content"]

    gens = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
    assert [(g.generation, g.origin) for g in gens] == [(0, "observation"), (1, "reflection")]
    assert gens[0] == gen0  # the older generation stays stored, unchanged
    assert gens[1].observations == summary
    assert gens[1].last_observed_message_id == gen0.last_observed_message_id
    (block,) = [t for t in system_texts(actor) if t.startswith(OBSERVATIONS_LABEL)]
    assert summary in block
    assert gen0.observations.splitlines()[0] not in block
    # The reflected generation records the groups it covers; its own group spans them.
    async with memory.pool.connection() as conn:
        (old_group,) = await obs_sql.groups_of_log(conn, gen0)
        (new_group,) = await obs_sql.groups_of_log(conn, gens[1])
    assert gens[1].covered_group_ids == (old_group.id,)
    assert new_group.kind == "reflection"
    assert (new_group.first_message_id, new_group.last_message_id) == (
        old_group.first_message_id,
        old_group.last_message_id,
    )


async def test_empty_looping_or_larger_reflections_never_replace_the_log(
    rig: AgentRig, resource: str
) -> None:
    memory, _, chat_model, scripted = rig
    agent, gen0 = await _observed_once(rig, resource)

    await update_settings(memory, resource, reflection_threshold_tokens=100)
    loop = "\n".join(["* 🔴 (10:00) shed painted, key under the pot."] * 12)
    # Smaller than the log, so only the loop detector can refuse it.
    assert count_text(loop) < gen0.observation_tokens
    larger = gen0.observations + "\n" + _lines("extra", 10)
    scripted.script(reflecting(""), reflecting(loop), reflecting(larger), Reply("still here"))
    result = await agent.run_turn(resource, "s", "reflect now")
    assert result.reply == "still here"
    reflections = [r for r in scripted.requests if is_reflector(r)]
    # Bounded escalation: three attempts, each asking for more compression.
    assert [f"level {n}" in r["messages"][-1]["content"] for n, r in enumerate(reflections, 1)] == [
        True
    ] * 3
    gens = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
    assert [g.generation for g in gens] == [0]
    assert gens[0].observations == gen0.observations
    (block,) = [t for t in system_texts(scripted.requests[-1]) if t.startswith(OBSERVATIONS_LABEL)]
    assert gen0.observations.splitlines()[0] in block

    # No reflection loop: the next turn does not reflect again (the log has not grown).
    scripted.script(Reply("calm"))
    assert (await agent.run_turn(resource, "s", "again")).reply == "calm"
    assert not any(is_reflector(r) for r in scripted.requests[-1:])
    assert len([r for r in scripted.requests if is_reflector(r)]) == 3


async def test_a_reflection_never_drops_observations_activated_while_it_ran(
    rig: AgentRig, resource: str, database_url: str
) -> None:
    memory, _, chat_model, scripted = rig
    agent, gen0 = await _observed_once(rig, resource)
    late = "* 🔴 (11:00) User: activated by another turn while the Reflector ran"

    def reflect_while_another_turn_activates(body: dict[str, Any]) -> Reply:
        assert is_reflector(body)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE popagent_observation_logs SET observations = observations || %s, "
                "updated_at = now() WHERE resource_id = %s AND id = %s",
                ("\n\n" + late, resource, gen0.id),
            )
        return Reply("<observations>\n* 🔴 (10:00) User keeps shed notes.\n</observations>")

    await update_settings(memory, resource, reflection_threshold_tokens=100)
    scripted.script(Respond(reflect_while_another_turn_activates), Reply("answer"))
    await agent.run_turn(resource, "s", "reflect now")
    gens = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
    assert [g.generation for g in gens] == [0]  # the stale reflection was dropped
    assert gens[0].observations.endswith(late)
    (block,) = [t for t in system_texts(scripted.requests[-1]) if t.startswith(OBSERVATIONS_LABEL)]
    assert late in block


async def test_escalation_keeps_the_smallest_valid_reflection(rig: AgentRig, resource: str) -> None:
    memory, _, chat_model, scripted = rig
    agent, gen0 = await _observed_once(rig, resource)
    lines = gen0.observations.splitlines()
    smaller = "\n".join(lines[: len(lines) * 3 // 4])
    smallest = "\n".join(lines[: len(lines) // 2])
    assert count_text(smallest) > 100  # neither reaches the target: escalation goes on

    await update_settings(memory, resource, reflection_threshold_tokens=100)
    scripted.script(reflecting(smaller), reflecting(smallest), reflecting(smaller), Reply("ok"))
    await agent.run_turn(resource, "s", "compress")
    assert len([r for r in scripted.requests if is_reflector(r)]) == 3
    gens = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
    assert [g.generation for g in gens] == [0, 1]
    assert gens[1].observations == smallest
    # Above the threshold still, but no new generation on every turn after it.
    scripted.script(Reply("calm"))
    await agent.run_turn(resource, "s", "again")
    assert len(await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")) == 2


async def test_a_failing_observer_degrades_to_raw_context_and_keeps_the_log(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, chat_model, scripted = rig
    # A bound a busy machine's successful Observer call stays well within, and a hang
    # far past it: the turn's time tells the bound from the hang with room either way.
    history = ObservationalHistory(chat_model, timeout_s=5.0)
    agent, gen0 = await _observed_once(rig, resource, history)
    await seed(threads, resource, "s", 12, tag="late")
    unobserved = [
        m
        for m in await _stored(threads, resource, "s")
        if m.id > (gen0.last_observed_message_id or 0)
    ]

    # An HTTP error (after the client's own retries), then a hang past the bound.
    for step in (Fail(500), Hang(120.0, Reply("<observations>\n* late\n</observations>"))):
        steps = [step] * 3 if isinstance(step, Fail) else [step]
        scripted.script(*steps, Reply("answered anyway"))
        began = time.monotonic()
        result = await agent.run_turn(resource, "s", "are you there?")
        assert time.monotonic() - began < 60  # the 5 s bound, not the 120 s hang
        assert result.reply == "answered anyway"
        assert history.last is not None and history.last.degraded
        context = _actor_history(scripted.requests[-1])
        assert context[0]["content"].startswith(OBSERVATIONS_LABEL)
        assert gen0.observations in context[0]["content"]
        raw = [m["content"] for m in context[1:]]
        assert raw[: len(unobserved)] == [m.content for m in unobserved]
        gens = await ObservationalMemory(memory.pool, chat_model).generations(resource, "s")
        assert gens == [gen0]
        unobserved = [
            m for m in await _stored(threads, resource, "s") if m.id > unobserved[0].id - 1
        ]


async def test_temporal_marker_before_the_new_message_follows_the_setting(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, chat_model, scripted = rig
    later = ObservationalHistory(
        chat_model, clock=lambda: datetime.now(UTC) + timedelta(hours=2, minutes=5, seconds=30)
    )
    agent = _agent(rig, later)
    await seed(threads, resource, "s", 2)
    scripted.script(Reply("a"), Reply("b"))
    await agent.run_turn(resource, "s", "no markers by default")
    assert not any("later]" in t for t in system_texts(scripted.requests[-1]))
    await update_settings(memory, resource, temporal_markers=True)
    await agent.run_turn(resource, "s", "back again")
    context = _actor_history(scripted.requests[-1])
    assert context[-1] == {
        "role": "system",
        "content": "[2 hours 5 minutes later] (since the previous message)",
    }


_ATTACHED = (
    {
        "type": "attachment",
        "name": "bed.png",
        "media_type": "image/png",
        "url": "https://example.test/bed.png",
    },
    {"type": "attachment", "name": "leaf.jpg", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
    {"type": "attachment", "name": "plan.pdf", "media_type": "application/pdf", "data": "JVBERi0x"},
    {"type": "attachment", "name": "yield.csv", "media_type": "text/csv", "data": "YSxiCjEsMg=="},
    {"type": "attachment", "name": "far.png", "media_type": "image/png"},  # nothing to send
)
_WIRE = {
    "bed.png": {"type": "image_url", "image_url": {"url": "https://example.test/bed.png"}},
    "leaf.jpg": {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
    "plan.pdf": {
        "type": "file",
        "file": {"file_data": "data:application/pdf;base64,JVBERi0x", "filename": "plan.pdf"},
    },
    "yield.csv": {
        "type": "file",
        "file": {"file_data": "data:text/csv;base64,YSxiCjEsMg==", "filename": "yield.csv"},
    },
}


@pytest.mark.parametrize(
    ("changes", "forwarded"),
    [
        ({}, ["bed.png", "leaf.jpg", "plan.pdf"]),
        ({"forward_attachments": False}, []),
        ({"forward_attachments": True}, ["bed.png", "leaf.jpg", "plan.pdf", "yield.csv"]),
    ],
    ids=["default", "none", "all"],
)
async def test_attachments_reach_the_observer_as_content_parts_per_the_setting(
    rig: AgentRig, resource: str, changes: dict[str, Any], forwarded: list[str]
) -> None:
    memory, threads, chat_model, scripted = rig
    await update_settings(memory, resource, **AT_200, **changes)
    await threads.append_message(
        resource, "s", "user", "Photos of the garden", parts=_ATTACHED, create_session=True
    )
    await seed(threads, resource, "s", 6)
    agent = _agent(rig, ObservationalHistory(chat_model))
    scripted.script(OBSERVE, Reply("ok"))
    await agent.run_turn(resource, "s", "what did I send?")
    observer = scripted.requests[0]
    assert is_observer(observer)
    content = observer["messages"][-1]["content"]
    section = observed_section(observer)
    assert "User (" in section and "Photos of the garden" in section
    # Every attachment is named by a placeholder; forwarded ones also as a part.
    for label in ("Image #1: bed.png", "Image #2: leaf.jpg", "File #1: plan.pdf"):
        assert f"[{label}]" in section
    assert "[File #2: yield.csv]" in section and "[Image #3: far.png]" in section
    assert "base64" not in section and "/9j/4AAQ" not in section
    if not forwarded:
        assert isinstance(content, str) and "attached after this text" not in content
        assert "https://example.test" not in content
        return
    assert content[0]["type"] == "text" and content[0]["text"] == user_text(observer)
    assert content[1:] == [_WIRE[name] for name in forwarded]
    listing = user_text(observer).split("in this order:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.rsplit(" ", 1)[1] for line in listing.splitlines()] == forwarded
    if "yield.csv" not in forwarded:
        assert "[File #2: yield.csv]\n" in section  # a placeholder only: no details
