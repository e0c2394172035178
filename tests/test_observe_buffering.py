"""Asynchronous observation buffering and activation through the real history step:
real PostgreSQL, the real client, the scripted model server answering as Observer
(over real HTTP) and as the actor."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import popagent
from popagent.agent import OBSERVATIONS_LABEL, ObservationalHistory
from popagent.agent.history import HistoryRequest
from popagent.llm import ModelSettings, OpenAIChatModel
from popagent.models import Message, ObservationGroup, Role
from popagent.observe import MemorySettingsStore
from popagent.observe.engine import ObservationalMemory, ObservedContext
from popagent.observe.observer import ObservationFailed
from popagent.observe.tokens import count_message
from popagent.store import observations as obs_sql
from popagent.threads import ThreadStore
from tests.agent_support import AgentRig, system_texts
from tests.observe_support import (
    OBSERVE,
    is_observer,
    is_reflector,
    observed_section,
    reflecting,
    reflector_input,
)
from tests.scripted_model import Fail, Hang, Reply, Respond, ScriptedModelServer, Step

#: Threshold 1000, interval 30% (300), retained 20% (200), safety bound 120% (1200).
THRESHOLD = 1_000
INTERVAL = 300
FLOOR = 200
BLOCK_AFTER = 1_200


async def _settings(memory: popagent.LongTermMemory, resource: str, **changes: Any) -> None:
    values: dict[str, Any] = {
        "observation_threshold_tokens": THRESHOLD,
        "observation_buffer_percent": 30,
        "retained_context_percent": 20,
        "reflection_threshold_tokens": 100_000,
    }
    await MemorySettingsStore(memory.pool).update(resource, **{**values, **changes})


class Thread:
    """One session: adds small alternating messages and loads its history step."""

    def __init__(
        self,
        memory: popagent.LongTermMemory,
        threads: ThreadStore,
        history: ObservationalHistory,
        resource: str,
        session: str = "s",
    ) -> None:
        self.memory, self.threads, self.history = memory, threads, history
        self.resource, self.session = resource, session
        self.count = 0

    async def add(self, tokens: int) -> list[Message]:
        """Append messages until they hold at least ``tokens`` tokens."""
        added: list[Message] = []
        while sum(count_message(m) for m in added) < tokens:
            role: Role = "user" if self.count % 2 == 0 else "assistant"
            text = f"m{self.count}: the shed key sits under pot {self.count} by the door."
            added.append(
                await self.threads.append_message(
                    self.resource, self.session, role, text, create_session=True
                )
            )
            self.count += 1
        return added

    async def load(self) -> ObservedContext:
        await self.history.load(HistoryRequest(self.resource, self.session, None, self.memory.pool))
        assert self.history.last is not None
        return self.history.last

    async def stored(self) -> list[Message]:
        return await self.threads.list_messages(self.resource, self.session, limit=1000)

    async def groups(self, status: str) -> list[ObservationGroup]:
        async with self.memory.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT id FROM popagent_observation_groups WHERE resource_id = %s "
                "AND session_id = %s AND status = %s ORDER BY first_message_id",
                (self.resource, self.session, status),
            )
            ids = [row["id"] for row in await cur.fetchall()]
        async with self.memory.pool.connection() as conn:
            found = [
                await obs_sql.get_group(conn, self.resource, i, session_id=self.session)
                for i in ids
            ]
        return [g for g in found if g is not None]

    async def buffer_round(self, scripted: ScriptedModelServer, tokens: int = INTERVAL) -> None:
        """Add an interval's worth of messages, load (a background Observer run starts), wait."""
        await self.add(tokens)
        before = _observer_calls(scripted)
        scripted.script(OBSERVE)
        context = await self.load()
        assert context.buffer_job is not None
        await self.history.drain()
        assert _observer_calls(scripted) == before + 1
        assert not self.history.buffer_errors


@asynccontextmanager
async def _buffered_session(
    rig: AgentRig,
    resource: str,
    history: ObservationalHistory | None = None,
    **changes: Any,
) -> AsyncIterator[Thread]:
    """Session "s" of ``resource`` under the buffering settings (with ``changes``), read
    through ``history`` (a default one over the rig's model unless given), which is closed
    on exit so no background run outlives the test."""
    await _settings(rig.memory, resource, **changes)
    history = history or ObservationalHistory(rig.chat_model)
    try:
        yield Thread(rig.memory, rig.threads, history, resource)
    finally:
        await history.aclose()


def _observer_calls(scripted: ScriptedModelServer) -> int:
    return sum(1 for r in scripted.requests if is_observer(r))


def _pending(messages: list[Message], cursor: int | None) -> int:
    return sum(count_message(m) for m in messages if cursor is None or m.id > cursor)


def _assert_continuity(context: ObservedContext, stored: list[Message]) -> None:
    """Every stored message is inside exactly one active group's range or raw in
    ``recent``; never both, never neither; the raw ones are the newest, in order."""
    covered = {
        m.id
        for m in stored
        for g in context.groups
        if g.first_message_id <= m.id <= g.last_message_id
    }
    raw = [m.id for m in context.recent]
    assert covered.isdisjoint(raw)
    assert covered | set(raw) == {m.id for m in stored}
    assert raw == [m.id for m in stored][len(stored) - len(raw) :]
    for m in stored:
        assert sum(g.first_message_id <= m.id <= g.last_message_id for g in context.groups) <= 1


async def test_buffering_runs_in_the_background_at_each_interval(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    async with _buffered_session(rig, resource) as thread:
        # Below one interval: nothing runs.
        await thread.add(INTERVAL // 3)
        context = await thread.load()
        assert context.buffer_job is None and not thread.history.buffering(resource, "s")
        # Past the interval: the load returns at once, the Observer runs in the background.
        first = await thread.add(INTERVAL)
        # The Observer answers only once the test lets it (not after a time that a busy
        # machine could outrun): the load must return while it still runs.
        let_it_answer = threading.Event()
        scripted.script(Respond(lambda _: OBSERVE if let_it_answer.wait(120) else Fail(500)))
        context = await thread.load()
        assert thread.history.buffering(resource, "s")
        assert context.buffer_job is not None and not context.observed
        # While it runs, the context is raw and nothing is stored yet.
        assert [m.id for m in context.recent] == [m.id for m in await thread.stored()]
        assert await thread.groups("buffered") == []
        let_it_answer.set()
        await thread.history.drain()
        assert not thread.history.buffering(resource, "s")
        (chunk,) = await thread.groups("buffered")
        stored = await thread.stored()
        assert (chunk.first_message_id, chunk.last_message_id) == (stored[0].id, first[-1].id)
        section = observed_section(next(r for r in scripted.requests if is_observer(r)))
        assert all(m.content in section for m in stored)
        # A second interval: a second chunk continuing right after the first.
        await thread.buffer_round(scripted)
        chunks = await thread.groups("buffered")
        assert len(chunks) == 2
        assert chunks[1].first_message_id == first[-1].id + 1
        # The second run was shown the first chunk as previous observations.
        second = [r for r in scripted.requests if is_observer(r)][-1]
        shown = str(second["messages"][-1]["content"]).split("## New messages to observe")[0]
        assert "## Previous observations" in shown
        assert chunks[0].observations.splitlines()[1] in shown
        # Still below the threshold: nothing is active, the context stays raw.
        context = await thread.load()
        assert context.activation is None and context.groups == ()
        assert len(context.recent) == len(await thread.stored())


async def test_activation_at_the_threshold_makes_no_model_call_and_keeps_continuity(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    async with _buffered_session(rig, resource) as thread:
        agent = rig.agent(history=thread.history, hooks=[])
        for _ in range(3):
            await thread.buffer_round(scripted, INTERVAL + 10)
        chunks = await thread.groups("buffered")
        assert len(chunks) == 3
        stored = await thread.stored()
        # Cross the threshold with less than an interval of new messages.
        await thread.add(THRESHOLD - _pending(stored, None))
        stored = await thread.stored()
        pending = _pending(stored, None)
        assert THRESHOLD <= pending < BLOCK_AFTER
        assert _pending(stored, chunks[-1].last_message_id) < INTERVAL  # no buffering due

        before = len(scripted.requests)
        scripted.script(Reply("answer"))
        result = await agent.run_turn(resource, "s", "what do you remember?")
        assert result.reply == "answer"
        await thread.history.drain()
        (actor,) = scripted.requests[before:]  # no Observer request on this turn
        assert not is_observer(actor)
        context = thread.history.last
        assert context is not None
        assert context.activation == "threshold" and not context.observed
        # The longest prefix of chunks that leaves at least the retained floor raw.
        assert [g.id for g in context.activated] == [c.id for c in chunks[:2]]
        assert [g.id for g in context.buffered] == [chunks[2].id]
        assert context.log is not None
        assert context.log.last_observed_message_id == chunks[1].last_message_id
        assert sum(count_message(m) for m in context.recent) >= FLOOR
        # One more chunk would have left less than the floor raw.
        assert _pending(stored, chunks[2].last_message_id) < FLOOR
        _assert_continuity(context, stored)
        # The actor saw the activated observations, then exactly the retained raw messages.
        messages = actor["messages"]
        (block,) = [t for t in system_texts(actor) if t.startswith(OBSERVATIONS_LABEL)]
        assert chunks[0].observations in block and chunks[1].observations in block
        assert chunks[2].observations not in block
        raw = [m["content"] for m in messages[1:-1] if m["role"] != "system"]
        assert raw == [m.content for m in context.recent]
        assert await thread.groups("buffered") == [chunks[2]]
        assert [g.id for g in await thread.groups("active")] == [c.id for c in chunks[:2]]


async def test_the_safety_bound_forces_a_synchronous_observation(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    async with _buffered_session(rig, resource) as thread:
        # Over the threshold but under the bound, nothing buffered: no synchronous call,
        # the raw context stays and a background run starts instead.
        await thread.add(THRESHOLD + 20)
        scripted.script(Fail(500), Fail(500), Fail(500))
        context = await thread.load()
        assert _pending(await thread.stored(), None) < BLOCK_AFTER
        assert not context.observed and context.activation is None
        assert context.buffer_job is not None
        assert len(context.recent) == len(await thread.stored())
        await thread.history.drain()
        assert thread.history.buffer_errors  # that background run failed: nothing buffered
        assert await thread.groups("buffered") == []
        # At the bound with no chunk to activate: a synchronous observation on this load.
        await thread.add(BLOCK_AFTER - _pending(await thread.stored(), None))
        before = _observer_calls(scripted)
        scripted.script(OBSERVE)
        context = await thread.load()
        assert _observer_calls(scripted) == before + 1
        assert context.observed and context.activation is None
        stored = await thread.stored()
        assert context.log is not None and context.log.last_observed_message_id is not None
        assert FLOOR <= _pending(stored, context.log.last_observed_message_id) < INTERVAL
        assert context.buffer_job is None
        _assert_continuity(context, stored)


async def test_activation_above_the_bound_overshoots_to_one_chunk_and_needs_no_observer(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    async with _buffered_session(rig, resource) as thread:
        # One chunk covering nearly everything, then a jump past the bound.
        await thread.buffer_round(scripted, THRESHOLD - 50)
        (chunk,) = await thread.groups("buffered")
        await thread.add(BLOCK_AFTER - _pending(await thread.stored(), None))
        before = len(scripted.requests)
        context = await thread.load()
        stored = await thread.stored()
        assert context.activation == "block_after" and not context.observed
        assert [g.id for g in context.activated] == [chunk.id]
        assert len(scripted.requests) == before
        _assert_continuity(context, stored)


async def test_idle_activation_uses_the_clock_and_the_auto_ttl(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    now = [datetime.now(UTC)]
    history = ObservationalHistory(rig.chat_model, clock=lambda: now[0])
    # 'auto' with an unknown provider (the scripted server's host:port) is 5 minutes.
    async with _buffered_session(
        rig, resource, history, observation_activate_after_idle="auto"
    ) as thread:
        await thread.buffer_round(scripted)
        await thread.buffer_round(scripted)
        chunks = await thread.groups("buffered")
        assert len(chunks) == 2
        now[0] = datetime.now(UTC) + timedelta(minutes=4)
        context = await thread.load()
        assert context.activation is None and context.groups == ()
        now[0] = datetime.now(UTC) + timedelta(minutes=6)
        before = len(scripted.requests)
        context = await thread.load()
        assert len(scripted.requests) == before  # activation makes no model call
        assert context.activation == "idle"
        # Far below the threshold: only what leaves the retained floor raw.
        assert [g.id for g in context.activated] == [chunks[0].id]
        _assert_continuity(context, await thread.stored())
        assert sum(count_message(m) for m in context.recent) >= FLOOR


async def test_provider_change_activates_buffered_observations_early(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, chat_model, scripted = rig
    await _settings(memory, resource, observation_activate_on_provider_change=True)
    settings = ModelSettings(
        base_url=scripted.base_url, api_key=None, model="scripted-2", timeout_s=5.0
    )
    async with OpenAIChatModel(settings) as other:
        first = ObservationalHistory(chat_model)
        second = ObservationalHistory(chat_model, actor=other)
        thread = Thread(memory, threads, first, resource)
        try:
            await thread.buffer_round(scripted)
            await thread.buffer_round(scripted)
            chunks = await thread.groups("buffered")
            # Same provider/model as recorded: no activation.
            context = await thread.load()
            assert context.activation is None
            # Another model answers this turn: activation, without a model call.
            thread.history = second
            before = len(scripted.requests)
            context = await thread.load()
            assert len(scripted.requests) == before
            assert context.activation == "provider_change"
            assert [g.id for g in context.activated] == [chunks[0].id]
            _assert_continuity(context, await thread.stored())
            # Recorded: the next turn with the same model does not trigger again.
            context = await thread.load()
            assert context.activation is None
        finally:
            await first.aclose()
            await second.aclose()


async def test_early_activation_is_off_unless_configured(rig: AgentRig, resource: str) -> None:
    memory, threads, chat_model, scripted = rig
    await _settings(memory, resource)
    settings = ModelSettings(
        base_url=scripted.base_url, api_key=None, model="scripted-2", timeout_s=5.0
    )
    async with OpenAIChatModel(settings) as other:
        history = ObservationalHistory(
            chat_model, clock=lambda: datetime.now(UTC) + timedelta(days=3)
        )
        thread = Thread(memory, threads, history, resource)
        try:
            await thread.buffer_round(scripted)
            await thread.buffer_round(scripted)
            thread.history = ObservationalHistory(
                chat_model, actor=other, clock=lambda: datetime.now(UTC) + timedelta(days=3)
            )
            context = await thread.load()
            assert context.activation is None and context.groups == ()
        finally:
            await history.aclose()
            await thread.history.aclose()


async def test_a_hanging_background_observer_never_delays_a_turn_beyond_the_bound(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    async with _buffered_session(
        rig, resource, ObservationalHistory(rig.chat_model, timeout_s=30.0, buffer_wait_s=0.3)
    ) as thread:
        agent = rig.agent(history=thread.history, hooks=[])
        await thread.add(INTERVAL)
        # Which request reaches the server first, the background Observer's or the
        # turn's, is a race: route by content, not by order.
        replies = iter([Reply("first"), Reply("second")])

        def route(body: dict[str, Any]) -> Step:
            return Hang(20.0, OBSERVE) if is_observer(body) else next(replies)

        scripted.script(Respond(route), Respond(route), Respond(route))
        began = time.monotonic()
        assert (await agent.run_turn(resource, "s", "hello")).reply == "first"
        assert thread.history.buffering(resource, "s")
        await thread.add(INTERVAL)
        assert (await agent.run_turn(resource, "s", "still there?")).reply == "second"
        # Two turns, the second waiting its 0.3 s bound on the hanging run, then going on
        # (not the 20 s hang).
        assert time.monotonic() - began < 15
        assert thread.history.buffering(resource, "s")  # at most one run per thread: no second one
        assert _observer_calls(scripted) == 1
        context = thread.history.last
        assert context is not None and context.buffer_job is not None
        assert len(context.recent) == len(await thread.stored()) - 2
        await thread.history.aclose()
        assert not thread.history.buffering(resource, "s")
        assert await thread.groups("buffered") == []


async def test_a_failing_background_observer_leaves_raw_context_and_no_chunk(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    async with _buffered_session(
        # A bound a busy machine's successful Observer call stays well within, and a
        # hang far past it.
        rig,
        resource,
        ObservationalHistory(rig.chat_model, timeout_s=5.0),
    ) as thread:
        await thread.add(INTERVAL)
        for steps in ([Fail(500)] * 3, [Hang(120.0, OBSERVE)], [Reply("no observations here")]):
            errors = len(thread.history.buffer_errors)
            scripted.script(*steps)
            context = await thread.load()
            assert context.buffer_job is not None
            await thread.history.drain()
            assert len(thread.history.buffer_errors) == errors + 1
            assert await thread.groups("buffered") == []
            assert await thread.groups("active") == []
            assert [m.id for m in context.recent] == [m.id for m in await thread.stored()]
        # The next interval tries again and succeeds.
        scripted.script(OBSERVE)
        await thread.load()
        await thread.history.drain()
        (chunk,) = await thread.groups("buffered")
        assert chunk.first_message_id == (await thread.stored())[0].id


async def test_buffering_off_keeps_synchronous_observation(rig: AgentRig, resource: str) -> None:
    scripted = rig.scripted
    async with _buffered_session(rig, resource, observation_buffer_percent=None) as thread:
        for _ in range(3):  # intervals pass: no background run
            await thread.add(INTERVAL)
            context = await thread.load()
            assert context.buffer_job is None and not thread.history.buffering(resource, "s")
        assert _observer_calls(scripted) == 0
        await thread.add(THRESHOLD - _pending(await thread.stored(), None))
        scripted.script(OBSERVE)
        context = await thread.load()  # at the threshold, not the safety bound: synchronous
        assert context.observed and context.activation is None
        assert _observer_calls(scripted) == 1
        assert not thread.history.buffering(resource, "s")
        assert await thread.groups("buffered") == []
        _assert_continuity(context, await thread.stored())


async def test_a_background_run_overtaken_by_a_synchronous_observation_stores_nothing(
    rig: AgentRig, resource: str
) -> None:
    memory, _, chat_model, scripted = rig
    async with _buffered_session(rig, resource) as thread:
        engine = ObservationalMemory(memory.pool, chat_model)
        await thread.add(INTERVAL)
        snapshot = await engine.snapshot(resource)
        job = (await engine.prepare(resource, "s", snapshot)).buffer_job
        assert job is not None  # due, but not run yet
        await thread.add(BLOCK_AFTER)
        scripted.script(OBSERVE)
        context = await engine.prepare(resource, "s", snapshot)
        assert context.observed  # the safety bound observed those messages synchronously
        scripted.script(OBSERVE)
        with pytest.raises(ObservationFailed, match="moved on"):
            await engine.buffer(job)
        assert await thread.groups("buffered") == []
        stored = await thread.stored()
        _assert_continuity(await engine.prepare(resource, "s", snapshot), stored)


def _reflector_calls(scripted: ScriptedModelServer) -> int:
    return sum(1 for r in scripted.requests if is_reflector(r))


async def _to_threshold_with_three_chunks(
    thread: Thread, scripted: ScriptedModelServer
) -> list[ObservationGroup]:
    """Three buffered chunks, then messages up to the threshold (less than an interval)."""
    for _ in range(3):
        await thread.buffer_round(scripted, INTERVAL + 10)
    chunks = await thread.groups("buffered")
    await thread.add(THRESHOLD - _pending(await thread.stored(), None))
    return chunks


@asynccontextmanager
async def _reflection_at_1000(
    rig: AgentRig, resource: str
) -> AsyncIterator[tuple[Thread, ObservationalMemory, list[ObservationGroup]]]:
    """Reflection threshold 1000, background reflection from 50% (500), bound 120% (1200);
    three buffered chunks, then messages up to the observation threshold. Yields the
    session, the engine and the chunks."""
    async with _buffered_session(rig, resource, reflection_threshold_tokens=1_000) as thread:
        chunks = await _to_threshold_with_three_chunks(thread, rig.scripted)
        yield thread, ObservationalMemory(rig.memory.pool, rig.chat_model), chunks


async def test_a_buffered_reflection_runs_in_the_background_and_activates_without_a_call(
    rig: AgentRig, resource: str
) -> None:
    scripted = rig.scripted
    summary = "* 🔴 (10:00) User keeps notes on where the shed key sits."
    async with _reflection_at_1000(rig, resource) as (thread, engine, chunks):
        scripted.script(reflecting(summary))
        context = await thread.load()  # activates two chunks: the log passes 500
        assert context.activation == "threshold" and context.log is not None
        assert 500 <= context.log.observation_tokens < 1_000
        assert context.reflect_job is not None and context.reflection is None
        await thread.history.drain()
        assert _reflector_calls(scripted) == 1
        (gen0,) = await engine.generations(resource, "s")
        assert gen0.observations == context.log.observations  # not replaced yet
        reflector = next(r for r in scripted.requests if is_reflector(r))
        assert reflector_input(reflector) == gen0.observations

        # The log grows past the reflection threshold by activating two more chunks.
        await thread.buffer_round(scripted, INTERVAL + 10)
        await thread.add(INTERVAL + 10)
        scripted.script(OBSERVE)
        before = _reflector_calls(scripted)
        context = await thread.load()
        await thread.history.drain()
        assert context.activation == "threshold"
        assert context.reflection_activated is not None and context.reflection is None
        assert _reflector_calls(scripted) == before  # no Reflector call
        gens = await engine.generations(resource, "s")
        assert [(g.generation, g.origin) for g in gens] == [(0, "observation"), (1, "reflection")]
        tail = [g for g in context.activated]
        assert gens[1].observations == "\n\n".join([summary, *(g.observations for g in tail)])
        assert gens[1].covered_group_ids == tuple(c.id for c in chunks[:2])
        kinds = [(g.kind, g.first_message_id, g.last_message_id) for g in context.groups]
        assert kinds == [
            ("reflection", chunks[0].first_message_id, chunks[1].last_message_id),
            *(("observation", g.first_message_id, g.last_message_id) for g in tail),
        ]
        assert gens[0].observations.endswith(tail[-1].observations)  # old generation kept
        _assert_continuity(context, await thread.stored())


async def test_a_failing_buffered_reflection_keeps_the_log_and_the_bound_reflects_sync(
    rig: AgentRig, resource: str
) -> None:
    memory, _, _, scripted = rig
    async with _reflection_at_1000(rig, resource) as (thread, engine, _):
        scripted.script(*[Fail(500)] * 3)  # the client retries, then reflection gives up
        context = await thread.load()
        assert context.reflect_job is not None
        await thread.history.drain()
        (gen0,) = await engine.generations(resource, "s")
        assert context.log is not None and gen0.observations == context.log.observations
        async with memory.pool.connection() as conn:
            assert await obs_sql.buffered_reflection(conn, gen0) is None
        # No retry on every turn: the next background reflection waits for growth.
        await thread.buffer_round(scripted, INTERVAL + 10)
        assert thread.history.last is not None and thread.history.last.reflect_job is None
        # Past the reflection safety bound with nothing buffered: a synchronous reflection.
        await thread.add(INTERVAL + 10)
        summary = "* 🔴 (10:00) User keeps notes on where the shed key sits."
        scripted.script(reflecting(summary), OBSERVE)
        context = await thread.load()
        await thread.history.drain()
        assert context.activation == "threshold"
        assert context.reflection is not None and context.reflection_activated is None
        assert context.reflection.observations == summary
        gens = await engine.generations(resource, "s")
        assert [g.generation for g in gens] == [0, 1] and gens[1].observations == summary


async def test_idle_activates_a_buffered_reflection_early_only_when_reflections_opt_in(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, chat_model, scripted = rig
    small = "\n".join(
        f"* 🔴 (10:{i:02d}) User keeps note {i} on where the shed key sits." for i in range(8)
    )
    # Larger than the observations added after it: the guard refuses early activation.
    large = "\n".join(
        f"* 🔴 (11:{i:02d}) User keeps a long note {i} on the shed key and the pot by the door."
        for i in range(30)
    )
    outcomes = {}
    now = [datetime.now(UTC)]
    for opt_in, summary in ((False, small), (True, large), (True, small)):
        session = f"s{opt_in}{len(summary)}"
        await _settings(
            memory,
            resource,
            # A background reflection from 60% (840); the early-activation guard
            # needs 75% of 1400 * (1 - 0.6) = 420 tokens.
            reflection_threshold_tokens=1_400,
            reflection_buffer_start_percent=60,
            observation_activate_after_idle=60,
            reflection_activate_after_idle=60 if opt_in else None,
        )
        now[0] = datetime.now(UTC)
        history = ObservationalHistory(chat_model, clock=lambda: now[0])
        thread = Thread(memory, threads, history, resource, session)
        engine = ObservationalMemory(memory.pool, chat_model)
        try:
            await _to_threshold_with_three_chunks(thread, scripted)
            scripted.script(reflecting(summary))
            context = await thread.load()
            assert context.reflect_job is not None
            await history.drain()
            assert len(await engine.generations(resource, session)) == 1
            await thread.add(INTERVAL // 2 + 30)
            context = await thread.load()  # not idle yet: nothing activates
            assert context.activation is None and context.reflection_activated is None
            now[0] = datetime.now(UTC) + timedelta(minutes=2)
            before = len(scripted.requests)
            context = await thread.load()
            assert len(scripted.requests) == before  # no model call
            assert context.activation == "idle"  # the buffered observations, always
            assert context.log is not None
            outcomes[opt_in, summary == large] = context.reflection_activated is not None
            gens = await engine.generations(resource, session)
            assert gens[0].observation_tokens < 1_400  # below the reflection threshold
            if outcomes[opt_in, summary == large]:
                assert gens[1].observations.startswith(summary)
                _assert_continuity(context, await thread.stored())
        finally:
            await history.aclose()
    assert outcomes == {(False, False): False, (True, True): False, (True, False): True}
