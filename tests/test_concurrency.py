"""Concurrent writers: uniqueness holds under contention."""

from __future__ import annotations

import asyncio

from popagent import LongTermMemory


async def rows(memory: LongTermMemory, resource: str) -> list[dict[str, object]]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT kind, key, content FROM popagent_memories WHERE resource_id = %s", (resource,)
        )
        return list(await cur.fetchall())


async def test_twenty_identical_fact_writes_leave_one_row(
    memory: LongTermMemory, resource: str
) -> None:
    results = await asyncio.gather(
        *(memory.remember(resource, "Drinks green tea") for _ in range(20))
    )
    assert len({r.memory.id for r in results}) == 1
    assert sorted(r.action for r in results).count("created") == 1
    assert len(await rows(memory, resource)) == 1


async def test_twenty_identical_episode_writes_leave_one_row(
    memory: LongTermMemory, resource: str
) -> None:
    results = await asyncio.gather(
        *(
            memory.retain_episode(resource, f"s{i}", "Same question", "Same answer")
            for i in range(20)
        )
    )
    assert len({r.id for r in results if r is not None}) == 1
    assert len(await rows(memory, resource)) == 1


async def test_concurrent_upserts_of_one_key_leave_one_value(
    memory: LongTermMemory, resource: str
) -> None:
    values = [f"Home city is city-{i}" for i in range(20)]
    await asyncio.gather(*(memory.remember(resource, v, key="home.city") for v in values))
    stored = await rows(memory, resource)
    assert len(stored) == 1
    assert stored[0]["content"] in values and stored[0]["key"] == "home.city"
