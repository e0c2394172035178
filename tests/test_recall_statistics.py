"""The recall statistics tables equal a full recount after every kind of write.

Migration 0004's triggers maintain ``popagent_resource_stats`` and
``popagent_lexeme_stats``; recall trusts them instead of counting, so each
write path (single and bulk inserts, deduplicated inserts, fact upserts and
edits, deletes, cleanup, maintenance, concurrent writers) is checked here
against a recount of ``popagent_memories``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.models import MemoryFilter


@pytest.fixture
async def memory(database_url: str) -> AsyncIterator[LongTermMemory]:
    """Recall by words alone: these tests compare lexical rankings and statistics, which
    vectors written in the background between two recalls would change."""
    async with popagent.connect(database_url, max_size=24, embedder=None) as root:
        ltm = root.memory
        yield ltm


RECOUNT = """
SELECT coalesce((SELECT jsonb_object_agg(resource_id, jsonb_build_array(n, total, bytes))
                 FROM (SELECT resource_id, count(*) AS n,
                              sum(length(search_vector)) AS total,
                              sum(octet_length(content)) AS bytes
                       FROM popagent_memories WHERE resource_id = ANY(%(ids)s)
                       GROUP BY resource_id) c), '{}'::jsonb) AS resources,
       coalesce((SELECT jsonb_object_agg(resource_id || ' ' || lexeme, n)
                 FROM (SELECT m.resource_id, l.lexeme, count(*) AS n
                       FROM popagent_memories m CROSS JOIN LATERAL unnest(m.search_vector) l
                       WHERE m.resource_id = ANY(%(ids)s)
                       GROUP BY 1, 2) c), '{}'::jsonb) AS lexemes
"""

STORED = """
SELECT coalesce((SELECT jsonb_object_agg(
                     resource_id, jsonb_build_array(documents, total_length, content_bytes))
                 FROM popagent_resource_stats
                 WHERE resource_id = ANY(%(ids)s) AND documents > 0), '{}'::jsonb) AS resources,
       coalesce((SELECT jsonb_object_agg(resource_id || ' ' || lexeme, documents)
                 FROM popagent_lexeme_stats
                 WHERE resource_id = ANY(%(ids)s) AND documents <> 0), '{}'::jsonb) AS lexemes
"""


async def assert_statistics_exact(memory: LongTermMemory, *resources: str) -> None:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(RECOUNT, {"ids": list(resources)})
        recount = await cur.fetchone()
        cur = await conn.execute(STORED, {"ids": list(resources)})
        stored = await cur.fetchone()
    assert stored == recount


async def test_every_write_path_keeps_statistics_exact(
    memory: LongTermMemory, resource: str, other_resource: str
) -> None:
    now = datetime.now(UTC)
    await memory.retain_episode(resource, "s1", "I bake sourdough bread", "Lovely, rye or wheat?")
    await memory.retain_episode(resource, "s1", "I bake sourdough bread", "Lovely, rye or wheat?")
    await memory.retain_episodes(
        resource,
        [
            EpisodeTurn("s2", f"gardening tip {i} about tomatoes", f"water early {i}", now)
            for i in range(30)
        ]
        + [
            EpisodeTurn("s2", "old chat about sailing", "sailing is fun", now - timedelta(days=120))
        ],
    )
    await memory.retain_episodes(other_resource, [EpisodeTurn("s", "tomatoes again", "yes")])
    await assert_statistics_exact(memory, resource, other_resource)

    theme = await memory.remember(resource, "Prefers dark mode in editors", key="ui.theme")
    await memory.remember(resource, "Prefers light mode everywhere", key="ui.theme")  # new words
    await memory.remember(resource, "Prefers light mode everywhere", key="ui.theme")  # unchanged
    loose = await memory.remember(resource, "Allergic to peanuts")
    await memory.remember(resource, "Allergic to peanuts", importance=0.9)  # importance only
    await memory.update_fact(resource, loose.memory.id, content="Allergic to peanuts and walnuts")
    await memory.update_fact(resource, theme.memory.id, importance=0.2)
    await assert_statistics_exact(memory, resource, other_resource)
    # New bytes, the same lexemes: the content's bytes move, the lexeme counts do not.
    await memory.update_fact(resource, loose.memory.id, content="ALLERGIC to peanuts and walnuts!")
    await assert_statistics_exact(memory, resource, other_resource)

    # A key's words are searchable: changing or clearing the key alone moves them.
    await memory.update_fact(resource, theme.memory.id, key="editor.colour_scheme")
    await assert_statistics_exact(memory, resource, other_resource)
    assert (await memory.recall(resource, "colour scheme?"))[0].memory.id == theme.memory.id
    await memory.update_fact(resource, theme.memory.id, clear_key=True)
    await assert_statistics_exact(memory, resource, other_resource)
    assert await memory.recall(resource, "colour scheme?") == []
    await memory.update_fact(resource, theme.memory.id, key="ui.theme")

    episodes = await memory.list(resource, MemoryFilter(kind="episode", limit=5))
    await memory.delete(resource, episodes[0].id, kind="episode")
    await memory.delete(resource, loose.memory.id, kind="fact")
    await memory.cleanup(resource, kind="episode", older_than=now - timedelta(days=1))
    await memory.recall(resource, "tomatoes gardening")  # access bookkeeping only
    await assert_statistics_exact(memory, resource, other_resource)

    await memory.maintain(now=now + timedelta(days=60))
    await assert_statistics_exact(memory, resource, other_resource)
    await memory.cleanup(resource)
    await assert_statistics_exact(memory, resource, other_resource)
    assert await memory.recall(resource, "tomatoes") == []
    assert await memory.recall(other_resource, "tomatoes")


async def test_concurrent_writers_keep_statistics_exact(
    memory: LongTermMemory, resource: str, other_resource: str
) -> None:
    async def writer(rid: str, n: int) -> None:
        for i in range(10):
            await memory.retain_episode(rid, f"s{n}", f"note {n}-{i} on budget travel", "noted")
        await memory.retain_episodes(
            rid, [EpisodeTurn(f"s{n}", f"batch {n}-{i} hotel flight", "ok") for i in range(20)]
        )
        await memory.remember(rid, f"writer {n} prefers window seats", key=f"seat.{n % 3}")

    async def deleter(rid: str) -> None:
        for _ in range(5):
            await memory.cleanup(rid, older_than=datetime.now(UTC))
            await asyncio.sleep(0.01)

    await asyncio.gather(
        *(writer(rid, n) for n in range(6) for rid in (resource, other_resource)),
        deleter(resource),
        memory.maintain(),
    )
    await assert_statistics_exact(memory, resource, other_resource)


async def test_misspelled_word_finds_its_neighbour(memory: LongTermMemory, resource: str) -> None:
    await memory.retain_episode(resource, "s", "What should I eat for breakfast?", "Try oatmeal.")
    await memory.retain_episode(resource, "s", "Book a table for dinner", "Booked for eight.")
    results = await memory.recall(resource, "what did I have for brekfast")
    assert results and "breakfast" in results[0].memory.content
    trigram = {c.name: c.value for c in results[0].components}["trigram"]
    assert 0 < trigram < 1
