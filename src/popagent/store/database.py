"""Opening the database: choose the server, open the pool, migrate.

``POPAGENT_DATABASE_URL`` (or an explicit URL) selects an existing server;
without one, an embedded cluster is started and stopped with the pool.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ..errors import DatabaseError
from .embedded import EmbeddedServer
from .migrate import apply_migrations

__all__ = [
    "DATABASE_URL_ENV",
    "SESSION_SETTINGS",
    "Conn",
    "Pool",
    "configure_connection",
    "open_pool",
    "resolve_url",
]

DATABASE_URL_ENV = "POPAGENT_DATABASE_URL"

#: A pooled connection: dict rows, autocommit (the service layer opens transactions).
Conn = psycopg.AsyncConnection[dict[str, Any]]
Pool = AsyncConnectionPool[Conn]


# popagent's statements are short index lookups whose latency matters; starting a
# parallel worker costs more than it could save, yet the planner chose one for
# recall once a costly index expression made the scan look large.
SESSION_SETTINGS = "SET max_parallel_workers_per_gather = 0"


async def configure_connection(conn: Conn) -> None:
    """Session settings of every pooled connection."""
    await conn.execute(SESSION_SETTINGS)


def resolve_url(url: str | None) -> str | None:
    """The explicit URL, else ``POPAGENT_DATABASE_URL``, else ``None`` (embedded)."""
    return url or os.environ.get(DATABASE_URL_ENV) or None


@asynccontextmanager
async def open_pool(
    url: str | None = None,
    *,
    data_dir: Path | str | None = None,
    min_size: int = 1,
    max_size: int = 10,
) -> AsyncIterator[Pool]:
    """Yield a migrated, open pool; close it (and any embedded server) on exit."""
    target = resolve_url(url)
    server: EmbeddedServer | None = None
    if target is None:
        server = EmbeddedServer(data_dir)
        target = server.url
    try:
        try:
            async with await psycopg.AsyncConnection.connect(target) as conn:
                await apply_migrations(conn)
        except psycopg.OperationalError as exc:
            raise DatabaseError(f"could not connect to PostgreSQL: {exc}") from exc
        pool: Pool = AsyncConnectionPool(
            target,
            min_size=min_size,
            max_size=max_size,
            kwargs={"row_factory": dict_row, "autocommit": True},
            configure=configure_connection,
            open=False,
        )
        await pool.open(wait=True, timeout=30)
        try:
            yield pool
        finally:
            await pool.close()
    finally:
        if server is not None:
            server.stop()
