"""SQL that proposes recall candidates; the scoring itself is pure (``memory.ranking``).

Semantic recall and the lexical fallback (the model failed) use these; a
lexical recall runs the same steps and the scoring as one statement
(``store.ranked``), which is tested against them. Two round trips per
recall, each independent of the resource's size:

1. ``corpus_stats``: the query's lexemes as PostgreSQL stems them, each
   lexeme's document frequency in the resource, the resource's size and
   average document length, and for each lexeme the resource never held, its
   *neighbours*: the resource's own lexemes that look like it by trigram
   similarity (a misspelling's likely meaning, a partial word's completions). All of it comes from the statistics
   tables that migration 0004's triggers keep exact, by primary key and by the
   trigram index of the resource's vocabulary; no memory row is read.
2. ``candidates``: memories holding any of the chosen lexemes (OR, not AND),
   pre-ordered by the IDF they cover, each with its term frequencies for the
   query's lexemes and their neighbours, and its length.

Lexemes are chosen rarest first until their summed document frequency passes
``CANDIDATE_BUDGET`` (the rarest always goes in), which bounds the rows one
recall touches however common the other words are. A query lexeme the
resource never saw is replaced in that choice by its neighbours. Common words
still count in the final score, which sees every query lexeme.

Every statement is scoped by ``resource_id``: the statistics by their primary
keys and the vocabulary's ``(resource_id, lexeme)`` trigram index; memories
by the GIN index over ``popagent_scoped_lexemes(resource_id, search_vector)``,
whose keys name the resource, plus an explicit ``resource_id`` filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from psycopg.rows import tuple_row

from ..models import Candidate, CorpusStats, Neighbour
from .citus import ROUTING, distributed, for_postgresql
from .database import Conn
from .memories import MEMORY_COLUMNS, MEMORY_WIDTH, tuple_to_memory

__all__ = [
    "CANDIDATE_BUDGET",
    "CORPUS_STATS",
    "LEXICAL_CANDIDATES",
    "NEIGHBOURS_PER_LEXEME",
    "NEIGHBOUR_THRESHOLD",
    "candidate_lexemes",
    "candidate_parameters",
    "candidates",
    "candidates_statement",
    "choose_lexemes",
    "corpus_stats",
    "scored_lexemes",
    "tsquery_literal",
]

CANDIDATE_BUDGET = 500
#: Least trigram similarity of a neighbour. The ``%`` operator that lets the index
#: find them applies pg_trgm's ``similarity_threshold``, whose default is the same.
NEIGHBOUR_THRESHOLD = 0.3
NEIGHBOURS_PER_LEXEME = 3

# One row: the resource's size and summed lengths, and for each distinct query
# lexeme its document count (0 if the resource never held it) and, for such an
# unknown lexeme only, its neighbours. Known words are taken as meant: looking
# for their look-alikes would cost a trigram search each and mostly find noise
# ("plan" -> "place").
CORPUS_STATS = f"""
WITH q AS (
    SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english'::regconfig, %(query)s)) AS t
)
SELECT coalesce(r.documents, 0) AS documents,
       coalesce(r.total_length, 0) AS total_length,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(q.lexeme, coalesce(s.documents, 0), n.near)),
                        '[]'::jsonb)
        FROM q
        LEFT JOIN popagent_lexeme_stats s
               ON s.resource_id = %(resource_id)s AND s.lexeme = q.lexeme
        CROSS JOIN LATERAL (
            SELECT coalesce(jsonb_agg(jsonb_build_array(v.lexeme, v.similarity, v.documents)
                                      ORDER BY v.similarity DESC, v.lexeme), '[]'::jsonb) AS near
            FROM (SELECT v.lexeme, similarity(v.lexeme, q.lexeme) AS similarity, v.documents
                  FROM popagent_lexeme_stats v
                  WHERE coalesce(s.documents, 0) = 0
                    AND v.resource_id = %(resource_id)s AND v.lexeme %% q.lexeme
                    AND similarity(v.lexeme, q.lexeme) >= {NEIGHBOUR_THRESHOLD}
                    AND v.lexeme <> q.lexeme AND v.documents > 0
                  ORDER BY similarity DESC, v.lexeme
                  LIMIT {NEIGHBOURS_PER_LEXEME}) v
        ) n) AS lexemes
FROM (SELECT 1) AS one
LEFT JOIN popagent_resource_stats r ON r.resource_id = %(resource_id)s
"""

# Term frequencies of the memory's lexemes among %(lexemes)s, as 'lexeme:count'
# strings: one pass over the memory's tsvector, no join or sort per row.
_TERM_FREQUENCIES = """
ARRAY(SELECT u.lexeme || ':' || coalesce(cardinality(u.positions), 1)
      FROM unnest(m.search_vector) AS u
      WHERE u.lexeme = ANY(%(lexemes)s::text[]))
"""

# The terms CTE is materialized so each one-term tsquery is built once, not per row.
LEXICAL_CANDIDATES = f"""
WITH terms AS MATERIALIZED (
    SELECT t.q, t.idf FROM unnest(%(term_queries)s::tsquery[], %(idfs)s::float8[]) AS t(q, idf)
), hits AS (
    SELECT m.id,
           (SELECT sum(terms.idf) FROM terms WHERE m.search_vector @@ terms.q) AS covered
    FROM popagent_memories m
    -- The keys name the resource (length-prefixed, so no other resource's key
    -- can equal them): the index condition alone is the resource filter. A
    -- separate resource_id condition would only tempt PostgreSQL into AND-ing the
    -- whole resource's index entries; Citus needs one to send the statement to the
    -- resource's shard, so it is there for Citus alone (store.citus).
    WHERE {ROUTING.format("m")}popagent_scoped_lexemes(m.resource_id, m.search_vector)
          && popagent_scoped_lexemes(%(resource_id)s, array_to_tsvector(%(chosen)s::text[]))
    ORDER BY covered DESC, m.id DESC
    LIMIT %(pool)s
)
SELECT {", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))},
       length(m.search_vector) AS length,
       {_TERM_FREQUENCIES} AS tf
FROM hits JOIN popagent_memories m ON m.resource_id = %(resource_id)s AND m.id = hits.id
WHERE m.expires_at IS NULL OR m.expires_at > now()  -- an expired fact is never recalled
"""

# What runs on plain PostgreSQL: the same, without the equality only Citus needs.
_CANDIDATES_POSTGRESQL = for_postgresql(LEXICAL_CANDIDATES, "m")


def tsquery_literal(lexemes: list[str]) -> str:
    """An OR tsquery of ``lexemes``, each quoted for tsquery's syntax."""
    quoted = ("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes)
    return " | ".join(quoted)


def choose_lexemes(frequencies: dict[str, int], budget: int = CANDIDATE_BUDGET) -> list[str]:
    """Rarest first, while the summed frequency stays within ``budget`` (at least one).

    Lexemes no memory holds are skipped: they cannot propose anything.
    """
    present = sorted((df, lex) for lex, df in frequencies.items() if df > 0)
    chosen: list[str] = []
    total = 0
    for df, lex in present:
        if chosen and total + df > budget:
            break
        chosen.append(lex)
        total += df
    return chosen


def candidate_lexemes(stats: CorpusStats) -> dict[str, int]:
    """The lexemes that may propose candidates, with their document frequencies.

    The query's own lexemes, and for each one the resource never saw, its
    neighbours (what a misspelling most likely meant).
    """
    out = {lex: df for lex, df in stats.document_frequency.items() if df > 0}
    for lex, df in stats.document_frequency.items():
        if df == 0:
            for near in stats.neighbours.get(lex, ()):
                out.setdefault(near.lexeme, near.documents)
    return out


async def corpus_stats(conn: Conn, resource_id: str, query: str) -> CorpusStats:
    cur = await conn.execute(CORPUS_STATS, {"resource_id": resource_id, "query": query})
    row = await cur.fetchone()
    assert row is not None
    documents = int(row["documents"])
    frequencies: dict[str, int] = {}
    neighbours: dict[str, tuple[Neighbour, ...]] = {}
    for lexeme, df, near in row["lexemes"]:
        frequencies[lexeme] = int(df)
        if near:
            neighbours[lexeme] = tuple(Neighbour(lex, float(sim), int(n)) for lex, sim, n in near)
    return CorpusStats(
        documents=documents,
        average_length=int(row["total_length"]) / documents if documents else 0.0,
        document_frequency=frequencies,
        neighbours=neighbours,
    )


def candidate_parameters(
    resource_id: str, stats: CorpusStats, idfs: dict[str, float], pool: int
) -> dict[str, Any] | None:
    """The parameters of ``LEXICAL_CANDIDATES``; ``None`` when no lexeme can propose any."""
    chosen = choose_lexemes(candidate_lexemes(stats))
    if not chosen:
        return None
    return {
        "resource_id": resource_id,
        "chosen": chosen,
        "term_queries": [tsquery_literal([lex]) for lex in chosen],
        "idfs": [idfs[lex] for lex in chosen],
        "lexemes": scored_lexemes(stats),
        "pool": pool,
    }


def scored_lexemes(stats: CorpusStats) -> list[str]:
    """The lexemes whose term frequencies ranking reads: the query's and their neighbours."""
    lexemes = set(stats.document_frequency)
    lexemes.update(n.lexeme for near in stats.neighbours.values() for n in near)
    return sorted(lexemes)


@lru_cache(maxsize=64)
def candidates_statement(pool: int, distributed: bool) -> str:
    """``LEXICAL_CANDIDATES`` as run: ``pool`` written in as a number and, on plain
    PostgreSQL, the resource id read through ``(SELECT ...)``, for one generic plan
    (the reasons are ``store.ranked.statement``'s: with them as parameters
    PostgreSQL planned this statement afresh on every recall)."""
    if type(pool) is not int or pool < 1:  # written into the statement: no bools, no text
        raise ValueError("pool must be a positive integer")
    text = LEXICAL_CANDIDATES
    if not distributed:
        text = _CANDIDATES_POSTGRESQL.replace("%(resource_id)s", "(SELECT %(resource_id)s::text)")
    return text.replace("%(pool)s", str(pool))


async def candidates(
    conn: Conn, resource_id: str, stats: CorpusStats, *, idfs: dict[str, float], pool: int
) -> list[Candidate]:
    """At most ``pool`` memories holding a chosen lexeme, most IDF covered first.

    ``idfs`` weighs each candidate lexeme in that pre-order (the ranking's IDF).
    """
    params = candidate_parameters(resource_id, stats, idfs, pool)
    if params is None:
        return []
    text = candidates_statement(pool, await distributed(conn))
    # Tuple rows: the candidate rows are the hot loop of recall's decoding.
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(text, params)
        return [_to_candidate(row) for row in await cur.fetchall()]


def term_frequencies(items: Sequence[str]) -> dict[str, int]:
    """``{lexeme: count}`` from the ``lexeme:count`` strings the candidate SQL returns."""
    out = {}
    for item in items:
        lexeme, _, count = item.rpartition(":")
        out[lexeme] = int(count)
    return out


def _to_candidate(row: tuple[Any, ...]) -> Candidate:
    return Candidate(
        memory=tuple_to_memory(row),
        term_frequency=term_frequencies(row[MEMORY_WIDTH + 1]),
        length=row[MEMORY_WIDTH],
    )
