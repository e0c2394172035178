"""Recall ranking as pure functions.

A memory's score is a weighted sum of five signals, each in [0, 1] (``SIGNALS``
holds each one's name, weight, Python scorer and SQL expression, so that
``store.ranked`` computes the same score in one statement):

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

Semantic recall (``semantic=True``, when recall embeds the query) judges each
candidate's cosine similarity to the question (its best-matching chunk) and
fuses the evidence in one of three ways (``fusion``):

``calibrated`` (default: ``popagent.memory.evidence``)
    A candidate is admitted only with evidence: two or more of the question's
    words, a name, a quoted or a rare word of it, or a cosine clearly above what
    unrelated text of the resource scores for this question (measured per
    recall on the resource's newest memories: ``store.vectors.background``);
    importance, recency, the fact bonus and the time signal only order the
    admitted. Its ``relevance`` mixes ``words`` (the lexical signals, one
    common word counting little) and ``meaning`` (the cosine between the
    least and the best of the candidates), and each result names what
    admitted it (``RecallResult.evidence``). Chosen on LoCoMo, the implicit
    questions and the relevance set together (``bench/quality.py --sweep
    calibrated``; docs/embeddings.md has the numbers).
``blend`` (the default before; kept for comparison)
    ``vector`` is the cosine rescaled over the candidates (nearest 1, farthest
    0), ``text`` and ``trigram`` keep ``1 - semantic_share`` of their weights
    and ``vector`` gets ``semantic_share`` of their sum. A cosine of at least
    ``min_similarity`` is evidence, as is one within ``similarity_margin`` of
    the recall's best and at least ``min_nearest_similarity``; a resource of at
    most ``limit`` memories has no floor.
``rrf``
    Reciprocal-rank fusion: the lexical ranking (by ``text`` and ``trigram``
    as weighted) and the vector ranking each give ``1 / (rrf_k + rank)``; the
    sum, divided by its best possible value, is the ``fused`` signal with the
    relevance weight (``text + trigram``), with ``blend``'s evidence rule.

The raw cosine is listed as ``similarity`` (weight 0) in every mode.

In semantic recall the ``text`` signal also weighs a name or a quoted phrase
of the question more (``emphasis``, ``emphasised_lexemes``), and recall returns
the episode that follows its best one right after it (``with_next_turns``).
Both were chosen on LoCoMo and the implicit questions together
(``bench/quality.py --sweep``, docs/embeddings.md).

When the query names a period (``popagent.memory.temporal``), a ``time``
signal with weight ``time`` is added: 1 for memories whose event interval
(the event clock), or else whose creation time, falls in the period, halving
per period-length outside it; for a question that asks when ("when did I …?")
it is 1 for a memory that dates its event. Importance, recency and the fact bonus
apply unchanged in every mode, so facts keep their priority.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from operator import mul

from ..models import Candidate, CorpusStats, Memory, RecallResult, ScoreComponent
from .evidence import Evidence
from .temporal import HALF_LIVES_CAP, TimeWindow, time_score

__all__ = [
    "DEFAULT_WEIGHTS",
    "FUSIONS",
    "SIGNALS",
    "RankingWeights",
    "Scorer",
    "ScoringContext",
    "Signal",
    "bm25_text_score",
    "emphasised_lexemes",
    "idf",
    "rank",
    "recency_score",
    "trigram_score",
    "with_next_turns",
]


FUSIONS = ("calibrated", "blend", "rrf")


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
    #: Semantic recall: how the evidence by meaning joins the evidence by words
    #: (``calibrated``, ``blend`` or ``rrf``: see the module docstring).
    fusion: str = "calibrated"
    #: ``blend``: the share of the relevance weight (text + trigram) given to ``vector``.
    #: Chosen on three LoCoMo conversations, checked on the other seven (docs/embeddings.md).
    semantic_share: float = 0.2
    #: ``calibrated`` (``memory.evidence``): the share of the relevance weight given to
    #: ``meaning``; ``words`` gets the rest.
    meaning_share: float = 0.2
    #: ``calibrated``: the nearest memory is evidence at this many background spreads
    #: above the resource's background ...
    min_meaning_z: float = 2.0
    #: ... any other at ``extreme_z * sqrt(2 ln n)`` spreads (what the largest of n
    #: unrelated cosines reaches), and within ``meaning_gap`` spreads of the nearest.
    extreme_z: float = 1.0
    meaning_gap: float = 2.5
    #: ``calibrated``: the least background spread, in cosine.
    min_spread: float = 0.03
    #: ``calibrated``: one common word of the question (not a name, a quoted word or a
    #: word rare in the resource) admits a memory only this many spreads above the
    #: background, and counts ``single_word`` of its ``words``.
    weak_words_z: float = 2.0
    single_word: float = 0.3
    #: ``calibrated``: a word in at most this share of the resource's memories is rare.
    rare_word: float = 0.02
    #: ``calibrated``: a resource of at most ``limit`` memories comes back whole.
    whole_store: bool = True
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
        if self.meaning_share > 1:
            raise ValueError("meaning_share must be in [0, 1]")
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


#: A signal's value for one candidate, in [0, 1].
Scorer = Callable[[Candidate], float]


@dataclass(frozen=True, slots=True)
class ScoringContext:
    """One recall's side of scoring, from which each signal builds its ``Scorer``."""

    stats: CorpusStats
    weights: RankingWeights
    now: datetime
    window: TimeWindow | None
    emphasis: Collection[str]


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal of a recall's score, as Python and as SQL compute it.

    ``name`` names the explanation's component, the ``RankingWeights`` field that
    holds its weight, and the statement's column (``<name>_signal``, weighed by
    the ``%(w_<name>)s`` parameter: ``store.ranked``). ``sql`` is its value as an
    expression over ``store.ranked``'s ``scored`` step (``s``: the memory's row with
    ``length`` and ``average_length``; ``t``: the query's totals; ``f``: the
    memory's term aggregate; the statement's ``%(name)s`` parameters), ``NULL``
    where the signal does not apply. ``scorer`` builds, once per recall, the
    Python function that computes the same value (to 1e-12:
    ``tests/test_ranked_recall.py``), or ``None`` where it does not apply.
    ``relevance``: a signal of the query's words; the evidence rule reads them,
    and semantic recall fuses them with ``vector`` (see the module docstring).
    """

    name: str
    sql: str
    scorer: Callable[[ScoringContext], Scorer | None]
    relevance: bool = False


def _text(context: ScoringContext) -> Scorer:
    return _TextScorer(context.stats, context.weights, context.emphasis)


def _trigram(context: ScoringContext) -> Scorer:
    return _TrigramScorer(context.stats)


def _importance(_context: ScoringContext) -> Scorer:
    return lambda candidate: candidate.memory.importance


def _recency(context: ScoringContext) -> Scorer:
    now, half_life = context.now, context.weights.recency_half_life_days
    return lambda candidate: recency_score(candidate.memory.updated_at, now, half_life)


def _fact(_context: ScoringContext) -> Scorer:
    return lambda candidate: 1.0 if candidate.memory.kind == "fact" else 0.0


def _time(context: ScoringContext) -> Scorer | None:
    window = context.window
    if window is None:
        return None

    def score(candidate: Candidate) -> float:
        # The event clock when the memory has one, else the record clock.
        m = candidate.memory
        if m.happened_start is None:
            return time_score(m.created_at, window)
        return time_score(m.happened_start, window, m.happened_end)

    return score


def _halved(interval: str, scale: str) -> str:
    """``0.5 ** min(days / scale, HALF_LIVES_CAP)`` in SQL, for an SQL interval and a
    scale in days. least(): PostgreSQL's power() raises an underflow error below the
    smallest double instead of returning 0 (``temporal.HALF_LIVES_CAP``)."""
    days = f"extract(epoch FROM {interval})::float8 / 86400.0 / {scale}"
    return f"power(0.5::float8, least({days}, {HALF_LIVES_CAP}))"


#: Recall's signals, in the order of the score's sum and of the explanation's
#: components (the relevance signals first). A new signal is one row here, its
#: weight in ``RankingWeights``, and its test in ``tests/test_ranked_recall.py``.
SIGNALS: tuple[Signal, ...] = (
    Signal(
        "text",
        """CASE
               WHEN f.matched = 0 THEN 0.0::float8
               WHEN t.text_total <= 1e-9 THEN f.matched::float8 / t.lexemes
               ELSE least(1.0, f.bm25 / t.text_total)
           END""",
        _text,
        relevance=True,
    ),
    Signal(
        "trigram",
        """CASE
               WHEN t.lexemes = 0 THEN 0.0::float8
               ELSE least(1.0, f.covered / CASE WHEN t.trigram_total <= 1e-9
                                                THEN t.lexemes::float8 ELSE t.trigram_total END)
           END""",
        _trigram,
        relevance=True,
    ),
    Signal("importance", "s.importance", _importance),
    Signal(
        "recency",
        f"""CASE
               WHEN s.updated_at >= %(now)s THEN 1.0::float8
               ELSE {_halved("%(now)s - s.updated_at", "%(half_life_days)s")}
           END""",
        _recency,
    ),
    Signal("fact", "CASE WHEN s.kind = 'fact' THEN 1.0::float8 ELSE 0.0::float8 END", _fact),
    # The memory's event interval [happened_start, happened_end) when it has one, else
    # its record time as a point (``temporal.time_score``); a scale of 0 marks a
    # question that asks when (``TimeWindow.scale``): 1 for a dated memory.
    Signal(
        "time",
        f"""CASE
               WHEN %(window_start)s::timestamptz IS NULL THEN NULL::float8
               WHEN %(window_scale)s::float8 = 0.0
                   THEN CASE WHEN s.happened_start IS NULL THEN 0.0::float8 ELSE 1.0::float8 END
               WHEN coalesce(s.happened_start, s.created_at) < %(window_end)s
                    AND (coalesce(s.happened_end, s.created_at) > %(window_start)s
                         OR coalesce(s.happened_start, s.created_at) >= %(window_start)s)
                   THEN 1.0::float8
               WHEN coalesce(s.happened_end, s.created_at) <= %(window_start)s
                   THEN {
            _halved("%(window_start)s - coalesce(s.happened_end, s.created_at)", "%(window_scale)s")
        }
               ELSE {
            _halved("coalesce(s.happened_start, s.created_at) - %(window_end)s", "%(window_scale)s")
        }
           END""",
        _time,
    ),
)
_RELEVANCE = tuple(signal for signal in SIGNALS if signal.relevance)
_OTHERS = tuple(signal for signal in SIGNALS if not signal.relevance)


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
    background: Sequence[float] = (),
) -> list[RecallResult]:
    """Score, filter and order candidates; return at most ``limit`` explained results.

    ``semantic``: the candidates carry query similarities (see the module
    docstring); ``window``: the period the query names; ``background``: the
    query's cosines to a sample of the resource's memories
    (``store.vectors.background``), from which ``calibrated`` fusion judges the
    candidates' (the candidates' own when empty). A candidate listed twice
    (proposed by two indexes) counts once, with its best similarity. Ties break
    towards facts, then the more recently updated, then the higher id, so the
    order is total and repeatable.
    """
    candidates = _merge(candidates)
    context = ScoringContext(stats, weights, now, window, emphasis)
    # The evidence rule is over the two relevance signals: text, then trigram.
    text_of, trigram_of = [signal.scorer(context) for signal in _RELEVANCE]
    assert text_of is not None and trigram_of is not None  # they apply to every recall
    calibrated = semantic and weights.fusion == "calibrated"
    judge = (
        Evidence.of(candidates, stats, weights, limit, background, emphasis) if calibrated else None
    )
    relevant: list[Candidate] = []
    relevance: list[tuple[float, ...]] = []
    evidence: list[str] = []
    min_trigram = weights.min_trigram
    min_similarity = _similarity_floor(candidates, weights) if semantic else 0.0
    if semantic and stats.documents <= limit:
        # The whole resource fits in the answer, so its top ``limit`` is all of it:
        # every memory the model placed counts, however far from the question.
        min_similarity = -1.0  # the least cosine there is
    for cand in candidates:
        text, trigram = text_of(cand), trigram_of(cand)
        if judge is not None:
            why = judge.admits(cand, text, trigram)
            if not why:
                continue
        elif not (text > 0.0 or trigram > min_trigram) and (
            not semantic or cand.similarity is None or cand.similarity < min_similarity
        ):
            continue
        else:
            why = ""
        relevant.append(cand)
        relevance.append((text, trigram))
        evidence.append(why)
    if judge is not None:
        names, signal_weights, rows = judge.relevance(relevant, relevance)
    else:
        names, signal_weights, rows = _relevance(
            relevant, relevance, weights, semantic, min_similarity
        )
    # The other signals that apply, computed a column at a time (the loop stays in C).
    others = [
        (signal.name, scorer)
        for signal in _OTHERS
        if (scorer := signal.scorer(context)) is not None
    ]
    names += tuple(name for name, _scorer in others)
    signal_weights += tuple(getattr(weights, name) for name, _scorer in others)
    columns = [list(map(scorer, relevant)) for _name, scorer in others]
    if columns:
        rows = [row + more for row, more in zip(rows, zip(*columns, strict=True), strict=True)]
    scored: list[tuple[float, bool, datetime, int, tuple[float, ...], str, Candidate]] = []
    for cand, values, why in zip(relevant, rows, evidence, strict=True):
        memory = cand.memory
        score = sum(map(mul, values, signal_weights))
        scored.append(
            (score, memory.kind == "fact", memory.updated_at, memory.id, values, why, cand)
        )
    scored.sort(key=lambda s: (s[0], s[1], s[2], s[3]), reverse=True)
    return [
        RecallResult(
            memory=cand.memory,
            score=score,
            components=tuple(map(ScoreComponent, names, values, signal_weights)),
            evidence=why,
        )
        for score, _fact, _updated, _id, values, why, cand in scored[:limit]
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
    relevant: Sequence[Candidate],
    values: list[tuple[float, ...]],
    weights: RankingWeights,
    semantic: bool,
    min_similarity: float,
) -> tuple[tuple[str, ...], tuple[float, ...], list[tuple[float, ...]]]:
    """The relevance components' names and weights, and each candidate's values, in
    order (see the module docstring): the relevance signals as they are, or fused
    with the vector signal."""
    names = tuple(signal.name for signal in _RELEVANCE)
    own = tuple(getattr(weights, name) for name in names)
    if not semantic:
        return names, own, values
    sims = [c.similarity for c in relevant]
    known = [sim for sim in sims if sim is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    vectors = [
        0.0 if sim is None else (sim - low) / (high - low) if high > low else 1.0 for sim in sims
    ]
    raw = [sim if sim is not None else 0.0 for sim in sims]
    relevance_weight = sum(own)
    semantic_names = (*names, "vector", "similarity")
    if weights.fusion == "blend":
        lexical_share = 1.0 - weights.semantic_share
        blended = tuple(weight * lexical_share for weight in own)
        vector_weight = relevance_weight * weights.semantic_share
        return (
            semantic_names,
            (*blended, vector_weight, 0.0),
            [(*v, vector, sim) for v, vector, sim in zip(values, vectors, raw, strict=True)],
        )
    lexical = [sum(map(mul, own, v)) for v in values]
    lexical_rank = _ranks([(v, v > 0.0) for v in lexical])
    vector_rank = _ranks(
        [
            (v, sim is not None and sim >= min_similarity)
            for v, sim in zip(vectors, sims, strict=True)
        ]
    )
    best = 2.0 / (weights.rrf_k + 1.0)
    fused = [
        sum(1.0 / (weights.rrf_k + r[i]) for r in (lexical_rank, vector_rank) if r[i]) / best
        for i in range(len(values))
    ]
    return (
        ("fused", *semantic_names),
        (relevance_weight, *(0.0 for _ in semantic_names)),
        [
            (f, *v, vector, sim)
            for f, v, vector, sim in zip(fused, values, vectors, raw, strict=True)
        ],
    )


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
            out.append(
                RecallResult(
                    memory=after,
                    score=result.score,
                    components=(component,),
                    evidence="next turn",
                )
            )
            seen.add(after.id)
    return out[:limit]
