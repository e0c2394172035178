"""Per-resource API keys: the CLI, the key store, and multi-resource mode over real HTTP.

Two server apps on one database stand for ``serve --workers``'s processes (each
its own pool and event loop). Every request takes its resource from its key;
scopes, expiry and revocation are checked by the database on every request; the
operator token manages keys and reads no memory; the audit holds no content.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psutil  # type: ignore[import-untyped]
import psycopg
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import popagent
from popagent.cli import main
from popagent.keys import KeyStore, RateLimit, Usage, hash_secret, looks_like_key
from popagent.models import MemoryFilter, Session
from popagent.threads import ThreadStore
from popagent.web import ServerConfig
from popagent.web.middleware import LOGIN_COOKIE
from tests.fault_support import ServeProcess, clean_env, wait_for
from tests.gui_support import csrf_token, post_form
from tests.mcp_support import http_server as mcp_http_server
from tests.mcp_support import text_of
from tests.scripted_model import Reply, ScriptedModelServer
from tests.web_support import scripted_settings, uvicorn_server

OPERATOR = "operator-token-0123456789abcdef"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}


@contextmanager
def multi_servers(
    database_url: str, n: int, config: ServerConfig | None = None, **kwargs: object
) -> Iterator[list[str]]:
    """``n`` multi-resource server apps on one database (as ``serve --workers``'s processes)."""
    if config is None:
        config = ServerConfig(maintenance_interval_s=None, token=OPERATOR, multi_resource=True)
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                uvicorn_server(
                    config,
                    database_url=database_url,
                    model_from_env=False,
                    embedder=None,
                    **kwargs,
                )
            )
            for _ in range(n)
        ]


def _rows(database_url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_the_cli_creates_lists_and_revokes_keys(database_url: str, resource: str) -> None:
    runner = CliRunner()
    created = runner.invoke(
        main,
        ["--database-url", database_url, "keys", "create", "--resource-id", resource,
         "--scope", "read", "--name", "laptop", "--expires", "30d"],
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert looks_like_key(key)
    assert "shown once" in created.stderr
    stored = _rows(
        database_url,
        "SELECT key_sha256, prefix, scope, expires_at FROM popagent_api_keys"
        " WHERE resource_id = %s",
        resource,
    )
    assert len(stored) == 1
    sha, prefix, scope, expires_at = stored[0]
    assert bytes(sha) == hashlib.sha256(key.encode()).digest()
    assert key.startswith(str(prefix)) and scope == "read"
    assert isinstance(expires_at, datetime)
    assert timedelta(days=29) < expires_at - datetime.now(UTC) <= timedelta(days=30)

    listed = runner.invoke(main, ["--database-url", database_url, "keys", "list",
                                  "--resource-id", resource])  # fmt: skip
    assert listed.exit_code == 0
    assert "laptop" in listed.output and "read" in listed.output
    assert key not in listed.output and str(prefix) in listed.output

    again = runner.invoke(main, ["--database-url", database_url, "keys", "create",
                                 "--resource-id", resource, "--name", "laptop"])  # fmt: skip
    assert again.exit_code == 1 and "already has a live key" in again.output
    bad = runner.invoke(main, ["--database-url", database_url, "keys", "create",
                               "--resource-id", resource, "--expires", "2001-01-01"])  # fmt: skip
    assert bad.exit_code == 2 and "in the past" in bad.output

    key_id = _rows(database_url, "SELECT id FROM popagent_api_keys WHERE resource_id = %s",
                   resource)[0][0]  # fmt: skip
    revoked = runner.invoke(main, ["--database-url", database_url, "keys", "revoke", str(key_id)])
    assert revoked.exit_code == 0 and "Revoked" in revoked.output
    missing = runner.invoke(main, ["--database-url", database_url, "keys", "revoke", str(key_id)])
    assert missing.exit_code == 1
    assert "No keys." in runner.invoke(main, ["--database-url", database_url, "keys", "list",
                                              "--resource-id", resource]).output  # fmt: skip


async def test_a_key_is_refused_once_revoked_or_expired(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    store = KeyStore(memory.pool)
    row, key = await store.create(resource, "k", "write")
    principal = await store.authenticate(key)
    assert principal is not None and principal.resource_id == resource
    assert principal.scope == "write" and principal.key_id == row.id
    assert await store.authenticate(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert await store.authenticate("not a key") is None
    [listed] = await store.list_keys(resource)
    assert listed.use_count == 1 and listed.last_used_at is not None

    async with memory.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_api_keys SET expires_at = now() - interval '1 second' WHERE id = %s",
            (row.id,),
        )
    assert await store.authenticate(key) is None
    _, other = await store.create(resource, "k2", "read")
    await store.revoke((await store.list_keys(resource))[-1].id)
    assert await store.authenticate(other) is None
    events = await store.audit(10, resource_id=resource)
    assert [(e["event"], e["reason"]) for e in events][:3] == [
        ("refused", "revoked"),
        ("key_revoked", None),
        ("key_created", None),
    ]
    assert ("refused", "expired") in [(e["event"], e["reason"]) for e in events]
    with pytest.raises(popagent.ValidationError):
        await store.create(resource, "bad name\n", "write")
    with pytest.raises(popagent.ValidationError):
        await store.create(resource, "x", "owner")


@pytest.mark.plain_postgresql
async def test_multi_resource_mode_takes_the_resource_from_the_key(
    database_url: str, memory: popagent.LongTermMemory
) -> None:
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    _, write_one = await store.create(one, "w", "write")
    _, read_one = await store.create(one, "r", "read")
    admin_row, admin_one = await store.create(one, "a", "admin")
    two_row, write_two = await store.create(two, "w", "write")
    secret = f"alpha-{uuid.uuid4().hex}"
    with multi_servers(database_url, 2) as (first, second):
        async with httpx.AsyncClient(base_url=first) as a, httpx.AsyncClient(base_url=second) as b:
            assert (await a.get("/healthz")).status_code == 200  # no key needed
            # No key (loopback or not): nobody, as there is no resource to serve.
            assert (await a.get("/api/facts")).status_code == 401
            twice = [*bearer(read_one).items(), *bearer(write_two).items()]
            ambiguous = await a.get("/api/facts", headers=twice)
            assert ambiguous.status_code == 400, ambiguous.text
            assert ambiguous.json()["error"] == "bad_request"
            assert (await a.get("/", follow_redirects=False)).status_code == 303
            wrote = await a.post("/api/facts", json={"content": secret}, headers=bearer(write_one))
            assert wrote.status_code == 201, wrote.text
            seen = await b.get("/api/facts", headers=bearer(read_one))
            assert [f["content"] for f in seen.json()["items"]] == [secret]
            other = await b.get("/api/facts", headers=bearer(write_two))
            assert other.status_code == 200 and other.json()["items"] == []
            recall = await b.post("/api/recall", json={"query": "alpha"}, headers=bearer(write_two))
            assert secret not in recall.text
            info = await a.get("/api/info", headers=bearer(write_two))
            assert info.json()["resource_id"] == two
            # A request still may not name a resource.
            named = await a.get(f"/api/facts?resource_id={one}", headers=bearer(write_two))
            assert named.status_code == 422
            # Scopes: read looks (recall included), write writes, admin manages keys.
            refused = await a.post("/api/facts", json={"content": "x"}, headers=bearer(read_one))
            assert refused.status_code == 403 and "scope (read)" in refused.text
            purge = await a.post("/api/purge", json={"confirm": True}, headers=bearer(write_one))
            assert purge.status_code == 403
            assert (await a.get("/api/keys", headers=bearer(write_one))).status_code == 403
            keys = await a.get("/api/keys", headers=bearer(admin_one))
            assert {k["name"] for k in keys.json()} == {"w", "r", "a"}
            assert all("key" not in k for k in keys.json())
            foreign = await a.delete(f"/api/keys/{two_row.id}", headers=bearer(admin_one))
            assert foreign.status_code == 404
            # The operator makes and revokes keys, and reads no memory.
            op = bearer(OPERATOR)
            assert (await a.get("/api/facts", headers=op)).status_code == 403
            assert (await a.post("/api/recall", json={"query": "a"}, headers=op)).status_code == 403
            made = await a.post(
                "/api/keys", json={"name": "made", "scope": "read", "resource_id": two}, headers=op
            )
            assert made.status_code == 201, made.text
            made_key = made.json()["key"]
            assert (await b.get("/api/facts", headers=bearer(made_key))).status_code == 200
            # Revoked in one process: refused by the other at its next request.
            gone = await a.delete(f"/api/keys/{made.json()['id']}", headers=op)
            assert gone.status_code == 200
            assert (await b.get("/api/facts", headers=bearer(made_key))).status_code == 401
            # An admin key revokes its own resource's keys.
            assert (await b.delete(f"/api/keys/{admin_row.id}", headers=bearer(admin_one))).status_code == 200  # fmt: skip
            assert (await a.get("/api/keys", headers=bearer(admin_one))).status_code == 401
    events = await store.audit(200)
    mine = [e for e in events if e["resource_id"] in (one, two)]
    reasons = {(e["event"], e["reason"]) for e in mine}
    assert {("refused", "scope"), ("refused", "revoked"), ("key_created", None),
            ("key_revoked", None)} <= reasons  # fmt: skip
    assert ("refused", "operator_reads_no_memory") in {(e["event"], e["reason"]) for e in events}
    assert not any(secret in str(e) for e in events)  # no content in the audit
    uses = {k.name: k.use_count for k in await store.list_keys(one, include_revoked=True)}
    assert uses["w"] >= 2 and uses["r"] >= 2


@pytest.mark.plain_postgresql
async def test_gui_login_and_chat_with_a_key(
    database_url: str, memory: popagent.LongTermMemory, scripted: ScriptedModelServer
) -> None:
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    row_one, key_one = await store.create(one, "gui", "write")
    _, key_two = await store.create(two, "gui", "write")
    theirs = f"other-{uuid.uuid4().hex}"
    await memory.remember(two, theirs)
    ours = f"ours-{uuid.uuid4().hex}"
    await memory.remember(one, ours)
    scripted.script(Reply("Hello from the model."))
    with multi_servers(database_url, 1, model_settings=scripted_settings(scripted)) as (base,):
        async with httpx.AsyncClient(base_url=base) as gui:
            await csrf_token(gui, "/login")
            wrong = await post_form(gui, "/login", {"token": "pak_" + "x" * 43, "next": "/"})
            assert wrong.status_code == 401
            logged = await post_form(gui, "/login", {"token": key_one, "next": "/"})
            assert logged.status_code == 303
            login = gui.cookies[LOGIN_COOKIE]
            assert key_one not in logged.headers["set-cookie"]
            [(stored_key, stored_resource)] = _rows(
                database_url,
                "SELECT key_id, resource_id FROM popagent_logins WHERE login_sha256 = %s",
                hash_secret(login),
            )
            assert (stored_key, stored_resource) == (row_one.id, one)
            page = await gui.get("/")
            assert page.status_code == 200 and one in page.text and ours in page.text
            assert theirs not in page.text and two not in page.text
            # Chat over the API with the key: the session is the key's resource's.
            reply = await gui.post(
                "/api/sessions/s1/chat", json={"message": "Hi there"}, headers=bearer(key_one)
            )
            assert reply.status_code == 200, reply.text
            assert [s.session_id for s in await popagent_sessions(memory, one)] == ["s1"]
            assert await popagent_sessions(memory, two) == []
            listed = await gui.get("/api/sessions", headers=bearer(key_two))
            assert listed.json()["items"] == []
            # Revoking the key ends its login at once.
            await store.revoke(row_one.id)
            assert (await gui.get("/", follow_redirects=False)).status_code == 303


async def popagent_sessions(memory: popagent.LongTermMemory, resource: str) -> list[Session]:
    return list(await ThreadStore(memory.pool).list_sessions(resource))


@pytest.mark.plain_postgresql
async def test_mcp_http_takes_the_resource_from_the_key(
    database_url: str, memory: popagent.LongTermMemory, tmp_path: Path
) -> None:
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    _, write_one = await store.create(one, "mcp", "write")
    _, read_two = await store.create(two, "mcp", "read")
    revoked_row, revoked = await store.create(two, "gone", "write")
    await store.revoke(revoked_row.id)
    ours = f"ours-{uuid.uuid4().hex}"
    with mcp_http_server(
        database_url, "unused-resource", tmp_path / "mcp.log", "--multi-resource"
    ) as url:
        async with httpx.AsyncClient(timeout=10) as plain:
            headers = {"accept": "application/json, text/event-stream"}
            for credential in (None, revoked, OPERATOR):
                auth = {"authorization": f"Bearer {credential}"} if credential else {}
                refused = await plain.post(url, json=INITIALIZE, headers={**headers, **auth})
                assert refused.status_code == 401, credential
            # Two Authorization headers: which one counts is ambiguous, so neither does.
            twice = [*headers.items(), *bearer(write_one).items(), *bearer(read_two).items()]
            refused = await plain.post(url, json=INITIALIZE, headers=twice)
            assert refused.status_code == 400 and "Authorization" in refused.json()["detail"]
        async with (
            httpx2.AsyncClient(headers=bearer(write_one), timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as c,
        ):
            stored = await c.call_tool("remember", {"content": ours})
            assert not stored.is_error, text_of(stored)
            assert "remember" in [t.name for t in (await c.list_tools()).tools]
        async with (
            httpx2.AsyncClient(headers=bearer(read_two), timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as c,
        ):
            found = await c.call_tool("recall", {"query": ours})
            assert not found.is_error and ours not in text_of(found)
            # A read key is listed the tools it may call: the read-only ones.
            listed = (await c.list_tools()).tools
            assert "recall" in [t.name for t in listed]
            assert all(t.annotations and t.annotations.read_only_hint for t in listed), listed
            write = await c.call_tool("remember", {"content": "not with a read key"})
            assert write.is_error and "read-only tools only" in text_of(write)
    assert [m.content for m in await memory.list(one, MemoryFilter(kind="fact"))] == [ours]
    assert await memory.list(two, MemoryFilter(kind="fact")) == []
    assert await memory.list("unused-resource", MemoryFilter(kind="fact")) == []


@pytest.mark.plain_postgresql
async def test_mcp_http_applies_the_key_rate_and_the_storage_quota(
    database_url: str, memory: popagent.LongTermMemory, tmp_path: Path
) -> None:
    """``popagent mcp --multi-resource`` with the same limits as ``serve``: a key past
    its bucket (``--key-burst``) gets 429 with Retry-After, audited; a tool that adds
    content to a resource at its quota is refused before it runs, a forget is not."""
    one = f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    busy_row, busy = await store.create(one, "busy", "write")
    _, writer = await store.create(one, "writer", "write")
    args = ("--multi-resource", "--key-rate", "60", "--key-burst", "12", "--quota-memories", "2")
    with mcp_http_server(database_url, "unused-resource", tmp_path / "mcp.log", *args) as url:
        headers = {"accept": "application/json, text/event-stream", **bearer(busy)}
        async with httpx.AsyncClient(timeout=10) as plain:
            began = asyncio.get_running_loop().time()
            answers = await asyncio.gather(
                *(plain.post(url, json=INITIALIZE, headers=headers) for _ in range(16))
            )
            took = asyncio.get_running_loop().time() - began
        statuses = sorted(r.status_code for r in answers)
        allowed = statuses.count(200)
        # The bucket's 12, plus the tokens that came while refusals were held back.
        assert 12 <= allowed <= 12 + int(took) + 1, (statuses, took)
        assert statuses == [200] * allowed + [429] * (16 - allowed)
        limited = next(r for r in answers if r.status_code == 429)
        assert limited.headers["retry-after"] == "1"
        assert "60 requests a minute, in bursts of up to 12" in limited.json()["detail"]
        async with (
            httpx2.AsyncClient(headers=bearer(writer), timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as c,
        ):
            for n in range(2):
                stored = await c.call_tool("remember", {"content": f"fact number {n}"})
                assert not stored.is_error, text_of(stored)
            full = await c.call_tool("remember", {"content": "one too many"})
            assert full.is_error and "its quota is 2" in text_of(full)
            first = (await memory.list(one, MemoryFilter(kind="fact")))[0]
            gone = await c.call_tool("forget_fact", {"id": first.id})
            assert not gone.is_error, text_of(gone)
            fits = await c.call_tool("remember", {"content": "room again"})
            assert not fits.is_error, text_of(fits)
    kept = {"fact number 0", "fact number 1", "room again"} - {first.content}
    assert {m.content for m in await memory.list(one, MemoryFilter(kind="fact"))} == kept
    events = await store.audit(200, resource_id=one)
    rate_refusals = [e for e in events if e["reason"] == "rate_limited"]
    assert len(rate_refusals) == 16 - allowed
    assert {(e["key_id"], e["path"]) for e in rate_refusals} == {(busy_row.id, "/mcp")}
    assert [e["path"] for e in events if e["reason"] == "quota"] == ["remember"]


def test_key_burst_needs_a_rate(database_url: str) -> None:
    for command in (["serve"], ["mcp", "--transport", "http"]):
        result = CliRunner().invoke(
            main,
            ["--database-url", database_url, *command, "--key-rate", "0", "--key-burst", "5"],
        )
        assert result.exit_code == 2, result.output
        assert "key_burst" in result.output and "--key-rate" in result.output


@pytest.mark.plain_postgresql
async def test_per_key_rate_is_a_token_bucket_shared_by_two_servers(
    database_url: str, memory: popagent.LongTermMemory
) -> None:
    """6 requests a minute in bursts of 10: a bucket of 10 that refills one token in
    ten seconds (slow enough that no pause of a busy machine refills it unseen), spent
    from both server apps (each its own pool and event loop, as ``serve --workers``'s
    processes). A burst gets exactly the bucket, the rest 429 with a Retry-After after
    which a request succeeds; another key's bucket is untouched."""
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    busy_row, busy = await store.create(one, "busy", "write")
    _, quiet = await store.create(two, "quiet", "write")
    assert RateLimit.of(60) == RateLimit(60, 10)
    config = ServerConfig(
        maintenance_interval_s=None, multi_resource=True, key_requests_per_minute=6, key_burst=10
    )
    with multi_servers(database_url, 2, config) as (first, second):
        async with httpx.AsyncClient(base_url=first) as a, httpx.AsyncClient(base_url=second) as b:
            # Warm both apps' pools, so that the burst below takes well under a second.
            for client in (a, b):
                assert (await client.get("/healthz")).status_code == 200
            began = asyncio.get_running_loop().time()
            burst = await asyncio.gather(
                *((a if n % 2 else b).get("/api/facts", headers=bearer(busy)) for n in range(16))
            )
            took = asyncio.get_running_loop().time() - began
            statuses = sorted(r.status_code for r in burst)
            # The bucket's 10, plus at most the tokens that refilled during the burst.
            allowed = statuses.count(200)
            assert 10 <= allowed <= 10 + int(took / 10), (statuses, took)
            assert statuses == [200] * allowed + [429] * (16 - allowed)
            limited = next(r for r in burst if r.status_code == 429)
            assert limited.json()["error"] == "rate_limited"
            assert "6 requests a minute, in bursts of up to 10" in limited.json()["message"]
            # Less than a token is missing, at one token in ten seconds; the refusal was
            # held back up to a second of that.
            assert 1 <= int(limited.headers["retry-after"]) <= 10
            # Another key's bucket is full: its own burst is not refused.
            others = await asyncio.gather(
                *((b if n % 2 else a).get("/api/facts", headers=bearer(quiet)) for n in range(10))
            )
            assert [r.status_code for r in others] == [200] * 10
            # The refusals were held back (at most a second each), so a token may have
            # come meanwhile: spend it, then the bucket is empty.
            later = [await a.get("/api/facts", headers=bearer(busy)) for _ in range(4)]
            assert [r.status_code for r in later][-1] == 429, [r.status_code for r in later]
            await asyncio.sleep(int(later[-1].headers["retry-after"]))
            # A client that waited Retry-After finds a token, in the other process too.
            assert (await b.get("/api/facts", headers=bearer(busy))).status_code == 200
    sent = 16 + len(later) + 1
    refusals = 16 - allowed + [r.status_code for r in later].count(429)
    [listed] = [k for k in await store.list_keys(one) if k.id == busy_row.id]
    assert listed.use_count == sent  # a refused request is still a use of the key
    refused = [e for e in await store.audit(200, resource_id=one) if e["reason"] == "rate_limited"]
    assert len(refused) == refusals
    assert _rows(
        database_url,
        "SELECT rate_tokens < 10 AND rate_at IS NOT NULL FROM popagent_api_keys WHERE id = %s",
        busy_row.id,
    ) == [(True,)]


async def test_a_process_refuses_a_key_it_found_empty_without_the_database(
    memory: popagent.LongTermMemory,
) -> None:
    """After the database found a key's bucket empty, the key store refuses it itself
    until its next token is due (no UPDATE queued on the key's row); those refusals
    are counted and audited by ``flush``, one row each, and a token is there again
    once the wait has passed."""
    one = f"res-{uuid.uuid4().hex}"
    store, other = KeyStore(memory.pool), KeyStore(memory.pool)
    row, key = await store.create(one, "bursty", "write")
    # One token in ten seconds: no pause of a busy machine lets a token come unseen
    # between the steps below.
    rate = RateLimit.of(6, 2)

    async def uses_and_refusals() -> tuple[int, int]:
        [listed] = await other.list_keys(one)
        audited = [e for e in await other.audit(50, resource_id=one) if e["event"] == "refused"]
        return listed.use_count, len(audited)

    first = [await store.authenticate(key, method="GET", path="/api/facts", rate=rate)]
    first += [await store.authenticate(key, method="GET", path="/api/facts", rate=rate)]
    assert [p.retry_after_s if p else "none" for p in first] == [None, None]
    from_database = await store.authenticate(key, method="GET", path="/api/facts", rate=rate)
    assert from_database is not None and from_database.retry_after_s is not None
    assert await uses_and_refusals() == (3, 1)  # counted and audited by its statement
    answered_here = [
        await store.authenticate(key, method="POST", path="/api/recall", rate=rate)
        for _ in range(5)
    ]
    assert all(p is not None and 0 < (p.retry_after_s or 0) <= 10 for p in answered_here)
    assert await uses_and_refusals() == (3, 1)  # nothing written yet
    # Another process (another store) asks the database, which agrees.
    elsewhere = await other.authenticate(key, method="GET", path="/api/facts", rate=rate)
    assert elsewhere is not None and elsewhere.retry_after_s is not None
    await store.flush()
    assert await uses_and_refusals() == (9, 7)
    audited = await other.audit(50, resource_id=one)
    assert sum(1 for e in audited if (e["method"], e["path"]) == ("POST", "/api/recall")) == 5
    assert {e["key_id"] for e in audited if e["event"] == "refused"} == {row.id}
    # Once the wait this process knows has passed, a token is due: the database is
    # asked, and has one (the database's refusal came before this process noted it).
    last = answered_here[-1]
    assert last is not None and last.retry_after_s is not None
    await asyncio.sleep(last.retry_after_s + 0.1)
    again = await store.authenticate(key, method="GET", path="/api/facts", rate=rate)
    assert again is not None and again.retry_after_s is None
    await store.aclose()
    await other.aclose()


@pytest.mark.plain_postgresql
async def test_storage_quota_counts_memories_from_the_statistics(
    database_url: str, memory: popagent.LongTermMemory
) -> None:
    """The memory quota reads the resource's count from recall's statistics (one row,
    whatever the resource's size), across both server apps; a write past it is refused
    with nothing written, and a delete makes room. The byte quota refuses too."""
    one, two = f"res-{uuid.uuid4().hex}", f"res-{uuid.uuid4().hex}"
    store = KeyStore(memory.pool)
    _, small = await store.create(one, "small", "write")
    _, large = await store.create(two, "large", "write")
    config = ServerConfig(
        maintenance_interval_s=None, multi_resource=True, quota_memories=3, quota_bytes=40
    )
    with multi_servers(database_url, 2, config) as (first, second):
        async with httpx.AsyncClient(base_url=first) as a, httpx.AsyncClient(base_url=second) as b:
            for n in range(3):
                made = await b.post(
                    "/api/facts", json={"content": f"fact {n}"}, headers=bearer(small)
                )
                assert made.status_code == 201, made.text
            assert await store.usage(one) == Usage(one, 3, 18, 0)
            full = await a.post("/api/facts", json={"content": "one more"}, headers=bearer(small))
            assert full.status_code == 429 and full.json()["error"] == "quota_exceeded"
            assert "quota is 3" in full.json()["message"] and full.headers["retry-after"]
            assert len(await memory.list(one, MemoryFilter(kind="fact"))) == 3
            # Deleting makes room (a delete is never refused by the quota).
            fact = (await memory.list(one, MemoryFilter(kind="fact")))[0]
            gone = await a.delete(f"/api/facts/{fact.id}", headers=bearer(small))
            assert gone.status_code in (200, 204), gone.text
            assert (await store.usage(one)).memories == 2
            again = await b.post("/api/facts", json={"content": "fits now"}, headers=bearer(small))
            assert again.status_code == 201
            # 40 bytes: one memory of 41 fits (the check is before the write), the next not.
            big = await a.post("/api/facts", json={"content": "x" * 41}, headers=bearer(large))
            assert big.status_code == 201, big.text
            over = await b.post("/api/facts", json={"content": "y"}, headers=bearer(large))
            assert over.status_code == 429 and "41 bytes" in over.json()["message"]
            assert await store.usage(two) == Usage(two, 1, 41, 0)
    reasons = {(e["resource_id"], e["reason"]) for e in await store.audit(100)}
    assert (one, "quota") in reasons and (two, "quota") in reasons
    unknown = f"res-{uuid.uuid4().hex}"
    assert await store.usage(unknown) == Usage(unknown, 0, 0, 0)


@pytest.mark.plain_postgresql
async def test_revocation_is_immediate_across_serve_workers(
    tmp_path: Path, database_url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    """A real ``popagent serve --multi-resource --workers 2``: a key works in both
    worker processes, and once revoked, the very next request in either is refused."""
    store = KeyStore(memory.pool)
    row, key = await store.create(resource, "workers", "write")
    env = clean_env(tmp_path, POPAGENT_DATABASE_URL=database_url, POPAGENT_EMBEDDER="none")
    serve = ServeProcess(
        tmp_path / "data", tmp_path, env=env, args=["--workers", "2", "--multi-resource"]
    )
    serve.start(timeout_s=120)
    try:
        root = psutil.Process(serve.process.pid if serve.process else 0)
        wait_for(lambda: len(root.children()) >= 2, 60, "two workers")
        # The startup line says where resources come from, not the unused default one.
        wait_for(lambda: "GUI and API at" in serve.log(), 60, "the ready line")
        [ready] = [line for line in serve.log_lines() if "GUI and API at" in line]
        assert "every resource, each request's from its API key" in ready
        assert "popagent-user" not in ready

        async def statuses(n: int) -> list[int]:
            # A connection per request, so the kernel spreads them over both workers.
            async def one() -> int:
                async with httpx.AsyncClient(base_url=serve.base_url, timeout=30) as c:
                    return (await c.get("/api/facts", headers=bearer(key))).status_code

            return list(await asyncio.gather(*(one() for _ in range(n))))

        assert await statuses(24) == [200] * 24
        await store.revoke(row.id)
        assert await statuses(24) == [401] * 24
        [listed] = await store.list_keys(resource, include_revoked=True)
        assert listed.use_count == 24  # the refused requests are not uses
    finally:
        serve.stop()


@pytest.mark.plain_postgresql
async def test_rate_bucket_is_shared_by_serve_workers(
    tmp_path: Path, database_url: str, memory: popagent.LongTermMemory, resource: str
) -> None:
    """A real ``popagent serve --multi-resource --workers 2 --key-rate 60``: a burst
    over fresh connections (spread over both workers by the kernel) gets the one
    bucket of 10, not 10 per process."""
    store = KeyStore(memory.pool)
    _, key = await store.create(resource, "bucket", "write")
    env = clean_env(tmp_path, POPAGENT_DATABASE_URL=database_url, POPAGENT_EMBEDDER="none")
    serve = ServeProcess(
        tmp_path / "data",
        tmp_path,
        env=env,
        args=["--workers", "2", "--multi-resource", "--key-rate", "60"],
    )
    serve.start(timeout_s=120)
    try:
        root = psutil.Process(serve.process.pid if serve.process else 0)
        wait_for(lambda: len(root.children()) >= 2, 60, "two workers")

        async def one() -> httpx.Response:
            async with httpx.AsyncClient(base_url=serve.base_url, timeout=30) as c:
                return await c.get("/api/facts", headers=bearer(key))

        began = asyncio.get_running_loop().time()
        burst = await asyncio.gather(*(one() for _ in range(30)))
        took = asyncio.get_running_loop().time() - began
        allowed = sum(r.status_code == 200 for r in burst)
        assert 10 <= allowed <= 10 + int(took), (allowed, took)
        assert all(r.status_code in (200, 429) for r in burst)
        assert all(r.headers["retry-after"] == "1" for r in burst if r.status_code == 429)
    finally:
        serve.stop()
