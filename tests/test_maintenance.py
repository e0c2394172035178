"""Retention maintenance: age, per-resource cap, facts kept, idempotence, concurrency."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from popagent import EpisodeTurn, LongTermMemory
from popagent.memory.longterm import EPISODE_CAP_PER_RESOURCE
from popagent.models import MemoryFilter

NOW = datetime(2026, 3, 1, tzinfo=UTC)


async def count(memory: LongTermMemory, resource: str, kind: str) -> int:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM popagent_memories WHERE resource_id = %s AND kind = %s",
            (resource, kind),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_old_episodes_expire_facts_stay(memory: LongTermMemory, resource: str) -> None:
    ancient = NOW - timedelta(days=400)
    await memory.retain_episode(resource, "s", "old", "reply", created_at=NOW - timedelta(days=91))
    await memory.retain_episode(
        resource, "s", "recent", "reply", created_at=NOW - timedelta(days=89)
    )
    await memory.remember(resource, "A fact from long ago")
    async with memory.pool.connection() as conn:  # make the fact ancient too
        await conn.execute(
            "UPDATE popagent_memories SET created_at = %s, updated_at = %s WHERE resource_id = %s",
            (ancient, ancient, resource),
        )
        await conn.execute(
            "UPDATE popagent_memories SET created_at = %s WHERE resource_id = %s AND content LIKE %s",
            (NOW - timedelta(days=89), resource, "%recent%"),
        )
    report = await memory.maintain(now=NOW)
    assert report.expired_episodes >= 1
    assert [
        e.content.split()[1] for e in await memory.list(resource, MemoryFilter(kind="episode"))
    ] == ["recent"]
    assert await count(memory, resource, "fact") == 1
    again = await memory.maintain(now=NOW)
    assert await count(memory, resource, "episode") == 1
    assert again.expired_episodes == 0


async def test_cap_is_per_resource_and_keeps_the_newest(
    memory: LongTermMemory, resource: str, other_resource: str
) -> None:
    start = NOW - timedelta(days=30)
    over = EPISODE_CAP_PER_RESOURCE + 37
    turns = [
        EpisodeTurn("s", f"turn {i}", "ok", created_at=start + timedelta(seconds=i))
        for i in range(over)
    ]
    assert await memory.retain_episodes(resource, turns) == over
    await memory.retain_episodes(other_resource, turns[:100])
    for i in range(20):
        await memory.remember(resource, f"fact number {i}")
    report = await memory.maintain(now=NOW)
    assert report.capped_episodes == 37
    assert await count(memory, resource, "episode") == EPISODE_CAP_PER_RESOURCE
    assert await count(memory, other_resource, "episode") == 100
    assert await count(memory, resource, "fact") == 20
    oldest = (
        await memory.list(
            resource, MemoryFilter(kind="episode", limit=1, offset=EPISODE_CAP_PER_RESOURCE - 1)
        )
    )[0]
    assert oldest.content.startswith("User: turn 37\n")
    assert (await memory.maintain(now=NOW)).total == 0


async def test_two_maintenance_runs_at_once(memory: LongTermMemory, resource: str) -> None:
    turns = [
        EpisodeTurn("s", f"stale {i}", "x", created_at=NOW - timedelta(days=100))
        for i in range(300)
    ]
    await memory.retain_episodes(resource, turns)
    reports = await asyncio.gather(memory.maintain(now=NOW), memory.maintain(now=NOW))
    assert sum(r.expired_episodes for r in reports) >= 300
    assert await count(memory, resource, "episode") == 0


async def test_recall_during_maintenance_never_fails(memory: LongTermMemory, resource: str) -> None:
    turns = [
        EpisodeTurn(
            "s", f"hiking story {i}", "lovely trail", created_at=NOW - timedelta(days=80 + i % 20)
        )
        for i in range(2_000)
    ]
    await memory.retain_episodes(resource, turns)

    async def recalls() -> int:
        done = 0
        for _ in range(30):
            await memory.recall(resource, "hiking story trail", limit=20, now=NOW)
            done += 1
        return done

    results = await asyncio.gather(
        recalls(), recalls(), memory.maintain(now=NOW), recalls(), return_exceptions=True
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert 0 < await count(memory, resource, "episode") < 2_000


@pytest.mark.parametrize("mode", ["fused", "lexical"])
async def test_a_deadlocked_access_bookkeeping_leaves_the_recall_standing(
    memory: LongTermMemory, resource: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Under maintenance PostgreSQL once chose recall's access bookkeeping as a deadlock
    victim, and the recall failed. The bookkeeping is best effort: the recall returns
    its memories, their access counts unchanged."""
    fact = await memory.create_fact(resource, "Goes hiking on Sundays")
    assert await memory.wait_for_vectors(resource) == 0
    victims: list[str] = []

    def deadlocking(execute: Any) -> Any:
        async def run(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            text = query if isinstance(query, str) else ""
            if "access_count = m.access_count + 1" in text and not victims:
                victims.append(text)
                raise psycopg.errors.DeadlockDetected("deadlock detected")
            return await execute(self, query, *args, **kwargs)

        return run

    monkeypatch.setattr(
        psycopg.AsyncConnection, "execute", deadlocking(psycopg.AsyncConnection.execute)
    )
    monkeypatch.setattr(
        psycopg.AsyncRawCursor, "execute", deadlocking(psycopg.AsyncRawCursor.execute)
    )
    results = await memory.recall(resource, "hiking", mode=mode)  # type: ignore[arg-type]
    assert victims, "the bookkeeping statement was not the one refused"
    assert [r.memory.id for r in results] == [fact.id]
    assert (await memory.get(resource, fact.id)).access_count == 0
    # The next recall touches again.
    await memory.recall(resource, "hiking", mode=mode)  # type: ignore[arg-type]
    assert (await memory.get(resource, fact.id)).access_count == 1
