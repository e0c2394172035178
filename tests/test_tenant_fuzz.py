"""The fuzz corpus replayed across two keys: one tenant's hostile input never reaches another.

A real ``serve --multi-resource`` app (uvicorn on 127.0.0.1) on the real
database, with resources A and B that share a session id and a fact key, each
with a write key. Key A replays every case of the API's hostile-input corpus
(``tests/hostile_corpus``), the same cases aimed at B's fact id, and the
credential corpus (``tests/credential_corpus``) as facts and as session items.
Then:

- every response to A was below 500 and held no traceback;
- B's rows (memories, fact versions, sessions, messages, settings, and the row
  count of every table with ``resource_id``) are exactly what they were;
- through the API as key B, the facts, recall, the session list, the shared
  session's messages and items show B's own rows only, and A's fact and A's
  sessions are "not found".
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import popagent
from popagent.keys import KeyStore
from popagent.threads import ThreadStore
from popagent.web import ServerConfig
from tests.credential_corpus import CORPUS, ORDINARY
from tests.db_support import RESOURCE_DIGESTS
from tests.hostile_corpus import ApiCase, api_cases, dumps
from tests.scripted_model import ScriptedModelServer
from tests.web_support import scripted_settings, uvicorn_server

SESSION = "shared-session"
TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "/')

_RESOURCE_TABLES = """
SELECT c.table_name FROM information_schema.columns c
  JOIN information_schema.tables t USING (table_schema, table_name)
 WHERE c.table_schema = current_schema() AND c.column_name = 'resource_id'
   AND t.table_type = 'BASE TABLE' AND c.table_name LIKE 'popagent%%'
 ORDER BY c.table_name
"""
#: Not compared: B's key row changes when B authenticates (use count, last use), and
#: the vector worker embeds B's seeded memories in the background whenever it gets to
#: them; neither is A's doing. B's memories themselves are compared exactly.
_SKIPPED = (
    "popagent_api_keys",
    "popagent_access_audit",
    "popagent_logins",
    "popagent_memory_embeddings",
    "popagent_pending_vectors",
)
_VERSIONS = """
SELECT coalesce(md5(string_agg(concat_ws('|', fact_id, version, content, ended, valid_to),
                               ',' ORDER BY fact_id, version)), '') AS versions
  FROM popagent_fact_versions WHERE resource_id = %(r)s
"""
_ITEMS = {"role": "user", "content": "B's own framework item"}


def state_of(url: str, resource: str) -> dict[str, Any]:
    """Digests of ``resource``'s rows and its row count in every resource table, read
    as the owner (row-level security does not apply)."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        state: dict[str, Any] = dict(
            conn.execute(RESOURCE_DIGESTS, {"r": resource}).fetchone() or {}
        )
        state |= conn.execute(_VERSIONS, {"r": resource}).fetchone() or {}
        for row in conn.execute(_RESOURCE_TABLES).fetchall():
            table = row["table_name"]
            if table in _SKIPPED:
                continue
            count = sql.SQL("SELECT count(*) AS n FROM {} WHERE resource_id = %(r)s")
            found = conn.execute(count.format(sql.Identifier(table)), {"r": resource}).fetchone()
            state[table] = found["n"] if found else None
    return state


def memory_ids(url: str, resource: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id FROM popagent_memories WHERE resource_id = %s", (resource,)
        ).fetchall()
    return {int(r[0]) for r in rows}


async def seed(memory: popagent.LongTermMemory, a: str, b: str) -> tuple[int, int]:
    """The same fact key and session id in both resources, B's with its own words;
    the fact ids of A and B."""
    threads = ThreadStore(memory.pool)
    a_fact = (await memory.remember(a, "Keeps bees on the roof", key="hobby")).memory
    b_fact = (await memory.remember(b, "Keeps owls in the barn", key="hobby")).memory
    await memory.remember(b, "Prefers tea in the morning", key="drink")
    await memory.retain_episode(b, SESSION, "Any owls?", "Two, in the barn.")
    for r, text in ((a, "Hello from A"), (b, "Hello from B")):
        await threads.append_message(r, SESSION, "user", text, create_session=True)
    assert a_fact.id is not None and b_fact.id is not None
    return a_fact.id, b_fact.id


def _request(case: ApiCase, fact_id: int) -> dict[str, Any]:
    path = case.path.replace("{fact}", str(fact_id)).replace("{session}", SESSION)
    headers = {"content-type": "application/json", **case.headers}
    if isinstance(case.body, bytes):
        content: bytes | None = case.body
    elif case.body is None:
        content = None
        headers.pop("content-type")
    else:
        content = dumps(case.body).encode()
    return {"method": case.method, "url": path, "content": content, "headers": headers}


def _problem(name: str, response: httpx.Response) -> str | None:
    if response.status_code >= 500:
        return f"{name}: status {response.status_code} {response.text[:160]}"
    if any(marker in response.text for marker in TRACEBACK_MARKERS):
        return f"{name}: traceback in the response"
    return None


@pytest.mark.plain_postgresql
async def test_the_fuzz_corpus_replayed_as_one_key_leaves_another_resource_alone(
    database_url: str, memory: popagent.LongTermMemory, scripted: ScriptedModelServer
) -> None:
    a, b = f"tenant-a-{uuid.uuid4().hex[:12]}", f"tenant-b-{uuid.uuid4().hex[:12]}"
    a_fact, b_fact = await seed(memory, a, b)
    store = KeyStore(memory.pool)
    _, key_a = await store.create(a, "fuzz", "write")
    _, key_b = await store.create(b, "victim", "write")
    cases = api_cases()
    assert len(cases) >= 300
    aimed_at_b = [c for c in cases if "{fact}" in c.path]
    assert aimed_at_b
    b_before = state_of(database_url, b)
    b_ids = memory_ids(database_url, b)
    config = ServerConfig(
        maintenance_interval_s=None,
        multi_resource=True,
        key_requests_per_minute=None,  # the corpus is one burst; limits have their own tests
    )
    failures: list[str] = []
    statuses: dict[int, int] = {}
    began = time.monotonic()
    with uvicorn_server(
        config,
        database_url=database_url,
        model_settings=scripted_settings(scripted),
        embedder=None,
    ) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            replay = [(c.name, _request(c, a_fact)) for c in cases]
            replay += [(f"{c.name} (B's fact)", _request(c, b_fact)) for c in aimed_at_b]
            for target in (f"/api/facts/{b_fact}", f"/api/memories/{b_fact}"):
                for method in ("GET", "DELETE"):
                    replay.append((f"{method} {target} (B's)", {"method": method, "url": target}))
            replay.append(("PUT by-key hobby", {"method": "PUT", "url": "/api/facts/by-key/hobby",
                                                "json": {"content": "A's hobby now"}}))  # fmt: skip
            for n, secret in enumerate(CORPUS):
                replay.append((f"credential fact {secret.name}",
                               {"method": "POST", "url": "/api/facts",
                                "json": {"content": secret.sentence, "key": f"cred-{n}"}}))  # fmt: skip
                replay.append((f"credential item {secret.name}",
                               {"method": "POST", "url": f"/api/sessions/{SESSION}/items",
                                "json": {"items": [{"role": "user", "content": secret.sentence}]}}))  # fmt: skip
            for n, line in enumerate(ORDINARY):
                replay.append((f"ordinary fact {n}",
                               {"method": "POST", "url": "/api/facts", "json": {"content": line}}))  # fmt: skip
            replay.append(("items", {"method": "POST", "url": f"/api/sessions/{SESSION}/items",
                                     "json": {"items": [{"role": "user", "content": "A's item"}]}}))  # fmt: skip
            for name, request in replay:
                headers = request.pop("headers", {}) | {"authorization": f"Bearer {key_a}"}
                response = await client.request(**request, headers=headers)
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                problem = _problem(name, response)
                if problem:
                    failures.append(problem)
            replayed_s = time.monotonic() - began

            # In the database: B exactly as it was.
            assert state_of(database_url, b) == b_before
            assert memory_ids(database_url, b) == b_ids
            a_ids = memory_ids(database_url, a)
            assert len(a_ids) > 10  # A's accepted writes landed (in A)

            # Through the API as B: B's own rows only.
            as_b = {"authorization": f"Bearer {key_b}"}
            facts = await client.get("/api/facts", params={"limit": 200}, headers=as_b)
            assert facts.status_code == 200
            assert sorted(f["content"] for f in facts.json()["items"]) == [
                "Keeps owls in the barn",
                "Prefers tea in the morning",
            ]
            listed = await client.get("/api/memories", params={"limit": 200}, headers=as_b)
            assert {m["id"] for m in listed.json()["items"]} == b_ids
            for query in ("bees", "hobby", "tea", "password", "token", "Likes", "A's", "key"):
                found = await client.post(
                    "/api/recall", json={"query": query, "limit": 100}, headers=as_b
                )
                assert found.status_code == 200, found.text
                ids = {r["memory"]["id"] for r in found.json()["results"]}
                assert ids <= b_ids, (query, ids - b_ids)
            by_key = await client.get("/api/facts/by-key/hobby", headers=as_b)
            assert by_key.json()["content"] == "Keeps owls in the barn"
            for a_id in sorted(a_ids)[:20]:
                for path in (f"/api/memories/{a_id}", f"/api/facts/{a_id}"):
                    assert (await client.get(path, headers=as_b)).status_code == 404
            sessions = await client.get("/api/sessions", params={"limit": 200}, headers=as_b)
            assert [s["session_id"] for s in sessions.json()["items"]] == [SESSION]
            messages = await client.get(f"/api/sessions/{SESSION}/messages", headers=as_b)
            assert [m["content"] for m in messages.json()["items"]] == ["Hello from B"]
            items = await client.get(f"/api/sessions/{SESSION}/items", headers=as_b)
            assert items.status_code == 200
            assert all("A's" not in str(i) for i in items.json()["items"])
            assert all(s.sentence not in items.text for s in CORPUS)
            a_sessions = {s.session_id for s in await ThreadStore(memory.pool).list_sessions(a)}
            for session_id in sorted(a_sessions - {SESSION})[:10]:
                missing = await client.get(f"/api/sessions/{session_id}", headers=as_b)
                assert missing.status_code == 404
            assert (await client.get("/healthz")).status_code == 200
    assert failures == [], f"{len(failures)} of {len(replay)} requests failed:\n" + "\n".join(
        failures
    )
    # The corpus must have exercised both refusals and acceptances as A.
    assert sum(n for s, n in statuses.items() if 200 <= s < 300) > 50, statuses
    assert sum(n for s, n in statuses.items() if 400 <= s < 500) > 300, statuses
    assert replayed_s < 120, f"the replay took {replayed_s:.0f} s"
