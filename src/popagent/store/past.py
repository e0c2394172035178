"""SQL of recall in the past: the memories and fact values of a moment, and the
earlier values of facts that held during a period.

Recall as of a moment (``memory.versions``) reads ``AT_MOMENT``: the episodes told
by then (or, as of a moment of the world, about what had happened by then), and of
each fact the value that held then: current, or earlier (``popagent_fact_versions``,
migration 0012), whichever was told last of those that had begun to hold (by their
event start as of a moment of the world, else when written), unless it had been
deleted or had expired by then. A question about
a past period reads ``HELD_DURING``: earlier values that held in the world during
it (from their event start, else when written, until a value told after them began
to hold, or they were deleted or expired). Both
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

# When a fact's value began to hold: as of a moment of the world (%(event)s), its
# event start when it has one, else when it was written; as the store knew it, when
# it was written.
_HELD_FROM = (
    "CASE WHEN %(event)s THEN coalesce({a}.happened_start, {a}.{written}) ELSE {a}.{written} END"
)


def _held_by_world(alias: str, written: str) -> str:
    """The value of ``alias`` had begun to hold at %(world)s, and the store knew it at
    %(known_at)s (when given)."""
    return (
        f"{_HELD_FROM.format(a=alias, written=written)} <= %(world)s"
        f" AND (%(known_at)s::timestamptz IS NULL OR {alias}.{written} <= %(known_at)s)"
    )


# When an earlier value stopped holding in the world: when a value told after it
# began to hold (its event start, else when written: the first of them), or when it
# was deleted or expired; without either (an operator's edit), when it was replaced.
_HELD_TO = """coalesce(least(
    (SELECT min(coalesce(w.happened_start, w.valid_from)) FROM popagent_fact_versions w
     WHERE w.resource_id = %(resource_id)s AND w.fact_id = v.fact_id AND w.version > v.version),
    (SELECT coalesce(c.happened_start, c.updated_at) FROM popagent_memories c
     WHERE c.resource_id = %(resource_id)s AND c.id = v.fact_id AND c.kind = 'fact'),
    CASE WHEN v.ended <> 'updated' THEN v.valid_to END), v.valid_to)"""

# The earlier values that held in the world during the period: from their event
# start (else when written) until ``_HELD_TO``. A value a later one overtook from
# before it began (told later, holding since earlier) held at no time.
_HELD_SPAN = f"""CROSS JOIN LATERAL (
    SELECT coalesce(v.happened_start, v.valid_from) AS held_from, {_HELD_TO} AS held_to
) h"""
_HELD_IN_PERIOD = "h.held_from < %(end)s AND h.held_to > %(start)s AND h.held_to > h.held_from"

AT_MOMENT = f"""
(SELECT {_MEMORY_COLUMNS}, length(m.search_vector) AS length,
        {_TF.format(vector="m.search_vector")} AS tf, NULL::timestamptz AS until
 FROM popagent_memories m
 WHERE m.resource_id = %(resource_id)s AND m.search_vector @@ %(tsquery)s::tsquery
   AND CASE WHEN m.kind = 'fact' THEN {_held_by_world("m", "updated_at")}
            ELSE (%(known_at)s::timestamptz IS NULL OR m.created_at <= %(known_at)s)
                 AND (%(as_of)s::timestamptz IS NULL
                      OR least(m.created_at, m.happened_start) <= %(as_of)s) END
   AND (m.expires_at IS NULL OR m.expires_at > %(world)s)
 ORDER BY ts_rank(m.search_vector, %(tsquery)s::tsquery) DESC, m.id DESC
 LIMIT %(pool)s)
UNION ALL
(SELECT {VERSION_AS_MEMORY}, length(v.vector), {_TF.format(vector="v.vector")},
        -- Until when it held: in the world (as of a date), or in the store (known_at).
        CASE WHEN %(event)s THEN h.held_to ELSE v.valid_to END
 FROM ({_VERSIONS}
         AND {_held_by_world("v", "valid_from")}
         AND NOT (v.ended <> 'updated' AND v.valid_to <= %(gone_by)s)
         AND (v.expires_at IS NULL OR v.expires_at > %(world)s)
         -- The value told last of those that had begun to hold is the one that held.
         AND NOT EXISTS (
             SELECT 1 FROM popagent_fact_versions w
             WHERE w.resource_id = %(resource_id)s AND w.fact_id = v.fact_id
               AND w.version > v.version AND {_held_by_world("w", "valid_from")})
         AND NOT EXISTS (
             SELECT 1 FROM popagent_memories c
             WHERE c.resource_id = %(resource_id)s AND c.id = v.fact_id AND c.kind = 'fact'
               AND {_held_by_world("c", "updated_at")})) v
 {_HELD_SPAN}
 ORDER BY ts_rank(v.vector, %(tsquery)s::tsquery) DESC, v.fact_id DESC
 LIMIT %(pool)s)
"""

HELD_DURING = f"""
SELECT {VERSION_AS_MEMORY}, length(v.vector), {_TF.format(vector="v.vector")}, h.held_to
FROM ({_VERSIONS}) v
{_HELD_SPAN}
WHERE {_HELD_IN_PERIOD}
ORDER BY ts_rank(v.vector, %(tsquery)s::tsquery) DESC, v.valid_to DESC
LIMIT %(pool)s
"""

# Whether any earlier value of the resource held during the period, whatever its
# words: HELD_DURING's own span and test, without a vector computed or matched (the
# versions are read by their primary key's prefix), so it is true whenever
# HELD_DURING could find a row.
ANY_HELD_DURING = f"""
SELECT EXISTS (SELECT 1 FROM popagent_fact_versions v {_HELD_SPAN}
               WHERE v.resource_id = %(resource_id)s AND {_HELD_IN_PERIOD})
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
    conn: Conn,
    resource_id: str,
    lexemes: list[str],
    as_of: datetime | None,
    known_at: datetime | None,
    pool: int,
) -> list[PastCandidate]:
    """What held in the world at ``as_of``, as the store knew it at ``known_at`` (at
    least one given), that holds one of ``lexemes``: at most ``pool`` memories and
    ``pool`` earlier fact values, each best matching first (``memory.versions``)."""
    given = [m for m in (as_of, known_at) if m is not None]
    params = {
        "resource_id": resource_id,
        "lexemes": lexemes,
        "as_of": as_of,
        "known_at": known_at,
        # The world is read at as_of (by the event clock), else at known_at.
        "world": as_of or known_at,
        "event": as_of is not None,
        # A value deleted or expired by then had ended, as far as the store knew.
        "gone_by": min(given),
        "pool": pool,
    }
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
