"""Semantic recall against the real database: vectors written after their memories by
the background worker, isolation inside the vector search, model switching, backfill,
time-aware queries.

The embedder is the real ``OpenAIEmbedder`` against a scripted ``/v1/embeddings``
server (``tests/embedding_server.py``), whose vectors make chosen words mean the same.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.cli import main
from popagent.embed import LocalEmbedder, OpenAIEmbedder, configured_embedder
from popagent.errors import ValidationError
from popagent.models import MemoryFilter
from popagent.store import vectors as vector_store

from .embedding_server import EmbeddingServer, concept_vector

CONCEPTS = {
    "wedding": "marry",
    "married": "marry",
    "marriage": "marry",
    "sister": "family",
    "anna": "family",
}


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(dimensions=384, concepts=CONCEPTS) as s:
        yield s


def client(server: EmbeddingServer, name: str = "scripted-384") -> OpenAIEmbedder:
    return OpenAIEmbedder(
        "scripted", base_url=server.base_url, name=name, timeout_s=5, max_retries=0
    )


@pytest.fixture
async def semantic(database_url: str, server: EmbeddingServer) -> AsyncIterator[LongTermMemory]:
    embedder = client(server)
    async with popagent.connect(database_url, embedder=embedder, max_size=4) as root:
        memory = root.memory
        yield memory
    await embedder.aclose()


async def vector_rows(memory: LongTermMemory, resource: str) -> list[dict[str, Any]]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT e.memory_id, e.model, e.chunk, e.dimensions, e.content_sha256,"
            " m.content_sha256 AS memory_sha"
            " FROM popagent_memory_embeddings e JOIN popagent_memories m"
            " ON m.resource_id = e.resource_id AND m.id = e.memory_id"
            " WHERE e.resource_id = %s ORDER BY e.memory_id, e.model, e.chunk",
            (resource,),
        )
        return list(await cur.fetchall())


def component(result: popagent.RecallResult, name: str) -> float:
    return next(c.value for c in result.components if c.name == name)


async def test_paraphrase_is_recalled_without_a_shared_word(
    semantic: LongTermMemory, resource: str
) -> None:
    await semantic.remember(resource, "Anna got married in June")
    await semantic.remember(resource, "The printer needs new toner")
    assert await semantic.recall(resource, "my sister's wedding", mode="lexical") == []
    assert await semantic.wait_for_vectors(resource) == 0
    results = await semantic.recall(resource, "my sister's wedding")
    # Two memories fit in the answer (the limit is 8): both come back, the paraphrase first.
    assert [r.memory.content for r in results] == [
        "Anna got married in June",
        "The printer needs new toner",
    ]
    assert component(results[0], "similarity") > 0.5 and component(results[0], "text") == 0.0
    # A resource larger than the answer keeps the evidence rule: nothing unrelated.
    for i in range(8):
        await semantic.remember(resource, f"The printer on floor {i} needs new toner")
    assert await semantic.wait_for_vectors(resource) == 0
    results = await semantic.recall(resource, "my sister's wedding")
    assert [r.memory.content for r in results] == ["Anna got married in June"]


async def test_every_write_path_gets_its_vectors_from_the_worker(
    semantic: LongTermMemory, resource: str
) -> None:
    await semantic.retain_episode(resource, "s1", "hello there", "general kenobi")
    await semantic.retain_episode(resource, "s1", "hello there", "general kenobi")  # duplicate
    turns = [EpisodeTurn("s2", f"question {i}", f"answer {i}") for i in range(5)]
    assert await semantic.retain_episodes(resource, turns) == 5
    assert await semantic.retain_episodes(resource, turns) == 0
    await semantic.remember(resource, "Prefers tea", key="drink")
    await semantic.create_fact(resource, "Lives in Lisbon")
    assert await semantic.wait_for_vectors(resource) == 0
    rows = await vector_rows(semantic, resource)
    memories = await semantic.list(resource, MemoryFilter(limit=100))
    assert sorted({r["memory_id"] for r in rows}) == sorted(m.id for m in memories)
    assert len(rows) == len(memories) == 8  # one chunk each, no duplicates
    assert all(r["model"] == "scripted-384" and r["dimensions"] == 384 for r in rows)
    assert all(r["content_sha256"] == r["memory_sha"] for r in rows)


async def test_a_long_episode_is_embedded_in_chunks(
    semantic: LongTermMemory, resource: str
) -> None:
    long = " ".join(f"Sentence {i} mentions the garden." for i in range(200))
    memory = await semantic.retain_episode(resource, "s", long[:3900], "ok")
    assert memory is not None
    assert await semantic.wait_for_vectors(resource) == 0
    rows = await vector_rows(semantic, resource)
    assert [r["chunk"] for r in rows] == list(range(len(rows))) and len(rows) >= 4


async def test_changed_content_replaces_vectors_and_stale_ones_never_survive(
    semantic: LongTermMemory, resource: str, database_url: str
) -> None:
    first = await semantic.remember(resource, "Prefers tea", key="drink")
    second = await semantic.remember(resource, "Prefers coffee", key="drink")
    assert second.action == "updated" and second.memory.id == first.memory.id
    assert await semantic.wait_for_vectors(resource) == 0
    rows = await vector_rows(semantic, resource)
    assert len(rows) == 1 and rows[0]["content_sha256"] == second.memory.content_sha256
    updated = await semantic.update_fact(resource, first.memory.id, content="Prefers cocoa")
    assert await semantic.wait_for_vectors(resource) == 0
    rows = await vector_rows(semantic, resource)
    assert len(rows) == 1 and rows[0]["content_sha256"] == updated.content_sha256
    # A writer that bypasses the service cannot leave a stale vector behind.
    async with semantic.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_memories SET content = 'Prefers water',"
            " content_sha256 = repeat('a', 64) WHERE resource_id = %s AND id = %s",
            (resource, first.memory.id),
        )
    assert await vector_rows(semantic, resource) == []
    await semantic.delete(resource, first.memory.id, kind="fact")


@pytest.mark.parametrize("path", ["exact", "hnsw"])
async def test_vector_search_stays_in_its_resource(
    semantic: LongTermMemory,
    resource: str,
    other_resource: str,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """The other resource holds 150 memories nearer the query; none ever leaks, and the
    resource's own memories all come back (the filter is inside the search)."""
    if path == "hnsw":
        monkeypatch.setattr(vector_store, "EXACT_SEARCH_MAX", 0)
    await semantic.retain_episodes(
        other_resource,
        [EpisodeTurn("s", f"wedding wedding plans {i}", f"married {i}") for i in range(150)],
    )
    own = [EpisodeTurn("s", f"garden note {i}", "the wedding of tulips") for i in range(5)]
    await semantic.retain_episodes(resource, own)
    assert await semantic.wait_for_vectors(other_resource) == 0
    assert await semantic.wait_for_vectors(resource) == 0
    for limit in (3, 8):
        results = await semantic.recall(resource, "wedding marriage", limit=limit, mode="vector")
        assert all(r.memory.resource_id == resource for r in results)
        assert len(results) == min(limit, 5)


async def _search_a_crowded_graph(
    semantic: LongTermMemory, resource: str, other_resource: str, limit_it: str, undo: str
) -> list[Any]:
    """12 memories of ``resource`` among 300 nearer ones of ``other_resource``: the
    graph search for 10 of them, with ``limit_it`` run first on the connection (and
    ``undo`` after)."""
    await semantic.retain_episodes(
        other_resource, [EpisodeTurn("s", f"wedding {i}", f"married {i}") for i in range(300)]
    )
    await semantic.retain_episodes(
        resource, [EpisodeTurn("s", f"tulips {i}", "bulbs") for i in range(12)]
    )
    assert await semantic.wait_for_vectors(other_resource) == 0
    assert await semantic.wait_for_vectors(resource) == 0
    query = semantic.embedder
    assert query is not None
    vector = (await query.embed(["wedding"], kind="query"))[0]
    async with semantic.pool.connection() as conn:
        await conn.execute(limit_it)
        try:
            return await vector_store.nearest(
                conn,
                resource,
                model=query.model,
                query=vector,
                limit=10,
                lexemes=[],
                resource_size=vector_store.EXACT_SEARCH_MAX + 1,  # take the graph first
            )
        finally:  # the pool's session settings again, for the connection's next user
            await conn.execute(undo)


async def test_hnsw_answers_min_limit_count_even_when_the_graph_gives_up(
    semantic: LongTermMemory, resource: str, other_resource: str
) -> None:
    """pgvector stops an iterative scan after hnsw.max_scan_tuples; the exact search
    then answers, so a small resource among many still gets all it holds."""
    found = await _search_a_crowded_graph(
        semantic,
        resource,
        other_resource,
        "SET hnsw.max_scan_tuples = 20",
        "RESET hnsw.max_scan_tuples",
    )
    assert len(found) == 10 and all(c.memory.resource_id == resource for c in found)
    sims = [c.similarity or 0.0 for c in found]
    assert sims == sorted(sims, reverse=True)


async def test_switching_models_never_mixes_their_vectors(database_url: str, resource: str) -> None:
    """Memories embedded by a 64-dimensional model, recalled with a 384-dimensional one:
    the old vectors are ignored (not an error, not a score) until the new ones are
    written, which the new model's worker does by itself (its first look at the
    resource queues what lacks a vector of its model)."""
    with (
        EmbeddingServer(dimensions=64, concepts=CONCEPTS) as old,
        EmbeddingServer(dimensions=384, concepts=CONCEPTS) as new,
    ):
        first, second = client(old, "old-64"), client(new, "new-384")
        async with popagent.connect(database_url, embedder=first, max_size=2) as root:
            memory = root.memory
            for i in range(6):
                await memory.retain_episode(resource, "s", f"Anna got married {i}", "lovely")
            assert await memory.wait_for_vectors(resource) == 0
        async with popagent.connect(database_url, embedder=second, max_size=2) as root:
            memory = root.memory
            await memory.aclose()  # no background worker: the switch is seen before any vector
            results = await memory.recall(resource, "wedding of Anna")
            assert results and all(component(r, "similarity") == 0.0 for r in results)
            assert all(component(r, "text") > 0 for r in results)  # the lexical path found them
            assert await memory.wait_for_vectors(resource) == 0
            results = await memory.recall(resource, "wedding of Anna")
            assert all(component(r, "similarity") > 0.3 for r in results)
            models = {r["model"] for r in await vector_rows(memory, resource)}
            assert models == {"old-64", "new-384"}
            report = await memory.embed_missing(resource, prune=True)
            assert (report.embedded, report.pruned) == (0, 6)
            assert {r["model"] for r in await vector_rows(memory, resource)} == {"new-384"}
        await first.aclose()
        await second.aclose()


async def test_backfill_is_resumable_and_reports_progress(
    memory: LongTermMemory, resource: str, other_resource: str, server: EmbeddingServer
) -> None:
    """``popagent embed``'s backfill, in a store written without a model (no worker)."""
    plain = LongTermMemory(memory.pool, embedder=None)
    await plain.retain_episodes(resource, [EpisodeTurn("s", f"u{i}", f"a{i}") for i in range(7)])
    await plain.retain_episodes(other_resource, [EpisodeTurn("s", "x", "y")])
    embedder = client(server)
    semantic = LongTermMemory(memory.pool, embedder=embedder)
    seen: list[int] = []
    starts: list[int] = []
    first = await semantic.embed_missing(
        resource, batch_size=2, max_memories=3, on_start=starts.append, on_batch=seen.append
    )
    assert (first.embedded, first.remaining, starts, seen) == (3, 4, [3], [2, 1])
    second = await semantic.embed_missing(resource, batch_size=2)
    assert (second.embedded, second.remaining) == (4, 0)
    assert (await semantic.embed_missing(resource)).embedded == 0
    assert len(await vector_rows(semantic, resource)) == 7
    assert await vector_rows(semantic, other_resource) == []  # only the resource asked for
    with pytest.raises(ValidationError, match="embedder"):
        await plain.embed_missing(resource)
    await embedder.aclose()


async def test_a_failing_model_loses_no_write_and_recall_falls_back(
    semantic: LongTermMemory,
    resource: str,
    server: EmbeddingServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An endpoint that fails: writes are unaffected, recall is lexical with one warning,
    and the vectors are written once it answers again (nothing is lost)."""
    server.fail_next(500, times=3)
    with caplog.at_level(logging.WARNING):
        stored = await semantic.retain_episode(resource, "s", "we planted tulips", "nice")
        assert stored is not None
        report = await semantic.recall_report(resource, "tulips")
        report_again = await semantic.recall_report(resource, "tulips")
    assert [r.memory.id for r in report.results] == [stored.id]
    assert (report.mode, report.model_state) == ("lexical", "unavailable")
    assert "unavailable" in report.reason and "500" in (report.model_error or "")
    assert report_again.mode == "lexical"
    assert caplog.text.count("is unavailable") == 1  # one warning, however many failures
    left = 1
    for _attempt in range(20):  # the rest of the scripted failures, then it answers
        left = await semantic.wait_for_vectors(resource, timeout=5)
        if left == 0:
            break
    assert left == 0
    assert [r["memory_id"] for r in await vector_rows(semantic, resource)] == [stored.id]
    assert (await semantic.recall_report(resource, "tulips")).mode == "fused"
    assert "works again" in caplog.text


async def test_fused_recall_keeps_fact_priority_and_explains_each_signal(
    semantic: LongTermMemory, resource: str
) -> None:
    await semantic.retain_episode(resource, "s", "my sister Anna married Tom", "congrats")
    await semantic.remember(resource, "Sister Anna married Tom in June", importance=0.5)
    assert await semantic.wait_for_vectors(resource) == 0
    for mode in ("fused", "vector", "lexical"):
        results = await semantic.recall(resource, "sister wedding", mode=mode)
        assert results[0].memory.kind == "fact"
        for r in results:
            assert abs(r.score - sum(c.value * c.weight for c in r.components)) < 1e-9
    names = {c.name for c in results[0].components}
    assert names == {"text", "trigram", "importance", "recency", "fact"}  # lexical
    fused = await semantic.recall(resource, "sister wedding")
    explained = {c.name for c in fused[0].components}
    assert {"relevance", "words", "meaning", "similarity", "background"} <= explained
    # Two memories fit in the answer: the whole store comes back, and says so.
    assert fused[0].evidence == "whole store"


async def test_modes_need_an_embedder(memory: LongTermMemory, resource: str) -> None:
    lexical = LongTermMemory(memory.pool, embedder=None)
    with pytest.raises(ValidationError, match="mode"):
        await lexical.recall(resource, "x", mode="vector")
    with pytest.raises(ValidationError, match="mode"):
        await memory.recall(resource, "x", mode="dense")  # type: ignore[arg-type]


async def test_a_named_period_favours_memories_of_that_time(
    memory: LongTermMemory, resource: str
) -> None:
    may = datetime(2023, 5, 10, tzinfo=UTC)
    july = datetime(2023, 7, 20, tzinfo=UTC)
    await memory.retain_episodes(
        resource,
        [
            EpisodeTurn("s", "we went hiking in the hills", "sounds fun", may),
            EpisodeTurn("s", "we went hiking by the lake", "lovely", july),
        ],
    )
    now = datetime(2023, 8, 1, tzinfo=UTC)
    # The time signal of the spec's (lexical) ranking, on its own.
    plain = await memory.recall(resource, "where did we go hiking?", now=now, mode="lexical")
    assert plain[0].memory.created_at == july  # recency
    dated = await memory.recall(
        resource, "where did we go hiking in May 2023?", now=now, mode="lexical"
    )
    assert dated[0].memory.created_at == may
    assert component(dated[0], "time") == 1.0 and component(dated[1], "time") < 0.5
    relative = await memory.recall(resource, "hiking two months ago", now=july, mode="lexical")
    assert relative[0].memory.created_at == may


def test_cli_embed_backfills_and_resumes(
    database_url: str, resource: str, server: EmbeddingServer
) -> None:
    runner = CliRunner()
    base = ["--database-url", database_url, "--resource-id", resource]
    for text in ("Likes tea", "Lives in Lisbon", "Plays chess"):
        assert runner.invoke(main, [*base, "remember", text]).exit_code == 0
    embed = [*base, "embed", "--embedder", "openai", "--model", "m", "--base-url", server.base_url]
    first = runner.invoke(main, [*embed, "--max", "2"], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "embedded 2 memories of 1 resource with m; 1 remaining" in first.output
    second = runner.invoke(main, embed, catch_exceptions=False)
    assert "embedded 1 memory of" in second.output and "0 remaining" in second.output
    bad = runner.invoke(main, [*base, "embed", "--embedder", "openai"])
    assert bad.exit_code == 2 and "embedding_model" in bad.output


@pytest.fixture(scope="session")
def local() -> LocalEmbedder:
    embedder = LocalEmbedder()
    embedder.load()
    return embedder


async def test_local_model_end_to_end(
    database_url: str, resource: str, local: LocalEmbedder
) -> None:
    async with popagent.connect(database_url, embedder=local, max_size=2) as root:
        memory = root.memory
        await memory.remember(resource, "Anna got married last Saturday")
        await memory.remember(resource, "The printer is out of toner")
        await memory.remember(resource, "Quarterly taxes are due in April")
        assert await memory.wait_for_vectors(resource) == 0
        results = await memory.recall(resource, "my sister's wedding", mode="vector")
        assert results[0].memory.content == "Anna got married last Saturday"
        rows = await vector_rows(memory, resource)
        assert {r["model"] for r in rows} == {"all-MiniLM-L6-v2-onnx-int8"}


def test_scripted_vectors_make_concepts_equal() -> None:
    assert concept_vector("wedding", 16, CONCEPTS) == concept_vector("married", 16, CONCEPTS)


def test_commands_use_the_local_model_unless_told_otherwise(
    database_url: str, resource: str, server: EmbeddingServer
) -> None:
    """``popagent`` commands recall semantically by default (the bundled local model);
    ``POPAGENT_EMBEDDER`` picks another provider or ``none``. A short-lived ``remember``
    leaves its vectors pending; the next ``recall`` writes them before it ranks."""
    assert isinstance(configured_embedder({}), LocalEmbedder)
    assert isinstance(configured_embedder({"POPAGENT_EMBEDDER": " "}), LocalEmbedder)
    assert configured_embedder({"POPAGENT_EMBEDDER": "none"}) is None
    assert configured_embedder({"POPAGENT_EMBEDDER": " None "}) is None

    def models() -> list[str]:
        with psycopg.connect(database_url) as conn:
            rows = conn.execute(
                "SELECT model FROM popagent_memory_embeddings WHERE resource_id = %s",
                (resource,),
            ).fetchall()
        return [r[0] for r in rows]

    runner = CliRunner()
    base = ["--database-url", database_url, "--resource-id", resource]
    off = {"POPAGENT_EMBEDDER": "none"}
    plain = runner.invoke(main, [*base, "remember", "Likes tea"], env=off)
    assert plain.exit_code == 0, plain.output
    recalled = runner.invoke(main, [*base, "recall", "tea", "--json"], env=off)
    assert json.loads(recalled.stdout)["mode"] == "lexical" and models() == []
    env = {
        "POPAGENT_EMBEDDER": "openai",
        "POPAGENT_EMBEDDING_MODEL": "scripted-384",
        "POPAGENT_EMBEDDING_BASE_URL": server.base_url,
    }
    semantic = runner.invoke(main, [*base, "remember", "Anna got married"], env=env)
    assert semantic.exit_code == 0, semantic.output
    recalled = runner.invoke(main, [*base, "recall", "my sister's wedding", "--json"], env=env)
    assert recalled.exit_code == 0, recalled.output
    data = json.loads(recalled.stdout)
    assert "Anna got married" in data["rendered"]
    assert (data["mode"], data["pending_vectors"]) == ("fused", 0)
    # Both memories have vectors now: the one stored without a model too.
    assert models() == ["scripted-384", "scripted-384"]


async def test_the_episode_after_the_best_one_comes_back_right_after_it(
    semantic: LongTermMemory, resource: str, database_url: str
) -> None:
    """The answer is often in the reply after the turn a question matches: semantic
    recall returns the next episode of the best one's session second, though it
    shares no word with the question; another session's episode never follows."""
    day = datetime(2024, 5, 1, tzinfo=UTC)
    await semantic.retain_episodes(
        resource,
        [
            EpisodeTurn("trip", "Where should we go for the wedding?", "Somewhere warm", day),
            EpisodeTurn("trip", "Lisbon then", "Booked for the 12th", day),
            EpisodeTurn("trip", "And the hotel?", "Near the river", day),
            EpisodeTurn("other", "Printer toner is low", "Ordered more", day),
        ],
    )
    assert await semantic.wait_for_vectors(resource) == 0
    found = await semantic.recall(resource, "wedding plans", now=day)
    assert [r.memory.content for r in found[:2]] == [
        "User: Where should we go for the wedding?\nAssistant: Somewhere warm",
        "User: Lisbon then\nAssistant: Booked for the 12th",
    ]
    follower = found[1]
    assert [(c.name, c.value, c.weight) for c in follower.components] == [("next_turn", 1.0, 0.0)]
    assert follower.score == found[0].score
    # Lexical recall is unchanged: only what its words find.
    lexical = await semantic.recall(resource, "wedding plans", now=day, mode="lexical")
    assert [r.memory.session_id for r in lexical] == ["trip"]
    # Words only in the last turn: nothing follows it (the other session's episode does not).
    last = await semantic.recall(resource, "river hotel", now=day, mode="fused", limit=2)
    assert last[0].memory.content.endswith("Near the river")
    assert all(c.name != "next_turn" for r in last for c in r.components)
    # A deleted follower: the episode after it follows instead.
    await semantic.delete(resource, follower.memory.id)
    again = await semantic.recall(resource, "wedding plans", now=day)
    assert again[1].memory.content == "User: And the hotel?\nAssistant: Near the river"
    assert again[1].components[0].name == "next_turn"


async def test_pooled_connections_carry_the_graph_search_settings(
    semantic: LongTermMemory, resource: str, other_resource: str
) -> None:
    """On plain PostgreSQL the graph search is one statement: its settings are every
    pooled connection's. A connection without them still gets every memory it asks
    for (the exact search answers what the graph leaves short)."""
    async with semantic.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT current_setting('hnsw.iterative_scan') AS scan,"
            " current_setting('hnsw.ef_search') AS ef"
        )
        assert await cur.fetchone() == {"scan": "relaxed_order", "ef": "100"}
    found = await _search_a_crowded_graph(
        semantic,
        resource,
        other_resource,
        "SELECT set_config('hnsw.iterative_scan', 'off', false)",
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false)",
    )
    assert len(found) == 10 and all(c.memory.resource_id == resource for c in found)
