"""Derived memories (migration 0022) in the library, against the real database.

A fact names what it was derived from (``based_on``); when a source changes,
expires, is deleted or purged, every memory based on it, and on those in turn, is
marked stale, never deleted; confirming clears the mark; a cycle or an unknown
source is refused and writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from popagent import LongTermMemory
from popagent.errors import ValidationError
from popagent.memory.render import render
from popagent.models import MemoryFilter, RecallResult


async def test_a_change_marks_the_chain_and_confirm_clears_it(
    memory: LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Lives in Lyon", key="home.city")
    airport = (
        await memory.remember(
            resource,
            "Nearest airport: Lyon-Saint Exupéry",
            key="home.airport",
            based_on=["home.city"],
        )
    ).memory
    lounge = (
        await memory.remember(resource, "Has lounge access at LYS", based_on=[airport.id])
    ).memory
    unrelated = (await memory.remember(resource, "Likes tea", key="drink")).memory
    assert airport.based_on == ("home.city",)
    assert lounge.based_on == (airport.id,)
    assert await memory.stale(resource) == []

    await memory.remember(resource, "Lives in Paris", key="home.city")

    stale = {m.id: m for m in await memory.stale(resource)}
    assert set(stale) == {airport.id, lounge.id}
    assert stale[airport.id].stale_source == "home.city"
    assert stale[lounge.id].stale_source == "home.city"
    assert stale[airport.id].stale_since is not None
    # Nothing was deleted, the unrelated fact is untouched.
    assert (await memory.get(resource, airport.id)).content == airport.content
    assert (await memory.get(resource, unrelated.id)).stale_since is None

    # Recall carries the mark, and the block says it.
    results = await memory.recall(resource, "nearest airport", limit=3)
    marked = next(r for r in results if r.memory.id == airport.id)
    assert marked.memory.stale_source == "home.city"
    day = stale[airport.id].stale_since.date().isoformat()  # type: ignore[union-attr]
    assert f"may be stale: based on home.city (changed {day})" in render(results)

    confirmed = await memory.confirm(resource, airport.id)
    assert confirmed.stale_since is None and confirmed.stale_source is None
    assert [m.id for m in await memory.stale(resource)] == [lounge.id]
    # Changing the dependent's own value clears its mark too.
    await memory.update_fact(resource, lounge.id, content="Has lounge access at CDG")
    assert await memory.stale(resource) == []


async def test_delete_expiry_and_purge_of_a_source_mark_dependents(
    memory: LongTermMemory, resource: str
) -> None:
    job = (await memory.remember(resource, "Works at Acme", key="job")).memory
    commute = (
        await memory.remember(resource, "Commutes by tram", key="commute", based_on=["job"])
    ).memory
    await memory.delete(resource, job.id)
    assert [m.id for m in await memory.stale(resource)] == [commute.id]
    await memory.confirm(resource, commute.id)

    soon = datetime.now(UTC) + timedelta(seconds=30)
    visa = (await memory.remember(resource, "Holds a visa", key="visa", expires_at=soon)).memory
    trip = (await memory.remember(resource, "Can travel to X", based_on=[visa.id])).memory
    await memory.maintain(now=soon + timedelta(seconds=1))
    marked = {m.id: m for m in await memory.stale(resource)}
    assert trip.id in marked
    # An expired source changed when it expired (here the sweep ran ahead of time,
    # as maintenance given a later ``now`` does: the mark says when it really ran).
    since = marked[trip.id].stale_since
    assert since is not None and since <= soon
    assert marked[trip.id].stale_source == "visa"

    await memory.delete(resource, commute.id, purge=True)
    assert await memory.list(resource, MemoryFilter(key="commute")) == []


async def test_cycles_unknown_sources_and_bad_input_are_refused(
    memory: LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "A", key="a")
    await memory.remember(resource, "B", key="b", based_on=["a"])
    await memory.remember(resource, "C", key="c", based_on=["b"])
    with pytest.raises(ValidationError) as cycle:
        await memory.remember(resource, "A again", key="a", based_on=["c"])
    assert cycle.value.field == "based_on" and "cycle" in str(cycle.value)
    # Nothing was written: "a" keeps its value and sources.
    (a,) = await memory.list(resource, MemoryFilter(key="a"))
    assert a.content == "A" and a.based_on == ()
    with pytest.raises(ValidationError, match="cycle"):
        await memory.remember(resource, "self", key="s", based_on=["s"])
    with pytest.raises(ValidationError, match="no fact 'nope'"):
        await memory.remember(resource, "X", based_on=["nope"])
    with pytest.raises(ValidationError, match="no memory 999999"):
        await memory.create_fact(resource, "Y", based_on=[999999])
    for bad in ("home.city", [1.5], [True], [""], list(range(1, 18))):
        with pytest.raises(ValidationError) as info:
            await memory.remember(resource, "Z", based_on=bad)  # type: ignore[arg-type]
        assert info.value.field == "based_on"
    assert [m.key for m in await memory.list(resource, MemoryFilter(kind="fact"))] == [
        "c",
        "b",
        "a",
    ]


async def test_other_resources_are_never_marked(memory: LongTermMemory, resource: str) -> None:
    other = resource + "-other"
    await memory.remember(resource, "Lives in Lyon", key="home.city")
    await memory.remember(other, "Lives in Rome", key="home.city")
    theirs = (await memory.remember(other, "Airport FCO", based_on=["home.city"])).memory
    await memory.remember(resource, "Lives in Paris", key="home.city")
    assert await memory.stale(other) == []
    assert (await memory.get(other, theirs.id)).stale_since is None


def test_recall_result_json_carries_the_mark() -> None:
    # The mark is part of the memory: every surface that writes a Memory carries it.
    from popagent.models import Memory

    now = datetime.now(UTC)
    m = Memory(1, "r", None, "fact", "k", "c", "0" * 64, 0.5, now, now, None, 0,
               based_on=("home.city", 3), stale_since=now, stale_source="home.city")  # fmt: skip
    data = RecallResult(memory=m, score=1.0, components=()).to_json()
    assert data["memory"]["based_on"] == ["home.city", 3]  # type: ignore[index]
    assert data["memory"]["stale_source"] == "home.city"  # type: ignore[index]
