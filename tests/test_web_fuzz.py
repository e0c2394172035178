"""Property-based fuzzing of every route from the server's own OpenAPI document.

Schemathesis generates valid and invalid requests for every operation and
sends them over real HTTP to a real uvicorn on 127.0.0.1 serving one resource.
Every response must be a non-5xx that conforms to the document (status code,
content type, body schema). Another resource, seeded before the run, must be
exactly as it was afterwards: nothing a request can say reaches it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import popagent
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from tests.db_support import RESOURCE_DIGESTS
from tests.scripted_model import Reply, ScriptedModelServer
from tests.web_support import scripted_settings, uvicorn_server

FUZZ_RESOURCE = f"fuzz-{uuid.uuid4().hex[:12]}"
BYSTANDER = f"bystander-{uuid.uuid4().hex[:12]}"
#: Generated requests per route and mode: bounded, so the run takes seconds.
EXAMPLES = 25


async def _seed(url: str) -> None:
    async with popagent.connect(url, max_size=2) as root:
        memory = root.memory
        threads = ThreadStore(memory.pool)
        for resource in (BYSTANDER, FUZZ_RESOURCE):
            await memory.remember(resource, "Keeps bees on the roof", key="hobby")
            await memory.remember(resource, "Allergic to peanuts", importance=0.9)
            await memory.retain_episode(resource, "s1", "How are the bees?", "Thriving.")
            await memory.retain_episode(
                resource,
                "s2",
                "Old chat",
                "From last year",
                created_at=datetime(2025, 1, 1, tzinfo=UTC),
            )
            await threads.append_message(resource, "s1", "user", "hello", create_session=True)
            await threads.append_message(resource, "s1", "assistant", "hi there")


def snapshot(url: str, resource: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        row = conn.execute(RESOURCE_DIGESTS, {"r": resource}).fetchone()
    assert row is not None
    return dict(zip(("memories", "sessions", "messages", "settings"), row, strict=True))


@pytest.fixture(scope="module")
def fuzz_server(database_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    asyncio.run(_seed(database_url))
    before = snapshot(database_url, BYSTANDER)
    config = ServerConfig(resource_id=FUZZ_RESOURCE, maintenance_interval_s=None)
    with ScriptedModelServer() as scripted:
        # Enough replies for every chat request the fuzzer can send.
        scripted.script(*[Reply("Noted.") for _ in range(4 * EXAMPLES)])
        settings = scripted_settings(scripted)
        with uvicorn_server(
            config, database_url=database_url, model_settings=settings, pool_size=4
        ) as base:
            yield base, before


@pytest.fixture(scope="module")
def web_schema(fuzz_server: tuple[str, dict[str, str]]) -> BaseSchema:
    base, _ = fuzz_server
    return schemathesis.openapi.from_url(f"{base}/openapi.json")


def _cases() -> list[tuple[GenerationMode, str, str]]:
    """Every (mode, method, path) to fuzz, read from the app's document without serving it.
    Negative mode needs something to break: routes without parameters or body get positive only."""
    document = create_app(ServerConfig(maintenance_interval_s=None), model_from_env=False).openapi()
    cases = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            cases.append((GenerationMode.POSITIVE, method.upper(), path))
            if operation.get("parameters") or operation.get("requestBody"):
                cases.append((GenerationMode.NEGATIVE, method.upper(), path))
    return cases


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Extra statuses every route may answer, as the middleware and error handlers document.
ALWAYS = {400, 401, 403, 404, 405, 411, 413, 422}


# The server under test runs in a thread of this process, and its connection pool
# draws the jitter of a new connection's expiry from the global ``random``
# (psycopg_pool): Hypothesis takes that for a strategy using ``random`` when the
# pool opens a connection while a case is being generated.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@pytest.mark.parametrize(("mode", "method", "path"), _cases())
def test_every_route_survives_fuzzing(
    web_schema: BaseSchema,
    fuzz_server: tuple[str, dict[str, str]],
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    base, _ = fuzz_server
    operation = web_schema[path][method]
    session = requests.Session()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )
    def check(case: Case[Any]) -> None:
        response = case.call(base_url=base, session=session, timeout=30)
        assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text}"
        if response.status_code in ALWAYS:
            assert response.json()["error"], response.text
            return
        case.validate_response(response, checks=CHECKS)

    check()


def test_fuzzing_left_the_other_resource_alone(
    database_url: str, fuzz_server: tuple[str, dict[str, str]]
) -> None:
    _, before = fuzz_server
    assert snapshot(database_url, BYSTANDER) == before
