"""Contract tests of the long-term store against a real PostgreSQL.

They own what the spec names: cross-session recall, write and render budgets,
fact prioritization and deduplication, and resource isolation.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from popagent import (
    HEADER,
    ConflictError,
    EpisodeTurn,
    LongTermMemory,
    NotFoundError,
    SecretRefusedError,
    ValidationError,
    render,
)
from popagent.models import MemoryFilter
from popagent.store.database import Conn


async def test_cross_session_recall(memory: LongTermMemory, resource: str) -> None:
    await memory.retain_episode(
        resource, "session-1", "I'm planning a trip to Kyoto in April", "Cherry blossom season!"
    )
    await memory.remember(
        resource, "Allergic to peanuts", key="health.allergy", session_id="session-1"
    )
    # A later session of the same resource sees both.
    results = await memory.recall(resource, "what do you know about my Kyoto trip?")
    assert results and "Kyoto" in results[0].memory.content
    assert results[0].memory.session_id == "session-1"
    allergy = await memory.recall(resource, "any food allergies?")
    assert allergy[0].memory.key == "health.allergy"


async def test_recall_updates_access_time_and_count(memory: LongTermMemory, resource: str) -> None:
    created = (await memory.remember(resource, "Owns a grey cat named Miso")).memory
    assert created.access_count == 0 and created.accessed_at is None
    first = await memory.recall(resource, "cat")
    assert first[0].memory.access_count == 1 and first[0].memory.accessed_at is not None
    await memory.recall(resource, "Miso")
    assert (await memory.get(resource, created.id, kind="fact")).access_count == 2


async def test_natural_language_question_matches_without_every_word(
    memory: LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "My sister Anna lives in Lisbon")
    results = await memory.recall(
        resource, "Where does my sister live these days, do you remember?"
    )
    assert [r.memory.content for r in results] == ["My sister Anna lives in Lisbon"]


async def test_misspelled_query_still_finds_by_trigram(
    memory: LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Favourite programming language is Haskell")
    results = await memory.recall(resource, "haskel", mode="lexical")
    assert results and "Haskell" in results[0].memory.content
    names = {c.name for c in results[0].components}
    assert names == {"text", "trigram", "importance", "recency", "fact"}


async def test_unrelated_query_returns_nothing(memory: LongTermMemory, resource: str) -> None:
    await memory.remember(resource, "Prefers window seats on flights", importance=1.0)
    assert await memory.recall(resource, "quantum chromodynamics") == []


async def test_recall_limit(memory: LongTermMemory, resource: str) -> None:
    await memory.retain_episodes(
        resource,
        [
            EpisodeTurn("s", f"tell me about gardening tip {i}", f"tip {i}: water early")
            for i in range(150)
        ],
    )
    assert len(await memory.recall(resource, "gardening tip")) == 8
    assert len(await memory.recall(resource, "gardening tip", limit=100)) == 100
    with pytest.raises(ValidationError, match="limit"):
        await memory.recall(resource, "gardening", limit=0)


async def test_episode_caps_and_truncation_markers(memory: LongTermMemory, resource: str) -> None:
    episode = await memory.retain_episode(resource, "s", "q" * 4_500, "a" * 8_500)
    assert episode is not None
    user, assistant = episode.content.split("\n", 1)
    assert len(user) - len("User: ") == 4_000 and "[truncated: " in user
    assert len(assistant) - len("Assistant: ") == 8_000 and "[truncated: " in assistant
    small = await memory.retain_episode(resource, "s", "q" * 4_000, "a" * 8_000)
    assert small is not None and "[truncated" not in small.content


async def test_episode_skipped_when_a_side_is_empty(memory: LongTermMemory, resource: str) -> None:
    assert await memory.retain_episode(resource, "s", "", "hello") is None
    assert await memory.retain_episode(resource, "s", "hi", "  ") is None
    assert await memory.list(resource, MemoryFilter(kind="episode")) == []


async def test_episode_keeps_imported_time(memory: LongTermMemory, resource: str) -> None:
    when = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    episode = await memory.retain_episode(resource, "s", "hi", "hello", created_at=when)
    assert episode is not None and episode.created_at == when and episode.updated_at == when
    with pytest.raises(ValidationError, match="timezone"):
        await memory.retain_episode(resource, "s", "hi", "hello", created_at=datetime(2023, 5, 8))


async def test_fact_limit_enforced_on_every_write_path(
    memory: LongTermMemory, resource: str
) -> None:
    long = "x" * 2_001
    with pytest.raises(ValidationError, match="2000"):
        await memory.remember(resource, long)
    with pytest.raises(ValidationError, match="2000"):
        await memory.create_fact(resource, long)
    fact = await memory.create_fact(resource, "short fact")
    with pytest.raises(ValidationError, match="2000"):
        await memory.update_fact(resource, fact.id, content=long)
    assert (await memory.get(resource, fact.id, kind="fact")).content == "short fact"
    assert len(await memory.list(resource, MemoryFilter(kind="fact"))) == 1


async def test_render_budget_and_label(memory: LongTermMemory, resource: str) -> None:
    for i in range(12):
        await memory.retain_episode(resource, "s", f"budget topic {i} " + "w" * 3_900, "r" * 7_900)
    await memory.remember(resource, "budget topic preference: concise answers", importance=0.9)
    results = await memory.recall(resource, "budget topic")
    assert len(results) == 8
    block = render(results)
    assert block.startswith(HEADER + "\n- [fact, said ")
    assert len(block) <= 24_000
    assert len(render(results, budget=5_000)) <= 5_000


async def test_fact_prioritization(memory: LongTermMemory, resource: str) -> None:
    for i in range(10):
        await memory.retain_episode(
            resource, f"s{i}", f"We discussed the coffee order again, round {i}", "Oat flat white."
        )
    fact = (
        await memory.remember(resource, "Coffee order: oat flat white", key="coffee.order")
    ).memory
    # The spec's ranking (full text, trigram, importance, recency): lexical.
    results = await memory.recall(resource, "what is my coffee order?", mode="lexical")
    assert results[0].memory.id == fact.id
    assert re.match(r"- \[fact, said [^\]]+\] Coffee order", render(results).split("\n")[1])


async def test_key_upsert_and_hash_dedup(memory: LongTermMemory, resource: str) -> None:
    a = await memory.remember(resource, "Theme is dark", key="ui.theme")
    b = await memory.remember(resource, "Theme is light", key="UI.THEME ")
    c = await memory.remember(resource, "Theme is light", key="ui.theme")
    assert (a.action, b.action, c.action) == ("created", "updated", "unchanged")
    assert a.memory.id == b.memory.id == c.memory.id
    facts = await memory.list(resource, MemoryFilter(kind="fact", key="ui.theme"))
    assert [f.content for f in facts] == ["Theme is light"]

    d = await memory.remember(resource, "Lives in Oslo", importance=0.4)
    e = await memory.remember(resource, "  Lives   in Oslo ", importance=0.4)
    f = await memory.remember(resource, "Lives in Oslo", importance=0.9)
    assert (d.action, e.action, f.action) == ("created", "unchanged", "updated")
    assert d.memory.id == e.memory.id == f.memory.id and f.memory.importance == 0.9
    import hashlib

    assert d.memory.content_sha256 == hashlib.sha256(b"Lives in Oslo").hexdigest()

    first = await memory.retain_episode(resource, "s1", "same turn", "same reply")
    again = await memory.retain_episode(resource, "s2", "same turn", "same reply")
    assert first is not None and again is not None and first.id == again.id
    assert len(await memory.list(resource, MemoryFilter(kind="episode"))) == 1
    # A keyless fact and an episode with the same text are different kinds.
    same = await memory.remember(resource, first.content.replace("\n", " "))
    assert same.action == "created"


async def test_strict_create_conflicts(memory: LongTermMemory, resource: str) -> None:
    await memory.create_fact(resource, "Speaks Norwegian", key="lang")
    with pytest.raises(ConflictError, match="key"):
        await memory.create_fact(resource, "Speaks Danish", key="lang")
    await memory.create_fact(resource, "Plays chess")
    with pytest.raises(ConflictError, match="identical"):
        await memory.create_fact(resource, "Plays chess")
    other = await memory.create_fact(resource, "Plays go", key="game")
    with pytest.raises(ConflictError):
        await memory.update_fact(resource, other.id, key="lang")
    assert (await memory.get(resource, other.id, kind="fact")).key == "game"


async def test_fact_management(memory: LongTermMemory, resource: str) -> None:
    fact = await memory.create_fact(resource, "Runs on Tuesdays", key="habit.run", importance=0.7)
    updated = await memory.update_fact(
        resource, fact.id, content="Runs on Thursdays", importance=0.2
    )
    assert (updated.content, updated.key, updated.importance) == (
        "Runs on Thursdays",
        "habit.run",
        0.2,
    )
    assert updated.updated_at >= fact.updated_at
    cleared = await memory.update_fact(resource, fact.id, clear_key=True)
    assert cleared.key is None
    assert [
        f.id for f in await memory.list(resource, MemoryFilter(kind="fact", text="thursday"))
    ] == [fact.id]
    await memory.delete(resource, fact.id, kind="fact")
    with pytest.raises(NotFoundError):
        await memory.get(resource, fact.id, kind="fact")
    with pytest.raises(NotFoundError):
        await memory.delete(resource, fact.id, kind="fact")


async def test_episodes_are_immutable_and_deletable(memory: LongTermMemory, resource: str) -> None:
    episode = await memory.retain_episode(resource, "s", "hello", "hi there")
    assert episode is not None
    assert not hasattr(memory, "update_episode")
    with pytest.raises(NotFoundError):
        await memory.update_fact(resource, episode.id, content="rewritten")
    with pytest.raises(NotFoundError):
        await memory.delete(resource, episode.id, kind="fact")
    assert (await memory.get(resource, episode.id, kind="episode")).content == episode.content
    await memory.delete(resource, episode.id, kind="episode")
    assert await memory.list(resource, MemoryFilter(kind="episode")) == []


async def test_list_filters_and_paging(memory: LongTermMemory, resource: str) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    for i in range(5):
        await memory.retain_episode(
            resource,
            f"s{i % 2}",
            f"episode {i} 100%_sure",
            "ok",
            created_at=base + timedelta(days=i),
        )
    page1 = await memory.list(resource, MemoryFilter(kind="episode", limit=2))
    page2 = await memory.list(resource, MemoryFilter(kind="episode", limit=2, offset=2))
    assert [e.content.split()[2] for e in page1 + page2] == ["4", "3", "2", "1"]
    assert len(await memory.list(resource, MemoryFilter(kind="episode", session_id="s0"))) == 3
    after = await memory.list(
        resource, MemoryFilter(kind="episode", created_after=base + timedelta(days=3))
    )
    assert len(after) == 2
    assert len(await memory.list(resource, MemoryFilter(kind="episode", text="100%_"))) == 5
    assert await memory.list(resource, MemoryFilter(kind="episode", text="100%x")) == []
    with pytest.raises(ValidationError, match="offset"):
        await memory.list(resource, MemoryFilter(kind="episode", offset=-1))


async def test_cleanup_is_explicit_and_filterable(memory: LongTermMemory, resource: str) -> None:
    old = datetime(2020, 1, 1, tzinfo=UTC)
    await memory.retain_episode(resource, "s", "old turn", "old reply", created_at=old)
    await memory.retain_episode(resource, "s", "new turn", "new reply")
    await memory.remember(resource, "A durable fact")
    assert (
        await memory.cleanup(resource, kind="episode", older_than=datetime(2021, 1, 1, tzinfo=UTC))
        == 1
    )
    assert len(await memory.list(resource, MemoryFilter(kind="episode"))) == 1
    assert await memory.cleanup(resource, kind="fact") == 1
    assert await memory.cleanup(resource) == 1
    assert await memory.list(resource) == []
    with pytest.raises(ValidationError, match="kind"):
        await memory.cleanup(resource, kind="note")  # type: ignore[arg-type]


async def test_resource_isolation(
    memory: LongTermMemory, resource: str, other_resource: str
) -> None:
    mine = (
        await memory.remember(resource, "Secret hobby: competitive yodeling", key="hobby")
    ).memory
    episode = await memory.retain_episode(resource, "shared-session", "yodeling practice", "nice")
    assert episode is not None
    # The same key, content and session in another resource never conflict.
    theirs = await memory.remember(
        other_resource, "Secret hobby: competitive yodeling", key="hobby"
    )
    assert theirs.action == "created" and theirs.memory.id != mine.id
    other_episode = await memory.retain_episode(
        other_resource, "shared-session", "yodeling practice", "nice"
    )
    assert other_episode is not None and other_episode.id != episode.id

    assert await memory.recall(f"{other_resource}-x", "yodeling") == []
    assert {r.memory.resource_id for r in await memory.recall(other_resource, "yodeling")} == {
        other_resource
    }
    for kind in ("fact", None):
        with pytest.raises(NotFoundError):
            await memory.get(other_resource, mine.id, kind=kind)
    with pytest.raises(NotFoundError):
        await memory.get(other_resource, episode.id, kind="episode")
    with pytest.raises(NotFoundError):
        await memory.update_fact(other_resource, mine.id, content="hijacked")
    with pytest.raises(NotFoundError):
        await memory.delete(other_resource, mine.id, kind="fact")
    with pytest.raises(NotFoundError):
        await memory.delete(other_resource, episode.id, kind="episode")
    assert await memory.cleanup(other_resource) == 2
    assert (
        await memory.get(resource, mine.id, kind="fact")
    ).content == "Secret hobby: competitive yodeling"
    assert (await memory.get(resource, episode.id, kind="episode")).id == episode.id
    assert all(m.resource_id == resource for m in await memory.list(resource))


async def test_every_unique_index_leads_with_resource_id(memory: LongTermMemory) -> None:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT i.relname AS name, a.attname AS first_column
            FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid
            JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
            WHERE x.indrelid = 'popagent_memories'::regclass AND x.indisunique AND NOT x.indisprimary
            """
        )
        rows = await cur.fetchall()
    assert rows and all(r["first_column"] == "resource_id" for r in rows)


async def test_secrets_refused_in_facts_and_redacted_in_episodes(
    memory: LongTermMemory, resource: str
) -> None:
    key = "sk-proj-" + "A1b2C3d4" * 5
    for write in (memory.remember, memory.create_fact):
        with pytest.raises(SecretRefusedError, match="credential"):
            await write(resource, f"My OpenAI key is {key}")
    with pytest.raises(SecretRefusedError):
        await memory.remember(resource, "my password is hunter22", key="login")
    episode = await memory.retain_episode(
        resource,
        "s",
        f"Use this key: {key}",
        "Saved. Authorization: Bearer abcdefghijklmnopqrstuvwx12",
    )
    assert episode is not None
    assert key not in episode.content and "abcdefghijklmnopqrstuvwx12" not in episode.content
    assert "[REDACTED:api_key]" in episode.content and "[REDACTED:authorization]" in episode.content
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda m, r: m.remember(r, ""), "content"),
        (lambda m, r: m.remember(r, "ok", key=""), "key"),
        (lambda m, r: m.remember(r, "ok", key="k" * 129), "key"),
        (lambda m, r: m.remember(r, "ok", importance=1.5), "importance"),
        (lambda m, r: m.remember(r, "ok", importance=float("nan")), "importance"),
        (lambda m, r: m.remember("", "ok"), "resource_id"),
        (lambda m, r: m.remember(r, "ok", session_id=""), "session_id"),
        (lambda m, r: m.remember(r, "nul\x00byte"), "content"),
        (lambda m, r: m.remember(r, "bad \udc80 unicode"), "content"),
        (lambda m, r: m.retain_episode(r, "s", "nul\x00", "x"), "user_text"),
        (lambda m, r: m.retain_episode(r, "", "hi", "x"), "session_id"),
        (lambda m, r: m.recall(r, "   "), "query"),
        (lambda m, r: m.recall(r, "q", now=datetime(2020, 1, 1)), "now"),
    ],
)
async def test_strict_validation_changes_nothing(
    memory: LongTermMemory, resource: str, call: object, field: str
) -> None:
    with pytest.raises(ValidationError) as err:
        await call(memory, resource)  # type: ignore[operator]
    assert err.value.field == field
    assert await memory.list(resource) == []


async def test_failed_batch_writes_nothing(memory: LongTermMemory, resource: str) -> None:
    turns = [EpisodeTurn("s", "fine", "fine"), EpisodeTurn("s", "bad\x00", "x")]
    with pytest.raises(ValidationError):
        await memory.retain_episodes(resource, turns)
    assert await memory.list(resource, MemoryFilter(kind="episode")) == []


async def test_database_constraints_back_the_rules(memory: LongTermMemory, resource: str) -> None:
    """Even a write that bypasses the service cannot break the table's invariants."""
    import psycopg

    async with memory.pool.connection() as conn:
        for bad in (
            "INSERT INTO popagent_memories (resource_id, kind, content, content_sha256, importance)"
            " VALUES (%(r)s, 'fact', 'x', repeat('a', 64), 1.5)",
            "INSERT INTO popagent_memories (resource_id, kind, key, content, content_sha256)"
            " VALUES (%(r)s, 'episode', 'k', 'x', repeat('a', 64))",
            "INSERT INTO popagent_memories (resource_id, kind, content, content_sha256)"
            " VALUES (%(r)s, 'fact', repeat('x', 2001), repeat('a', 64))",
        ):
            with pytest.raises(psycopg.errors.CheckViolation):
                await _execute(conn, bad, resource)


async def _execute(conn: Conn, statement: str, resource: str) -> None:
    await conn.execute(statement, {"r": resource})
