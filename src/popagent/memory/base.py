"""What every part of the long-term memory service shares: the pool, the ranking
weights and the embedder, and writing a memory's vectors.

``LongTermMemory`` is assembled from this base and the mixins beside it
(``history.FactHistory``); each holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..embed.protocol import Embedder, Vectors
from ..errors import ValidationError
from ..models import Memory
from ..store import vectors as vector_store
from ..store.database import Conn, Pool
from .ranking import DEFAULT_WEIGHTS, RankingWeights
from .semantic import embed_or_none, vector_rows

__all__ = ["MemoryBase", "check_memory_id"]


def check_memory_id(value: object, field: str = "id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**63 - 1:
        raise ValidationError(field, "must be a positive integer")
    return value


class MemoryBase:
    """The pool, weights and embedder of one long-term memory service."""

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

    @property
    def pool(self) -> Pool:
        return self._pool

    @property
    def embedder(self) -> Embedder | None:
        """The embedding model of semantic recall; ``None``: lexical recall only."""
        return self._embedder

    async def _vectors(self, contents: Sequence[str]) -> list[list[Vectors]] | None:
        if self._embedder is None or not contents:
            return None
        return await embed_or_none(self._embedder, contents)

    async def _write_vectors(
        self, conn: Conn, memory: Memory, chunks: list[Vectors] | None
    ) -> None:
        if self._embedder is None or not chunks:
            return
        await vector_store.write_vectors(
            conn,
            memory.resource_id,
            self._embedder.model,
            self._embedder.dimensions,
            vector_rows(memory.id, memory.content_sha256, chunks),
        )
