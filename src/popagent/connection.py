"""``popagent.connect``: the one entry point that yields a ready ``LongTermMemory``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from .embed.protocol import Embedder
from .memory.longterm import LongTermMemory
from .memory.ranking import DEFAULT_WEIGHTS, RankingWeights
from .store.database import DEFAULT_CHECKOUT_TIMEOUT, open_pool

__all__ = ["connect"]


@asynccontextmanager
async def connect(
    url: str | None = None,
    *,
    data_dir: Path | str | None = None,
    weights: RankingWeights = DEFAULT_WEIGHTS,
    embedder: Embedder | None = None,
    min_size: int = 1,
    max_size: int = 10,
    checkout_timeout: float = DEFAULT_CHECKOUT_TIMEOUT,
    migrated: bool = False,
) -> AsyncIterator[LongTermMemory]:
    """Open popagent's database and yield a ``LongTermMemory`` over it.

    ``url`` (or ``POPAGENT_DATABASE_URL``) selects an existing PostgreSQL
    server; without either, an embedded server is started in ``data_dir``
    (popagent's folder, default: the platform's user-data directory, or
    ``POPAGENT_DATA_DIR``; the cluster lives in its ``pgdata`` subfolder),
    restarted if its postmaster dies, and stopped cleanly on exit. Pending
    migrations are applied first, safely even when several processes start at
    once. A call that cannot get a connection within ``checkout_timeout``
    seconds, or loses it, raises ``DatabaseError``; so does a server that
    cannot be started or reached.

    ``embedder`` (``popagent.embed``: ``LocalEmbedder()``, ``OpenAIEmbedder(...)``,
    or ``embedder_from_env()``) turns on semantic recall; without it recall
    is lexical. No model is loaded here: a local one loads on first use.

    ``migrated=True`` (with a URL; for processes whose parent already
    migrated the database) skips the migrations and does not wait for the
    server at start: calls raise ``DatabaseError`` until it answers.
    """
    async with open_pool(
        url,
        data_dir=data_dir,
        min_size=min_size,
        max_size=max_size,
        checkout_timeout=checkout_timeout,
        migrated=migrated,
    ) as pool:
        yield LongTermMemory(pool, weights=weights, embedder=embedder)
