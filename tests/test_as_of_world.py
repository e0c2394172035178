"""Recall as of a date reads the event clock where it is known, against the real
database (``store.past.AT_MOMENT``): a value began to hold at its event start, else
when it was written, and of the values that had begun to hold, the one told last
held; ``known_at`` stays the record clock alone.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from popagent import LongTermMemory
from popagent.memory.render import render
from popagent.models import RecallResult


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


async def set_record_clock(
    memory: LongTermMemory, resource: str, fact_id: int, written: list[datetime]
) -> None:
    """Value n of the fact (1, 2, ...; the last one current) written at ``written[n-1]``."""
    async with memory.pool.connection() as conn:
        for n, (start, end) in enumerate(itertools.pairwise(written), 1):
            await conn.execute(
                "UPDATE popagent_fact_versions SET valid_from = %s, valid_to = %s"
                " WHERE resource_id = %s AND fact_id = %s AND version = %s",
                (start, end, resource, fact_id, n),
            )
        await conn.execute(
            "UPDATE popagent_memories SET created_at = %s, updated_at = %s"
            " WHERE resource_id = %s AND id = %s",
            (written[0], written[-1], resource, fact_id),
        )


async def lyon_since_2019(memory: LongTermMemory, resource: str) -> None:
    """Told in 2018: "Lives in Paris"; told in 2023: "Lives in Lyon", since 2019."""
    paris = await memory.remember(resource, "Lives in Paris", key="home.city")
    await memory.remember(resource, "Lives in Lyon", key="home.city", happened_at="2019")
    await set_record_clock(memory, resource, paris.memory.id, [day(2018, 1, 10), day(2023, 3, 1)])


def facts(results: list[RecallResult]) -> list[tuple[str, bool]]:
    """Each fact result's content, and whether it is a past value."""
    return [(r.memory.content, r.until is not None) for r in results if r.memory.kind == "fact"]


async def test_as_of_sees_a_value_from_its_event_start_known_at_from_its_writing(
    memory: LongTermMemory, resource: str
) -> None:
    await lyon_since_2019(memory, resource)
    question = "where do I live?"

    # In 2020 the world had Lyon, though the store learnt it only in 2023.
    assert facts(await memory.recall(resource, question, as_of="2020-06-01")) == [
        ("Lives in Lyon", False)
    ]
    # Before 2019 it had Paris, a past value; before anything was told, nothing.
    assert facts(await memory.recall(resource, question, as_of="2018-06-01")) == [
        ("Lives in Paris", True)
    ]
    assert facts(await memory.recall(resource, question, as_of="2017-06-01")) == []
    # known_at is the record clock alone: in 2020 the store knew Paris.
    assert facts(await memory.recall(resource, question, known_at="2020-06-01")) == [
        ("Lives in Paris", True)
    ]
    # Both: the world of 2020 as the store knew it in 2022 (Lyon not yet told).
    both = await memory.recall(resource, question, as_of="2020-06-01", known_at="2022-01-01")
    assert facts(both) == [("Lives in Paris", True)]
    both = await memory.recall(resource, question, as_of="2020-06-01", known_at="2024-01-01")
    assert facts(both) == [("Lives in Lyon", False)]


async def test_a_value_told_ahead_of_its_start_holds_only_from_then(
    memory: LongTermMemory, resource: str
) -> None:
    acme = await memory.remember(resource, "Works at Acme", key="job")
    await memory.remember(resource, "Works at Globex", key="job", happened_at="2024-09")
    await set_record_clock(memory, resource, acme.memory.id, [day(2020, 2, 1), day(2024, 6, 1)])
    # Told in June for September: in July the world still had Acme.
    assert facts(await memory.recall(resource, "where do I work?", as_of="2024-07-01")) == [
        ("Works at Acme", True)
    ]
    assert facts(await memory.recall(resource, "where do I work?", as_of="2024-10-01")) == [
        ("Works at Globex", False)
    ]
    # The store, though, held Globex from June.
    assert facts(await memory.recall(resource, "where do I work?", known_at="2024-07-01")) == [
        ("Works at Globex", False)
    ]


async def test_episodes_about_what_had_happened_and_deleted_values(
    memory: LongTermMemory, resource: str
) -> None:
    told = day(2023, 7, 30)
    await memory.retain_episode(
        resource, "s1", "we moved to Lyon in spring 2021", "Nice.", created_at=told
    )
    await memory.retain_episode(resource, "s1", "Lyon has good food", "It does.", created_at=told)
    episodes = await memory.recall(resource, "Lyon", as_of="2021-06-01")
    # What had happened by then is seen; what was only said later is not.
    assert [r.memory.content.split("\n")[0] for r in episodes] == [
        "User: we moved to Lyon in spring 2021"
    ]
    assert await memory.recall(resource, "Lyon", known_at="2021-06-01") == []

    # A value deleted now held from its event start until it was deleted.
    bike = await memory.remember(resource, "Owns a bicycle", key="bike", happened_at="2019")
    await memory.delete(resource, bike.memory.id)
    assert facts(await memory.recall(resource, "bicycle", as_of="2020-01-01")) == [
        ("Owns a bicycle", True)
    ]
    later = datetime.now(UTC) + timedelta(days=1)
    assert facts(await memory.recall(resource, "bicycle", as_of=later)) == []


async def test_a_past_question_finds_the_value_that_held_then_by_the_event_clock(
    memory: LongTermMemory, resource: str
) -> None:
    await lyon_since_2019(memory, resource)
    now = day(2024, 6, 1)
    # In 2021 Lyon held (since 2019), though Paris was what the store held then.
    in_2021 = facts(await memory.recall(resource, "where did I live in 2021?", now=now))
    assert in_2021 == [("Lives in Lyon", False)]
    # In 2018, Paris: a past value, before the current one, which began only in 2019.
    in_2018 = facts(await memory.recall(resource, "where did I live in 2018?", now=now))
    assert in_2018 == [("Lives in Paris", True), ("Lives in Lyon", False)]


async def test_a_value_told_today_about_long_ago_is_found_for_its_period(
    memory: LongTermMemory, resource: str
) -> None:
    """Both values told today, each with the year it began: the earlier one's record
    clock is today's, its event clock 2015 to 2019, so a question about 2016 finds it
    (the cheap test for earlier values in a period reads the same span as the search)."""
    await memory.remember(resource, "Lives in Paris", key="home.city", happened_at="2015")
    await memory.remember(resource, "Lives in Lyon", key="home.city", happened_at="2019")
    in_2016 = facts(await memory.recall(resource, "where did I live in 2016?", mode="lexical"))
    assert in_2016 == [("Lives in Paris", True), ("Lives in Lyon", False)]


async def test_a_past_values_label_gives_the_span_it_held_in_the_world(
    memory: LongTermMemory, resource: str
) -> None:
    """Told today, both values: the block labels Paris by when it held (2015 until
    Lyon began in 2019), not by the day the store learnt it."""
    await memory.remember(resource, "Lives in Paris", key="home.city", happened_at="2015")
    await memory.remember(resource, "Lives in Lyon", key="home.city", happened_at="2019")
    in_2016 = await memory.recall(resource, "where did I live in 2016?", mode="lexical")
    assert "past value 2015-01-01 to 2019-01-01] Lives in Paris" in render(in_2016)
    in_2017 = await memory.recall(resource, "where do I live?", as_of="2017-06-01")
    assert "past value 2015-01-01 to 2019-01-01] Lives in Paris" in render(in_2017)
