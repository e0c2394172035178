"""Purge: remove everything popagent holds of one resource, then vacuum what it emptied.

``purge_resource`` deletes, in one transaction, every row of the resource in
every table that has one (``popagent.store.purge.PURGE_TABLES``): facts and
every version of them, episodes, vectors, the recall statistics, sessions with
their messages, turns and observations, the memory settings, the secrets and
the audit rows. Then, after the commit, it runs a plain ``VACUUM`` of the
tables it deleted from.

Invariants:
- All or nothing: the deletes share one transaction; a failure or a
  cancellation before the commit leaves the resource exactly as it was.
- Nothing of another resource is read, written or locked beyond the tables'
  own row locks.
- The purge leaves no content-bearing record of itself in the database: the
  audit table records model and tool calls only (its ``hook`` column admits
  nothing else), and a row naming the purged resource would keep the very ID
  the purge removes. The one trace is a log line with the row counts and a
  short fingerprint of the resource ID (never the ID itself).
- ``VACUUM`` runs after the commit, on an autocommit connection (it cannot run
  inside a transaction), and is plain, not ``FULL``: plain vacuum runs beside
  every other resource's reads and writes, while ``VACUUM FULL`` takes an
  exclusive lock and rewrites each whole table, stopping every resource for
  as long as that takes. A vacuum that fails is reported, not raised: the
  purge itself is committed by then.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace

import psycopg
from psycopg import sql

from ..checks import check_id
from ..errors import DatabaseError, ValidationError
from ..models import PurgeReport
from ..store.database import Pool
from ..store.purge import PURGE_TABLES, count_rows, purge_rows

__all__ = [
    "count_resource_rows",
    "purge_resource",
    "resource_fingerprint",
    "vacuum_tables",
]

log = logging.getLogger(__name__)


def resource_fingerprint(resource_id: str) -> str:
    """12 hex digits of the ID's SHA-256: lets an operator who knows the ID match a
    log line, without the log holding the ID."""
    return hashlib.sha256(resource_id.encode("utf-8")).hexdigest()[:12]


async def purge_resource(pool: Pool, resource_id: str, *, vacuum: bool = True) -> PurgeReport:
    """Delete every row of ``resource_id`` in one transaction; then ``VACUUM`` the
    tables it deleted from, unless ``vacuum`` is false.

    Rows a concurrent writer commits after the purge's statements ran survive it
    (a write racing a purge is not undone), except thread rows of a session,
    which go with the session; stop the resource's agents first for a clean
    slate. Purging a resource with no rows deletes nothing and is not an error.
    Raises ``ValidationError`` for a bad ID and ``DatabaseError`` when the
    database fails before the commit (then nothing was deleted).
    """
    resource_id = check_id("resource_id", resource_id, screen=False)
    if not isinstance(vacuum, bool):
        raise ValidationError("vacuum", "must be true or false")
    async with pool.connection() as conn, conn.transaction():
        deleted = await purge_rows(conn, resource_id)
    counts = {table: deleted[table] for table in PURGE_TABLES}
    report = PurgeReport(deleted=counts, total=sum(counts.values()))
    emptied = tuple(table for table, n in counts.items() if n)
    log.info(
        "purged resource #%s: %d rows from %d tables",
        resource_fingerprint(resource_id),
        report.total,
        len(emptied),
    )
    if not vacuum or not emptied:
        return report
    try:
        await vacuum_tables(pool, emptied)
    except (DatabaseError, psycopg.Error) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        log.warning("vacuum after purge failed: %s", reason)
        return replace(report, vacuum_error=reason)
    return replace(report, vacuumed=emptied)


async def count_resource_rows(pool: Pool, resource_id: str) -> tuple[tuple[str, int], ...]:
    """What ``purge_resource`` would delete now: the resource's rows per table, in purge order."""
    resource_id = check_id("resource_id", resource_id, screen=False)
    async with pool.connection() as conn:
        counts = await count_rows(conn, resource_id)
    return tuple(counts.items())


async def vacuum_tables(pool: Pool, tables: tuple[str, ...]) -> None:
    """One plain ``VACUUM`` of ``tables`` (pooled connections are autocommit)."""
    statement = sql.SQL("VACUUM {}").format(sql.SQL(", ").join(map(sql.Identifier, tables)))
    async with pool.connection() as conn:
        await conn.execute(statement)
