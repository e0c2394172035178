"""Recall ranking as pure functions.

A memory's score is a weighted sum of five signals, each in [0, 1]:

``text``
    Okapi BM25 of the query's lexemes (PostgreSQL's English stemming and stop
    words) over the resource's memories, divided by the query's total IDF so
    that a memory that holds every query term once, at average length, scores
    about 1. A question whose words are not all present still matches: terms
    are OR-ed, and rarer terms weigh more.
``trigram``
    pg_trgm ``word_similarity(query, content)``: catches misspellings,
    partial words and phrasing the stemmer does not join.
``importance``
    The memory's own importance.
``recency``
    ``0.5 ** (age / half_life)`` from the last update (the original time for
    imported history), relative to ``now``.
``fact``
    1 for facts, 0 for episodes: explicit durable facts outrank a turn that
    merely mentions the same words.

A candidate must carry some lexical evidence (``text > 0`` or ``trigram`` at
least ``min_trigram``); importance and recency only order relevant memories,
they never make an unrelated one relevant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime

from ..models import Candidate, CorpusStats, RecallResult, ScoreComponent

__all__ = [
    "DEFAULT_WEIGHTS",
    "RankingWeights",
    "bm25_text_score",
    "idf",
    "rank",
    "recency_score",
    "trigram_shortlist",
]


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """The named, documented settings of recall ranking.

    The five weights add up to 1 by default, so a score reads as a fraction.
    """

    text: float = 0.55
    trigram: float = 0.15
    importance: float = 0.10
    recency: float = 0.10
    fact: float = 0.10
    #: Days after which the recency signal halves.
    recency_half_life_days: float = 90.0
    #: Okapi BM25 term-frequency saturation and length normalization.
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    #: Least trigram word similarity that counts as lexical evidence on its own.
    min_trigram: float = 0.3

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"ranking weight {f.name} must be a finite number >= 0")
        if self.recency_half_life_days <= 0:
            raise ValueError("recency_half_life_days must be > 0")


DEFAULT_WEIGHTS = RankingWeights()


def idf(documents: int, frequency: int) -> float:
    """BM25's IDF, never negative: ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
    n = max(documents, frequency)
    return math.log(1.0 + (n - frequency + 0.5) / (frequency + 0.5))


def bm25_text_score(
    candidate: Candidate, stats: CorpusStats, weights: RankingWeights = DEFAULT_WEIGHTS
) -> float:
    """BM25 over the query's lexemes divided by their summed IDF, clamped to [0, 1]."""
    lexemes = stats.document_frequency
    if not lexemes:
        return 0.0
    idfs = {lex: idf(stats.documents, df) for lex, df in lexemes.items()}
    total = sum(idfs.values())
    matched = [lex for lex in lexemes if candidate.term_frequency.get(lex, 0) > 0]
    if not matched:
        return 0.0
    if total <= 1e-9:
        # Every query term is everywhere: fall back to plain coverage.
        return len(matched) / len(lexemes)
    k1, b = weights.bm25_k1, weights.bm25_b
    avg = stats.average_length if stats.average_length > 0 else 1.0
    norm = k1 * (1.0 - b + b * candidate.length / avg)
    score = 0.0
    for lex in matched:
        tf = candidate.term_frequency[lex]
        score += idfs[lex] * tf * (k1 + 1.0) / (tf + norm)
    return min(1.0, score / total)


def recency_score(updated_at: datetime, now: datetime, half_life_days: float) -> float:
    """1 for now or later, halving every ``half_life_days`` of age."""
    age_days = (now - updated_at).total_seconds() / 86_400.0
    if age_days <= 0:
        return 1.0
    return float(0.5 ** (age_days / half_life_days))


def rank(
    candidates: Sequence[Candidate],
    stats: CorpusStats,
    *,
    now: datetime,
    limit: int,
    weights: RankingWeights = DEFAULT_WEIGHTS,
) -> list[RecallResult]:
    """Score, filter and order candidates; return at most ``limit`` explained results.

    Ties break towards facts, then the more recently updated, then the higher id,
    so the order is total and repeatable.
    """
    scored: list[tuple[float, int, datetime, int, RecallResult]] = []
    for cand in candidates:
        memory = cand.memory
        text = bm25_text_score(cand, stats, weights)
        trigram = max(0.0, min(1.0, cand.trigram or 0.0))
        if text <= 0.0 and trigram < weights.min_trigram:
            continue
        components = (
            ScoreComponent("text", text, weights.text),
            ScoreComponent("trigram", trigram, weights.trigram),
            ScoreComponent("importance", memory.importance, weights.importance),
            ScoreComponent(
                "recency",
                recency_score(memory.updated_at, now, weights.recency_half_life_days),
                weights.recency,
            ),
            ScoreComponent("fact", 1.0 if memory.kind == "fact" else 0.0, weights.fact),
        )
        score = sum(c.contribution for c in components)
        result = RecallResult(memory=memory, score=score, components=components)
        scored.append((score, memory.kind == "fact", memory.updated_at, memory.id, result))
    scored.sort(key=lambda s: (s[0], s[1], s[2], s[3]), reverse=True)
    return [s[4] for s in scored[:limit]]


def trigram_shortlist(
    candidates: Sequence[Candidate],
    stats: CorpusStats,
    *,
    now: datetime,
    limit: int,
    weights: RankingWeights = DEFAULT_WEIGHTS,
) -> list[int]:
    """Ids of the candidates without a trigram value whose similarity could change the top ``limit``.

    Ranked as if their similarity were 0, a candidate more than the trigram
    weight below the ``limit``-th score cannot reach the results even at
    similarity 1, so its similarity need not be computed.
    """
    pending = {c.memory.id for c in candidates if c.trigram is None}
    if not pending:
        return []
    open_gate = replace(weights, min_trigram=0.0)
    prelim = rank(candidates, stats, now=now, limit=len(candidates), weights=open_gate)
    if len(prelim) <= limit:
        return [r.memory.id for r in prelim if r.memory.id in pending]
    floor = prelim[limit - 1].score - weights.trigram
    return [r.memory.id for r in prelim if r.memory.id in pending and r.score >= floor]
