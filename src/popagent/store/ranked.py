r"""Lexical recall in one statement: candidates, scores, order and access bookkeeping.

``LexicalRecall``'s statement is what ``store.recall``'s two statements and
``memory.ranking.rank`` do for a lexical recall, done by PostgreSQL in one round
trip, so that a recall costs the server process one execute and the decoding of
the ``limit`` rows it returns instead of two executes, ``pool`` decoded
candidates and the ranking loop. The same signals, weights, evidence rule and
tie-breaks as ``rank`` (its module docstring is the definition); the Python
ranking stays the one used for semantic recall and the reference this
statement is tested against (``tests/test_ranked_recall.py``: same memories in
the same order, scores equal to 1e-12 on thousands of recalls).

Steps, each a CTE:

``q``, ``corpus``, ``known``, ``near``
    The query's lexemes, the resource's size and average length, each lexeme's
    document frequency, and for an unknown lexeme its neighbours (exactly
    ``CORPUS_STATS``; similarities go through text as they do there, so both
    paths see the same float).
``idfs``, ``terms``
    BM25's IDF of every lexeme involved; per query lexeme its text IDF and its
    trigram weight (an unknown one weighs as its likeliest neighbour).
``chosen``, ``hits``
    ``choose_lexemes`` (rarest first within ``CANDIDATE_BUDGET``) and the
    candidate pool pre-ordered by the IDF it covers (``LEXICAL_CANDIDATES``).
``scored``, ``ranked``
    The signals of each candidate (``memory.ranking.SIGNALS``, a column each:
    ``LexicalRecall``), its score, and the evidence rule; then the best ``limit``
    by score, then facts, then the more recently updated, then the higher id.

The touching statement also records the access of the returned memories
(``TOUCH_ACCESSED``'s rules: ``SKIP LOCKED``, asynchronous commit), returning
their new access time and count; it must run outside a transaction, as its own.
Every table is read by ``resource_id``, with an equality on it in every CTE: on a
distributed database (Citus) that is what sends the statement to the one shard
that holds the resource (``statement``, docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

import psycopg
from psycopg import AsyncRawCursor, pq
from psycopg.rows import tuple_row

from ..models import Memory
from .citus import ROUTING, distributed, for_postgresql
from .database import Conn
from .memories import MEMORY_COLUMNS, MEMORY_WIDTH, touch_statement, tuple_to_memory
from .recall import CANDIDATE_BUDGET, NEIGHBOUR_THRESHOLD, NEIGHBOURS_PER_LEXEME

__all__ = [
    "LexicalRecall",
    "RankedRow",
    "RecallParameters",
    "SignalSQL",
    "positional",
    "statement",
]

# BM25's IDF, never negative (``memory.ranking.idf``), of a document frequency column.
_IDF = "ln(1.0 + ((greatest(c.documents, {df}) - {df})::float8 + 0.5) / ({df}::float8 + 0.5))"

_SELECTED = ", ".join("s." + c.strip() for c in MEMORY_COLUMNS.split(","))

_RANKED = rf"""
WITH q AS MATERIALIZED (
    SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english'::regconfig, %(query)s)) AS t
), corpus AS MATERIALIZED (
    SELECT coalesce(r.documents, 0)::bigint AS documents,
           CASE WHEN coalesce(r.documents, 0) > 0 AND r.total_length > 0
                THEN r.total_length::float8 / r.documents ELSE 1.0 END AS average_length
    FROM (SELECT 1) AS one
    LEFT JOIN popagent_resource_stats r ON r.resource_id = %(resource_id)s
), known AS MATERIALIZED (
    SELECT q.lexeme, coalesce(s.documents, 0)::bigint AS df
    FROM q
    LEFT JOIN popagent_lexeme_stats s ON s.resource_id = %(resource_id)s AND s.lexeme = q.lexeme
), near AS MATERIALIZED (
    -- Only for a lexeme the resource never held (see CORPUS_STATS for why).
    SELECT k.lexeme AS of, n.lexeme, n.similarity::text::float8 AS similarity,
           n.documents::bigint AS documents, n.position
    FROM known k
    CROSS JOIN LATERAL (
        SELECT v.lexeme, similarity(v.lexeme, k.lexeme) AS similarity, v.documents,
               row_number() OVER (ORDER BY similarity(v.lexeme, k.lexeme) DESC, v.lexeme)
                   AS position
        FROM popagent_lexeme_stats v
        WHERE k.df = 0
          AND v.resource_id = %(resource_id)s AND v.lexeme %% k.lexeme
          AND similarity(v.lexeme, k.lexeme) >= {NEIGHBOUR_THRESHOLD}
          AND v.lexeme <> k.lexeme AND v.documents > 0
        ORDER BY similarity DESC, v.lexeme
        LIMIT {NEIGHBOURS_PER_LEXEME}
    ) AS n
), idfs AS MATERIALIZED (
    -- A neighbour's document count comes from the same table as a query
    -- lexeme's, so a lexeme that is both has one (lexeme, df) pair.
    SELECT l.lexeme, l.df, {_IDF.format(df="l.df")} AS idf
    FROM (SELECT lexeme, df FROM known UNION SELECT lexeme, documents FROM near) AS l,
         corpus c
), terms AS MATERIALIZED (
    SELECT k.lexeme, k.df, i.idf AS text_idf, coalesce(best.idf, i.idf) AS trigram_weight
    FROM known k
    JOIN idfs i ON i.lexeme = k.lexeme
    LEFT JOIN near b ON b.of = k.lexeme AND b.position = 1
    LEFT JOIN idfs best ON best.lexeme = b.lexeme
), totals AS MATERIALIZED (
    SELECT count(*) AS lexemes, coalesce(sum(text_idf), 0) AS text_total,
           coalesce(sum(trigram_weight), 0) AS trigram_total,
           ARRAY(SELECT lexeme FROM idfs) AS involved
    FROM terms
), chosen AS MATERIALIZED (
    SELECT p.lexeme, p.idf,
           ('''' || replace(replace(p.lexeme, '\', '\\'), '''', '''''') || '''')::tsquery AS q
    FROM (
        SELECT i.lexeme, i.idf,
               sum(i.df) OVER w AS running, row_number() OVER w AS position
        FROM idfs i
        WHERE i.df > 0
        WINDOW w AS (ORDER BY i.df, i.lexeme COLLATE "C" ROWS UNBOUNDED PRECEDING)
    ) AS p
    WHERE p.running <= {CANDIDATE_BUDGET} OR p.position = 1
), hits AS (
    SELECT m.id, (SELECT sum(c.idf) FROM chosen c WHERE m.search_vector @@ c.q) AS covered
    FROM popagent_memories m
    -- The keys name the resource (see LEXICAL_CANDIDATES); the equality, for Citus
    -- alone, is left out on PostgreSQL (store.citus).
    WHERE {ROUTING.format("m")}popagent_scoped_lexemes(m.resource_id, m.search_vector)
          && popagent_scoped_lexemes(%(resource_id)s,
                                     array_to_tsvector(ARRAY(SELECT lexeme FROM chosen)))
    ORDER BY covered DESC, m.id DESC
    LIMIT %(pool)s
), signals AS (
    SELECT m.*, length(m.search_vector) AS length, h.held, h.counts,
           (SELECT average_length FROM corpus) AS average_length
    FROM hits
    JOIN popagent_memories m ON m.resource_id = %(resource_id)s AND m.id = hits.id
    CROSS JOIN LATERAL (
        SELECT array_agg(u.lexeme) AS held,
               array_agg(coalesce(cardinality(u.positions), 1)) AS counts
        FROM unnest(m.search_vector) AS u, totals t
        WHERE u.lexeme = ANY(t.involved)
    ) AS h
    WHERE m.expires_at IS NULL OR m.expires_at > now()  -- an expired fact is never recalled
), scored AS (
    -- The signals as plain expressions over one aggregate per memory: each LATERAL
    -- here would be one more relation for the planner to order (planning time).
    SELECT s.*{{signals}}
    FROM signals s
    CROSS JOIN totals t
    CROSS JOIN LATERAL (
        -- One pass over the query's lexemes: a term's count in the memory by position in
        -- its held lexemes (no join to build per row); a neighbour only for an unknown one.
        SELECT count(x.tf) AS matched,
               sum(terms.text_idf * x.tf * %(k1_plus_1)s
                   / (x.tf + %(k1)s * (1.0 - %(b)s + %(b)s * s.length / s.average_length)))
                   AS bm25,
               sum(CASE WHEN t.trigram_total <= 1e-9 THEN 1.0 ELSE terms.trigram_weight END
                   * CASE WHEN x.tf IS NOT NULL THEN 1.0
                          WHEN terms.df > 0 THEN 0.0
                          ELSE coalesce((SELECT max(n.similarity) FROM near n
                                         WHERE n.of = terms.lexeme
                                           AND n.lexeme = ANY(s.held)), 0.0)
                     END) AS covered
        FROM terms
        CROSS JOIN LATERAL (SELECT s.counts[array_position(s.held, terms.lexeme)] AS tf) AS x
    ) AS f
), ranked AS MATERIALIZED (
    SELECT s.*,
           {{score}} AS score
    FROM scored s
    WHERE s.text_signal > 0.0 OR s.trigram_signal > %(min_trigram)s
    ORDER BY score DESC, s.kind = 'fact' DESC, s.updated_at DESC, s.id DESC
    LIMIT %(limit)s
)"""


# The statement's ORDER BY: score, then facts, then the more recently updated, then the higher id.
_ORDER = "ORDER BY s.score DESC, s.kind = 'fact' DESC, s.updated_at DESC, s.id DESC"

# What a touching recall returns of the memory: the access it has just recorded.
_TOUCHED = _SELECTED.replace("s.accessed_at", "coalesce(u.accessed_at, s.accessed_at)").replace(
    "s.access_count", "coalesce(u.access_count, s.access_count)"
)


class SignalSQL(Protocol):
    """What the statement needs of one recall signal (``memory.ranking.Signal``)."""

    @property
    def name(self) -> str: ...

    @property
    def sql(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RecallParameters:
    """The knobs of one lexical recall: ``memory.ranking.RankingWeights`` and the period.

    ``weights`` are the signals' weights, in the order of ``LexicalRecall``'s
    signals. ``window_*`` are all ``None`` when the query names no period (or
    the time weight is 0); ``window_scale`` is the period's length in days, at
    least 1.
    """

    limit: int
    pool: int
    now: datetime
    k1: float
    b: float
    half_life_days: float
    min_trigram: float
    weights: tuple[float, ...]
    window_start: datetime | None = None
    window_end: datetime | None = None
    window_scale: float | None = None


@dataclass(frozen=True, slots=True)
class RankedRow:
    """One returned memory with its score and its signals' values, in the order of
    ``LexicalRecall``'s signals (``None``: a signal that does not apply, as ``time``
    without a period)."""

    memory: Memory
    length: int
    score: float
    signals: tuple[float | None, ...]


class LexicalRecall:
    """Lexical recall's two statements for one table of signals, written once.

    ``memory.recall`` builds one from ``memory.ranking.SIGNALS`` when it is
    imported: each signal is a column ``<name>_signal`` of the ``scored`` step,
    weighed in the score by the parameter ``w_<name>`` (a ``NULL`` counts 0), and
    returned after the score in the same order.
    """

    __slots__ = ("names", "parameters", "preview_text", "touch_text")

    def __init__(self, signals: Sequence[SignalSQL]) -> None:
        self.names = tuple(signal.name for signal in signals)
        #: The parameters of both statements, in the order of their ``$n`` placeholders.
        #: ``limit`` and ``pool`` are not among them: they are written into the text.
        self.parameters = (
            *("resource_id", "query", "now", "k1", "k1_plus_1", "b", "half_life_days"),
            *("min_trigram", *(f"w_{name}" for name in self.names)),
            *("window_start", "window_end", "window_scale"),
        )
        columns = "".join(f",\n           {s.sql} AS {s.name}_signal" for s in signals)
        score = "\n           + ".join(
            f"coalesce(s.{name}_signal * %(w_{name})s, 0.0)" for name in self.names
        )
        ranked = _RANKED.replace("{signals}", columns).replace("{score}", score)
        returned = ", ".join(("s.length", "s.score", *(f"s.{n}_signal" for n in self.names)))
        #: Lexical recall without access bookkeeping (a preview).
        self.preview_text = f"{ranked}\nSELECT {_SELECTED}, {returned}\nFROM ranked s\n{_ORDER}\n"
        #: Lexical recall that records the access of what it returns (see the module docstring).
        self.touch_text = f"""{ranked}, touched AS ({touch_statement("IN (SELECT id FROM ranked)")})
SELECT {_TOUCHED}, {returned}
FROM ranked s
LEFT JOIN touched u ON u.resource_id = s.resource_id AND u.id = s.id
{_ORDER}
"""
        # A signal's unknown parameter fails here, on import, not on the first recall.
        positional(self.touch_text, (*self.parameters, "limit", "pool"))

    @staticmethod
    async def _fetch(conn: Conn, text: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        # Tuple rows, decoded positionally: this is the whole of recall's decoding.
        async with AsyncRawCursor(conn, row_factory=tuple_row) as cur:
            await cur.execute(text, params)
            return await cur.fetchall()

    def statement(self, touch: bool, limit: int, pool: int, distributed: bool = False) -> str:
        """The statement to run (see ``statement``)."""
        return statement(
            self.touch_text if touch else self.preview_text,
            self.parameters,
            limit,
            pool,
            distributed,
        )

    async def rows(
        self, conn: Conn, resource_id: str, query: str, parameters: RecallParameters, *, touch: bool
    ) -> list[RankedRow]:
        """The ranked rows of a lexical recall, best first (see the module docstring)."""
        p = parameters
        if len(p.weights) != len(self.names):
            raise ValueError(f"{len(self.names)} signal weights expected, got {len(p.weights)}")
        params = (
            resource_id, query, p.now, p.k1, p.k1 + 1.0, p.b, p.half_life_days,
            p.min_trigram, *p.weights, p.window_start, p.window_end, p.window_scale,
        )  # fmt: skip
        citus = await distributed(conn)
        try:
            rows = await self._fetch(conn, self.statement(touch, p.limit, p.pool, citus), params)
        except psycopg.errors.DeadlockDetected:
            if not touch or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                raise  # inside a caller's transaction, which the error has ended
            # The access bookkeeping waited on a concurrent write (maintenance
            # deleting, the vector worker's key checks) that waited on it, and
            # PostgreSQL ended this statement. Access counts are best effort (rows
            # locked elsewhere are skipped too): the same recall again, untouched.
            rows = await self._fetch(conn, self.statement(False, p.limit, p.pool, citus), params)
        w = MEMORY_WIDTH
        return [RankedRow(tuple_to_memory(r), r[w], r[w + 1], r[w + 2 :]) for r in rows]


def positional(query: str, names: Sequence[str]) -> str:
    """``query`` with each ``%(name)s`` as ``$n`` (``names``' order) and ``%%`` as ``%``.

    The statements are run by a raw cursor: psycopg re-parses the placeholders
    of a statement over 4 kB on every execute (its cache skips long ones),
    which was a third of a recall's Python time.
    """
    for n, name in enumerate(names, start=1):
        query = query.replace(f"%({name})s", f"${n}")
    if "%(" in query:
        raise ValueError("a placeholder without a parameter name")
    return query.replace("%%", "%")


@lru_cache(maxsize=64, typed=True)
def statement(
    text: str, names: tuple[str, ...], limit: int, pool: int, distributed: bool = False
) -> str:
    """``text`` (one of ``LexicalRecall``'s) as run: ``limit`` and ``pool`` written in as
    numbers, the resource id read through ``(SELECT $1)``, or as a bare ``$1`` when
    ``distributed``, and the placeholders numbered in ``names``' order.

    Both are for PostgreSQL's plan cache. Planning this statement takes about a
    millisecond, so psycopg prepares it and PostgreSQL should reuse one generic
    plan; it does so only when that plan's estimated cost is no worse than the
    plans made for the actual values. With the ``LIMIT``s as parameters the
    generic plan had to guess them (a tenth of the rows) and costed the scoring
    for thousands of rows; with the resource id visible, a small resource among
    large ones always looked cheaper planned afresh. Either way PostgreSQL
    planned every recall again (1.5 ms of a 3 to 4 ms recall). Behind a scalar
    subquery the id is a value known only at execution, in every plan alike, so
    the generic plan is chosen; the indexes are used the same way. Recall's
    limits are few (8 by default), so a statement per limit stays within
    psycopg's cache of prepared statements.

    On a distributed database (Citus, docs/scaling.md) the id must stay visible:
    Citus sends a statement to the one shard that holds the resource only when
    it sees ``resource_id = $1`` on every table it reads (so the candidate
    search has that equality there too: ``store.citus``), and refuses one it
    cannot send whole. Citus picks the shard per execution, so its plan does not
    depend on the id either.
    """
    if not all(type(n) is int and n > 0 for n in (limit, pool)):  # no bools, no text
        raise ValueError("limit and pool must be positive integers")
    if not distributed:
        text = for_postgresql(text, "m")
        text = text.replace("%(resource_id)s", "(SELECT %(resource_id)s::text)")
    text = text.replace("%(limit)s", str(limit)).replace("%(pool)s", str(pool))
    return positional(text, names)
