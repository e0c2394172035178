"""The two clocks against the real database: the event clock written with each memory
(episodes from the turn's words against the turn's time, facts from their text or
the writer's ``happened_at``), the ``time`` signal reading it, the block dating each
memory, and both clocks through export, import and the Mem0 importer.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

import popagent
from popagent import EpisodeTurn, Popagent, render
from popagent.agent.remember import RememberTool
from popagent.agent.tools import ToolContext
from popagent.cli import main
from popagent.errors import ValidationError
from popagent.models import Memory, MemoryFilter
from popagent.portable import export_resource, import_mem0, import_resource
from tests.web_support import api_client

SUNDAY = datetime(2023, 7, 30, 14, 0, tzinfo=UTC)


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


def event(m: Memory) -> tuple[datetime | None, datetime | None, str | None]:
    return m.happened_start, m.happened_end, m.happened_precision


async def test_an_episode_reads_its_event_clock_from_the_turn_against_the_turns_time(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    told = await memory.retain_episode(
        resource, "s1", "I went to the dentist last Friday", "Hope it went well!", created_at=SUNDAY
    )
    assert told is not None
    assert event(told) == (day(2023, 7, 28), day(2023, 7, 29), "day")
    assert told.happened_phrase == "last friday"
    assert told.created_at == SUNDAY  # the record clock is unchanged

    # In bulk (imports, LoCoMo) the same rule, each turn against its own time.
    turns = [
        EpisodeTurn("s2", "we moved here in spring 2021", "Nice place.", SUNDAY),
        EpisodeTurn("s2", "my flight is next Tuesday", "Safe travels.", SUNDAY),
        EpisodeTurn("s2", "May I ask what you recommend?", "Tea.", SUNDAY),
    ]
    assert await memory.retain_episodes(resource, turns) == 3
    listed = await memory.list(resource, MemoryFilter(kind="episode", session_id="s2"))
    by_text = {m.content.split("\n")[0]: m for m in listed}
    assert event(by_text["User: we moved here in spring 2021"]) == (
        day(2021, 3, 1),
        day(2021, 6, 1),
        "season",
    )
    # A plan: a future interval.
    assert event(by_text["User: my flight is next Tuesday"]) == (
        day(2023, 8, 1),
        day(2023, 8, 2),
        "day",
    )
    # Names no time: unknown stays unknown.
    unknown = by_text["User: May I ask what you recommend?"]
    assert event(unknown) == (None, None, None) and unknown.happened_phrase is None

    # The column check holds the invariant for every writer: all four or none.
    async with memory.pool.connection() as conn:
        with pytest.raises(Exception, match="event_clock"):
            await conn.execute(
                "UPDATE popagent_memories SET happened_precision = 'day' "
                "WHERE resource_id = %s AND id = %s",
                (resource, unknown.id),
            )


async def test_a_fact_takes_the_writers_happened_at_or_reads_its_text(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    read = await memory.remember(resource, "Moved to Lyon in spring 2021", key="home.city")
    assert event(read.memory)[2] == "season"
    assert read.memory.happened_start == day(2021, 3, 1)

    # A year is the whole year, never 1 January.
    given = await memory.remember(resource, "Works at the bakery", key="job", happened_at="2019")
    assert event(given.memory) == (day(2019, 1, 1), day(2020, 1, 1), "year")
    month = await memory.remember(resource, "Plays the cello", happened_at="2022-05")
    assert event(month.memory) == (day(2022, 5, 1), day(2022, 6, 1), "month")
    stamp = await memory.remember(resource, "Has a cat", happened_at="2023-07-28T18:30:00+02:00")
    assert event(stamp.memory) == (day(2023, 7, 28), day(2023, 7, 29), "day")

    # Unchanged, it keeps the clock it was first told with.
    again = await memory.remember(resource, "Works at the bakery", key="job")
    assert again.action == "unchanged" and event(again.memory) == event(given.memory)

    # A new event clock alone is written in place: no new version of the value.
    moved = await memory.update_fact(resource, given.memory.id, happened_at="spring 2018")
    assert event(moved) == (day(2018, 3, 1), day(2018, 6, 1), "season")
    assert moved.version == given.memory.version
    assert await memory.fact_history(resource, given.memory.id) == []

    for bad in ("", "someday", "x" * 201, 2021):
        with pytest.raises(ValidationError) as caught:
            await memory.remember(resource, "Anything", happened_at=bad)  # type: ignore[arg-type]
        assert caught.value.field == "happened_at"


async def test_the_time_signal_reads_the_event_clock(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    # Told on Monday 14 August about the weekend before last (5-6 August).
    dated = await memory.retain_episode(
        resource,
        "s1",
        "the weekend before last I went hiking in the Alps",
        "Sounds great.",
        created_at=datetime(2023, 8, 14, 9, 0, tzinfo=UTC),
    )
    # Told during that weekend, about a plan for September.
    planned = await memory.retain_episode(
        resource,
        "s1",
        "next month I want to go hiking in the Alps",
        "Good plan.",
        created_at=datetime(2023, 8, 6, 11, 0, tzinfo=UTC),
    )
    assert dated is not None and planned is not None
    assert event(dated)[:2] == (day(2023, 8, 5), day(2023, 8, 7))
    asked = datetime(2023, 8, 16, 12, 0, tzinfo=UTC)
    results = await memory.recall(
        resource, "what hiking did I do the weekend before last?", now=asked, touch=False
    )
    assert [r.memory.id for r in results][:1] == [dated.id]
    time_of = {r.memory.id: dict((c.name, c.value) for c in r.components)["time"] for r in results}
    assert time_of[dated.id] == 1.0  # its event, not its record time, is in the period
    assert time_of[planned.id] < 0.1  # recorded in the period, but it happens in September


async def test_when_questions_rank_the_memory_that_dates_the_event(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    undated = await memory.retain_episode(
        resource,
        "s2",
        "the dentist said my teeth are fine",
        "Good news.",
        created_at=datetime(2023, 8, 15, 9, 0, tzinfo=UTC),
    )
    when = await memory.retain_episode(
        resource,
        "s2",
        "I went to the dentist yesterday",
        "How was it?",
        created_at=datetime(2023, 8, 10, 9, 0, tzinfo=UTC),
    )
    assert undated is not None and when is not None
    asked = datetime(2023, 8, 16, 12, 0, tzinfo=UTC)
    results = await memory.recall(resource, "When did I go to the dentist?", now=asked)
    assert results[0].memory.id == when.id
    assert dict((c.name, c.value) for c in results[0].components)["time"] == 1.0


async def test_the_block_dates_each_recalled_memory(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.retain_episode(
        resource, "s1", "I went to the dentist last Friday", "Ouch.", created_at=SUNDAY
    )
    await memory.remember(resource, "Flight to Lisbon next Tuesday", key="trip")
    now = datetime(2023, 8, 3, 9, 0, tzinfo=UTC)
    results = await memory.recall(resource, "dentist", now=now, touch=False)
    line = render(results, now=now).splitlines()[1]
    assert line == (
        "- [episode, said 2023-07-30 (4 days ago), about 2023-07-28] "
        "User: I went to the dentist last Friday"
    )


async def export_text(memory: popagent.LongTermMemory, resource: str) -> str:
    out = io.StringIO()
    await export_resource(memory.pool, resource, out)
    return out.getvalue()


async def test_both_clocks_go_through_export_and_import(
    memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    await memory.retain_episode(
        resource, "s1", "we moved here in spring 2021", "Lovely.", created_at=SUNDAY
    )
    await memory.retain_episode(resource, "s1", "Tell me a joke", "Why not.", created_at=SUNDAY)
    await memory.remember(resource, "Works at the bakery", key="job", happened_at="2019")
    text = await export_text(memory, resource)
    records = [json.loads(line) for line in text.splitlines()[1:]]
    fact = next(r for r in records if r["type"] == "fact")
    assert fact["happened_start"].startswith("2019-01-01") and fact["happened_precision"] == "year"
    assert fact["created_at"] and fact["updated_at"]

    await import_resource(memory.pool, text.splitlines(), resource_id=other_resource)
    mine = {m.content: m for m in await memory.list(resource)}
    theirs = {m.content: m for m in await memory.list(other_resource)}
    assert mine.keys() == theirs.keys()
    for content, m in mine.items():
        t = theirs[content]
        assert (event(t), t.happened_phrase) == (event(m), m.happened_phrase), content
        assert t.created_at == m.created_at  # the record clock too
    assert event(theirs["Works at the bakery"])[2] == "year"
    assert event(theirs["User: Tell me a joke\nAssistant: Why not."]) == (None, None, None)

    # An export from before the event clock (no such fields) imports as unknown; a
    # half-given event clock is refused, naming the field.
    old = [
        line
        if json.loads(line).get("type") != "fact"
        else json.dumps({k: v for k, v in json.loads(line).items() if "happened" not in k})
        for line in text.splitlines()
    ]
    await import_resource(memory.pool, old, resource_id="time-old-export")
    assert event((await memory.list("time-old-export", MemoryFilter(kind="fact")))[0]) == (
        None,
        None,
        None,
    )
    half = [
        json.dumps({**json.loads(line), "happened_end": None})
        if json.loads(line).get("type") == "fact"
        else line
        for line in text.splitlines()
    ]
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, half, resource_id="time-half")
    assert caught.value.field.endswith("happened_end")


async def test_mem0_memories_read_their_event_clock_against_their_own_time(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    document = {
        "results": [
            {
                "memory": "Went to Rome last weekend",
                "user_id": resource,
                "created_at": "2023-07-30T14:00:00+00:00",
            },
            # Without its time a relative phrase would be a guess: unknown.
            {"memory": "Went to Oslo last weekend", "user_id": resource},
        ]
    }
    await import_mem0(memory.pool, json.dumps(document))
    facts = {m.content: m for m in await memory.list(resource)}
    assert event(facts["Went to Rome last weekend"]) == (day(2023, 7, 22), day(2023, 7, 24), "week")
    assert event(facts["Went to Oslo last weekend"]) == (None, None, None)


def test_happened_at_reaches_the_cli(database_url: str, resource: str) -> None:
    args = ["--database-url", database_url, "--resource-id", resource, "remember"]
    args += ["Plays the cello", "--happened-at", "spring 2021", "--json"]
    out = CliRunner().invoke(main, args, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    cello = json.loads(out.output)["memory"]
    assert cello["happened_precision"] == "season" and cello["happened_start"].startswith("2021-03")
    refused = CliRunner().invoke(main, [*args[:-3], "--happened-at", "someday"])
    assert refused.exit_code != 0 and "happened_at" in refused.output


async def test_happened_at_reaches_the_api_and_the_remember_tool(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    async with api_client(root, resource) as api:
        put = await api.put(
            "/api/facts/by-key/job", json={"content": "Works at the bakery", "happened_at": "2019"}
        )
        assert put.status_code == 201, put.text
        body = put.json()
        assert body["happened_precision"] == "year"
        assert body["happened_start"].startswith("2019-01-01")
        assert body["happened_end"].startswith("2020-01-01")
        bad = await api.post("/api/facts", json={"content": "Anything", "happened_at": "someday"})
        assert bad.status_code == 422 and "happened_at" in bad.text
        patched = await api.patch(f"/api/facts/{body['id']}", json={"happened_at": "2018-05"})
        assert patched.status_code == 200 and patched.json()["happened_precision"] == "month"
        preview = await api.post("/api/recall", json={"query": "bakery"})
        assert preview.status_code == 200, preview.text
        assert ", since May 2018] Works at the bakery" in preview.json()["rendered"]

    ctx = ToolContext(resource_id=resource, session_id="s1", memory=memory)
    told = await RememberTool().run(ctx, {"content": "Has a cat", "happened_at": "2023-07-28"})
    assert told.outcome == "ok" and "since 2023-07-28 (day)" in told.text
    refused = await RememberTool().run(ctx, {"content": "Has a dog", "happened_at": "soon-ish"})
    assert refused.outcome == "refused" and "happened_at" in refused.text
