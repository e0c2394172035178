"""``popagent.connect``: the one entry point; it yields the composition root, ``Popagent``."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Literal

from .embed.protocol import Embedder
from .embed.settings import configured_embedder
from .memory.ranking import DEFAULT_WEIGHTS, RankingWeights
from .root import Popagent
from .store.database import (
    DEFAULT_CHECKOUT_TIMEOUT,
    DEFAULT_QUEUE_LIMIT,
    DEFAULT_QUEUE_TIMEOUT,
    open_pool,
)

__all__ = ["CONFIGURED", "EmbedderChoice", "connect"]


class _Configured(enum.Enum):
    EMBEDDER = "the configured embedder"


#: ``connect``'s default ``embedder``: the one ``POPAGENT_EMBEDDER`` names, else the
#: bundled local model (``popagent.embed.configured_embedder``).
CONFIGURED: Final = _Configured.EMBEDDER

#: What ``connect(embedder=...)`` takes: an ``Embedder``, ``CONFIGURED`` or ``None`` (lexical).
EmbedderChoice = Embedder | Literal[_Configured.EMBEDDER] | None


@asynccontextmanager
async def connect(
    url: str | None = None,
    *,
    data_dir: Path | str | None = None,
    weights: RankingWeights = DEFAULT_WEIGHTS,
    embedder: EmbedderChoice = CONFIGURED,
    min_size: int = 1,
    max_size: int = 10,
    checkout_timeout: float = DEFAULT_CHECKOUT_TIMEOUT,
    queue_timeout: float = DEFAULT_QUEUE_TIMEOUT,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
    migrated: bool = False,
) -> AsyncIterator[Popagent]:
    """Open popagent's database and yield a ``Popagent``: the pool and the services
    over it (``app.memory``, ``app.threads``, ``app.settings``, ``app.agent(model)``, ...).

    ``url`` (or ``POPAGENT_DATABASE_URL``) selects an existing PostgreSQL
    server; without either, an embedded server is started in ``data_dir``
    (popagent's folder, default: the platform's user-data directory, or
    ``POPAGENT_DATA_DIR``; the cluster lives in its ``pgdata`` subfolder),
    restarted if its postmaster dies, and stopped cleanly on exit. Pending
    migrations are applied first, safely even when several processes start at
    once. A call that loses its connection, or waits ``checkout_timeout``
    seconds for one while the server is known away, raises ``DatabaseError``;
    so does a server that cannot be started or reached. A burst larger than
    the pool (``max_size``) waits in the pool's queue: up to ``queue_timeout``
    seconds, with at most ``queue_limit`` callers waiting; past that a call
    raises ``DatabaseBusyError`` (``popagent.store.database``).

    Recall is semantic by default: ``embedder`` defaults to the configured
    one (``POPAGENT_EMBEDDER``, else the bundled local model,
    all-MiniLM-L6-v2); pass another ``Embedder`` (``popagent.embed``:
    ``LocalEmbedder()``, ``OpenAIEmbedder(...)``), or ``None`` (or set
    ``POPAGENT_EMBEDDER=none``) for lexical recall only. No model is loaded
    here: it loads on first use (``app.memory.warm_up()`` loads it now).
    Writes never wait for the model: a background worker writes each memory's
    vectors after it commits (``app.memory.wait_for_vectors`` waits for
    them), and is stopped on exit; what it had not written yet is written by
    the next process (nothing is lost).

    ``migrated=True`` (with a URL; for processes whose parent already
    migrated the database) skips the migrations and does not wait for the
    server at start: calls raise ``DatabaseError`` until it answers.
    """
    chosen = configured_embedder() if embedder is CONFIGURED else embedder
    async with open_pool(
        url,
        data_dir=data_dir,
        min_size=min_size,
        max_size=max_size,
        checkout_timeout=checkout_timeout,
        queue_timeout=queue_timeout,
        queue_limit=queue_limit,
        migrated=migrated,
    ) as pool:
        app = Popagent.over(pool, weights=weights, embedder=chosen)
        try:
            yield app
        finally:
            await app.aclose()
