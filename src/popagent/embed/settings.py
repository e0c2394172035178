"""Choosing an embedder from settings: ``local`` (the default), ``openai`` or ``none``.

Read from the environment by ``popagent.connect()`` (unless it is given an
``embedder``, or ``None`` for lexical recall), by the command line and by
programs that want the same choice. Changing ``DEFAULT_PROVIDER`` (and the
provider it names) changes the default model everywhere.

``POPAGENT_EMBEDDER``
    ``local`` (all-MiniLM-L6-v2 on the CPU), ``e5`` (multilingual-e5-small,
    4-bit, on the CPU: better recall, slower), ``openai`` (an OpenAI-compatible
    endpoint) or ``none`` (lexical recall only, no model loaded). Default
    ``DEFAULT_PROVIDER`` (``local``).
``POPAGENT_EMBEDDING_MODEL``, ``POPAGENT_EMBEDDING_BASE_URL``, ``POPAGENT_EMBEDDING_API_KEY``, ``POPAGENT_EMBEDDING_DIMENSIONS``
    For ``openai``: the model (required), the server (default: OpenAI's), its
    key (default ``OPENAI_API_KEY``) and optionally the dimensions to request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..defaults import (
    EMBEDDER_ENV,
    EMBEDDING_API_KEY_ENV,
    EMBEDDING_BASE_URL_ENV,
    EMBEDDING_DIMENSIONS_ENV,
    EMBEDDING_MODEL_ENV,
    OPENAI_API_KEY_ENV,
)
from ..errors import ValidationError
from .e5 import E5Embedder
from .local import LocalEmbedder
from .protocol import Embedder

__all__ = [
    "DEFAULT_PROVIDER",
    "PROVIDERS",
    "configured_embedder",
    "embedder_from_env",
    "make_embedder",
]

PROVIDERS = ("local", "e5", "openai", "none")
DEFAULT_PROVIDER = "local"


def make_embedder(
    provider: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    dimensions: int | None = None,
) -> Embedder | None:
    """The embedder ``provider`` names; ``None`` for ``none``. Nothing is loaded yet."""
    if provider == "none":
        return None
    if provider == "local":
        return LocalEmbedder()
    if provider == "e5":
        return E5Embedder()
    if provider == "openai":
        if not model:
            raise ValidationError("embedding_model", "the openai provider needs a model name")
        # Imported here: the OpenAI SDK takes about half a second to import.
        from .remote import OpenAIEmbedder

        return OpenAIEmbedder(model, base_url=base_url, api_key=api_key, dimensions=dimensions)
    raise ValidationError("embedder", f"must be one of {', '.join(PROVIDERS)}")


def embedder_from_env(env: Mapping[str, str] | None = None) -> Embedder | None:
    """The embedder the ``POPAGENT_EMBEDDER*`` variables choose (see the module docstring)."""
    env = os.environ if env is None else env
    raw_dimensions = env.get(EMBEDDING_DIMENSIONS_ENV) or None
    try:
        dimensions = int(raw_dimensions) if raw_dimensions else None
    except ValueError:
        raise ValidationError(EMBEDDING_DIMENSIONS_ENV, "must be an integer") from None
    return make_embedder(
        (env.get(EMBEDDER_ENV) or "").strip().lower() or DEFAULT_PROVIDER,
        model=env.get(EMBEDDING_MODEL_ENV),
        base_url=env.get(EMBEDDING_BASE_URL_ENV),
        api_key=env.get(EMBEDDING_API_KEY_ENV) or env.get(OPENAI_API_KEY_ENV),
        dimensions=dimensions,
    )


def configured_embedder(env: Mapping[str, str] | None = None) -> Embedder | None:
    """The embedder of ``popagent.connect()`` by default and of every ``popagent``
    command (serve, chat, mcp, remember, recall...): the one ``POPAGENT_EMBEDDER``
    names, else the bundled local model (``DEFAULT_PROVIDER``); ``None`` for ``none``.

    Semantic recall is on by default: writes do not embed (the vector worker
    does, after they commit), so it costs a write nothing.
    """
    return embedder_from_env(env)
