"""The embedding providers: the local model (loaded once for the session) and the
OpenAI-compatible client against a scripted ``/v1/embeddings`` server."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from popagent.embed import (
    LOCAL_DIMENSIONS,
    LOCAL_MODEL,
    Embedder,
    EmbeddingError,
    LocalEmbedder,
    OpenAIEmbedder,
    embedder_from_env,
)
from popagent.embed.e5 import E5_DIMENSIONS, E5Embedder
from popagent.embed.local import load_local_model
from popagent.errors import ValidationError

from .embedding_server import EmbeddingServer


@pytest.fixture(scope="session")
def local() -> LocalEmbedder:
    """One loaded local model for the whole run."""
    embedder = LocalEmbedder()
    embedder.load()
    return embedder


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(dimensions=16, concepts={"wedding": "marry", "married": "marry"}) as s:
        yield s


def test_local_model_embeds_unit_vectors_that_capture_meaning(local: LocalEmbedder) -> None:
    vectors = local.embed_sync(
        ["my sister's wedding", "Anna got married last Saturday", "the printer is out of toner"]
    )
    assert vectors.shape == (3, LOCAL_DIMENSIONS) and vectors.dtype == np.float32
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(np.ones(3), abs=1e-5)
    wedding, married, toner = vectors
    assert float(wedding @ married) > float(wedding @ toner) + 0.2
    assert local.model == LOCAL_MODEL and isinstance(local, Embedder)


async def test_local_model_is_loaded_once_and_batches_keep_order(local: LocalEmbedder) -> None:
    assert load_local_model() is load_local_model()
    texts = [f"note number {i} about {'cats' if i % 2 else 'the tax return'}" for i in range(70)]
    batched = await LocalEmbedder(batch_size=8).embed(texts)
    one_by_one = np.stack([local.embed_sync([t])[0] for t in texts[:5]])
    assert batched.shape == (70, LOCAL_DIMENSIONS)
    assert batched[:5] == pytest.approx(one_by_one, abs=1e-4)  # padding does not change a vector
    assert (await local.embed([])).shape == (0, LOCAL_DIMENSIONS)


def test_local_model_truncates_long_text(local: LocalEmbedder) -> None:
    long = "word " * 5_000
    assert local.embed_sync([long]).shape == (1, LOCAL_DIMENSIONS)


async def test_openai_client_batches_normalizes_and_learns_dimensions(
    server: EmbeddingServer,
) -> None:
    embedder = OpenAIEmbedder("scripted-embed", base_url=server.base_url, batch_size=3)
    assert embedder.dimensions == 0
    vectors = await embedder.embed([f"text {i}" for i in range(7)])
    await embedder.aclose()
    assert vectors.shape == (7, 16) and embedder.dimensions == 16
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(np.ones(7), abs=1e-5)
    assert [len(r["input"]) for r in server.requests] == [3, 3, 1]
    assert all(
        r["model"] == "scripted-embed" and r["encoding_format"] == "float" for r in server.requests
    )


async def test_openai_client_sends_dimensions_and_prefixes(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder(
        "m", base_url=server.base_url, dimensions=8, query_prefix="query: ", name="m@8"
    )
    vectors = await embedder.embed(["hello"], kind="query")
    await embedder.aclose()
    assert vectors.shape == (1, 8) and embedder.model == "m@8"
    assert server.requests[0]["dimensions"] == 8
    assert server.requests[0]["input"] == ["query: hello"]


async def test_openai_client_paraphrase_is_near(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.base_url)
    wedding, married, toner = await embedder.embed(["wedding", "married", "toner"])
    await embedder.aclose()
    assert float(wedding @ married) == pytest.approx(1.0)
    assert float(wedding @ toner) < 0.5


async def test_openai_client_failure_is_an_embedding_error_without_the_key(
    server: EmbeddingServer,
) -> None:
    server.fail_next(500, times=3)
    embedder = OpenAIEmbedder(
        "m", base_url=server.base_url, api_key="sk-secret-key", max_retries=1, timeout_s=5
    )
    with pytest.raises(EmbeddingError) as info:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert "HTTP 500" in str(info.value) and "sk-secret" not in str(info.value)
    assert len(server.requests) == 2  # one retry


async def test_openai_client_rejects_a_changed_dimension(server: EmbeddingServer) -> None:
    embedder = OpenAIEmbedder("m", base_url=server.base_url)
    await embedder.embed(["a"])
    server.dimensions = 12
    with pytest.raises(EmbeddingError, match="12-dimensional"):
        await embedder.embed(["b"])
    await embedder.aclose()


def test_embedder_from_env_chooses_the_provider() -> None:
    assert isinstance(embedder_from_env({}), LocalEmbedder)  # the default
    assert embedder_from_env({"POPAGENT_EMBEDDER": "none"}) is None
    remote = embedder_from_env(
        {
            "POPAGENT_EMBEDDER": "openai",
            "POPAGENT_EMBEDDING_MODEL": "nomic-embed-text",
            "POPAGENT_EMBEDDING_BASE_URL": "http://127.0.0.1:1/v1",
            "POPAGENT_EMBEDDING_DIMENSIONS": "768",
        }
    )
    assert isinstance(remote, OpenAIEmbedder)
    assert remote.model == "nomic-embed-text" and remote.dimensions == 768
    with pytest.raises(ValidationError, match="embedding_model"):
        embedder_from_env({"POPAGENT_EMBEDDER": "openai"})
    with pytest.raises(ValidationError, match="embedder"):
        embedder_from_env({"POPAGENT_EMBEDDER": "word2vec"})
    with pytest.raises(ValidationError, match="DIMENSIONS"):
        embedder_from_env({"POPAGENT_EMBEDDER": "local", "POPAGENT_EMBEDDING_DIMENSIONS": "x"})


async def test_e5_provider_embeds_queries_and_passages_differently() -> None:
    embedder = E5Embedder()
    passages = await embedder.embed(
        ["Anna got married last Saturday", "The printer is out of toner"]
    )
    query = (await embedder.embed(["my sister's wedding"], kind="query"))[0]
    as_passage = (await embedder.embed(["my sister's wedding"]))[0]
    assert passages.shape == (2, E5_DIMENSIONS) and embedder.model == "multilingual-e5-small-q4"
    assert np.linalg.norm(passages, axis=1) == pytest.approx(np.ones(2), abs=1e-5)
    assert float(passages[0] @ query) > float(passages[1] @ query)
    assert not np.allclose(query, as_passage)  # the "query: " / "passage: " prefixes
    with pytest.raises(ValueError, match="variant"):
        E5Embedder(variant="large")
