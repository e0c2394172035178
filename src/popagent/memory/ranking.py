"""Recall ranking as pure functions.

A memory's score is a weighted sum of five signals, each in [0, 1]:

``text``
    Okapi BM25 of the query's lexemes (PostgreSQL's English stemming and stop
    words) over the resource's memories, divided by the query's total IDF so
    that a memory that holds every query term once, at average length, scores
    about 1. A question whose words are not all present still matches: terms
    are OR-ed, and rarer terms weigh more.
``trigram``
    Fuzzy coverage of the query: for each query lexeme, 1 if the memory holds
    it, else the best pg_trgm similarity of one of its *neighbours* the memory
    holds (for a lexeme the resource never held: the resource's lexemes that
    look like it, similarity at least 0.3);
    averaged with the lexemes' IDF as weights. Catches misspellings ("restaurnt"),
    partial words ("birth" for "birthday") and forms the stemmer does not join,
    at the cost of a lookup in the resource's vocabulary rather than trigram
    work over every candidate's text. An unknown lexeme weighs as its likeliest
    neighbour.
``importance``
    The memory's own importance.
``recency``
    ``0.5 ** (age / half_life)`` from the last update (the original time for
    imported history), relative to ``now``.
``fact``
    1 for facts, 0 for episodes: explicit durable facts outrank a turn that
    merely mentions the same words.

A candidate must carry some lexical evidence (``text > 0`` or ``trigram``
above ``min_trigram``); importance and recency only order relevant memories,
they never make an unrelated one relevant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime

from ..models import Candidate, CorpusStats, RecallResult, ScoreComponent

__all__ = [
    "DEFAULT_WEIGHTS",
    "RankingWeights",
    "bm25_text_score",
    "idf",
    "rank",
    "recency_score",
    "trigram_score",
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
    #: A trigram score above this counts as lexical evidence on its own.
    min_trigram: float = 0.0

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


class _TextScorer:
    """BM25 of one query over one resource: IDFs and their total computed once per recall."""

    __slots__ = ("avg", "b", "idfs", "k1", "lexemes", "total")

    def __init__(self, stats: CorpusStats, weights: RankingWeights) -> None:
        self.lexemes = len(stats.document_frequency)
        self.idfs = {lex: idf(stats.documents, df) for lex, df in stats.document_frequency.items()}
        self.total = sum(self.idfs.values())
        self.avg = stats.average_length if stats.average_length > 0 else 1.0
        self.k1, self.b = weights.bm25_k1, weights.bm25_b

    def __call__(self, candidate: Candidate) -> float:
        matched = [
            (self.idfs[lex], tf)
            for lex, tf in candidate.term_frequency.items()
            if tf > 0 and lex in self.idfs
        ]
        if not matched:
            return 0.0
        if self.total <= 1e-9:
            # Every query term is everywhere: fall back to plain coverage.
            return len(matched) / self.lexemes
        norm = self.k1 * (1.0 - self.b + self.b * candidate.length / self.avg)
        score = sum(w * tf * (self.k1 + 1.0) / (tf + norm) for w, tf in matched)
        return min(1.0, score / self.total)


class _TrigramScorer:
    """Fuzzy, IDF-weighted coverage of one query's lexemes (see the module docstring)."""

    __slots__ = ("neighbours", "total", "weights")

    def __init__(self, stats: CorpusStats) -> None:
        self.neighbours = stats.neighbours
        self.weights: dict[str, float] = {}
        for lex, df in stats.document_frequency.items():
            near = stats.neighbours.get(lex, ())
            if df == 0 and near:
                df = near[0].documents  # the likeliest meaning: neighbours come best first
            self.weights[lex] = idf(stats.documents, df)
        self.total = sum(self.weights.values())
        if self.total <= 1e-9:
            # Every query term is everywhere: weigh them equally.
            self.weights = dict.fromkeys(self.weights, 1.0)
            self.total = float(len(self.weights))

    def __call__(self, candidate: Candidate) -> float:
        if not self.weights:
            return 0.0
        tf = candidate.term_frequency
        covered = 0.0
        for lex, weight in self.weights.items():
            if tf.get(lex, 0) > 0:
                covered += weight
                continue
            best = max(
                (n.similarity for n in self.neighbours.get(lex, ()) if tf.get(n.lexeme, 0) > 0),
                default=0.0,
            )
            covered += weight * best
        return min(1.0, covered / self.total)


def trigram_score(candidate: Candidate, stats: CorpusStats) -> float:
    """The fuzzy coverage of the query by ``candidate``, in [0, 1]."""
    return _TrigramScorer(stats)(candidate)


def bm25_text_score(
    candidate: Candidate, stats: CorpusStats, weights: RankingWeights = DEFAULT_WEIGHTS
) -> float:
    """BM25 over the query's lexemes divided by their summed IDF, clamped to [0, 1]."""
    return _TextScorer(stats, weights)(candidate)


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
    text_score = _TextScorer(stats, weights)
    trigram_of = _TrigramScorer(stats)
    names = ("text", "trigram", "importance", "recency", "fact")
    weight_of = (weights.text, weights.trigram, weights.importance, weights.recency, weights.fact)
    # Scores first, explanations only for the results: most candidates are dropped.
    scored: list[tuple[float, bool, datetime, int, tuple[float, ...], Candidate]] = []
    for cand in candidates:
        memory = cand.memory
        text = text_score(cand)
        trigram = trigram_of(cand)
        if text <= 0.0 and trigram <= weights.min_trigram:
            continue
        values = (
            text,
            trigram,
            memory.importance,
            recency_score(memory.updated_at, now, weights.recency_half_life_days),
            1.0 if memory.kind == "fact" else 0.0,
        )
        score = sum(v * w for v, w in zip(values, weight_of, strict=True))
        scored.append((score, memory.kind == "fact", memory.updated_at, memory.id, values, cand))
    scored.sort(key=lambda s: (s[0], s[1], s[2], s[3]), reverse=True)
    return [
        RecallResult(
            memory=cand.memory,
            score=score,
            components=tuple(
                ScoreComponent(n, v, w) for n, v, w in zip(names, values, weight_of, strict=True)
            ),
        )
        for score, _fact, _updated, _id, values, cand in scored[:limit]
    ]
