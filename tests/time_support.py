"""A resource whose facts changed: the history the time tests recall from."""

from __future__ import annotations

from datetime import UTC, datetime

from popagent import LongTermMemory

#: When the first home's value held (its version's span).
PARIS_FROM = datetime(2021, 1, 10, tzinfo=UTC)
PARIS_TO = datetime(2022, 3, 1, tzinfo=UTC)


async def moved_house(memory: LongTermMemory, resource: str) -> int:
    """Paris from 2021-01-10 to 2022-03-01, then Lyon (the fact's id is returned);
    an episode of May 2021 about the Paris canal."""
    first = await memory.remember(resource, "Lives in Paris", key="home.city")
    await memory.remember(resource, "Lives in Lyon", key="home.city")
    await memory.retain_episode(
        resource, "s1", "I live near the Paris canal", "Nice!",
        created_at=datetime(2021, 5, 1, tzinfo=UTC),
    )  # fmt: skip
    async with memory.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_fact_versions SET valid_from = %s, valid_to = %s"
            " WHERE resource_id = %s",
            (PARIS_FROM, PARIS_TO, resource),
        )
        await conn.execute(
            "UPDATE popagent_memories SET created_at = %s, updated_at = %s"
            " WHERE resource_id = %s AND kind = 'fact'",
            (PARIS_FROM, PARIS_TO, resource),
        )
    return first.memory.id
