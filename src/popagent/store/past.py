"""SQL of recall in the past: the memories and fact values of a moment, and the
earlier values of facts that held during a period.

Recall as of a moment (``memory.versions``) reads ``AT_MOMENT``: the episodes and
current facts written by then that had not expired, and each fact's earlier value
that held then (from ``popagent_fact_versions``, migration 0012). A question about
a past period reads ``HELD_DURING``: earlier values whose span overlaps it. Both
return rows shaped as recall's candidates (``Memory``'s columns, the length, the
term frequencies) plus ``until``: when an earlier value stopped holding (``NULL``
for a current row).

Earlier values have no stored search vector: it is computed as migration 0010's
generated column computes a memory's (content and key words), over the versions
of the one resource (its primary key's prefix), which stay few per fact.

Invariants: every reference names the resource; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from ..models import Candidate, FactVersion, Memory
from ._rows import field_names
from .database import Conn
from .memories import MEMORY_WIDTH, tuple_to_memory
from .recall import term_frequencies, tsquery_literal

__all__ = [
    "ANY_HELD_DURING",
    "AT_MOMENT",
    "HELD_DURING",
    "PastCandidate",
    "any_held_during",
    "at_moment",
    "held_during",
]

#: A candidate and, for an earlier value of a fact, when it stopped holding.
PastCandidate = tuple[Candidate, datetime | None]

_VECTOR = "to_tsvector('english'::regconfig, v.content || coalesce(' ' || translate(v.key, '._-:/', '     '), ''))"

# A version as a memory row: its fact's id, its value, its span's start as both
# times; what a version does not keep (access, sources, marks, any later column) is NULL.
_AS_MEMORY = {
    "id": "v.fact_id",
    "kind": "'fact'::text",
    "created_at": "v.valid_from",
    "updated_at": "v.valid_from",
    "accessed_at": "NULL::timestamptz",
    "access_count": "0",
}
_VERSION_FIELDS = set(field_names(FactVersion))
VERSION_AS_MEMORY = ", ".join(
    _AS_MEMORY.get(name, f"v.{name}" if name in _VERSION_FIELDS else "NULL") + f" AS {name}"
    for name in field_names(Memory)
)
_MEMORY_COLUMNS = ", ".join(f"m.{name}" for name in field_names(Memory))

_TF = """ARRAY(SELECT u.lexeme || ':' || coalesce(cardinality(u.positions), 1)
      FROM unnest({vector}) AS u WHERE u.lexeme = ANY(%(lexemes)s::text[]))"""

# The versions of the resource that match the query, with their vectors.
_VERSIONS = f"""
    SELECT v.*, s.vector FROM popagent_fact_versions v
    CROSS JOIN LATERAL (SELECT {_VECTOR} AS vector) s
    WHERE v.resource_id = %(resource_id)s AND s.vector @@ %(tsquery)s::tsquery"""

AT_MOMENT = f"""
(SELECT {_MEMORY_COLUMNS}, length(m.search_vector) AS length,
        {_TF.format(vector="m.search_vector")} AS tf, NULL::timestamptz AS until
 FROM popagent_memories m
 WHERE m.resource_id = %(resource_id)s AND m.search_vector @@ %(tsquery)s::tsquery
   AND CASE WHEN m.kind = 'fact' THEN m.updated_at ELSE m.created_at END <= %(moment)s
   AND (m.expires_at IS NULL OR m.expires_at > %(moment)s)
 ORDER BY ts_rank(m.search_vector, %(tsquery)s::tsquery) DESC, m.id DESC
 LIMIT %(pool)s)
UNION ALL
(SELECT {VERSION_AS_MEMORY}, length(v.vector), {_TF.format(vector="v.vector")}, v.valid_to
 FROM ({_VERSIONS}
         AND v.valid_from <= %(moment)s AND v.valid_to > %(moment)s
         AND (v.expires_at IS NULL OR v.expires_at > %(moment)s)) v
 ORDER BY ts_rank(v.vector, %(tsquery)s::tsquery) DESC, v.fact_id DESC
 LIMIT %(pool)s)
"""

HELD_DURING = f"""
SELECT {VERSION_AS_MEMORY}, length(v.vector), {_TF.format(vector="v.vector")}, v.valid_to
FROM ({_VERSIONS}
        AND v.valid_from < %(end)s AND v.valid_to > %(start)s) v
ORDER BY ts_rank(v.vector, %(tsquery)s::tsquery) DESC, v.valid_to DESC
LIMIT %(pool)s
"""

# Whether any earlier value of the resource overlaps the period, whatever its words:
# no vector is computed, the versions are read by their primary key's prefix.
ANY_HELD_DURING = """
SELECT EXISTS (SELECT 1 FROM popagent_fact_versions v
               WHERE v.resource_id = %(resource_id)s
                 AND v.valid_from < %(end)s AND v.valid_to > %(start)s)
"""


async def _rows(conn: Conn, statement: str, params: dict[str, Any]) -> list[PastCandidate]:
    if not params["lexemes"]:
        return []
    params = {**params, "tsquery": tsquery_literal(params["lexemes"])}
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(statement, params)
        rows = await cur.fetchall()
    return [
        (
            Candidate(
                memory=tuple_to_memory(row),
                term_frequency=term_frequencies(row[MEMORY_WIDTH + 1]),
                length=row[MEMORY_WIDTH],
            ),
            row[MEMORY_WIDTH + 2],
        )
        for row in rows
    ]


async def at_moment(
    conn: Conn, resource_id: str, lexemes: list[str], moment: datetime, pool: int
) -> list[PastCandidate]:
    """What the resource held at ``moment`` that holds one of ``lexemes``: at most
    ``pool`` memories and ``pool`` earlier fact values, each best matching first."""
    params = {"resource_id": resource_id, "lexemes": lexemes, "moment": moment, "pool": pool}
    return await _rows(conn, AT_MOMENT, params)


async def held_during(
    conn: Conn, resource_id: str, lexemes: list[str], start: datetime, end: datetime, pool: int
) -> list[PastCandidate]:
    """At most ``pool`` earlier fact values holding one of ``lexemes`` whose span
    overlaps ``[start, end)``, best matching first."""
    params = {
        "resource_id": resource_id,
        "lexemes": lexemes,
        "start": start,
        "end": end,
        "pool": pool,
    }
    return await _rows(conn, HELD_DURING, params)


async def any_held_during(conn: Conn, resource_id: str, start: datetime, end: datetime) -> bool:
    """Whether any earlier fact value of the resource overlaps ``[start, end)``: when
    none does, ``held_during`` finds nothing for any words (the cheap test first)."""
    params = {"resource_id": resource_id, "start": start, "end": end}
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(ANY_HELD_DURING, params)
        row = await cur.fetchone()
    return bool(row and row[0])
