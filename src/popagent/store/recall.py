"""SQL that proposes recall candidates; the scoring itself is pure (``memory.ranking``).

Two round trips per recall:

1. ``corpus_stats``: the query's lexemes as PostgreSQL stems them, each
   lexeme's document frequency in the resource, the resource's size and its
   average document length. Counts stop at ``COUNT_CAP`` rows so that a huge
   resource costs no more than a large one; BM25's IDF keeps its order.
2. ``candidates``: memories matching any of the selected lexemes (OR, not
   AND), pre-ordered by the IDF they cover, plus trigram matches when the
   lexical path found fewer than ``limit`` (misspellings, partial words). Each comes with its term frequencies,
   length and trigram similarity.

Lexemes are chosen rarest first until their summed document frequency passes
``CANDIDATE_BUDGET`` (the rarest always goes in), which bounds the rows one
recall touches however common the other words are. Common words still count
in the final score, which sees every query lexeme.

Every statement leads with ``resource_id`` and uses the GIN indexes built on
``(resource_id, search_vector)`` and ``(resource_id, content gin_trgm_ops)``.
"""

from __future__ import annotations

from typing import Any

from ..models import Candidate, CorpusStats
from .database import Conn
from .memories import MEMORY_COLUMNS, row_to_memory

__all__ = [
    "CANDIDATE_BUDGET",
    "COUNT_CAP",
    "candidates",
    "choose_lexemes",
    "corpus_stats",
    "similarities",
    "tsquery_literal",
]

COUNT_CAP = 5_000
CANDIDATE_BUDGET = 1_000
LENGTH_SAMPLE = 1_000
TRIGRAM_THRESHOLD = 0.3

# A lexeme as a one-term tsquery, quoted for tsquery's own syntax.
_QUOTE = r"('''' || replace(replace({x}, '\', '\\'), '''', '''''') || '''')::tsquery"

LEXEME_FREQUENCIES = f"""
SELECT l.lexeme,
       (SELECT count(*) FROM (
            SELECT 1 FROM popagent_memories m
            WHERE m.resource_id = %(resource_id)s
              AND m.search_vector @@ {_QUOTE.format(x="l.lexeme")}
            LIMIT %(cap)s) s) AS df
FROM (SELECT DISTINCT t.lexeme
      FROM unnest(to_tsvector('english'::regconfig, %(query)s)) AS t) l
ORDER BY l.lexeme
"""

RESOURCE_SIZE = """
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM popagent_memories WHERE resource_id = %(resource_id)s
            LIMIT %(cap)s) s) AS documents,
       (SELECT avg(length(search_vector)) FROM (
            SELECT search_vector FROM popagent_memories WHERE resource_id = %(resource_id)s
            LIMIT %(sample)s) s) AS average_length
"""

_CANDIDATE_COLUMNS = f"""
    {", ".join("m." + c.strip() for c in MEMORY_COLUMNS.split(","))},
    length(m.search_vector) AS length,
    ARRAY(SELECT coalesce(cardinality(u.positions), 0)
          FROM unnest(%(lexemes)s::text[]) WITH ORDINALITY AS t(lexeme, ord)
          LEFT JOIN unnest(m.search_vector) AS u ON u.lexeme = t.lexeme
          ORDER BY t.ord) AS tf
"""

LEXICAL_CANDIDATES = f"""
WITH terms AS (
    SELECT {_QUOTE.format(x="t.lexeme")} AS q, t.idf
    FROM unnest(%(chosen)s::text[], %(idfs)s::float8[]) AS t(lexeme, idf)
), hits AS (
    SELECT m.id,
           (SELECT sum(terms.idf) FROM terms WHERE m.search_vector @@ terms.q) AS covered
    FROM popagent_memories m
    WHERE m.resource_id = %(resource_id)s AND m.search_vector @@ %(tsquery)s::tsquery
    ORDER BY covered DESC, m.id DESC
    LIMIT %(pool)s
)
SELECT {_CANDIDATE_COLUMNS}, NULL::float8 AS trigram
FROM hits JOIN popagent_memories m ON m.id = hits.id
WHERE m.resource_id = %(resource_id)s
"""

TRIGRAM_CANDIDATES = f"""
SELECT {_CANDIDATE_COLUMNS}, word_similarity(%(query)s, m.content) AS trigram
FROM popagent_memories m
WHERE m.resource_id = %(resource_id)s AND %(query)s <%% m.content
ORDER BY word_similarity(%(query)s, m.content) DESC, m.id DESC
LIMIT %(pool)s
"""

SIMILARITIES = """
SELECT id, word_similarity(%(query)s, content) AS trigram
FROM popagent_memories
WHERE resource_id = %(resource_id)s AND id = ANY(%(ids)s)
"""

SET_TRIGRAM_THRESHOLD = "SELECT set_config('pg_trgm.word_similarity_threshold', %s, true)"


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


async def corpus_stats(conn: Conn, resource_id: str, query: str) -> CorpusStats:
    params = {"resource_id": resource_id, "query": query, "cap": COUNT_CAP, "sample": LENGTH_SAMPLE}
    async with conn.pipeline():
        lex_cur = await conn.execute(LEXEME_FREQUENCIES, params)
        size_cur = await conn.execute(RESOURCE_SIZE, params)
    frequencies = {r["lexeme"]: int(r["df"]) for r in await lex_cur.fetchall()}
    size = await size_cur.fetchone()
    assert size is not None
    return CorpusStats(
        documents=int(size["documents"]),
        average_length=float(size["average_length"] or 0.0),
        document_frequency=frequencies,
    )


def _to_candidate(row: dict[str, Any], lexemes: list[str]) -> Candidate:
    return Candidate(
        memory=row_to_memory(row),
        term_frequency={lex: tf for lex, tf in zip(lexemes, row["tf"], strict=True) if tf},
        length=int(row["length"]),
        trigram=None if row["trigram"] is None else float(row["trigram"]),
    )


async def candidates(
    conn: Conn,
    resource_id: str,
    query: str,
    stats: CorpusStats,
    *,
    idfs: dict[str, float],
    pool: int,
    min_lexical: int,
) -> list[Candidate]:
    """Lexical candidates, topped up with trigram ones when needed; deduplicated by id.

    Must run inside a transaction: the trigram threshold is set for it alone.
    """
    lexemes = sorted(stats.document_frequency)
    found: dict[int, Candidate] = {}
    chosen = choose_lexemes(stats.document_frequency)
    base = {"resource_id": resource_id, "query": query, "lexemes": lexemes, "pool": pool}
    if chosen:
        cur = await conn.execute(
            LEXICAL_CANDIDATES,
            {
                **base,
                "chosen": chosen,
                "idfs": [idfs[lex] for lex in chosen],
                "tsquery": tsquery_literal(chosen),
            },
        )
        for row in await cur.fetchall():
            found[row["id"]] = _to_candidate(row, lexemes)
    # The trigram scan is the expensive path (its index selects nearly every row
    # for a long question), so it only runs when the lexical path came up short.
    if len(found) < min_lexical:
        await conn.execute(SET_TRIGRAM_THRESHOLD, (str(TRIGRAM_THRESHOLD),))
        cur = await conn.execute(TRIGRAM_CANDIDATES, base)
        for row in await cur.fetchall():
            found.setdefault(row["id"], _to_candidate(row, lexemes))
    return list(found.values())


async def similarities(
    conn: Conn, resource_id: str, query: str, ids: list[int]
) -> dict[int, float]:
    """``word_similarity(query, content)`` of the given memories."""
    if not ids:
        return {}
    cur = await conn.execute(SIMILARITIES, {"resource_id": resource_id, "query": query, "ids": ids})
    return {r["id"]: float(r["trigram"]) for r in await cur.fetchall()}
