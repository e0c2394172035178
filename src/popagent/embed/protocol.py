"""The seam between popagent and an embedding model.

An ``Embedder`` turns texts into unit-length float32 vectors. Invariants:

* ``model`` names the model *and* everything that changes its vectors (the
  weights, their quantization, a query prefix): two embedders with the same
  ``model`` produce comparable vectors, so the store keys every vector by it and
  never ranks vectors of two models together;
* ``dimensions`` is fixed for the embedder's life (a remote embedder learns it
  from its first answer when it was not given);
* ``embed`` returns one row per text, in order, each of norm 1 (cosine
  similarity is then a dot product), and either embeds every text or raises
  ``EmbeddingError``: never a partial answer;
* ``kind`` is ``"query"`` for a recall question and ``"document"`` for a
  stored memory; models trained with asymmetric prefixes (E5, BGE) use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ..errors import EmbeddingError
from ..models import Vectors

__all__ = ["EmbedKind", "Embedder", "EmbeddingError", "Vectors", "normalize_rows"]

EmbedKind = Literal["query", "document"]


@runtime_checkable
class Embedder(Protocol):
    """What recall and the write paths need of an embedding model."""

    @property
    def model(self) -> str:
        """The name the store keys vectors by (see the module docstring)."""
        ...

    @property
    def dimensions(self) -> int:
        """The length of each vector (0 until a remote embedder has answered once)."""
        ...

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        """One unit-length row per text, shape ``(len(texts), dimensions)``."""
        ...


def normalize_rows(vectors: NDArray[np.floating]) -> Vectors:
    """Scale each row to norm 1 (a zero row stays zero), as float32."""
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)
