"""What every part of the long-term memory service shares: the pool, the ranking
weights, the embedder and its vector worker.

``LongTermMemory`` (``memory.longterm``) is this state and a table of operations:
plain functions of a ``MemoryBase`` in the modules beside it (``recall``,
``manage``, ``history``), which hold no state of their own.

Writes never embed: a memory's vectors are written after it commits, by the
vector worker (``memory.vector_worker``), which every write notifies. The
methods here let a caller wait for them (``wait_for_vectors``, or
``catch_up_vectors`` for a short backlog, as a short-lived command or a tool
call that must see its own write does), count them
(``pending_vectors``), load the model ahead of the first recall (``warm_up``)
and stop the worker (``aclose``, which ``popagent.connect`` calls).
"""

from __future__ import annotations

import math

from ..embed.health import ModelHealth, model_health, record_failure, record_success
from ..embed.protocol import Embedder
from ..errors import EmbeddingError, ValidationError
from ..store import pending as pending_sql
from ..store.database import Pool
from .ranking import DEFAULT_WEIGHTS, RankingWeights
from .validation import check_id
from .vector_worker import VectorProgress, VectorWorker

__all__ = [
    "CATCH_UP_MAX",
    "CATCH_UP_S",
    "DEFAULT_VECTOR_WAIT_S",
    "MemoryBase",
    "check_memory_id",
]

#: How long ``wait_for_vectors`` waits by default.
DEFAULT_VECTOR_WAIT_S = 60.0
#: ``catch_up_vectors`` writes a backlog of at most this many memories, waiting at most
#: ``CATCH_UP_S``; a longer one is left to the background worker (``serve``, ``embed``).
CATCH_UP_MAX = 256
CATCH_UP_S = 30.0


def check_memory_id(value: object, field: str = "id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**63 - 1:
        raise ValidationError(field, "must be a positive integer")
    return value


class MemoryBase:
    """The pool, weights, embedder and vector worker of one long-term memory service."""

    def __init__(
        self,
        pool: Pool,
        *,
        weights: RankingWeights = DEFAULT_WEIGHTS,
        embedder: Embedder | None = None,
    ) -> None:
        self._pool = pool
        self.weights = weights
        self._embedder = embedder
        self._worker = VectorWorker(pool, embedder) if embedder is not None else None

    @property
    def pool(self) -> Pool:
        return self._pool

    @property
    def embedder(self) -> Embedder | None:
        """The embedding model of semantic recall; ``None``: lexical recall only."""
        return self._embedder

    def _vectors_pending(self, resource_id: str) -> None:
        """A memory of ``resource_id`` was written: have the worker look soon."""
        if self._worker is not None:
            self._worker.notify(resource_id)

    # ``timeout`` is not asyncio's: on timeout the call returns a count, it does not raise.
    async def wait_for_vectors(
        self,
        resource_id: str,
        *,
        timeout: float = DEFAULT_VECTOR_WAIT_S,  # noqa: ASYNC109
    ) -> int:
        """Wait until every memory of ``resource_id`` has its vectors; how many still
        lack them when it returns (0: all written).

        Vectors are written after a write commits, in the background; this call
        writes them here too (beside any other process's worker) and returns once
        none is pending, or after ``timeout`` seconds (plus at most one batch),
        or at once when the model fails. Benchmarks, imports and tests call it
        before a recall that must see every vector. Without an embedder there is
        nothing to wait for: it returns 0.
        """
        resource_id = check_id("resource_id", resource_id)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
            raise ValidationError("timeout", "must be a number of seconds >= 0")
        if self._worker is None:
            return 0
        return await self._worker.wait(
            resource_id, float(timeout) if math.isfinite(timeout) else 1e9
        )

    async def catch_up_vectors(
        self,
        resource_id: str,
        *,
        most: int = CATCH_UP_MAX,
        timeout: float = CATCH_UP_S,  # noqa: ASYNC109
    ) -> int:
        """Write the vectors of a short backlog now; how many memories still lack them.

        When at most ``most`` memories of ``resource_id`` wait (a write just made, a
        few from another process), this is ``wait_for_vectors(timeout=timeout)``, so
        a recall right after finds them by meaning too; a longer backlog is left to
        the background worker and only counted. The model runs off the event loop.
        Without an embedder it returns 0.
        """
        if self._worker is None:
            return 0
        pending = await self.pending_vectors(resource_id, cap=most + 1)
        if 0 < pending <= most:
            return await self.wait_for_vectors(resource_id, timeout=timeout)
        return pending

    async def pending_vectors(self, resource_id: str, *, cap: int = 1_000_000) -> int:
        """How many memories of ``resource_id`` still wait for their vectors (counted
        up to ``cap``)."""
        resource_id = check_id("resource_id", resource_id)
        async with self._pool.connection() as conn:
            return await pending_sql.count_pending(conn, resource_id, cap=cap)

    def watch_vectors(self, resource_id: str) -> None:
        """Have the worker look for ``resource_id``'s pending vectors now and every half
        second while it lives (a server watches its resource: memories written by other
        processes get their vectors within about a second)."""
        resource_id = check_id("resource_id", resource_id)
        if self._worker is not None:
            self._worker.watch(resource_id)

    def unwatch_vectors(self, resource_id: str) -> None:
        """Stop ``watch_vectors``: the resource is looked at again only after a write."""
        if self._worker is not None:
            self._worker.unwatch(resource_id)

    def vector_progress(self, resource_id: str) -> VectorProgress | None:
        """What this process's worker did for ``resource_id`` (``None`` without an embedder)."""
        return self._worker.progress(resource_id) if self._worker is not None else None

    def model_health(self) -> ModelHealth | None:
        """Whether the embedding model works in this process (``None`` without one)."""
        return model_health(self._embedder)

    async def warm_up(self) -> bool:
        """Load the embedding model now (a server does at start, so that no request pays
        for it); whether it works. A model that fails is reported once and recall stays
        lexical; this never raises. Without an embedder: ``False``."""
        if self._embedder is None:
            return False
        try:
            await self._embedder.embed(["warm up"], kind="query")
        except EmbeddingError as exc:
            record_failure(self._embedder.model, exc)
            return False
        record_success(self._embedder.model)
        return True

    async def aclose(self) -> None:
        """Stop the background vector worker (``connect`` does on exit). Rows it had not
        written yet stay pending for the next process; nothing is lost."""
        if self._worker is not None:
            await self._worker.aclose()
