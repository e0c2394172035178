"""``OpenAIEmbedder``: any OpenAI-compatible ``POST /v1/embeddings`` server.

OpenAI, Ollama, vLLM, llama.cpp and Hugging Face TEI all speak this API. Built
on the official ``openai`` SDK. Invariants:

* one ``embed`` call sends the texts in batches of at most ``batch_size``, in
  order, and returns all their vectors or raises ``EmbeddingError`` (the API
  key is in no message);
* every vector is scaled to norm 1 (not every server normalizes);
* ``dimensions`` is the configured one, else learned from the first answer;
  an answer of another length, or with a missing or repeated index, is an error;
* ``model`` is what the store keys the vectors by: the ``name`` given, else
  the server's model name.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import openai

from ..errors import EmbeddingError
from .protocol import EmbedKind, Vectors, normalize_rows

__all__ = ["OpenAIEmbedder"]

_PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore it; the SDK insists on one


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (``base_url`` ends in ``/v1``)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        name: str | None = None,
        batch_size: int = 64,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model name")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be >= 1")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._server_model = model
        self._name = name or model
        self._request_dimensions = dimensions
        self._dimensions = dimensions or 0
        self._batch_size = batch_size
        self._prefixes = {"query": query_prefix, "document": document_prefix}
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or _PLACEHOLDER_API_KEY,
            timeout=timeout_s,
            max_retries=max_retries,
        )

    @property
    def model(self) -> str:
        return self._name

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def aclose(self) -> None:
        await self._client.close()

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        prefix = self._prefixes[kind]
        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = [prefix + t for t in texts[start : start + self._batch_size]]
            rows.extend(await self._request(batch))
        if not rows:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        return normalize_rows(np.asarray(rows, dtype=np.float32))

    async def _request(self, batch: list[str]) -> list[list[float]]:
        try:
            response = await self._client.embeddings.create(
                model=self._server_model,
                input=batch,
                encoding_format="float",
                dimensions=self._request_dimensions or openai.omit,
            )
        except (openai.APIError, ValueError) as exc:
            status = getattr(exc, "status_code", None)
            what = f"HTTP {status}" if status else type(exc).__name__
            raise EmbeddingError(
                f"embedding request to model {self._server_model!r} failed: {what}"
            ) from exc
        data = sorted(response.data, key=lambda d: d.index)
        if [d.index for d in data] != list(range(len(batch))):
            raise EmbeddingError(
                f"the server answered {len(data)} embeddings for {len(batch)} texts"
            )
        vectors = [list(d.embedding) for d in data]
        for vector in vectors:
            if not self._dimensions:
                self._dimensions = len(vector)
            if len(vector) != self._dimensions or not vector:
                raise EmbeddingError(
                    f"the server answered a {len(vector)}-dimensional vector, expected {self._dimensions}"
                )
        return vectors
