"""Recall: the ranked, explained memories of one resource for a query.

``Recalling`` is the recall part of ``LongTermMemory`` (``memory.longterm``):
it proposes candidates from the lexical statistics and, with an embedder, the
vector index, ranks them with the pure functions of ``memory.ranking``, and
records the access of what it returns. It writes nothing else.

With an embedder, recall is ``fused`` by default. The question is embedded in a
worker thread while the lexical statements run, so the model adds little to
a recall's latency. When the model fails (it cannot load, an endpoint is
down), recall is lexical: the failure is logged once (``embed.health``),
never raised. Memories whose vectors are still pending are found by their
words. ``recall_report`` also says which mode ran and why
(``memory.recall_report``). Semantic recall also returns the episode that
follows its best one in the same session (``RankingWeights.next_turns``,
``store.neighbours``), right after it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import UTC, date, datetime

from ..checks import check_time
from ..embed.health import record_failure, record_success
from ..embed.protocol import EmbeddingError, Vectors
from ..errors import ValidationError
from ..models import CorpusStats, RecallResult, ScoreComponent
from ..store import memories as store
from ..store import neighbours as neighbours_sql
from ..store import past as past_sql
from ..store import ranked as ranked_sql
from ..store import recall as recall_sql
from ..store import vectors as vector_store
from ..store.database import Conn
from .base import MemoryBase
from .newest import newest_first, present_tense
from .ranking import SIGNALS, emphasised_lexemes, idf, rank, with_next_turns
from .recall_report import RecallMode, RecallReport, describe
from .temporal import TimeWindow, query_window, recall_window
from .validation import (
    check_id,
    check_limit,
    check_query,
)
from .versions import Moment, Relabelled, moment_of, past_period

__all__ = [
    "LEXICAL_RECALL",
    "RecallMode",
    "RecallReport",
    "candidate_idfs",
    "newest_applies",
    "recall",
    "recall_pool",
    "recall_report",
]

# The logger keeps the name it had before recall moved here: users filter on it.
log = logging.getLogger("popagent.memory.longterm")

#: ``recall_report`` counts pending vectors up to this many ("10,000 or more").
PENDING_COUNT_CAP = 10_000

#: Lexical recall's statements, written once from the table of signals.
LEXICAL_RECALL = ranked_sql.LexicalRecall(SIGNALS)
_NAMES = LEXICAL_RECALL.names


def recall_pool(limit: int) -> int:
    """How many candidates recall scores for ``limit`` results.

    The candidates come pre-ordered by the IDF of the query words they hold,
    which is close to the final order; LoCoMo's evidence recall was the same
    with 32 as with 48 at ``limit`` 10.
    """
    return max(limit * 3, 32)


def candidate_idfs(stats: CorpusStats) -> dict[str, float]:
    """The IDF of each lexeme that may propose candidates (their pre-order weights)."""
    return {
        lex: idf(stats.documents, df) for lex, df in recall_sql.candidate_lexemes(stats).items()
    }


# Recall's operations of ``LongTermMemory`` (``memory.longterm``): plain functions of
# the service's state (``MemoryBase``), bound as its methods there; they hold no state.


async def recall(
    self: MemoryBase,
    resource_id: str,
    query: str,
    *,
    limit: int = 8,
    now: datetime | None = None,
    mode: RecallMode | None = None,
    touch: bool = True,
    as_of: datetime | date | str | None = None,
    known_at: datetime | date | str | None = None,
) -> list[RecallResult]:
    """The ``limit`` (1 to 1,000) most relevant memories of this resource, best first.

    Each result explains its score (see ``popagent.memory.ranking``). The
    returned memories' access time and count are updated (unless ``touch``
    is false, as for a preview that is not a use); that bookkeeping
    never blocks on rows another transaction holds. ``now`` (timezone-aware)
    makes recency relative to another moment, as imports and benchmarks need,
    and is what a period the query names ("last week") is relative to.
    ``mode`` (default: ``fused`` with an embedder, else ``lexical``) picks
    the signals; ``vector`` and ``fused`` need an embedder. When the model
    fails, recall falls back to ``lexical`` (logged once) rather than fail.
    A memory written a moment ago is found by its words at once and by its
    meaning when its vectors are written (``wait_for_vectors``).

    ``as_of`` answers from the world as it was then (each fact by the value that
    held then, by the event clock where known; the episodes of then), ``known_at``
    from what the store knew then; each a timezone-aware time, a date (the end of
    that day, UTC) or ISO 8601 text of either (see ``memory.versions``). Such a recall is lexical
    and touches nothing. A question about a past period, or for an earlier value,
    also ranks the values facts held then, each with its ``until``.
    """
    results, _ran = await _recall(
        self, resource_id, query, limit, now, mode, touch, moment_of(as_of, known_at)
    )
    return results


async def recall_report(
    self: MemoryBase,
    resource_id: str,
    query: str,
    *,
    limit: int = 8,
    now: datetime | None = None,
    mode: RecallMode | None = None,
    touch: bool = True,
    as_of: datetime | date | str | None = None,
    known_at: datetime | date | str | None = None,
) -> RecallReport:
    """``recall``, with which mode ran and why: the model and its state, and how
    many of the resource's memories still wait for their vectors (counted up to
    10,000). For the recall preview and ``recall --explain``."""
    moment = moment_of(as_of, known_at)
    results, ran = await _recall(self, resource_id, query, limit, now, mode, touch, moment)
    pending = 0
    if self._embedder is not None:
        pending = await self.pending_vectors(resource_id, cap=PENDING_COUNT_CAP)
    health = self.model_health()
    model = health.model if health is not None else None
    state = health.state if health is not None else None
    error = health.error if health is not None else None
    return RecallReport(
        results=results,
        mode=ran,
        requested=mode,
        model=model,
        model_state=state,
        model_error=error,
        pending=pending,
        reason=describe(ran, mode, model, state, error, pending),
    )


async def _recall(
    self: MemoryBase,
    resource_id: str,
    query: str,
    limit: int,
    now: datetime | None,
    mode: RecallMode | None,
    touch: bool,
    moment: Moment | None = None,
) -> tuple[list[RecallResult], RecallMode]:
    """The ranked results, the newest value first for a question in the present
    tense (``memory.newest``; not as of a moment, nor for a past period)."""
    results, ran = await _ranked(self, resource_id, query, limit, now, mode, touch, moment)
    if moment is None and len(results) > 1 and newest_applies(query, now or datetime.now(UTC)):
        results = newest_first(results, query)
    return results, ran


def newest_applies(query: str, now: datetime) -> bool:
    """Whether recall puts the newest value first for ``query`` at ``now``: a question
    in the present tense (``newest.present_tense``: "where do I work?", not "what
    did I paint?"), neither about a past period ("where did I live in 2021?") nor
    asking when something happened ("when did I go to the dentist?"), which the
    event clock answers."""
    query = query.strip()
    if not present_tense(query):
        return False
    if past_period(query, query_window(query, now), now) is not None:
        return False
    window = recall_window(query, now)
    return window is None or not window.asks_when


async def _ranked(
    self: MemoryBase,
    resource_id: str,
    query: str,
    limit: int,
    now: datetime | None,
    mode: RecallMode | None,
    touch: bool,
    moment: Moment | None = None,
) -> tuple[list[RecallResult], RecallMode]:
    resource_id = check_id("resource_id", resource_id)
    query = check_query(query)
    limit = check_limit(limit)
    now = check_time("now", now) or datetime.now(UTC)
    mode = _check_mode(self, mode)
    if moment is not None:
        return await _at_moment(self, resource_id, query, limit, moment), "lexical"
    window = recall_window(query, now) if self.weights.time > 0 else None
    period = past_period(query, query_window(query, now), now)
    if self._worker is not None:
        # This process works on the resource: rows written elsewhere get vectors too.
        self._worker.notify(resource_id)
    if mode == "lexical" or self._embedder is None:
        if period is not None:
            with_past = await _lexical_with_past(
                self, resource_id, query, limit, now, window, period
            )
            if with_past is not None:
                return await _touched(self, resource_id, with_past, touch), "lexical"
        return await _lexical(self, resource_id, query, limit, now, window, touch), "lexical"
    embedder = self._embedder
    pool = recall_pool(limit)
    # The question is embedded in a worker thread while the lexical statements run.
    embedding = asyncio.create_task(_query_vector(self, query))
    try:
        async with self._pool.connection() as conn:
            # No transaction: each statement reads a consistent snapshot, and a
            # write landing between them can only shift a score, never leak or
            # lose a row of another resource.
            stats = await recall_sql.corpus_stats(conn, resource_id, query)
            past = Relabelled()
            if period is not None:
                past = Relabelled.of(
                    await past_sql.held_during(
                        conn, resource_id, recall_sql.scored_lexemes(stats), *period, pool
                    )
                )
            found = list(past.candidates)
            if mode == "fused":
                # Lexical candidates carry no similarity: those near enough to
                # matter are among the vector candidates too, and merge with them.
                found += await recall_sql.candidates(
                    conn, resource_id, stats, idfs=candidate_idfs(stats), pool=pool
                )
            query_vector = await embedding
            if query_vector is None:
                # The model failed: the lexical ranking over what was read.
                if mode != "fused":
                    found += await recall_sql.candidates(
                        conn, resource_id, stats, idfs=candidate_idfs(stats), pool=pool
                    )
                ran: RecallMode = "lexical"
                results = rank(
                    found, stats, now=now, limit=limit, weights=self.weights, window=window
                )
            else:
                ran = mode
                found += await vector_store.nearest(
                    conn,
                    resource_id,
                    model=embedder.model,
                    query=query_vector,
                    limit=pool,
                    lexemes=recall_sql.scored_lexemes(stats),
                    resource_size=stats.documents,
                )
                weights = self.weights
                background: list[float] = []
                if mode == "vector":
                    weights = replace(weights, fusion="blend", semantic_share=1.0)
                elif weights.fusion == "calibrated":
                    background = await vector_store.background(
                        conn, resource_id, model=embedder.model, query=query_vector
                    )
                results = rank(
                    found,
                    stats,
                    now=now,
                    limit=limit,
                    weights=weights,
                    semantic=True,
                    window=window,
                    emphasis=emphasised_lexemes(query, stats.document_frequency)
                    if weights.emphasis > 0
                    else (),
                    background=background,
                )
                top = min(weights.next_turns, len(results))
                episodes = [
                    r.memory.id
                    for r in results[:top]
                    if r.memory.kind == "episode" and r.memory.session_id is not None
                ]
                if episodes and limit > 1:
                    following = await neighbours_sql.next_episodes(conn, resource_id, episodes)
                    results = with_next_turns(results, following, top, limit)
            results = past.restore(results, period)
            if not results or not touch:
                return results, ran
            touched = await _touch(conn, resource_id, results)
    finally:
        if not embedding.done():
            embedding.cancel()
    return _with_access(results, touched), ran


async def _touch(
    conn: Conn, resource_id: str, results: list[RecallResult]
) -> dict[int, tuple[datetime, int]]:
    """Record the access of the current memories among ``results`` (not past values)."""
    ids = [r.memory.id for r in results if r.until is None]
    return await store.touch_accessed(conn, resource_id, ids) if ids else {}


async def _touched(
    self: MemoryBase, resource_id: str, results: list[RecallResult], touch: bool
) -> list[RecallResult]:
    if not results or not touch:
        return results
    async with self._pool.connection() as conn:
        touched = await _touch(conn, resource_id, results)
    return _with_access(results, touched)


def _with_access(
    results: list[RecallResult], touched: dict[int, tuple[datetime, int]]
) -> list[RecallResult]:
    return [
        replace(
            r,
            memory=replace(
                r.memory,
                accessed_at=touched[r.memory.id][0],
                access_count=touched[r.memory.id][1],
            ),
        )
        if r.memory.id in touched and r.until is None
        else r
        for r in results
    ]


async def _lexical_with_past(
    self: MemoryBase,
    resource_id: str,
    query: str,
    limit: int,
    now: datetime,
    window: TimeWindow | None,
    period: tuple[datetime, datetime],
) -> list[RecallResult] | None:
    """Lexical recall in which the values facts held during ``period`` compete: the
    pure ranking over the current candidates and those earlier values; ``None``
    when no earlier value matches (the one-statement lexical recall then runs)."""
    pool = recall_pool(limit)
    async with self._pool.connection() as conn:
        # Most questions about a past period meet no earlier value in it (a fact that
        # never changed has none): one cheap statement then saves the corpus
        # statistics and the versions' vectors, and the one-statement recall runs.
        if not await past_sql.any_held_during(conn, resource_id, *period):
            return None
        stats = await recall_sql.corpus_stats(conn, resource_id, query)
        held = await past_sql.held_during(
            conn, resource_id, recall_sql.scored_lexemes(stats), *period, pool
        )
        if not held:
            return None
        past = Relabelled.of(held)
        found = await recall_sql.candidates(
            conn, resource_id, stats, idfs=candidate_idfs(stats), pool=pool
        )
    ranked = rank(
        found + past.candidates, stats, now=now, limit=limit, weights=self.weights, window=window
    )
    return past.restore(ranked, period)


async def _at_moment(
    self: MemoryBase, resource_id: str, query: str, limit: int, moment: Moment
) -> list[RecallResult]:
    """Recall as of ``moment`` (see ``memory.versions``): lexical, relative to the
    moment, over what the resource held then; it touches nothing."""
    at = moment.at
    window = query_window(query, at) if self.weights.time > 0 else None
    async with self._pool.connection() as conn:
        stats = await recall_sql.corpus_stats(conn, resource_id, query)
        found = Relabelled.of(
            await past_sql.at_moment(
                conn,
                resource_id,
                recall_sql.scored_lexemes(stats),
                moment.as_of,
                moment.known_at,
                recall_pool(limit),
            )
        )
    ranked = rank(found.candidates, stats, now=at, limit=limit, weights=self.weights, window=window)
    return found.restore(ranked)


async def _lexical(
    self: MemoryBase,
    resource_id: str,
    query: str,
    limit: int,
    now: datetime,
    window: TimeWindow | None,
    touch: bool,
) -> list[RecallResult]:
    """Lexical recall in one statement (``store.ranked``): the same ranking as
    ``rank`` over ``store.recall``'s candidates, scored by PostgreSQL."""
    w = self.weights
    weights = tuple(getattr(w, signal.name) for signal in SIGNALS)
    parameters = ranked_sql.RecallParameters(
        limit=limit,
        pool=recall_pool(limit),
        now=now,
        k1=w.bm25_k1,
        b=w.bm25_b,
        half_life_days=w.recency_half_life_days,
        min_trigram=w.min_trigram,
        weights=weights,
        window_start=window.start if window is not None else None,
        window_end=window.end if window is not None else None,
        window_scale=window.scale if window is not None else None,
    )
    async with self._pool.connection() as conn:
        rows = await LEXICAL_RECALL.rows(conn, resource_id, query, parameters, touch=touch)
    return [_explained(row, weights) for row in rows]


def _check_mode(self: MemoryBase, mode: object) -> RecallMode:
    if mode is None:
        return "fused" if self._embedder is not None else "lexical"
    if mode not in ("lexical", "vector", "fused"):
        raise ValidationError("mode", "must be 'lexical', 'vector' or 'fused'")
    if mode != "lexical" and self._embedder is None:
        raise ValidationError("mode", f"{mode!r} recall needs an embedder")
    return mode


async def _query_vector(self: MemoryBase, query: str) -> Vectors | None:
    """The question's vector; ``None`` when the model fails (reported once)."""
    assert self._embedder is not None
    try:
        vectors = await self._embedder.embed([query], kind="query")
    except EmbeddingError as exc:
        record_failure(self._embedder.model, exc)
        return None
    record_success(self._embedder.model)
    first: Vectors = vectors[0]
    return first


def _explained(row: ranked_sql.RankedRow, weights: tuple[float, ...]) -> RecallResult:
    """A ranked row as ``rank`` would have explained it: the same components, in order."""
    components = tuple(
        ScoreComponent(name, value, weight)
        for name, value, weight in zip(_NAMES, row.signals, weights, strict=True)
        if value is not None
    )
    return RecallResult(memory=row.memory, score=row.score, components=components)
