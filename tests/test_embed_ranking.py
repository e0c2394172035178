"""Semantic fusion, the time signal, query periods and chunking: pure, no database."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from popagent.embed import chunk_text, normalize_rows
from popagent.memory.ranking import (
    DEFAULT_WEIGHTS,
    RankingWeights,
    emphasised_lexemes,
    rank,
    with_next_turns,
)
from popagent.memory.temporal import TimeWindow, query_window, time_score
from popagent.models import Candidate, CorpusStats

from .factories import NOW, make_memory

STATS = CorpusStats(documents=100, average_length=10.0, document_frequency={"wed": 3})
#: The fusion before calibrated fusion became the default: these tests pin its rules.
BLEND = replace(DEFAULT_WEIGHTS, fusion="blend")


def cand(
    id: int,
    tf: dict[str, int],
    similarity: float | None,
    *,
    kind: str = "episode",
    **kw: object,
) -> Candidate:
    return Candidate(
        memory=make_memory(id, kind=kind, **kw),  # type: ignore[arg-type]
        term_frequency=tf,
        length=10,
        similarity=similarity,
    )


def test_blend_finds_a_paraphrase_without_shared_words() -> None:
    """ "Anna got married" shares no word with the query but is its nearest vector."""
    paraphrase = cand(1, {}, 0.62)
    unrelated = cand(2, {}, 0.05)
    lexical = cand(3, {"wed": 1}, 0.30)
    results = rank(
        [paraphrase, unrelated, lexical], STATS, now=NOW, limit=10, weights=BLEND, semantic=True
    )
    # The unrelated one is below min_similarity: no evidence, not listed.
    assert sorted(r.memory.id for r in results) == [1, 3]
    lexical_only = rank([paraphrase, lexical], STATS, now=NOW, limit=10)
    assert [r.memory.id for r in lexical_only] == [3]


@pytest.mark.parametrize("fusion", ["blend", "rrf"])
def test_every_signal_is_explained_and_sums_to_the_score(fusion: str) -> None:
    weights = RankingWeights(fusion=fusion)
    window = TimeWindow(NOW - timedelta(days=7), NOW, "last week")
    cands = [cand(i, {"wed": i % 2}, 0.2 + i / 20) for i in range(1, 8)]
    results = rank(cands, STATS, now=NOW, limit=10, weights=weights, semantic=True, window=window)
    assert len(results) == 7
    for r in results:
        names = {c.name for c in r.components}
        assert {"text", "trigram", "vector", "similarity", "importance", "recency", "fact"} <= names
        assert "time" in names
        assert math.isclose(r.score, sum(c.value * c.weight for c in r.components))
    assert ("fused" in {c.name for c in results[0].components}) == (fusion == "rrf")


def test_vector_signal_is_rescaled_over_the_candidates() -> None:
    """E5-like cosines (all 0.8 to 0.9) still span the whole signal."""
    cands = [cand(1, {}, 0.80), cand(2, {}, 0.85), cand(3, {}, 0.90)]
    results = rank(cands, STATS, now=NOW, limit=3, weights=BLEND, semantic=True)
    vector = {
        r.memory.id: next(c.value for c in r.components if c.name == "vector") for r in results
    }
    assert vector == pytest.approx({1: 0.0, 2: 0.5, 3: 1.0})
    raw = {
        r.memory.id: next(c.value for c in r.components if c.name == "similarity") for r in results
    }
    assert raw == pytest.approx({1: 0.80, 2: 0.85, 3: 0.90})
    assert [r.memory.id for r in results] == [3, 2, 1]


def test_a_memory_without_a_vector_scores_zero_on_the_vector_signal() -> None:
    results = rank(
        [cand(1, {"wed": 1}, None), cand(2, {"wed": 1}, 0.5)],
        STATS,
        now=NOW,
        limit=2,
        weights=BLEND,
        semantic=True,
    )
    vector = {
        r.memory.id: next(c.value for c in r.components if c.name == "vector") for r in results
    }
    assert vector[1] == 0.0 and results[0].memory.id == 2


def test_facts_keep_their_priority_in_fused_ranking() -> None:
    episode = cand(1, {"wed": 1}, 0.7, kind="episode")
    fact = cand(2, {"wed": 1}, 0.7, kind="fact")
    for fusion in ("blend", "rrf"):
        results = rank(
            [episode, fact],
            STATS,
            now=NOW,
            limit=2,
            weights=RankingWeights(fusion=fusion),
            semantic=True,
        )
        assert [r.memory.id for r in results] == [2, 1]


def test_duplicate_candidates_merge_keeping_the_best_similarity() -> None:
    results = rank(
        [cand(1, {"wed": 1}, None), cand(1, {"wed": 1}, 0.6), cand(2, {}, 0.3)],
        STATS,
        now=NOW,
        limit=5,
        weights=BLEND,
        semantic=True,
    )
    assert [r.memory.id for r in results] == [1, 2]
    raw = next(c.value for c in results[0].components if c.name == "similarity")
    assert raw == pytest.approx(0.6)


def test_rrf_rewards_agreement_of_both_rankings() -> None:
    weights = RankingWeights(fusion="rrf", importance=0, recency=0, fact=0)
    both = cand(1, {"wed": 2}, 0.9)
    lexical = cand(2, {"wed": 1}, 0.1)
    vector = cand(3, {}, 0.8)
    results = rank([vector, lexical, both], STATS, now=NOW, limit=3, weights=weights, semantic=True)
    assert results[0].memory.id == 1
    fused = next(c for c in results[0].components if c.name == "fused")
    assert fused.value == pytest.approx(1.0)  # first in both rankings


def test_weights_validate_fusion_and_share() -> None:
    with pytest.raises(ValueError, match="fusion"):
        RankingWeights(fusion="max")
    with pytest.raises(ValueError, match="semantic_share"):
        RankingWeights(semantic_share=1.5)
    assert DEFAULT_WEIGHTS.fusion == "calibrated"


def test_time_signal_prefers_the_named_period() -> None:
    window = TimeWindow(NOW - timedelta(days=14), NOW - timedelta(days=7), "last week")
    inside = cand(1, {"wed": 1}, None, updated_at=NOW - timedelta(days=10))
    newer = cand(2, {"wed": 1}, None, updated_at=NOW - timedelta(hours=1))
    without = rank([inside, newer], STATS, now=NOW, limit=2)
    assert without[0].memory.id == 2  # recency alone prefers the newer one
    with_window = rank([inside, newer], STATS, now=NOW, limit=2, window=window)
    assert with_window[0].memory.id == 1
    assert time_score(NOW - timedelta(days=10), window) == 1.0
    assert time_score(NOW - timedelta(days=21), window) == pytest.approx(0.5)
    assert time_score(NOW, window) == pytest.approx(0.5)


WED = datetime(2023, 8, 16, 15, 0, tzinfo=UTC)  # a Wednesday


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did I do last week?", day(2023, 8, 7), day(2023, 8, 14)),
        ("What happened in May 2023?", day(2023, 5, 1), day(2023, 6, 1)),
        ("anything from yesterday", day(2023, 8, 15), day(2023, 8, 16)),
        ("what did we plan 3 days ago", day(2023, 8, 13), day(2023, 8, 14)),
        ("two months ago we talked about", day(2023, 6, 1), day(2023, 7, 1)),
        ("in 2022 I moved", day(2022, 1, 1), day(2023, 1, 1)),
        ("last Saturday's party", day(2023, 8, 12), day(2023, 8, 13)),
        ("on 8 May, 2023", day(2023, 5, 8), day(2023, 5, 9)),
        ("May 8th 2023", day(2023, 5, 8), day(2023, 5, 9)),
        ("the 2023-05-08 call", day(2023, 5, 8), day(2023, 5, 9)),
        ("what did I say this month", day(2023, 8, 1), day(2023, 9, 1)),
        ("in March", day(2023, 3, 1), day(2023, 4, 1)),
        ("in September", day(2022, 9, 1), day(2022, 10, 1)),  # the latest September past
        ("before May 2023", day(2022, 5, 1), day(2023, 5, 1)),
        ("after June 2023", day(2023, 7, 1), day(2024, 6, 30)),
    ],
)
def test_query_window_reads_named_periods(query: str, start: datetime, end: datetime) -> None:
    window = query_window(query, WED)
    assert window is not None, query
    assert (window.start, window.end) == (start, end)


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the support group?",
        "May I ask what you recommended?",
        "I march on",
        "what is my favourite colour",
        "after the trip, what did we do",  # an event, not a date: left to the other signals
    ],
)
def test_query_window_ignores_questions_without_a_period(query: str) -> None:
    assert query_window(query, WED) is None


def test_since_runs_to_now() -> None:
    window = query_window("since June", WED)
    assert window is not None
    assert window.start == day(2023, 6, 1) and window.end > WED


def test_chunks_cover_long_text_in_order_within_the_limit() -> None:
    sentence = "The quick brown fox jumps over the lazy dog. "
    text = sentence * 80  # 3,600 characters
    chunks = chunk_text(text, max_chars=1_000)
    assert len(chunks) == 4
    assert all(len(c) <= 1_000 for c in chunks)
    assert " ".join(chunks).split() == text.split()
    assert chunk_text("short") == ["short"]
    assert chunk_text("   ") == []
    assert len(chunk_text("word " * 10_000, max_chars=100, max_chunks=3)) == 3


def test_normalize_rows_gives_unit_rows_and_keeps_zero_rows() -> None:
    rows = normalize_rows(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert rows.dtype == np.float32
    assert rows[0] == pytest.approx([0.6, 0.8]) and not rows[1].any()


def test_recency_is_unchanged_by_semantic_mode() -> None:
    old = cand(1, {"wed": 1}, 0.5, updated_at=NOW - timedelta(days=90))
    results = rank([old], STATS, now=NOW, limit=1, weights=BLEND, semantic=True)
    recency = next(c for c in results[0].components if c.name == "recency")
    assert recency.value == pytest.approx(0.5)
    assert replace(DEFAULT_WEIGHTS).recency == recency.weight


def test_the_nearest_memory_below_the_floor_comes_back() -> None:
    """A store of a few memories: "what pets do I have?" is nearest "Has a cat named Miso"
    at a cosine under ``min_similarity``; it comes back, the farther one does not."""
    cat = cand(1, {}, 0.17)
    near = cand(2, {}, 0.13)
    far = cand(3, {}, 0.05)
    results = rank([far, near, cat], STATS, now=NOW, limit=8, weights=BLEND, semantic=True)
    assert [r.memory.id for r in results] == [1, 2]
    # Without the near-best rule only the floor admits: nothing comes back.
    floor_only = replace(BLEND, min_nearest_similarity=1.0)
    assert rank([far, near, cat], STATS, now=NOW, limit=8, weights=floor_only, semantic=True) == []


def test_the_near_best_rule_never_goes_below_its_own_floor_or_widens_above() -> None:
    weak = [cand(1, {}, 0.08), cand(2, {}, 0.06), cand(3, {}, 0.02)]
    # With a least cosine for the rule, a best below it is too weak to count: nothing is.
    at_least = replace(BLEND, min_nearest_similarity=0.1)
    assert rank(weak, STATS, now=NOW, limit=8, weights=at_least, semantic=True) == []
    # By default there is none (chosen on the implicit questions: a store of a few
    # memories answers with its nearest), but the margin still holds: 0.02 is too far.
    results = rank(weak, STATS, now=NOW, limit=8, weights=BLEND, semantic=True)
    assert [r.memory.id for r in results] == [1, 2]
    # The best is above min_similarity: the floor stays min_similarity.
    results = rank(
        [cand(1, {}, 0.30), cand(2, {}, 0.18)],
        STATS,
        now=NOW,
        limit=8,
        weights=BLEND,
        semantic=True,
    )
    assert [r.memory.id for r in results] == [1]
    # The same holds for reciprocal-rank fusion, which ranks the same evidence.
    rrf = RankingWeights(fusion="rrf")
    results = rank(
        [cand(1, {}, 0.16), cand(2, {}, 0.12), cand(3, {}, 0.02)],
        STATS,
        now=NOW,
        limit=8,
        weights=rrf,
        semantic=True,
    )
    assert [r.memory.id for r in results] == [1, 2]
    for r in results:
        assert math.isclose(r.score, sum(c.value * c.weight for c in r.components))


def test_lexical_ranking_ignores_similarities() -> None:
    """The near-best rule belongs to semantic recall: lexical ranking admits no vector-only
    candidate whatever its similarity."""
    assert rank([cand(1, {}, 0.9)], STATS, now=NOW, limit=8) == []


def test_the_next_turn_follows_its_hit_within_the_limit() -> None:
    results = rank(
        [cand(1, {"wed": 2}, 0.5), cand(2, {"wed": 1}, 0.4), cand(3, {}, 0.3)],
        STATS,
        now=NOW,
        limit=3,
        weights=BLEND,
        semantic=True,
    )
    assert [r.memory.id for r in results] == [1, 2, 3]
    follower = make_memory(9, kind="episode")
    out = with_next_turns(results, {1: follower, 2: make_memory(8, kind="episode")}, 1, 3)
    # Only the first result's follower (top 1); the last result makes room.
    assert [r.memory.id for r in out] == [1, 9, 2]
    assert out[1].score == out[0].score
    assert [(c.name, c.value, c.weight) for c in out[1].components] == [("next_turn", 1.0, 0.0)]
    # A follower ranked lower anyway moves up, and is not listed twice.
    moved = with_next_turns(results, {1: results[2].memory}, 1, 3)
    assert [r.memory.id for r in moved] == [1, 3, 2]
    assert with_next_turns(results, {}, 1, 3) == results
    assert [r.memory.id for r in with_next_turns(results, {1: follower}, 0, 3)] == [1, 2, 3]


def test_names_and_quoted_phrases_are_emphasised() -> None:
    lexemes = ["carolin", "go", "lgbtq", "support", "group", "big", "trip", "melani", "say"]
    found = emphasised_lexemes("When did Caroline go to the LGBTQ support group?", lexemes)
    assert found == {"carolin", "lgbtq"}  # not "When": a sentence's first word
    quoted = emphasised_lexemes('What did Melanie say about "the big trip"?', lexemes)
    assert quoted == {"melani", "big", "trip"}
    assert emphasised_lexemes("what should i avoid eating?", ["avoid", "eat"]) == frozenset()
    # An emphasised lexeme weighs more: a memory holding the name outranks one holding
    # the other word, which it tied with before.
    stats = CorpusStats(
        documents=100, average_length=10.0, document_frequency={"ann": 5, "trip": 5}
    )
    pair = [cand(1, {"trip": 1}, 0.3), cand(2, {"ann": 1}, 0.3)]
    plain = rank(pair, stats, now=NOW, limit=2, weights=BLEND, semantic=True)
    assert plain[0].score == pytest.approx(plain[1].score)
    boosted = rank(pair, stats, now=NOW, limit=2, weights=BLEND, semantic=True, emphasis={"ann"})
    assert [r.memory.id for r in boosted] == [2, 1] and boosted[0].score > boosted[1].score


@pytest.mark.parametrize("fusion", ["blend", "rrf"])
def test_a_resource_that_fits_in_the_answer_comes_back_whole(fusion: str) -> None:
    """Five facts and a question the model places far from all of them: the top eight of
    five memories is all five, ranked; a larger resource keeps its evidence floor."""
    weights = RankingWeights(fusion=fusion)
    facts = [
        cand(i, {}, sim, kind="fact") for i, sim in enumerate((0.11, 0.05, 0.035, 0.02, -0.01))
    ]
    small = CorpusStats(documents=5, average_length=4.0, document_frequency={})
    whole = rank(facts, small, now=NOW, limit=8, weights=weights, semantic=True)
    assert [r.memory.id for r in whole] == [0, 1, 2, 3, 4]  # nearest first
    large = CorpusStats(documents=9, average_length=4.0, document_frequency={})
    floored = rank(facts, large, now=NOW, limit=8, weights=weights, semantic=True)
    assert [r.memory.id for r in floored] == [0]  # only the near-best rule admits one
    # By words alone nothing changes: no word in common, nothing returned.
    assert rank(facts, small, now=NOW, limit=8, weights=weights) == []
    # The limit is the measure: five memories against a limit of 3 keep the floor.
    assert [r.memory.id for r in rank(facts, small, now=NOW, limit=3, semantic=True)] == [0]


# --- calibrated fusion (the default: ``memory.evidence``) -------------------------------

#: The query's cosines to a resource's newest memories: median 0.055, spread 0.03.
BACKGROUND = [0.02, 0.05, 0.06, 0.08, 0.1, 0.04, 0.07, 0.03, 0.05, 0.06]
LIVING = CorpusStats(documents=40, average_length=8.0, document_frequency={"live": 1})


def test_calibrated_admits_nothing_on_importance_and_recency() -> None:
    """A fact as important and as new as can be, clearly above the background but far
    below the nearest memory, is not evidence: it is not returned. The same memory
    holding a name of the question is."""
    answer = cand(1, {}, 0.40)
    loud = cand(2, {}, 0.22, kind="fact", importance=1.0, updated_at=NOW)
    results = rank([answer, loud], LIVING, now=NOW, limit=8, semantic=True, background=BACKGROUND)
    assert [(r.memory.id, r.evidence) for r in results] == [(1, "meaning")]
    named = cand(2, {"live": 1}, 0.22, kind="fact", importance=1.0, updated_at=NOW)
    results = rank(
        [answer, named],
        LIVING,
        now=NOW,
        limit=8,
        semantic=True,
        background=BACKGROUND,
        emphasis={"live"},
    )
    assert {r.memory.id: r.evidence for r in results} == {1: "meaning", 2: "words"}
    # The blend admitted it by its nearness alone, and put it first by its importance.
    blend = rank([answer, loud], LIVING, now=NOW, limit=8, weights=BLEND, semantic=True)
    assert [r.memory.id for r in blend] == [2, 1]


def test_calibrated_a_common_word_loses_to_meaning_and_a_rare_word_wins() -> None:
    job = cand(1, {}, 0.36, kind="fact")  # "I work as a backend engineer"
    sister = cand(2, {"live": 1}, 0.10, kind="fact")  # "My sister Ana lives in Toronto"
    results = rank([sister, job], LIVING, now=NOW, limit=8, semantic=True, background=BACKGROUND)
    assert next(r.memory.id for r in results) == 1
    # Alone, one common word is no evidence (its meaning is near the background).
    assert 2 not in {r.memory.id for r in results}
    # A rare word of the question (a name) is: it admits and leads.
    ana = CorpusStats(documents=40, average_length=8.0, document_frequency={"ana": 1})
    sister = cand(2, {"ana": 1}, 0.30, kind="fact")
    other = cand(3, {}, 0.33, kind="fact")
    results = rank(
        [other, sister], ana, now=NOW, limit=8, semantic=True, background=BACKGROUND,
        emphasis={"ana"},
    )  # fmt: skip
    assert next(r.memory.id for r in results) == 2
    for r in results:
        names = [c.name for c in r.components]
        assert names[:7] == ["relevance", "words", "meaning", "text", "trigram",
                             "similarity", "background"]  # fmt: skip
        assert math.isclose(r.score, sum(c.value * c.weight for c in r.components))


def test_the_background_is_robust_and_never_flat() -> None:
    from popagent.memory.evidence import Background

    bg = Background.of(BACKGROUND, 0.03)
    assert bg is not None and bg.median == pytest.approx(0.055) and bg.spread == 0.03
    # One related memory among the sample moves the median and spread little.
    with_hit = Background.of([*BACKGROUND, 0.6], 0.01)
    assert with_hit is not None and with_hit.median == pytest.approx(0.06)
    assert with_hit.spread < 0.04
    assert Background.of([], 0.03) is None
    assert Background.of([0.2, 0.2, 0.2], 0.03) == Background(0.2, 0.03, 3)
