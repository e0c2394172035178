"""The library with a real embedder: ``OpenAIEmbedder`` against the scripted
``EmbeddingServer`` (``tests/embedding_server.py``) on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import popagent
from popagent.embed import OpenAIEmbedder
from tests.embedding_server import EmbeddingServer

__all__ = ["semantic_memory"]


@asynccontextmanager
async def semantic_memory(
    database_url: str, server: EmbeddingServer, *, max_size: int = 6
) -> AsyncIterator[popagent.LongTermMemory]:
    """``popagent.connect(database_url)`` embedding through ``server`` (model
    ``scripted-<dimensions>``, no retries, 5 s timeout); the embedder is closed after."""
    embedder = OpenAIEmbedder(
        "scripted",
        base_url=server.base_url,
        name=f"scripted-{server.dimensions}",
        timeout_s=5,
        max_retries=0,
    )
    try:
        async with popagent.connect(database_url, embedder=embedder, max_size=max_size) as root:
            memory = root.memory
            yield memory
    finally:
        await embedder.aclose()
