"""Ranking is pure: these tests need no database."""

from __future__ import annotations

import math
import re
from dataclasses import fields
from datetime import timedelta

import pytest

from popagent.memory.ranking import (
    DEFAULT_WEIGHTS,
    SIGNALS,
    RankingWeights,
    bm25_text_score,
    idf,
    rank,
    recency_score,
    trigram_score,
)
from popagent.memory.temporal import TimeWindow
from popagent.models import Candidate, CorpusStats, Neighbour
from popagent.store.recall import choose_lexemes, tsquery_literal

from .factories import NOW, make_memory

STATS = CorpusStats(
    documents=100, average_length=10.0, document_frequency={"rare": 2, "common": 90}
)
# "brekfast" is unknown to the resource; "breakfast" (5 memories) looks like it.
TYPO_STATS = CorpusStats(
    documents=50,
    average_length=10.0,
    document_frequency={"brekfast": 0, "pancak": 2},
    neighbours={"brekfast": (Neighbour("breakfast", 0.6, 5), Neighbour("bread", 0.3, 9))},
)


def cand(id: int, tf: dict[str, int], *, kind: str = "episode", **kw: object) -> Candidate:
    return Candidate(
        memory=make_memory(id, kind=kind, **kw),  # type: ignore[arg-type]
        term_frequency=tf,
        length=10,
    )


def test_idf_is_never_negative_and_orders_by_rarity() -> None:
    assert idf(100, 2) > idf(100, 50) > idf(100, 100) >= 0
    assert idf(10, 20) >= 0  # capped counts can make df exceed N


def test_text_score_rewards_rare_terms_and_is_bounded() -> None:
    rare = bm25_text_score(cand(1, {"rare": 1}), STATS)
    common = bm25_text_score(cand(2, {"common": 1}), STATS)
    both = bm25_text_score(cand(3, {"rare": 1, "common": 1}), STATS)
    assert 0 < common < rare < both <= 1.0
    assert bm25_text_score(cand(4, {}), STATS) == 0.0


def test_partial_match_still_scores() -> None:
    """A natural-language question whose words are not all present still matches."""
    stats = CorpusStats(10, 5.0, {"where": 3, "sister": 1, "live": 2})
    assert bm25_text_score(cand(1, {"sister": 1}), stats) > 0


def test_rank_explains_every_score_and_sums_components() -> None:
    results = rank([cand(1, {"rare": 1}), cand(2, {"common": 2})], STATS, now=NOW, limit=8)
    assert [r.memory.id for r in results] == [1, 2]
    for r in results:
        names = [c.name for c in r.components]
        assert names == ["text", "trigram", "importance", "recency", "fact"]
        assert math.isclose(r.score, sum(c.value * c.weight for c in r.components))
        weights = {c.name: c.weight for c in r.components}
        assert weights["text"] == DEFAULT_WEIGHTS.text


def test_the_signal_table_names_weights_columns_and_components() -> None:
    """Each signal's name is its weight's field, its column's stem and its component's
    name; relevance signals come first (the evidence rule and fusion read them first)."""
    names = [s.name for s in SIGNALS]
    floats = {f.name for f in fields(RankingWeights) if f.type in (float, "float")}
    assert len(set(names)) == len(names) and set(names) <= floats
    assert all(re.fullmatch(r"[a-z_]+", name) for name in names)
    assert [s.name for s in SIGNALS if s.relevance] == ["text", "trigram"]
    assert [s.relevance for s in SIGNALS] == sorted((s.relevance for s in SIGNALS), reverse=True)
    window = TimeWindow(NOW - timedelta(days=7), NOW, "last week")
    results = rank([cand(1, {"rare": 1})], STATS, now=NOW, limit=8, window=window)
    assert [c.name for c in results[0].components] == names
    assert [c.weight for c in results[0].components] == [
        getattr(DEFAULT_WEIGHTS, name) for name in names
    ]


def test_facts_outrank_equally_relevant_episodes() -> None:
    episode = cand(1, {"rare": 1}, kind="episode")
    fact = cand(2, {"rare": 1}, kind="fact")
    assert [r.memory.id for r in rank([episode, fact], STATS, now=NOW, limit=2)] == [2, 1]


def test_irrelevant_memories_are_never_returned() -> None:
    important = cand(1, {"unrelated": 3}, kind="fact", importance=1.0)
    assert rank([important], STATS, now=NOW, limit=8) == []
    # A memory holding only a neighbour of a misspelled query word is evidence.
    typo = cand(2, {"breakfast": 1})
    assert [r.memory.id for r in rank([typo], TYPO_STATS, now=NOW, limit=8)] == [2]


def test_recency_and_importance_break_lexical_ties() -> None:
    old = cand(1, {"rare": 1}, updated_at=NOW - timedelta(days=200))
    new = cand(2, {"rare": 1}, updated_at=NOW - timedelta(days=1))
    assert [r.memory.id for r in rank([old, new], STATS, now=NOW, limit=2)] == [2, 1]
    low = cand(3, {"rare": 1}, importance=0.1)
    high = cand(4, {"rare": 1}, importance=0.9)
    assert [r.memory.id for r in rank([low, high], STATS, now=NOW, limit=2)] == [4, 3]


def test_recency_halves_every_half_life() -> None:
    assert recency_score(NOW, NOW, 30) == 1.0
    assert recency_score(NOW + timedelta(days=5), NOW, 30) == 1.0
    assert math.isclose(recency_score(NOW - timedelta(days=30), NOW, 30), 0.5)
    assert math.isclose(recency_score(NOW - timedelta(days=60), NOW, 30), 0.25)


def test_rank_honours_limit_and_is_deterministic() -> None:
    cands = [cand(i, {"rare": 1}) for i in range(1, 21)]
    first = rank(cands, STATS, now=NOW, limit=5)
    assert len(first) == 5
    assert [r.memory.id for r in first] == [
        r.memory.id for r in rank(cands[::-1], STATS, now=NOW, limit=5)
    ]


def test_weights_are_validated() -> None:
    with pytest.raises(ValueError, match="text"):
        RankingWeights(text=-1)
    with pytest.raises(ValueError, match="half_life"):
        RankingWeights(recency_half_life_days=0)
    custom = RankingWeights(recency=0.0)
    old = cand(1, {"rare": 1}, updated_at=NOW - timedelta(days=400), importance=0.9)
    new = cand(2, {"rare": 1}, updated_at=NOW, importance=0.1)
    assert rank([old, new], STATS, now=NOW, limit=2, weights=custom)[0].memory.id == 1


def test_choose_lexemes_rarest_first_within_budget() -> None:
    assert choose_lexemes({"a": 3000, "b": 10, "c": 2000, "z": 0}, budget=4000) == ["b", "c"]
    assert choose_lexemes({"a": 9000, "b": 8000}, budget=4000) == ["b"]
    assert choose_lexemes({"z": 0}) == []


def test_tsquery_literal_quotes_lexemes() -> None:
    assert tsquery_literal(["it's", "a\\b"]) == "'it''s' | 'a\\\\b'"


def test_trigram_is_fuzzy_idf_weighted_coverage() -> None:
    exact = cand(1, {"brekfast": 1, "pancak": 1})
    fuzzy = cand(2, {"breakfast": 1, "pancak": 1})
    partial = cand(3, {"pancak": 1})
    scores = {c.memory.id: trigram_score(c, TYPO_STATS) for c in (exact, fuzzy, partial)}
    assert scores[1] == pytest.approx(1.0)
    assert scores[1] > scores[2] > scores[3] > 0
    # The misspelled lexeme weighs as its neighbour; the neighbour counts at its similarity.
    weights = {"brekfast": idf(50, 5), "pancak": idf(50, 2)}
    expected = (weights["brekfast"] * 0.6 + weights["pancak"]) / sum(weights.values())
    assert scores[2] == pytest.approx(expected)
    assert trigram_score(cand(4, {}), TYPO_STATS) == 0.0
    assert trigram_score(cand(5, {"x": 1}), CorpusStats(0, 0.0, {})) == 0.0


def test_trigram_orders_a_misspelled_query() -> None:
    near = cand(1, {"breakfast": 2})
    far = cand(2, {"breakfast": 1, "bread": 1})
    results = rank([far, near], TYPO_STATS, now=NOW, limit=8)
    assert {r.memory.id for r in results} == {1, 2}
    trigram = {r.memory.id: r.components[1].value for r in results}
    assert trigram[1] == trigram[2] > 0
