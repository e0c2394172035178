"""Fact versions, provenance and expiry in the library, against the real database.

Every replaced, deleted or expired value of a fact is a version (migration 0012's
trigger and the delete and expiry statements); restoring and reverting write
through the same unique indexes as every other write; bad input names its field
and writes nothing.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from popagent import LongTermMemory
from popagent.errors import ConflictError, NotFoundError, ValidationError
from popagent.models import MemoryFilter, Provenance
from tests.expiry_support import LATER, pass_expiry


async def version_rows(memory: LongTermMemory, resource: str) -> list[dict[str, Any]]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM popagent_fact_versions WHERE resource_id = %s ORDER BY fact_id, version",
            (resource,),
        )
        return list(await cur.fetchall())


async def vector_shas(memory: LongTermMemory, resource: str) -> list[str]:
    """The content hashes of the resource's vectors, once the worker has written them."""
    assert await memory.wait_for_vectors(resource) == 0
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT content_sha256 FROM popagent_memory_embeddings WHERE resource_id = %s"
            " ORDER BY memory_id, chunk",
            (resource,),
        )
        return [row["content_sha256"] for row in await cur.fetchall()]


async def memory_rows(memory: LongTermMemory, resource: str) -> list[dict[str, Any]]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT * FROM popagent_memories WHERE resource_id = %s ORDER BY id", (resource,)
        )
        return list(await cur.fetchall())


# --- versions -------------------------------------------------------------------------------


async def test_every_change_keeps_the_replaced_value_with_its_writer(
    memory: LongTermMemory, resource: str
) -> None:
    agent = Provenance(origin="agent", turn_id=7, message_ids=(11, 12), tool_call_id="call_0")
    first = await memory.remember(
        resource, "Prefers dark mode", key="ui.theme", session_id="s1", provenance=agent
    )
    assert (first.action, first.memory.version, first.memory.origin) == ("created", 1, "agent")
    assert (first.memory.turn_id, first.memory.message_ids) == (7, (11, 12))
    assert first.memory.tool_call_id == "call_0"
    fact_id = first.memory.id

    # By key: the agent's value becomes version 1, ended by the CLI's write.
    second = await memory.remember(
        resource, "Prefers light mode", key="ui.theme", provenance=Provenance(origin="cli")
    )
    assert (second.action, second.memory.id, second.memory.version) == ("updated", fact_id, 2)
    assert (second.memory.origin, second.memory.turn_id, second.memory.message_ids) == (
        "cli",
        None,
        (),
    )
    # By id.
    third = await memory.update_fact(
        resource, fact_id, importance=0.9, session_id="s2", provenance=Provenance(origin="api")
    )
    assert (third.version, third.importance, third.origin, third.session_id) == (
        3,
        0.9,
        "api",
        "s2",
    )
    history = await memory.fact_history(resource, fact_id)
    assert [v.version for v in history] == [2, 1]
    v2, v1 = history
    assert (v1.content, v1.origin, v1.session_id, v1.turn_id, v1.message_ids) == (
        "Prefers dark mode",
        "agent",
        "s1",
        7,
        (11, 12),
    )
    assert (v1.tool_call_id, v1.ended, v1.ended_origin, v1.ended_session_id) == (
        "call_0",
        "updated",
        "cli",
        None,
    )
    assert (v2.content, v2.importance, v2.origin, v2.ended_origin, v2.ended_session_id) == (
        "Prefers light mode",
        0.5,
        "cli",
        "api",
        "s2",
    )
    assert v1.valid_from <= v1.valid_to == v2.valid_from <= v2.valid_to == third.updated_at
    assert v1.to_json()["message_ids"] == [11, 12]

    # A keyless fact: an identical remember with a higher importance raises it, a version.
    keyless = await memory.remember(resource, "Cycles to work", importance=0.4)
    raised = await memory.remember(resource, "Cycles to work", importance=0.8)
    assert (raised.action, raised.memory.id, raised.memory.version) == (
        "updated",
        keyless.memory.id,
        2,
    )
    (old,) = await memory.fact_history(resource, keyless.memory.id)
    assert (old.version, old.importance, old.ended) == (1, 0.4, "updated")


async def test_an_unchanged_write_makes_no_version(memory: LongTermMemory, resource: str) -> None:
    first = await memory.remember(resource, "Lives in Ghent", key="home")
    again = await memory.remember(resource, "Lives  in Ghent ", key="home", session_id="other")
    assert again.action == "unchanged" and again.memory.version == 1
    assert again.memory.session_id is None  # nothing was written, not even the session
    lower = await memory.remember(resource, "Lives in Ghent", key="home", importance=0.5)
    assert lower.action == "unchanged"
    keyless = await memory.remember(resource, "Speaks Dutch", importance=0.6)
    lower_keyless = await memory.remember(resource, "Speaks Dutch", importance=0.2)
    assert lower_keyless.action == "unchanged" and lower_keyless.memory.importance == 0.6
    same = await memory.update_fact(resource, first.memory.id, content="Lives in Ghent")
    assert same.version == 1 and same.updated_at == first.memory.updated_at
    assert await version_rows(memory, resource) == []
    assert await memory.fact_history(resource, keyless.memory.id) == []


async def test_delete_keeps_the_last_value_and_purge_keeps_nothing(
    memory: LongTermMemory, resource: str, other_resource: str
) -> None:
    kept = await memory.remember(resource, "Has a cat", key="pets")
    await memory.remember(resource, "Has two cats", key="pets")
    # Another resource can neither read nor restore this history.
    with pytest.raises(NotFoundError):
        await memory.fact_history(other_resource, kept.memory.id)
    with pytest.raises(NotFoundError):
        await memory.restore_fact(other_resource, kept.memory.id, 1)
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []
    await memory.delete(resource, kept.memory.id, kind="fact", origin="gui", session_id="g1")
    with pytest.raises(NotFoundError):
        await memory.get(resource, kept.memory.id, kind="fact")
    deleted, updated = await memory.fact_history(resource, kept.memory.id)
    assert (deleted.version, deleted.content, deleted.ended) == (2, "Has two cats", "deleted")
    assert (deleted.ended_origin, deleted.ended_session_id) == ("gui", "g1")
    assert (updated.version, updated.ended) == (1, "updated")
    # The history of a fact deleted before can be purged later.
    gone = await memory.remember(resource, "Has a dog", key="dog")
    await memory.delete(resource, gone.memory.id, kind="fact")
    assert len(await memory.fact_history(resource, gone.memory.id)) == 1
    await memory.delete(resource, gone.memory.id, kind="fact", purge=True)
    with pytest.raises(NotFoundError):
        await memory.fact_history(resource, gone.memory.id)

    purged = await memory.remember(resource, "Plays chess", key="games")
    await memory.remember(resource, "Plays go", key="games")
    await memory.delete(resource, purged.memory.id, kind="fact", purge=True)
    with pytest.raises(NotFoundError):
        await memory.fact_history(resource, purged.memory.id)
    assert {r["fact_id"] for r in await version_rows(memory, resource)} == {kept.memory.id}
    with pytest.raises(NotFoundError):
        await memory.delete(resource, purged.memory.id, kind="fact", purge=True)
    with pytest.raises(NotFoundError):
        await memory.fact_history(resource, 2**62)


# --- restore --------------------------------------------------------------------------------


async def test_restore_an_old_value_and_a_deleted_fact_rewrites_vectors(
    semantic: LongTermMemory, resource: str
) -> None:
    first = await semantic.remember(resource, "Drinks green tea", key="drink")
    await semantic.remember(resource, "Drinks black coffee", key="drink")
    fact_id = first.memory.id
    restored = await semantic.restore_fact(
        resource, fact_id, 1, session_id="s9", provenance=Provenance(origin="cli")
    )
    assert (restored.id, restored.content, restored.version) == (fact_id, "Drinks green tea", 3)
    assert (restored.origin, restored.session_id) == ("cli", "s9")
    assert [(v.version, v.content) for v in await semantic.fact_history(resource, fact_id)] == [
        (2, "Drinks black coffee"),
        (1, "Drinks green tea"),
    ]
    assert await vector_shas(semantic, resource) == [restored.content_sha256]
    # Restoring the value it already has changes nothing.
    again = await semantic.restore_fact(resource, fact_id, 1)
    assert again.version == 3 and len(await semantic.fact_history(resource, fact_id)) == 2

    await semantic.delete(resource, fact_id, kind="fact")
    assert await vector_shas(semantic, resource) == []
    back = await semantic.restore_fact(resource, fact_id, 2)
    assert (back.id, back.content, back.key, back.version) == (
        fact_id,
        "Drinks black coffee",
        "drink",
        4,
    )
    assert back.created_at == first.memory.created_at
    assert await vector_shas(semantic, resource) == [back.content_sha256]
    found = await semantic.recall(resource, "coffee", mode="vector")
    assert [r.memory.id for r in found] == [fact_id]
    assert [v.version for v in await semantic.fact_history(resource, fact_id)] == [3, 2, 1]
    with pytest.raises(NotFoundError):
        await semantic.restore_fact(resource, fact_id, 9)


async def test_a_restore_that_conflicts_writes_nothing(
    memory: LongTermMemory, resource: str
) -> None:
    old = await memory.remember(resource, "Works at Acme", key="job")
    await memory.update_fact(resource, old.memory.id, key="work.employer")
    # Another fact takes the old key; restoring version 1 would duplicate it.
    await memory.remember(resource, "Studies at night", key="job")
    before = (await memory_rows(memory, resource), await version_rows(memory, resource))
    with pytest.raises(ConflictError):
        await memory.restore_fact(resource, old.memory.id, 1)
    assert (await memory_rows(memory, resource), await version_rows(memory, resource)) == before
    # A deleted keyless fact whose text another fact now has.
    twin = await memory.remember(resource, "Owns a bike")
    await memory.delete(resource, twin.memory.id, kind="fact")
    await memory.remember(resource, "Owns a bike")
    middle = (await memory_rows(memory, resource), await version_rows(memory, resource))
    with pytest.raises(ConflictError):
        await memory.restore_fact(resource, twin.memory.id, 1)
    assert (await memory_rows(memory, resource), await version_rows(memory, resource)) == middle


# --- expiry ---------------------------------------------------------------------------------


async def test_an_expired_fact_is_never_recalled_and_maintenance_removes_it(
    semantic: LongTermMemory, resource: str
) -> None:
    ahead = datetime.now(UTC) + LATER
    expiring = await semantic.remember(
        resource, "Staying at the Hotel Aurora in Lisbon", key="trip.hotel", expires_at=ahead
    )
    lasting = await semantic.remember(resource, "Likes the Hotel Aurora breakfast")
    assert expiring.memory.expires_at == ahead
    assert await semantic.wait_for_vectors(resource) == 0  # the vector mode below needs them
    assert {r.memory.id for r in await semantic.recall(resource, "hotel aurora")} == {
        expiring.memory.id,
        lasting.memory.id,
    }
    async with semantic.pool.connection() as conn:
        soon = await pass_expiry(conn, resource, expiring.memory.id)
    assert datetime.now(UTC) > soon
    for mode in ("lexical", "vector", "fused"):
        found = await semantic.recall(resource, "hotel aurora", mode=mode)
        assert [r.memory.id for r in found] == [lasting.memory.id], mode
    # Listed until maintenance removes it (with its expiry, so a reader sees why).
    assert (await semantic.get(resource, expiring.memory.id, kind="fact")).expires_at == soon
    report = await semantic.maintain(resource_id=resource)
    assert report.expired_facts == 1 and report.total == 1
    assert [m.id for m in await semantic.list(resource, MemoryFilter(kind="fact"))] == [
        lasting.memory.id
    ]
    (gone,) = await semantic.fact_history(resource, expiring.memory.id)
    assert (gone.ended, gone.ended_origin, gone.expires_at) == ("expired", "maintenance", soon)
    assert (await semantic.maintain(resource_id=resource)).expired_facts == 0
    # Restored, a past expiry is dropped: the fact lasts.
    back = await semantic.restore_fact(resource, expiring.memory.id, 1)
    assert back.expires_at is None
    assert expiring.memory.id in {r.memory.id for r in await semantic.recall(resource, "hotel")}


async def test_maintenance_expires_by_its_own_clock_and_every_resource(
    memory: LongTermMemory, resource: str, other_resource: str
) -> None:
    later = datetime.now(UTC) + timedelta(days=3)
    mine = await memory.create_fact(resource, "On leave", key="status", expires_at=later)
    theirs = await memory.create_fact(other_resource, "On leave", key="status", expires_at=later)
    await memory.update_fact(resource, mine.id, clear_expiry=True)
    assert (await memory.get(resource, mine.id, kind="fact")).expires_at is None
    report = await memory.maintain(now=later + timedelta(seconds=1))
    assert report.expired_facts >= 1
    assert [m.id for m in await memory.list(resource, MemoryFilter(kind="fact"))] == [mine.id]
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []
    assert [v.ended for v in await memory.fact_history(other_resource, theirs.id)] == ["expired"]


# --- cleanup and revert ---------------------------------------------------------------------


async def test_cleanup_removes_the_versions_too(memory: LongTermMemory, resource: str) -> None:
    fact = await memory.remember(resource, "Runs on Sundays", key="sport")
    await memory.remember(resource, "Runs on Saturdays", key="sport")
    gone = await memory.remember(resource, "Swims", key="water")
    await memory.delete(resource, gone.memory.id, kind="fact")
    assert len(await version_rows(memory, resource)) == 2
    assert await memory.cleanup(resource, kind="episode") == 0
    assert len(await version_rows(memory, resource)) == 2
    assert await memory.cleanup(resource) == 1
    assert await version_rows(memory, resource) == []
    for fact_id in (fact.memory.id, gone.memory.id):
        with pytest.raises(NotFoundError):
            await memory.fact_history(resource, fact_id)


async def test_revert_session_undoes_its_writes_and_skips_conflicts(
    memory: LongTermMemory, resource: str
) -> None:
    bad = "bad-session"
    kept = await memory.remember(resource, "Name is Ada", key="name", session_id="good")
    # The bad session: creates a fact, updates one, deletes one, keeps an episode.
    created = await memory.remember(resource, "Hates cheese", key="food", session_id=bad)
    await memory.remember(resource, "Name is Bob", key="name", session_id=bad)
    victim = await memory.remember(resource, "Has a dog", key="pet", session_id="good")
    await memory.delete(resource, victim.memory.id, kind="fact", session_id=bad)
    episode = await memory.retain_episode(resource, bad, "I am Bob", "Hello Bob.")
    assert episode is not None
    # One it created and deleted stays deleted; one it changed and deleted comes
    # back with the value before the session.
    fleeting = await memory.remember(resource, "Is in a hurry", key="mood", session_id=bad)
    await memory.delete(resource, fleeting.memory.id, kind="fact", session_id=bad)
    car = await memory.remember(resource, "Drives a van", key="car", session_id="good")
    await memory.remember(resource, "Drives a bus", key="car", session_id=bad)
    await memory.delete(resource, car.memory.id, kind="fact", session_id=bad)
    # One it deleted whose key another fact has taken since: skipped.
    clash = await memory.remember(resource, "Lives in Oslo", key="home", session_id="good")
    await memory.delete(resource, clash.memory.id, kind="fact", session_id=bad)
    await memory.remember(resource, "Lives in Bergen", key="home", session_id="good")

    writes = await memory.session_writes(resource, bad)
    assert {m.id for m in writes.memories} == {created.memory.id, kept.memory.id, episode.id}
    assert {(v.fact_id, v.ended) for v in writes.ended} >= {
        (victim.memory.id, "deleted"),
        (kept.memory.id, "updated"),
    }
    report = await memory.revert_session(resource, bad, origin="gui", by_session_id="admin")
    assert set(report.deleted) == {created.memory.id, episode.id}
    assert set(report.restored) == {kept.memory.id, victim.memory.id, car.memory.id}
    assert report.skipped == (clash.memory.id,)
    assert report.to_json()["skipped"] == [clash.memory.id]
    name = await memory.get(resource, kept.memory.id, kind="fact")
    assert (name.content, name.origin, name.session_id) == ("Name is Ada", "gui", "admin")
    assert (await memory.get(resource, victim.memory.id, kind="fact")).content == "Has a dog"
    assert (await memory.get(resource, car.memory.id, kind="fact")).content == "Drives a van"
    with pytest.raises(NotFoundError):
        await memory.get(resource, fleeting.memory.id, kind="fact")
    with pytest.raises(NotFoundError):
        await memory.get(resource, created.memory.id, kind="fact")
    assert await memory.list(resource, MemoryFilter(kind="episode")) == []
    # The undone values stay in history.
    assert "Name is Bob" in [v.content for v in await memory.fact_history(resource, kept.memory.id)]
    assert (await memory.session_writes(resource, bad)).memories == ()


# --- validation and invariants --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"expires_at": datetime(2099, 1, 1)}, "expires_at"),  # naive
        ({"expires_at": datetime(2001, 1, 1, tzinfo=UTC)}, "expires_at"),  # past
        ({"expires_at": "2099-01-01T00:00:00Z"}, "expires_at"),  # text, not a datetime
        ({"provenance": Provenance(origin="someone")}, "origin"),
        ({"provenance": Provenance(turn_id=0)}, "turn_id"),
        ({"provenance": Provenance(message_ids=(1, -2))}, "message_ids"),
        ({"provenance": Provenance(message_ids=tuple(range(1, 66)))}, "message_ids"),
        ({"provenance": Provenance(message_ids=[1])}, "message_ids"),  # type: ignore[arg-type]
        ({"provenance": Provenance(tool_call_id="")}, "tool_call_id"),
        ({"provenance": Provenance(tool_call_id="x" * 257)}, "tool_call_id"),
        ({"provenance": Provenance(tool_call_id="a\x00b")}, "tool_call_id"),
        ({"provenance": "agent"}, "provenance"),
    ],
)
async def test_bad_input_names_its_field_and_writes_nothing(
    memory: LongTermMemory, resource: str, kwargs: dict[str, Any], field: str
) -> None:
    existing = await memory.create_fact(resource, "Likes rain", key="weather")
    before = (await memory_rows(memory, resource), await version_rows(memory, resource))
    writes = [
        memory.remember(resource, "Likes snow", key="weather", **kwargs),
        memory.remember(resource, "Likes fog", **kwargs),
        memory.create_fact(resource, "Likes hail", **kwargs),
        memory.update_fact(resource, existing.id, content="Likes sleet", **kwargs),
    ]
    for write in writes:
        with pytest.raises(ValidationError) as caught:
            await write
        assert caught.value.field == field
    if "provenance" in kwargs:
        with pytest.raises(ValidationError) as caught:
            await memory.restore_fact(resource, existing.id, 1, **kwargs)
        assert caught.value.field in (field, "version")
        with pytest.raises(ValidationError) as caught:
            await memory.retain_episode(resource, "s", "Hi", "Hello", **kwargs)
        assert caught.value.field == field
    assert (await memory_rows(memory, resource), await version_rows(memory, resource)) == before


async def test_other_bad_arguments_are_refused(memory: LongTermMemory, resource: str) -> None:
    fact = await memory.create_fact(resource, "Likes tea")
    later = datetime.now(UTC) + timedelta(days=1)
    with pytest.raises(ValidationError) as caught:
        await memory.update_fact(resource, fact.id, expires_at=later, clear_expiry=True)
    assert caught.value.field == "expires_at"
    with pytest.raises(ValidationError) as caught:
        await memory.delete(resource, fact.id, kind="fact", origin="nobody")
    assert caught.value.field == "origin"
    with pytest.raises(ValidationError) as caught:
        await memory.delete(resource, fact.id, kind="fact", purge="yes")  # type: ignore[arg-type]
    assert caught.value.field == "purge"
    with pytest.raises(ValidationError) as caught:
        await memory.restore_fact(resource, fact.id, 0)
    assert caught.value.field == "version"
    with pytest.raises(ValidationError) as caught:
        await memory.retain_episodes(resource, [], origin="Not An Origin")
    assert caught.value.field == "origin"
    with pytest.raises(ValidationError) as caught:
        await memory.revert_session(resource, "")
    assert caught.value.field == "session_id"
    assert (await memory.get(resource, fact.id, kind="fact")).version == 1
    # An episode never carries an expiry: the schema refuses one outright.
    episode = await memory.retain_episode(resource, "s", "Hi", "Hello")
    assert episode is not None and episode.origin == "library"
    async with memory.pool.connection() as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            await conn.execute(
                "UPDATE popagent_memories SET expires_at = now() WHERE resource_id = %s AND id = %s",
                (resource, episode.id),
            )


async def test_the_unique_indexes_hold_for_current_rows_only(
    memory: LongTermMemory, resource: str
) -> None:
    first = await memory.remember(resource, "Drives a van", key="car")
    await memory.remember(resource, "Drives a truck", key="car")
    await memory.delete(resource, first.memory.id, kind="fact")
    # Versions may share a key with a current fact; the current rows may not share one.
    second = await memory.remember(resource, "Drives a bus", key="car")
    assert second.action == "created" and second.memory.id != first.memory.id
    with pytest.raises(ConflictError):
        await memory.create_fact(resource, "Drives a tram", key="car")
    with pytest.raises(ConflictError):
        await memory.restore_fact(resource, first.memory.id, 2)
    async with memory.pool.connection() as conn:
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                "INSERT INTO popagent_memories"
                " (resource_id, kind, key, content, content_sha256, importance)"
                " VALUES (%s, 'fact', %s, 'Drives a cab', repeat('b', 64), 0.5)",
                (resource, second.memory.key),
            )
    rows = await memory_rows(memory, resource)
    assert [(r["key"], r["content"]) for r in rows] == [("car", "Drives a bus")]


async def test_a_change_made_by_plain_sql_is_kept_and_numbered(
    memory: LongTermMemory, resource: str
) -> None:
    """An operator's UPDATE does not number the version itself: the trigger does."""
    fact = (await memory.remember(resource, "Reads novels", key="reading")).memory
    async with memory.pool.connection() as conn:
        for text in ("Reads poetry", "Reads essays"):
            await conn.execute(
                "UPDATE popagent_memories SET content = %s, content_sha256 = %s "
                "WHERE resource_id = %s AND id = %s",
                (text, hashlib.sha256(text.encode()).hexdigest(), resource, fact.id),
            )
    current = await memory.get(resource, fact.id, kind="fact")
    assert (current.content, current.version) == ("Reads essays", 3)
    history = await memory.fact_history(resource, fact.id)
    assert [(v.version, v.content) for v in history] == [(2, "Reads poetry"), (1, "Reads novels")]
