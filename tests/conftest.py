"""Test fixtures: one disposable PostgreSQL per test run, fresh resource IDs per test.

By default the run starts an embedded cluster in a temporary directory and
deletes it afterwards. With ``POPAGENT_TEST_DATABASE_URL`` set, a scratch
database is created on that server for the run and dropped after it. Tests
that need the database fail, never skip, when none can be had.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import popagent
from popagent.llm import OpenAIChatModel
from popagent.secrets import SecretCipher, SecretStore
from popagent.store.embedded import EmbeddedServer
from popagent.threads import ThreadStore
from tests.scripted_model import ScriptedModelServer
from tests.web_support import scripted_settings


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    external = os.environ.get("POPAGENT_TEST_DATABASE_URL")
    if external:
        name = f"popagent_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(external, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        params = conninfo_to_dict(external)
        params["dbname"] = name
        try:
            yield make_conninfo(**params)  # type: ignore[arg-type]
        finally:
            with psycopg.connect(external, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        return
    with tempfile.TemporaryDirectory(prefix="popagent-test-") as tmp:
        server = EmbeddedServer(tmp, delete=True)
        try:
            yield server.url
        finally:
            server.stop()


@pytest.fixture
async def memory(database_url: str) -> AsyncIterator[popagent.LongTermMemory]:
    async with popagent.connect(database_url, max_size=24) as ltm:
        yield ltm


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
def threads(memory: popagent.LongTermMemory) -> ThreadStore:
    return ThreadStore(memory.pool)


@pytest.fixture
def secret_store(memory: popagent.LongTermMemory) -> SecretStore:
    return SecretStore(memory.pool, SecretCipher(os.urandom(32)))
