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

Semantic recall (``semantic=True``, when recall embeds the query) adds

``vector``
    The cosine similarity of the memory's best-matching chunk to the query,
    rescaled over this recall's candidates so that the nearest scores 1 and
    the farthest 0: models differ widely in their cosine ranges (MiniLM's
    related texts score 0.3 to 0.7, E5's 0.75 to 0.9), and a raw cosine would
    let recency outweigh E5's whole spread. A memory without a vector of the
    query's model scores 0. The raw cosine is listed as ``similarity`` (weight
    0); at least ``min_similarity`` of it counts as evidence on its own. So
    does a cosine within ``similarity_margin`` of the recall's best one and at
    least ``min_nearest_similarity``: the memories nearest the question can
    come back though they share no word with it and fall below the floor,
    which matters most in a store of a few memories, where an implicit
    question ("what should I avoid eating?") would otherwise get nothing. (Chosen on the implicit questions' dev split,
    ``bench/quality.py --sweep``; docs/embeddings.md has the numbers.)

and fuses the relevance signals in one of two ways (``fusion``):

``blend`` (default)
    ``text`` and ``trigram`` keep ``1 - semantic_share`` of their weights and
    ``vector`` gets ``semantic_share`` of their sum; a weighted sum as before.
``rrf``
    Reciprocal-rank fusion: the lexical ranking (by ``text`` and ``trigram``
    as weighted) and the vector ranking each give ``1 / (rrf_k + rank)``; the
    sum, divided by its best possible value, is the ``fused`` signal with the
    relevance weight (``text + trigram``). The three relevance signals are
    still listed, with weight 0, so the explanation shows each.

In semantic recall the ``text`` signal also weighs a name or a quoted phrase
of the question more (``emphasis``, ``emphasised_lexemes``), and recall returns
the episode that follows its best one right after it (``with_next_turns``).
Both were chosen on LoCoMo and the implicit questions together
(``bench/quality.py --sweep``, docs/embeddings.md).

When the query names a period (``popagent.memory.temporal``), a ``time``
signal with weight ``time`` is added: 1 for memories created in the period,
halving per period-length outside it. Importance, recency and the fact bonus
apply unchanged in every mode, so facts keep their priority.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from datetime import datetime

from ..models import Candidate, CorpusStats, Memory, RecallResult, ScoreComponent
from .temporal import HALF_LIVES_CAP, TimeWindow, time_score

__all__ = [
    "DEFAULT_WEIGHTS",
    "FUSIONS",
    "RankingWeights",
    "bm25_text_score",
    "emphasised_lexemes",
    "idf",
    "rank",
    "recency_score",
    "trigram_score",
    "with_next_turns",
]


FUSIONS = ("blend", "rrf")


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
    #: Semantic recall: how the vector signal joins the lexical ones (``blend`` or ``rrf``).
    fusion: str = "blend"
    #: ``blend``: the share of the relevance weight (text + trigram) given to ``vector``.
    #: Chosen on three LoCoMo conversations, checked on the other seven (docs/embeddings.md).
    semantic_share: float = 0.2
    #: ``rrf``: the rank offset; larger flattens the difference between top ranks (the
    #: literature's 60 let weak ranks count too much on the same three conversations).
    rrf_k: float = 5.0
    #: A cosine similarity at least this counts as evidence on its own.
    min_similarity: float = 0.2
    #: Below ``min_similarity``, a cosine within this of the recall's best counts too,
    #: if it is at least ``min_nearest_similarity``: the nearest memories can come back.
    similarity_margin: float = 0.05
    min_nearest_similarity: float = 0.0
    #: Semantic recall: each of the first ``next_turns`` results that is an episode
    #: brings the next episode of its session right after it (``memory.recall``).
    next_turns: int = 1
    #: The weight of the ``time`` signal when the query names a period.
    time: float = 0.15
    #: Semantic recall, ``text``: the IDF of an emphasised lexeme (a name, a quoted
    #: phrase) is multiplied by ``1 + emphasis`` (``emphasised_lexemes``).
    emphasis: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                continue
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"ranking weight {f.name} must be a finite number >= 0")
        if self.recency_half_life_days <= 0:
            raise ValueError("recency_half_life_days must be > 0")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}")
        if self.semantic_share > 1:
            raise ValueError("semantic_share must be in [0, 1]")
        if type(self.next_turns) is not int:
            raise ValueError("next_turns must be an integer >= 0")


DEFAULT_WEIGHTS = RankingWeights()


def idf(documents: int, frequency: int) -> float:
    """BM25's IDF, never negative: ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
    n = max(documents, frequency)
    return math.log(1.0 + (n - frequency + 0.5) / (frequency + 0.5))


class _TextScorer:
    """BM25 of one query over one resource: IDFs and their total computed once per recall.

    Recall scores every candidate with it, so the loop is written for speed; the
    arithmetic (and so every score, to the last bit) is the plain formula's.
    """

    __slots__ = ("avg", "b", "idfs", "k1", "k1_plus_1", "lexemes", "total")

    def __init__(
        self, stats: CorpusStats, weights: RankingWeights, emphasis: Collection[str] = ()
    ) -> None:
        self.lexemes = len(stats.document_frequency)
        self.idfs = {lex: idf(stats.documents, df) for lex, df in stats.document_frequency.items()}
        if weights.emphasis > 0:
            # A name or a quoted phrase of the question counts more than its other words.
            for lex in emphasis:
                if lex in self.idfs:
                    self.idfs[lex] *= 1.0 + weights.emphasis
        self.total = sum(self.idfs.values())
        self.avg = stats.average_length if stats.average_length > 0 else 1.0
        self.k1, self.b = weights.bm25_k1, weights.bm25_b
        self.k1_plus_1 = self.k1 + 1.0

    def __call__(self, candidate: Candidate) -> float:
        idfs = self.idfs
        matched = [
            (idfs[lex], tf)
            for lex, tf in candidate.term_frequency.items()
            if tf > 0 and lex in idfs
        ]
        if not matched:
            return 0.0
        if self.total <= 1e-9:
            # Every query term is everywhere: fall back to plain coverage.
            return len(matched) / self.lexemes
        norm = self.k1 * (1.0 - self.b + self.b * candidate.length / self.avg)
        k1_plus_1 = self.k1_plus_1
        score = sum(w * tf * k1_plus_1 / (tf + norm) for w, tf in matched)
        return min(1.0, score / self.total)


class _TrigramScorer:
    """Fuzzy, IDF-weighted coverage of one query's lexemes (see the module docstring)."""

    __slots__ = ("neighbours", "terms", "total", "weights")

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
        # (lexeme, weight, its look-alikes as (lexeme, similarity)), once per recall.
        self.terms = [
            (lex, weight, tuple((n.lexeme, n.similarity) for n in self.neighbours.get(lex, ())))
            for lex, weight in self.weights.items()
        ]

    def __call__(self, candidate: Candidate) -> float:
        if not self.terms:
            return 0.0
        tf = candidate.term_frequency
        covered = 0.0
        for lex, weight, near in self.terms:
            if tf.get(lex, 0) > 0:
                covered += weight
                continue
            best = 0.0
            for lexeme, similarity in near:
                if similarity > best and tf.get(lexeme, 0) > 0:
                    best = similarity
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
    return float(0.5 ** min(age_days / half_life_days, HALF_LIVES_CAP))


#: One signal before it becomes a ``ScoreComponent``: (name, value, weight). Ranking
#: builds components only for the results it returns, not for every candidate.
_Signal = tuple[str, float, float]


def rank(
    candidates: Sequence[Candidate],
    stats: CorpusStats,
    *,
    now: datetime,
    limit: int,
    weights: RankingWeights = DEFAULT_WEIGHTS,
    semantic: bool = False,
    window: TimeWindow | None = None,
    emphasis: Collection[str] = (),
) -> list[RecallResult]:
    """Score, filter and order candidates; return at most ``limit`` explained results.

    ``semantic``: the candidates carry query similarities (see the module
    docstring); ``window``: the period the query names. A candidate listed
    twice (proposed by two indexes) counts once, with its best similarity.
    Ties break towards facts, then the more recently updated, then the higher
    id, so the order is total and repeatable.
    """
    candidates = _merge(candidates)
    text_score = _TextScorer(stats, weights, emphasis)
    trigram_of = _TrigramScorer(stats)
    # (text, trigram, similarity or None) of each candidate with some evidence.
    relevant: list[tuple[Candidate, float, float, float | None]] = []
    min_trigram = weights.min_trigram
    min_similarity = _similarity_floor(candidates, weights) if semantic else 0.0
    for cand in candidates:
        text = text_score(cand)
        trigram = trigram_of(cand)
        similarity = cand.similarity if semantic else None
        lexical = text > 0.0 or trigram > min_trigram
        if not lexical and (similarity is None or similarity < min_similarity):
            continue
        relevant.append((cand, text, trigram, similarity))
    relevance = _relevance(relevant, weights, semantic, min_similarity)
    half_life = weights.recency_half_life_days
    scored: list[tuple[float, bool, datetime, int, tuple[_Signal, ...], Candidate]] = []
    for (cand, *_signals), parts in zip(relevant, relevance, strict=True):
        memory = cand.memory
        is_fact = memory.kind == "fact"
        signals = (
            *parts,
            ("importance", memory.importance, weights.importance),
            ("recency", recency_score(memory.updated_at, now, half_life), weights.recency),
            ("fact", 1.0 if is_fact else 0.0, weights.fact),
        )
        if window is not None:
            signals += (("time", time_score(memory.created_at, window), weights.time),)
        score = sum(value * weight for _name, value, weight in signals)
        scored.append((score, is_fact, memory.updated_at, memory.id, signals, cand))
    scored.sort(key=lambda s: (s[0], s[1], s[2], s[3]), reverse=True)
    return [
        RecallResult(
            memory=cand.memory,
            score=score,
            components=tuple(ScoreComponent(*signal) for signal in signals),
        )
        for score, _fact, _updated, _id, signals, cand in scored[:limit]
    ]


def _similarity_floor(candidates: Sequence[Candidate], weights: RankingWeights) -> float:
    """The least cosine that counts as evidence in this recall (see the module docstring):
    ``min_similarity``, or down to ``min_nearest_similarity`` for the best cosines."""
    best = max((c.similarity for c in candidates if c.similarity is not None), default=None)
    if best is None:
        return weights.min_similarity
    near = max(weights.min_nearest_similarity, best - weights.similarity_margin)
    return min(weights.min_similarity, near)


def _merge(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per memory id, keeping the best known similarity."""
    out: dict[int, Candidate] = {}
    for cand in candidates:
        seen = out.get(cand.memory.id)
        if seen is None or (seen.similarity or -2.0) < (cand.similarity or -2.0):
            out[cand.memory.id] = cand
    return list(out.values())


def _relevance(
    relevant: Sequence[tuple[Candidate, float, float, float | None]],
    weights: RankingWeights,
    semantic: bool,
    min_similarity: float,
) -> list[tuple[_Signal, ...]]:
    """The relevance signals of each candidate, in order (see the module docstring)."""
    if not semantic:
        text_weight, trigram_weight = weights.text, weights.trigram
        return [
            (("text", text, text_weight), ("trigram", tri, trigram_weight))
            for _cand, text, tri, _sim in relevant
        ]
    sims = [sim for *_rest, sim in relevant if sim is not None]
    low, high = (min(sims), max(sims)) if sims else (0.0, 0.0)
    vectors = [
        0.0 if sim is None else (sim - low) / (high - low) if high > low else 1.0
        for *_rest, sim in relevant
    ]
    raw: list[_Signal] = [
        ("similarity", sim if sim is not None else 0.0, 0.0) for *_r, sim in relevant
    ]
    if weights.fusion == "blend":
        lexical_share = 1.0 - weights.semantic_share
        vector_weight = (weights.text + weights.trigram) * weights.semantic_share
        return [
            (
                ("text", text, weights.text * lexical_share),
                ("trigram", tri, weights.trigram * lexical_share),
                ("vector", vector, vector_weight),
                similarity,
            )
            for (_cand, text, tri, _sim), vector, similarity in zip(
                relevant, vectors, raw, strict=True
            )
        ]
    lexical = [weights.text * text + weights.trigram * tri for _c, text, tri, _s in relevant]
    lexical_rank = _ranks([(v, v > 0.0) for v in lexical])
    vector_rank = _ranks(
        [
            (v, sim is not None and sim >= min_similarity)
            for v, (*_r, sim) in zip(vectors, relevant, strict=True)
        ]
    )
    best = 2.0 / (weights.rrf_k + 1.0)
    out: list[tuple[_Signal, ...]] = []
    for i, (_cand, text, tri, _sim) in enumerate(relevant):
        fused = sum(1.0 / (weights.rrf_k + r[i]) for r in (lexical_rank, vector_rank) if r[i])
        out.append(
            (
                ("fused", fused / best, weights.text + weights.trigram),
                ("text", text, 0.0),
                ("trigram", tri, 0.0),
                ("vector", vectors[i], 0.0),
                raw[i],
            )
        )
    return out


def _ranks(values: Sequence[tuple[float, bool]]) -> list[int]:
    """1-based rank of each value among the eligible ones (0: not ranked); ties share the
    better rank, so the fusion never depends on the input order."""
    eligible = sorted((v for v, ok in values if ok), reverse=True)
    first: dict[float, int] = {}
    for position, v in enumerate(eligible, start=1):
        first.setdefault(v, position)
    return [first[v] if ok else 0 for v, ok in values]


_QUOTED = re.compile(r'"([^"]+)"|\u201c([^\u201d]+)\u201d')
_WORD = re.compile(r"[^\W\d_][\w'-]*")


def emphasised_lexemes(query: str, lexemes: Collection[str]) -> frozenset[str]:
    """The query's lexemes (as PostgreSQL stemmed them: ``lexemes``) that come from a
    quoted phrase or a capitalised word other than the sentence's first (a name:
    "Caroline", "Miso").

    A word is matched to the lexeme it starts with, within two letters (the
    English stemmer only cuts endings: "Caroline" -> "carolin").
    """
    words: list[str] = []
    for match in _QUOTED.finditer(query):
        words += _WORD.findall(match.group(1) or match.group(2))
    for sentence in re.split(r"[.!?]\s+", query):
        words += [w for w in _WORD.findall(sentence)[1:] if w[0].isupper()]
    out = set()
    for word in words:
        lower = word.lower().removesuffix("'s")
        for lex in lexemes:
            if lower.startswith(lex) and len(lower) - len(lex) <= 2 and len(lex) >= 2:
                out.add(lex)
    return frozenset(out)


def with_next_turns(
    results: Sequence[RecallResult], following: dict[int, Memory], top: int, limit: int
) -> list[RecallResult]:
    """``results`` with, after each of the first ``top``, the episode that follows it
    (``following``: memory id -> the next episode of its session), at most ``limit``.

    An answer is often in the reply after the turn a question matches (LoCoMo's
    evidence R@8 0.726 -> 0.756, the implicit questions unchanged:
    docs/embeddings.md). The follower takes its hit's score, and explains itself
    with one ``next_turn`` component (value 1, weight 0); one that was ranked lower
    anyway moves up rather than appearing twice.
    """
    out: list[RecallResult] = []
    seen: set[int] = set()
    for position, result in enumerate(results):
        if result.memory.id not in seen:
            out.append(result)
            seen.add(result.memory.id)
        after = following.get(result.memory.id) if position < top else None
        if after is not None and after.id not in seen:
            component = ScoreComponent("next_turn", 1.0, 0.0)
            out.append(RecallResult(memory=after, score=result.score, components=(component,)))
            seen.add(after.id)
    return out[:limit]
