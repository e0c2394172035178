"""LangGraph's ``index=`` config on ``PopagentStore``: the caller's embedding model, the
fields it embeds, and the name its vectors are kept under.

LangGraph's ``IndexConfig`` (and ``PostgresIndexConfig``'s ``distance_type``) as its
stores read it (``InMemoryStore``, ``PostgresStore``):

- ``dims``: the vectors' dimensions (each embedding is checked against it);
- ``embed``: an ``Embeddings`` object, a sync or async function of a list of texts,
  or a provider string (``"openai:text-embedding-3-small"``) that LangChain's
  ``init_embeddings`` resolves (it needs ``langchain`` and the provider's package);
  resolved by LangGraph's own ``ensure_embeddings``;
- ``fields``: JSON paths into the value (``"text"``, ``"a.b"``, ``"items[*].text"``,
  ``"{title,body}"``; LangGraph's ``get_text_at_path``), ``["$"]`` (the default) for
  the whole value (``text_fields``, ``SqliteIndexConfig``'s name, is read the same);
  each text found is one vector, and an item is as near to a
  query as its nearest vector;
- ``distance_type``: ``"cosine"`` (default), ``"inner_product"`` or ``"l2"``; scores
  are the cosine similarity, the inner product, or the negative L2 distance, as
  ``PostgresStore`` reports them. ``ann_index_config`` and other keys are accepted
  and not used (popagent scores every item in scope exactly).

The vectors live in ``popagent_memory_embeddings`` under a model name of their own
(``caller:langgraph:<store prefix><embedding's name>:<dims>``), so stores with
different configs on one resource never mix vectors, and recall never reads them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

try:
    from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path
except ImportError as exc:  # pragma: no cover - exercised by the import test in a subprocess
    raise ImportError(
        'popagent.adapters.langgraph needs LangGraph: pip install "popagent[langgraph]"'
    ) from exc

from ..errors import ValidationError
from ..memory.caller_vectors import MAX_CALLER_VECTORS, MAX_DIMENSIONS, MAX_MODEL_CHARS
from ..store.caller_vectors import CALLER_MODEL_PREFIX, DISTANCES, Distance

__all__ = ["StoreIndex"]


class Embedder(Protocol):
    """What the index calls on LangChain's ``Embeddings`` (``ensure_embeddings`` gives one)."""

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]: ...

    async def aembed_query(self, text: str) -> list[float]: ...


def _name(embed: object, embeddings: object) -> str:
    """A readable name of the embedding model: the provider string, the object's
    ``model``/``model_name``, or its class."""
    if isinstance(embed, str):
        return embed
    for attribute in ("model", "model_name"):
        value = getattr(embeddings, attribute, None)
        if isinstance(value, str) and value:
            return value
    func = getattr(embeddings, "func", None) or getattr(embeddings, "afunc", None)
    named = func if func is not None else embeddings
    return getattr(named, "__qualname__", None) or type(named).__qualname__


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """A store's checked ``index=`` config: how it embeds, what, and where it keeps it."""

    config: dict[str, Any]
    dims: int
    embeddings: Embedder
    fields: tuple[tuple[str, Any], ...]
    distance: Distance
    model: str

    @classmethod
    def of(cls, index: Mapping[str, Any], prefix: str) -> StoreIndex:
        """``index`` (LangGraph's ``IndexConfig``) checked; ``ValidationError`` names the key."""
        if not isinstance(index, Mapping):
            raise ValidationError("index", "must be LangGraph's IndexConfig (a dict)")
        dims = index.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= MAX_DIMENSIONS:
            raise ValidationError("index.dims", f"must be an integer from 1 to {MAX_DIMENSIONS}")
        embed = index.get("embed")
        if embed is None:
            raise ValidationError("index.embed", "is required: an Embeddings, a function or a name")
        distance = index.get("distance_type", "cosine")
        if distance not in DISTANCES:
            raise ValidationError("index.distance_type", f"must be one of {sorted(DISTANCES)}")
        # ``text_fields``: the name ``SqliteStore``'s config gives them.
        fields = index.get("fields") or index.get("text_fields") or ["$"]
        if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
            raise ValidationError("index.fields", "must be a list of JSON paths")
        embeddings = ensure_embeddings(embed)
        model = f"{CALLER_MODEL_PREFIX}langgraph:{prefix}{_name(embed, embeddings)}:{dims}"
        if len(model) > MAX_MODEL_CHARS:  # a long name: its start and a digest of the rest
            digest = hashlib.sha256(model.encode()).hexdigest()[:16]
            model = f"{model[: MAX_MODEL_CHARS - 18]}~{digest}"
        return cls(
            config=dict(index),
            dims=dims,
            embeddings=cast(Embedder, embeddings),
            fields=tuple(_tokenized(f) for f in fields),
            distance=cast(Distance, distance),
            model=model,
        )

    def texts(self, value: Mapping[str, Any], index: Sequence[str] | None) -> list[str]:
        """The texts of ``value`` to embed: at the config's fields, or at ``index`` (a
        put's own paths); a path that is not there gives none."""
        paths = self.fields if index is None else tuple(_tokenized(p) for p in index)
        found = [text for _path, tokens in paths for text in get_text_at_path(value, tokens)]
        if len(found) > MAX_CALLER_VECTORS:
            raise ValidationError(
                "index", f"the fields name {len(found)} texts; at most {MAX_CALLER_VECTORS}"
            )
        return found

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The caller's model's vectors of ``texts``, each checked against ``dims``."""
        if not texts:
            return []
        vectors = await self.embeddings.aembed_documents(texts)
        if len(vectors) != len(texts):
            raise ValidationError(
                "index.embed", f"gave {len(vectors)} vectors for {len(texts)} texts"
            )
        return [self._checked(v) for v in vectors]

    async def embed_query(self, query: str) -> list[float]:
        return self._checked(await self.embeddings.aembed_query(query))

    def _checked(self, vector: Sequence[float]) -> list[float]:
        if len(vector) != self.dims:
            raise ValidationError(
                "index.dims",
                f"the model gave {len(vector)} dimensions, the config says {self.dims}",
            )
        return [float(x) for x in vector]


def _tokenized(path: str) -> tuple[str, Any]:
    if not isinstance(path, str) or not path:
        raise ValidationError("index", "paths must be non-empty strings")
    return (path, path) if path == "$" else (path, tokenize_path(path))
