"""Test fixtures: one disposable PostgreSQL per test run, fresh resource IDs per test.

By default the run starts an embedded cluster in a temporary directory and
deletes it afterwards. With ``POPAGENT_TEST_DATABASE_URL`` set, a scratch
database is created on that server for the run and dropped after it; with
``POPAGENT_TEST_NO_CREATE_DATABASE=1`` too, the run uses that database itself,
migrated and then handed to ``POPAGENT_TEST_AFTER_MIGRATE`` (``tests/db_support.py``;
docs/scaling.md runs the suite on a Citus cluster this way). Tests that need the
database fail, never skip, when none can be had.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

import popagent
from popagent import Popagent
from popagent.llm import OpenAIChatModel
from popagent.secrets import SecretCipher, SecretStore
from popagent.store.embedded import EmbeddedServer
from popagent.threads import ThreadStore
from tests.agent_support import AgentRig
from tests.db_support import (
    creates_databases,
    given_database_url,
    prepare_given_database,
    runs_on_citus,
    scratch_database,
)
from tests.embed_support import semantic_memory
from tests.embedding_server import EmbeddingServer
from tests.scripted_model import ScriptedModelServer
from tests.web_support import api_client, scripted_settings

#: Why a test marked ``plain_postgresql`` does not run in the suite's Citus mode.
PLAIN_POSTGRESQL_ONLY = (
    "needs plain PostgreSQL: multi-resource mode keeps resources apart by row-level "
    "security, which cannot hold on tables distributed by Citus, so it refuses to start "
    "there (docs/scaling.md); this run is the suite's Citus mode"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "plain_postgresql: runs multi-resource mode (row-level security per request), "
        "which needs plain PostgreSQL; not run in the suite's Citus mode",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the suite's Citus mode (``db_support.runs_on_citus``), and only there, the
    tests marked ``plain_postgresql`` are skipped, saying why; elsewhere they run."""
    marked = [item for item in items if item.get_closest_marker("plain_postgresql")]
    if marked and runs_on_citus():
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=PLAIN_POSTGRESQL_ONLY))


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    external = given_database_url()
    if external and not creates_databases():
        prepare_given_database(external)
        yield external
        return
    if external:
        with scratch_database(external, prefix="popagent_test") as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="popagent-test-") as tmp:
        server = EmbeddedServer(tmp, delete=True)
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture
async def root(database_url: str) -> AsyncIterator[Popagent]:
    """``popagent.connect()``'s composition root on the suite's database."""
    async with popagent.connect(database_url, max_size=24) as app:
        yield app


@pytest.fixture
def memory(root: Popagent) -> popagent.LongTermMemory:
    return root.memory


@pytest.fixture
def resource() -> str:
    """A resource ID no other test uses, so tests never see each other's rows."""
    return f"res-{uuid.uuid4().hex}"


@pytest.fixture
def other_resource() -> str:
    return f"res-{uuid.uuid4().hex}"


@pytest.fixture
def scripted() -> Iterator[ScriptedModelServer]:
    """A scripted Chat Completions server on 127.0.0.1 (see ``tests/scripted_model.py``)."""
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
async def chat_model(scripted: ScriptedModelServer) -> AsyncIterator[OpenAIChatModel]:
    """The real client against ``scripted``: two retries, millisecond backoff."""
    async with OpenAIChatModel(scripted_settings(scripted, max_retries=2, timeout_s=5.0)) as model:
        yield model


@pytest.fixture
def scratch_url(database_url: str) -> Iterator[str]:
    """A second, fresh database on the suite's server (``tests/db_support.py``); dropped
    after the test."""
    with scratch_database(database_url) as url:
        yield url


@pytest.fixture
async def scratch_root(scratch_url: str) -> AsyncIterator[Popagent]:
    """The library on ``scratch_url``."""
    async with popagent.connect(scratch_url, max_size=8) as app:
        yield app


@pytest.fixture
def scratch(scratch_root: Popagent) -> popagent.LongTermMemory:
    return scratch_root.memory


@pytest.fixture
async def gui(root: Popagent, resource: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the server app (and so its GUI) for ``resource``: no model, no schedule."""
    async with api_client(root, resource) as client:
        yield client


@pytest.fixture
def embedding_dimensions() -> int:
    """How many dimensions ``embedding_server``'s vectors have; a test file may override it."""
    return 64


@pytest.fixture
def embedding_server(embedding_dimensions: int) -> Iterator[EmbeddingServer]:
    """A scripted embeddings server on 127.0.0.1 (see ``tests/embedding_server.py``)."""
    with EmbeddingServer(dimensions=embedding_dimensions) as server:
        yield server


@pytest.fixture
async def semantic(
    database_url: str, embedding_server: EmbeddingServer
) -> AsyncIterator[popagent.LongTermMemory]:
    """The library with the real embedder against ``embedding_server``."""
    async with semantic_memory(database_url, embedding_server) as memory:
        yield memory


@pytest.fixture
def threads(root: Popagent) -> ThreadStore:
    return root.threads


@pytest.fixture
def rig(
    memory: popagent.LongTermMemory,
    threads: ThreadStore,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
) -> AgentRig:
    """The database, threads, real client and scripted server of an agent turn, together."""
    return AgentRig(memory, threads, chat_model, scripted)


@pytest.fixture
def secret_store(memory: popagent.LongTermMemory) -> SecretStore:
    return SecretStore(memory.pool, SecretCipher(os.urandom(32)))
