"""Lexical recall in one statement (``store.ranked``) ranks as ``memory.ranking.rank`` does.

The Python ranking over ``store.recall``'s candidates is the reference: for
every query, limit and set of weights here, the statement must return the same
memories in the same order with the same explanations (values to 1e-12: the
two sum the same terms in different orders). The corpus mixes facts and
episodes, importance, ages over a year, repeated texts (ties), an expired fact
and a second resource holding the same texts; the queries mix known words,
misspellings, partial words, stop words, unknown words and named periods.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.memory.newest import newest_first
from popagent.memory.ranking import DEFAULT_WEIGHTS, SIGNALS, RankingWeights, Signal, rank
from popagent.memory.recall import LEXICAL_RECALL, candidate_idfs, newest_applies, recall_pool
from popagent.memory.temporal import query_window, recall_window
from popagent.models import RecallResult
from popagent.store import ranked
from popagent.store import recall as recall_sql
from popagent.store.citus import distributed


@pytest.fixture
async def memory(database_url: str) -> AsyncIterator[LongTermMemory]:
    """Recall by words alone: these tests compare lexical rankings and statistics, which
    vectors written in the background between two recalls would change."""
    async with popagent.connect(database_url, max_size=24, embedder=None) as root:
        ltm = root.memory
        yield ltm


NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)

WORDS = [
    *("sourdough", "bread", "garden", "tomato", "hiking", "trail", "mountain", "restaurant"),
    *("sushi", "birthday", "party", "guitar", "lesson", "piano", "concert", "museum"),
    *("painting", "sister", "brother", "dentist", "appointment", "marathon", "training"),
    *("budget", "vacation", "beach", "camping", "tent", "coffee", "espresso", "deadline"),
    *("project", "kitten", "puppy", "veterinarian", "allergy", "peanut", "recipe", "lasagna"),
]

QUERIES = (
    "sourdough bread",
    "what did I say about the restaurant",
    "restaurnt sushi",  # a misspelling
    "birth",  # a partial word
    "guitar piano concert lesson",
    "the and of a",  # stop words only
    "zyxwv qqqq",  # words no memory holds
    "hiking trail last week",  # a named period
    "dentist appointment in March",
    "marathon training budget vacation beach camping tent coffee",
    "kitten veterinarian allergy",
    "espreso deadlne",
    "lasagna recipe yesterday",
    "mountain",
    "when did I go to the museum",  # asks when: the memories that date their event
    "what happened in spring 2025 with the tent",  # an event clock in a named season
)
#: Said in some turns: each gives the episode an event clock (the time signal reads it).
TOLD = ("last week", "in March", "yesterday", "in spring 2025", "next Tuesday", "in 2025")


async def fill(memory: LongTermMemory, resource: str, rng: random.Random) -> None:
    turns = []
    for i in range(260):
        words = rng.sample(WORDS, rng.randint(2, 6))
        # Every fifth turn repeats an earlier text (same content, other time): ties.
        user = " ".join(words) if i % 5 else f"I talked about {WORDS[i % 7]} and {WORDS[i % 11]}"
        if i % 3 == 0:
            user += f" {TOLD[i % len(TOLD)]}"
        turns.append(
            EpisodeTurn(
                f"s{i % 9}",
                user,
                f"noted {rng.choice(WORDS)} {i}",
                NOW - timedelta(days=rng.uniform(0, 400), seconds=i),
            )
        )
    await memory.retain_episodes(resource, turns)
    for i in range(40):
        text = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
        await memory.remember(resource, f"fact {i}: {text}", importance=rng.choice([0, 0.3, 1]))
    # Spread the facts' update times too, and expire one (past expiry, not yet maintained).
    # In epoch seconds: a distributed table (Citus) refuses timestamptz arithmetic on a
    # column in an UPDATE (a stable operator), and these run on one too (docs/scaling.md).
    async with memory.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_memories SET updated_at = to_timestamp(%s - (id %% 97) * 259200.0) "
            "WHERE resource_id = %s AND kind = 'fact'",
            (NOW.timestamp(), resource),
        )
        await conn.execute(
            "UPDATE popagent_memories SET expires_at = now() - interval '1 day' "
            "WHERE resource_id = %s AND id = (SELECT min(id) FROM popagent_memories "
            "                                 WHERE resource_id = %s AND kind = 'fact')",
            (resource, resource),
        )


async def reference(
    memory: LongTermMemory, resource: str, query: str, limit: int, *, newest: bool = True
) -> list[RecallResult]:
    """``rank`` over the two-statement candidates: the ranking as the spec defines it,
    then the newest value first (``memory.newest``), as recall orders any ranking."""
    weights = memory.weights
    window = recall_window(query, NOW) if weights.time > 0 else None
    async with memory.pool.connection() as conn:
        stats = await recall_sql.corpus_stats(conn, resource, query)
        candidates = await recall_sql.candidates(
            conn, resource, stats, idfs=candidate_idfs(stats), pool=recall_pool(limit)
        )
    ranked = rank(candidates, stats, now=NOW, limit=limit, weights=weights, window=window)
    if newest and len(ranked) > 1 and newest_applies(query, NOW):
        ranked = newest_first(ranked, query)
    return ranked


def assert_same(expected: list[RecallResult], got: list[RecallResult], query: str) -> None:
    assert [r.memory.id for r in got] == [r.memory.id for r in expected], query
    for want, have in zip(expected, got, strict=True):
        assert have.memory == want.memory
        assert have.score == pytest.approx(want.score, abs=1e-12)
        assert [(c.name, c.weight) for c in have.components] == [
            (c.name, c.weight) for c in want.components
        ]
        for a, b in zip(want.components, have.components, strict=True):
            assert b.value == pytest.approx(a.value, abs=1e-12), (query, a.name)


@pytest.fixture
async def corpus(memory: LongTermMemory, resource: str, other_resource: str) -> str:
    await fill(memory, resource, random.Random(7))
    await fill(memory, other_resource, random.Random(7))  # the same texts elsewhere
    return resource


@pytest.mark.parametrize(
    "weights",
    [
        RankingWeights(),
        # Other knobs: a short half-life, a trigram threshold, a strong period weight.
        RankingWeights(recency_half_life_days=7, min_trigram=0.4, time=0.5, bm25_k1=2.0),
        RankingWeights(text=0.2, trigram=0.6, importance=0.0, fact=0.3, time=0.0),
    ],
)
async def test_statement_ranks_as_the_python_ranking(
    memory: LongTermMemory, corpus: str, weights: RankingWeights
) -> None:
    tuned = LongTermMemory(memory.pool, weights=weights)
    compared = 0
    for query in QUERIES:
        for limit in (1, 8, 40):
            expected = await reference(tuned, corpus, query, limit)
            got = await tuned.recall(corpus, query, limit=limit, now=NOW, touch=False)
            assert_same(expected, got, query)
            compared += len(got)
    assert compared > 300  # the queries do find things: the comparison is not vacuous


async def test_a_new_signal_is_one_row_of_the_table(memory: LongTermMemory, corpus: str) -> None:
    """A row added to ``SIGNALS`` is a column of the statement, weighed by its own
    parameter in the score and returned in its place, as the table defines it."""
    probe = Signal("probe", "0.25::float8", lambda _context: lambda _candidate: 0.25)
    lexical = ranked.LexicalRecall((*SIGNALS, probe))
    assert "w_probe" in lexical.parameters and "probe_signal" in lexical.statement(True, 8, 32)
    w = DEFAULT_WEIGHTS
    unweighted = ranked.RecallParameters(
        limit=8,
        pool=32,
        now=NOW,
        k1=w.bm25_k1,
        b=w.bm25_b,
        half_life_days=w.recency_half_life_days,
        min_trigram=w.min_trigram,
        weights=(*(getattr(w, s.name) for s in SIGNALS), 0.0),
    )
    weighed = replace(unweighted, weights=(*unweighted.weights[:-1], 0.5))
    async with memory.pool.connection() as conn:
        before = await lexical.rows(conn, corpus, "sourdough bread", unweighted, touch=False)
        after = await lexical.rows(conn, corpus, "sourdough bread", weighed, touch=False)
        with pytest.raises(ValueError, match="signal weights"):
            await lexical.rows(conn, corpus, "bread", replace(weighed, weights=()), touch=False)
    assert len(before) == 8 and [r.memory.id for r in after] == [r.memory.id for r in before]
    expected = await reference(memory, corpus, "sourdough bread", 8, newest=False)
    assert [r.memory.id for r in before] == [r.memory.id for r in expected]
    for old, new, want in zip(before, after, expected, strict=True):
        assert len(new.signals) == len(SIGNALS) + 1 and new.signals[-1] == 0.25
        assert new.signals[:-1] == old.signals[:-1]
        assert old.score == pytest.approx(want.score, abs=1e-12)
        assert new.score == pytest.approx(old.score + 0.125, abs=1e-12)


async def test_a_period_thousands_of_half_lives_away_ranks_and_does_not_fail(
    memory: LongTermMemory, corpus: str
) -> None:
    """A one-day period years before every memory decays past the smallest double: the
    statement failed with PostgreSQL's "value out of range: underflow"; the decay now
    stops at ``HALF_LIVES_CAP`` in SQL and in Python alike."""
    for query in ("what did we bake on 3 March 2020?", "bread in summer 1144"):
        assert query_window(query, NOW) is not None, query
        expected = await reference(memory, corpus, query, 8)
        got = await memory.recall(corpus, query, limit=8, now=NOW, touch=False)
        assert got, query
        assert_same(expected, got, query)


async def test_the_expired_fact_and_the_other_resource_never_come_back(
    memory: LongTermMemory, corpus: str, other_resource: str
) -> None:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT id FROM popagent_memories WHERE resource_id = %s AND expires_at < now()",
            (corpus,),
        )
        expired = {r["id"] for r in await cur.fetchall()}
    assert len(expired) == 1
    seen: set[int] = set()
    for query in (*QUERIES, "fact 0", "fact"):
        for r in await memory.recall(corpus, query, limit=100, now=NOW, touch=False):
            assert r.memory.resource_id == corpus
            seen.add(r.memory.id)
    assert seen and not (seen & expired)


async def test_touch_counts_what_it_returns_and_skips_locked_rows(
    memory: LongTermMemory, corpus: str, other_resource: str, database_url: str
) -> None:
    first = await memory.recall(corpus, "sourdough bread", now=NOW, touch=False)
    assert len(first) == 8 and all(r.memory.access_count == 0 for r in first)
    touched = await memory.recall(corpus, "sourdough bread", now=NOW)
    assert [r.memory.id for r in touched] == [r.memory.id for r in first]
    assert all(r.memory.access_count == 1 and r.memory.accessed_at for r in touched)
    # Hold the best one locked in another transaction: recall neither waits nor counts it.
    locked = first[0].memory.id
    other = await psycopg.AsyncConnection.connect(database_url)
    async with other, other.transaction():
        await other.execute(
            "SELECT 1 FROM popagent_memories WHERE resource_id = %s AND id = %s FOR UPDATE",
            (corpus, locked),
        )
        again = await asyncio.wait_for(
            memory.recall(corpus, "sourdough bread", now=NOW), timeout=10
        )
    counts = {r.memory.id: r.memory.access_count for r in again}
    assert counts.pop(locked) == 1
    assert set(counts.values()) == {2}
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT resource_id, sum(access_count) AS n FROM popagent_memories "
            "WHERE resource_id = ANY(%s) GROUP BY resource_id",
            ([corpus, other_resource],),
        )
        totals = {r["resource_id"]: r["n"] for r in await cur.fetchall()}
    assert totals == {corpus: 1 + 7 * 2, other_resource: 0}


def test_positional_numbers_each_named_placeholder() -> None:
    assert ranked.positional("a %(x)s b %(y)s %(x)s %% c", ("x", "y")) == "a $1 b $2 $1 % c"
    with pytest.raises(ValueError, match="placeholder"):
        ranked.positional("a %(z)s", ("x",))
    with pytest.raises(ValueError, match="placeholder"):  # a signal's unknown parameter
        ranked.LexicalRecall((*SIGNALS, Signal("x", "%(unknown)s", lambda _context: None)))
    for touch in (False, True):
        converted = LEXICAL_RECALL.statement(touch, 8, 32)
        assert "%(" not in converted and f"${len(LEXICAL_RECALL.parameters)}" in converted


def test_statement_writes_the_limits_in_and_refuses_anything_else() -> None:
    text = LEXICAL_RECALL.statement(False, 8, 32)
    assert "LIMIT 32" in text and "LIMIT 8" in text and "%(" not in text
    assert "UPDATE popagent_memories" in LEXICAL_RECALL.statement(True, 8, 32)
    assert "UPDATE" not in text  # a preview writes nothing
    bad: tuple[tuple[Any, Any], ...] = ((0, 32), (8, -1), (True, 32), ("8", 32))
    for limit, pool in bad:
        with pytest.raises(ValueError, match="positive integers"):
            LEXICAL_RECALL.statement(False, limit, pool)


async def test_repeated_recalls_run_one_generic_plan(
    memory: LongTermMemory, corpus: str, database_url: str
) -> None:
    """After PostgreSQL's first five plans the prepared statement runs one generic plan,
    not a fresh plan per recall, for a small resource beside a large one (the case in
    which a visible resource id made PostgreSQL plan every recall afresh)."""
    rng = random.Random(3)
    big = [
        EpisodeTurn("b", " ".join(rng.sample(WORDS, 5)), f"big {i}", NOW - timedelta(days=i % 300))
        for i in range(4_000)
    ]
    await memory.retain_episodes(f"{corpus}-big", big)
    async with memory.pool.connection() as conn:
        await conn.execute("ANALYZE popagent_memories, popagent_lexeme_stats")
    async with popagent.connect(database_url, min_size=1, max_size=1, embedder=None) as one_root:
        one = one_root.memory
        async with one.pool.connection() as conn:
            citus = await distributed(conn)
        if citus:
            await _assert_routed_to_one_shard(one, corpus)
            return
        for query in QUERIES * 3:
            await one.recall(corpus, query, now=NOW, touch=False)
        async with one.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%%popagent_scoped_lexemes%%'"
            )
            plans = await cur.fetchone()
    assert plans is not None
    # psycopg prepares it at the 6th run; PostgreSQL plans its first 5 runs afresh.
    assert plans["custom_plans"] == 5 and plans["generic_plans"] >= 15


async def _assert_routed_to_one_shard(one: LongTermMemory, corpus: str) -> None:
    """On a Citus cluster the coordinator plans every execution itself; what keeps a
    recall cheap there is that it goes whole to the one shard of its resource: one
    remote command per recall, naming shards of that shard alone (docs/scaling.md)."""
    sent: list[str] = []
    async with one.pool.connection() as conn:  # the pool's one connection, kept
        conn.add_notice_handler(lambda d: sent.append(d.message_primary or ""))
        await conn.execute("SET citus.log_remote_commands = on")
        await conn.execute("SET client_min_messages = log")
    for query in ("sourdough bread", "restaurnt sushi", "guitar piano concert lesson"):
        before = len(sent)
        results = await one.recall(corpus, query, now=NOW, touch=False)
        commands = [m for m in sent[before:] if "popagent_scoped_lexemes" in m]
        assert len(commands) == 1, (query, sent[before:])
        shards = set(re.findall(r"popagent_memories_(\d+)", commands[0]))
        assert len(shards) == 1, commands[0]
        assert results, query
