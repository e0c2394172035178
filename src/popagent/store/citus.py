"""What popagent's SQL does differently on a distributed database (Citus, docs/scaling.md).

Every statement is written as Citus needs it; where plain PostgreSQL plans the
same text worse, the statement marks the part that only Citus needs with
``ROUTING`` and ``for_postgresql`` removes it there. Today that is the
``resource_id`` equality beside the candidate search's index keys (the keys
already name the resource): Citus sends a statement to one shard only when
every table reference has such an equality, while PostgreSQL, given it,
AND-ed the whole resource's primary-key entries into the candidate search
(20,000 of them for a resource of 20,000 memories).

Whether a database is distributed is asked of the server once per connection:
a pool's connections outlive many statements.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from psycopg import AsyncRawCursor
from psycopg.rows import tuple_row

from .database import Conn

__all__ = ["CITUS_INSTALLED", "ROUTING", "distributed", "for_postgresql"]

#: Whether the connected database has Citus installed.
CITUS_INSTALLED = "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')"

#: Marks an equality on ``resource_id`` that only Citus needs: ``ROUTING.format(alias)``.
ROUTING = "{}.resource_id = %(resource_id)s /* routes Citus */ AND "

_known: WeakKeyDictionary[Conn, bool] = WeakKeyDictionary()


async def distributed(conn: Conn) -> bool:
    """Whether ``conn``'s database runs Citus (asked once per connection)."""
    known = _known.get(conn)
    if known is None:
        async with AsyncRawCursor(conn, row_factory=tuple_row) as cur:
            await cur.execute(CITUS_INSTALLED)
            row = await cur.fetchone()
        known = _known[conn] = bool(row and row[0])
    return known


def for_postgresql(statement: str, alias: str) -> str:
    """``statement`` without its ``ROUTING`` equality on ``alias`` (which it must have)."""
    marked = ROUTING.format(alias)
    if statement.count(marked) != 1:
        raise ValueError(f"the statement has no single routing equality on {alias}")
    return statement.replace(marked, "")
