"""Recall as of a date, and earlier values for questions about the past, against
the real database (``memory.versions``, ``store.past``).

``as_of``/``known_at`` answer from what held, and what the store knew, at a
moment; a question about a past period lets the value current then compete,
labelled with its span; a present-tense question never sees an earlier value.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from popagent import LongTermMemory
from popagent.errors import ValidationError
from popagent.memory.render import render
from popagent.memory.temporal import query_window
from popagent.memory.versions import check_moment, past_period
from popagent.store import past as past_sql
from tests.time_support import moved_house


async def test_as_of_answers_from_the_value_that_held_then(
    memory: LongTermMemory, resource: str
) -> None:
    fact_id = await moved_house(memory, resource)
    for moment in (date(2021, 6, 1), "2021-06-01", "2021-06-01T12:00:00+02:00"):
        results = await memory.recall(resource, "where do I live?", as_of=moment)
        contents = [r.memory.content for r in results]
        assert "Lives in Paris" in contents and "Lives in Lyon" not in contents
        paris = next(r for r in results if r.memory.content == "Lives in Paris")
        assert paris.memory.id == fact_id
        assert paris.until == datetime(2022, 3, 1, tzinfo=UTC)
        assert "[fact, past value 2021-01-10 to 2022-03-01] Lives in Paris" in render(results)
        # The episode of May 2021 was written by then.
        assert any(r.memory.kind == "episode" for r in results)
    # known_at: what the store knew then (the record clock); before anything, nothing.
    known = await memory.recall(resource, "where do I live?", known_at="2021-06-01")
    assert [r.memory.content for r in known if r.memory.kind == "fact"] == ["Lives in Paris"]
    assert await memory.recall(resource, "where do I live?", known_at="2020-01-01") == []
    # Later than the change: the current value, and it is not a past value.
    now = await memory.recall(resource, "where do I live?", as_of=datetime.now(UTC))
    assert [(r.memory.content, r.until) for r in now if r.memory.kind == "fact"] == [
        ("Lives in Lyon", None)
    ]
    report = await memory.recall_report(resource, "where do I live?", as_of="2021-06-01")
    assert report.results[0].memory.content == "Lives in Paris"


async def test_a_past_question_lets_the_value_of_then_compete(
    memory: LongTermMemory, resource: str
) -> None:
    fact_id = await moved_house(memory, resource)
    now = datetime(2024, 6, 1, tzinfo=UTC)
    past = await memory.recall(resource, "where did I live in 2021?", now=now)
    facts = [r for r in past if r.memory.kind == "fact"]
    assert facts[0].memory.content == "Lives in Paris" and facts[0].until is not None
    assert facts[0].memory.id == fact_id
    assert "past value 2021-01-10 to 2022-03-01" in render(past)
    before = await memory.recall(resource, "which city did I live in before this one?", now=now)
    assert "Lives in Paris" in [r.memory.content for r in before]
    # A present-tense question never sees the earlier value.
    for question in ("where do I live?", "which city do I live in now?", "Paris or Lyon?"):
        present = await memory.recall(resource, question, now=now)
        assert all(r.until is None for r in present), question
        assert "past value" not in render(present)
    # The access of a past value is never recorded on the current fact.
    current = await memory.get(resource, fact_id)
    assert current.content == "Lives in Lyon"


async def test_a_period_no_earlier_value_overlaps_recalls_as_the_present(
    memory: LongTermMemory, resource: str
) -> None:
    await moved_house(memory, resource)
    now = datetime(2024, 6, 1, tzinfo=UTC)
    in_2021 = (datetime(2021, 1, 1, tzinfo=UTC), datetime(2022, 1, 1, tzinfo=UTC))
    in_2019 = (datetime(2019, 1, 1, tzinfo=UTC), datetime(2020, 1, 1, tzinfo=UTC))
    async with memory.pool.connection() as conn:
        assert await past_sql.any_held_during(conn, resource, *in_2021)
        assert not await past_sql.any_held_during(conn, resource, *in_2019)
        # The cheap test never says no where the full statement finds a value.
        assert await past_sql.held_during(conn, resource, ["pari"], *in_2021, 32)
    # 2019: no earlier value overlaps, so the one-statement recall answers, with the
    # current value only, ranked and explained as the lexical ranking does.
    results = await memory.recall(resource, "where did I live in 2019?", now=now, touch=False)
    assert [(r.memory.content, r.until) for r in results if r.memory.kind == "fact"] == [
        ("Lives in Lyon", None)
    ]
    assert all(r.components for r in results)


def test_moments_are_checked_and_name_their_field() -> None:
    assert check_moment("as_of", date(2021, 6, 1)) == datetime(
        2021, 6, 1, 23, 59, 59, 999999, tzinfo=UTC
    )
    assert check_moment("as_of", None) is None
    for bad in ("yesterday", "2021-13-01", "2021-06-01T12:00:00", 5, "x" * 100):
        with pytest.raises(ValidationError) as info:
            check_moment("known_at", bad)
        assert info.value.field == "known_at"
    with pytest.raises(ValidationError) as naive:
        check_moment("as_of", datetime(2021, 6, 1))
    assert naive.value.field == "as_of"


async def test_recall_refuses_a_bad_moment(memory: LongTermMemory, resource: str) -> None:
    with pytest.raises(ValidationError) as info:
        await memory.recall(resource, "anything", as_of="last tuesday")
    assert info.value.field == "as_of"


def test_only_past_periods_and_earlier_values_open_the_history() -> None:
    now = datetime(2024, 6, 1, tzinfo=UTC)

    def period(q: str) -> object:
        return past_period(q, query_window(q, now), now)

    assert period("where did I live in 2021?") is not None
    assert period("what was my job before this one?") is not None
    assert period("what did I use to drink?") is not None
    assert period("where do I live?") is None
    assert period("what is my job?") is None
    assert period("what did I do this week?") is None
