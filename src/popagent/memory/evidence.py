"""Calibrated fusion: what admits a memory to semantic recall, and how relevant it is.

Semantic recall's default (``RankingWeights.fusion == "calibrated"``). Pure
functions over one recall's candidates, like the rest of ``memory.ranking``.

**The background.** A cosine means little on its own: models differ in their
ranges (MiniLM's related texts score 0.3 to 0.7, E5's 0.75 to 0.9), and a short
question scores lower against everything. So each recall measures what
*unrelated* text scores here: the query's cosines to the resource's newest
memories (``store.vectors.background``), most of which have nothing to do with
any one question. Their median and robust spread (``Background``) turn a
cosine into ``z``, how many spreads above that background it is.

**Evidence admits; nothing else does.** A candidate enters the result only
with evidence of relevance (``Evidence.admits``):

* ``words``: it holds two or more of the question's words (as PostgreSQL's
  English stemming sees them; stop words never count), or one that is a name
  or a quoted word of the question, or one that is rare in the resource (in at
  most ``rare_word`` of its memories, in a resource of at least
  ``1 / rare_word`` memories, where a document frequency means something). A
  memory that shares just one common word with the question ("live" in "what
  do I do for a living?" and "My sister lives in Toronto") needs its meaning
  too: ``z`` at least ``weak_words_z`` (a memory without a vector yet is
  admitted by its words, as lexical recall would). ``look-alike words`` (pg_trgm
  neighbours of a question word) follow the same rule.
* ``meaning``: ``z`` at least the recall's bar. The nearest memory needs
  ``min_meaning_z``; any other needs more: the largest cosine among ``n``
  unrelated ones lands about ``sqrt(2 ln n)`` spreads above their median, so
  the bar is ``extreme_z * sqrt(2 ln n)`` (``n``: the background's size), and
  within ``meaning_gap`` spreads of the nearest.
* ``whole store``: a resource of at most ``limit`` memories comes back whole
  (``whole_store``), as before this module: five facts answer "recommend some
  Thai dishes" with the nut allergy, which the bundled model puts at a cosine
  of 0.035 from the question. Chosen on measurements (docs/embeddings.md):
  the implicit set's small stores find their answer in 100 % of questions with
  it and 55 % without, at the cost of their unrelated questions returning the
  store (3 to 7 memories).

Importance, recency, the fact bonus and the time signal order admitted
memories; they never admit one.

**Relevance.** ``words`` is the lexical signals as weighed (``text`` and
``trigram``), a single common word counting ``single_word`` of itself;
``meaning`` is the cosine placed between the least (0) and the best (1) of the
recall's candidates. ``relevance`` mixes them, ``meaning_share`` to meaning,
and carries the weight of ``text + trigram``. The parameters were chosen on
three kinds of data together (``bench/quality.py --sweep calibrated``: LoCoMo's
first three conversations, the implicit set's dev split and the relevance
set's dev users) and checked on the rest.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..models import Candidate, CorpusStats

if TYPE_CHECKING:
    from .ranking import RankingWeights

__all__ = ["COMPONENTS", "Background", "Evidence"]

#: The explanation's components of calibrated relevance, in order: ``relevance``
#: carries the weight; the others (weight 0) say what it is made of.
COMPONENTS = ("relevance", "words", "meaning", "text", "trigram", "similarity", "background")


@dataclass(frozen=True, slots=True)
class Background:
    """What a cosine to the query scores among one resource's memories.

    ``median``: the typical cosine; ``spread``: 1.4826 x their median absolute
    deviation (the standard deviation, were they normal), at least the given
    floor (a store of a few memories can have almost none); ``sample``: how
    many cosines they come from.
    """

    median: float
    spread: float
    sample: int

    @classmethod
    def of(cls, cosines: Sequence[float], min_spread: float) -> Background | None:
        if not cosines:
            return None
        ordered = sorted(cosines)
        median = _median(ordered)
        mad = _median(sorted(abs(c - median) for c in ordered))
        return cls(median, max(1.4826 * mad, min_spread), len(ordered))

    def z(self, similarity: float) -> float:
        """How many spreads above the median ``similarity`` is."""
        return (similarity - self.median) / self.spread


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


@dataclass(frozen=True, slots=True)
class Evidence:
    """One recall's judge (see the module docstring), built once by ``of``."""

    weights: RankingWeights
    background: Background | None
    #: The resource fits in the answer and ``whole_store`` is on.
    whole: bool
    #: The ``z`` that admits a memory other than the nearest by its meaning alone.
    bar: float
    #: The question's lexemes; those that are names or quoted, or rare in the resource.
    lexemes: tuple[str, ...]
    strong: frozenset[str]
    #: The best and the least cosine of the recall's candidates.
    best: float | None
    lowest: float | None

    @classmethod
    def of(
        cls,
        candidates: Sequence[Candidate],
        stats: CorpusStats,
        weights: RankingWeights,
        limit: int,
        background: Sequence[float],
        emphasis: Collection[str],
    ) -> Evidence:
        """The judge of one recall. ``background``: the query's cosines to the
        resource's sample (the candidates' own when empty)."""
        sims = [c.similarity for c in candidates if c.similarity is not None]
        bg = Background.of(background or sims, weights.min_spread)
        best = max(sims, default=None)
        bar = weights.min_meaning_z
        if bg is not None:
            bar = max(bar, weights.extreme_z * math.sqrt(2.0 * math.log(max(bg.sample, 2))))
            if best is not None and weights.meaning_gap > 0:
                bar = max(bar, bg.z(best) - weights.meaning_gap)
        cut = weights.rare_word * stats.documents
        rare = {lex for lex, df in stats.document_frequency.items() if cut >= 1 and 0 < df <= cut}
        return cls(
            weights=weights,
            background=bg,
            whole=weights.whole_store and stats.documents <= limit,
            bar=bar,
            lexemes=tuple(stats.document_frequency),
            strong=frozenset(emphasis) | frozenset(rare),
            best=best,
            lowest=min(sims, default=None),
        )

    def z(self, cand: Candidate) -> float | None:
        if cand.similarity is None or self.background is None:
            return None
        return self.background.z(cand.similarity)

    def _held(self, cand: Candidate) -> list[str]:
        tf = cand.term_frequency
        return [lex for lex in self.lexemes if tf.get(lex, 0) > 0]

    def admits(self, cand: Candidate, text: float, trigram: float) -> str:
        """Why ``cand`` is relevant (``words``, ``look-alike words``, ``meaning``,
        ``whole store``); "" when nothing says it is."""
        w = self.weights
        z = self.z(cand)
        if text > 0.0 or trigram > w.min_trigram:
            held = self._held(cand) if text > 0.0 else []
            strong = len(held) >= 2 or not self.strong.isdisjoint(held)
            # Without a vector (pending, or an earlier value of a fact) the meaning cannot
            # be judged: its words admit it, as in lexical recall.
            if strong or z is None or z >= w.weak_words_z:
                return "words" if text > 0.0 else "look-alike words"
        if z is not None:
            nearest = cand.similarity == self.best and z >= w.min_meaning_z
            if nearest or z >= self.bar:
                return "meaning"
        if self.whole and cand.similarity is not None:
            return "whole store"
        return ""

    def relevance(
        self, relevant: Sequence[Candidate], values: Sequence[tuple[float, ...]]
    ) -> tuple[tuple[str, ...], tuple[float, ...], list[tuple[float, ...]]]:
        """The explanation's names and weights (``COMPONENTS``), and each admitted
        candidate's values: ``values`` holds its ``text`` and ``trigram``."""
        w = self.weights
        total = w.text + w.trigram
        low = self.lowest if self.lowest is not None else 0.0
        high = self.best if self.best is not None else 0.0
        median = self.background.median if self.background is not None else 0.0
        rows: list[tuple[float, ...]] = []
        for cand, (text, trigram) in zip(relevant, values, strict=True):
            words = (w.text * text + w.trigram * trigram) / total if total > 0 else 0.0
            if words > 0 and w.single_word < 1.0:
                held = self._held(cand)
                if len(held) <= 1 and self.strong.isdisjoint(held):
                    words *= w.single_word
            sim = cand.similarity
            meaning = 0.0
            if sim is not None:
                meaning = min(1.0, max(0.0, (sim - low) / (high - low))) if high > low else 1.0
            fused = (1.0 - w.meaning_share) * words + w.meaning_share * meaning
            similarity = sim if sim is not None else 0.0
            rows.append((fused, words, meaning, text, trigram, similarity, median))
        return COMPONENTS, (total, *(0.0 for _ in COMPONENTS[1:])), rows
