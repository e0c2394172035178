"""The storage quota covers the chats a resource stores, not only its memories.

``popagent_resource_stats.thread_bytes`` (migration 0020) holds the bytes of a
resource's messages; every statement that writes, rewrites or deletes messages
counts them (``store.recall_stats.thread_counted``). The first test checks each
write path against a recount; the second drives a real ``popagent serve
--multi-resource --quota-bytes`` whose tenant fills its quota with session items
and gets 429 ``quota_exceeded``, and reads the usage where the operator and the
tenant's admin see it (``popagent keys list``, the GUI's Keys page).
"""

from __future__ import annotations

import asyncio
import io
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from click.testing import CliRunner

from popagent.cli import main
from popagent.keys import KeyStore, Usage
from popagent.portable.exporter import export_resource
from popagent.portable.importer import import_resource
from popagent.root import Popagent
from popagent.store.migrate import CREATE_MIGRATIONS_TABLE, INSERT_APPLIED, apply_migrations
from popagent.threads import turns
from tests.fault_support import ServeProcess, clean_env
from tests.gui_support import csrf_token, post_form

RECOUNT = """
SELECT coalesce(sum(popagent_message_bytes(content, parts, item)), 0) AS bytes
FROM popagent_messages WHERE resource_id = %(r)s
"""
STORED = "SELECT thread_bytes FROM popagent_resource_stats WHERE resource_id = %(r)s"


async def _bytes(root: Popagent, resource_id: str) -> tuple[int, int | None]:
    """(recount of the resource's messages, the stored thread_bytes or None)."""
    async with root.memory.pool.connection() as conn:
        counted = await (await conn.execute(RECOUNT, {"r": resource_id})).fetchone()
        row = await (await conn.execute(STORED, {"r": resource_id})).fetchone()
    assert counted is not None
    return int(counted["bytes"]), None if row is None else int(row["thread_bytes"])


async def _assert_exact(root: Popagent, resource_id: str) -> int:
    recount, stored = await _bytes(root, resource_id)
    assert stored == recount, f"thread_bytes {stored}, recount {recount}"
    return recount


async def test_every_message_write_counts_its_bytes(
    root: Popagent, resource: str, other_resource: str
) -> None:
    threads, items = root.threads, root.items
    await threads.append_message(resource, "a", "user", "hello there", create_session=True)
    first = await _assert_exact(root, resource)
    assert first > len("hello there")
    await threads.append_message(
        resource, "a", "assistant", "hi", parts=[{"type": "attachment", "name": "a.txt"}]
    )
    # A chat turn: its first message starts it, its final one completes it.
    started = await threads.append_message(resource, "t", "user", "question", turn="start")
    assert started.turn_id is not None
    await threads.append_message(
        resource, "t", "assistant", "answer " * 50, turn="complete", turn_id=started.turn_id
    )
    await _assert_exact(root, resource)
    # Framework items: a batch, a pop, a clear.
    big = {"role": "user", "content": "x" * 5_000}
    await items.append(resource, "i", [big, {"role": "assistant", "content": "ok"}])
    before_pop = await _assert_exact(root, resource)
    await items.pop(resource, "i")
    assert await _assert_exact(root, resource) < before_pop
    await items.append(resource, "i", [big, big])
    await items.clear(resource, "i")
    await _assert_exact(root, resource)
    # A scrubbed rewrite changes a message's size.
    [message] = [m for m in await threads.list_messages(resource, "a") if m.role == "user"]
    await turns.rewrite_messages(
        root.memory.pool, resource, "a", [(message.id, "hello there, much longer now", [])]
    )
    await _assert_exact(root, resource)
    # An import counts what it adds; a delete of a session takes its messages out.
    out = io.StringIO()
    await export_resource(root.memory.pool, resource, out)
    await import_resource(root.memory.pool, io.StringIO(out.getvalue()), resource_id=other_resource)
    assert await _assert_exact(root, other_resource) == await _assert_exact(root, resource)
    await threads.delete_session(resource, "t")
    await threads.delete_session(resource, "a")
    await threads.delete_session(resource, "i")
    assert await _assert_exact(root, resource) == 0
    # A purge takes the whole row.
    await root.memory.purge(other_resource, vacuum=False)
    assert await _bytes(root, other_resource) == (0, None)


@pytest.mark.plain_postgresql  # a --multi-resource server, which Citus refuses
async def test_a_tenant_over_its_byte_quota_through_items_gets_429(
    tmp_path: Path, database_url: str, root: Popagent
) -> None:
    """The attack of the report: ``--quota-bytes 20000 --quota-memories 10``, and one
    key storing session items of 225 KB. The first fits (the check is before the
    write), every next write that adds content is refused, a delete makes room."""
    tenant = f"res-{uuid.uuid4().hex}"
    store = KeyStore(root.memory.pool)
    _, key = await store.create(tenant, "writer", "admin")
    env = clean_env(tmp_path, POPAGENT_DATABASE_URL=database_url, POPAGENT_EMBEDDER="none")
    args = ["--multi-resource", "--quota-bytes", "20000", "--quota-memories", "10"]
    serve = ServeProcess(tmp_path / "data", tmp_path, env=env, args=args)
    serve.start(timeout_s=120)
    auth = {"authorization": f"Bearer {key}"}
    item = {"role": "user", "content": "z" * 225_000}
    try:
        async with httpx.AsyncClient(base_url=serve.base_url, timeout=60) as client:
            made = await client.post("/api/sessions/s1/items", json={"items": [item]}, headers=auth)
            assert made.status_code == 201, made.text
            statuses = []
            for n in range(5):
                again = await client.post(
                    f"/api/sessions/s{n}/items", json={"items": [item]}, headers=auth
                )
                statuses.append(again.status_code)
            assert statuses == [429] * 5
            body = again.json()
            assert body["error"] == "quota_exceeded", body
            used = await store.usage(tenant)
            # The item's text is stored twice: as the message's content and in the item.
            assert used.memories == 0 and used.thread_bytes > 2 * 225_000
            assert used.thread_bytes == (await _bytes(root, tenant))[0]
            assert "quota is 20,000" in body["message"]
            assert f"chats {used.thread_bytes:,} bytes" in body["message"]
            assert again.headers["retry-after"]
            # A fact is refused too: the resource is full, whatever fills it.
            fact = await client.post("/api/facts", json={"content": "one fact"}, headers=auth)
            assert fact.status_code == 429

            # The tenant's admin sees it on the Keys page.
            await csrf_token(client, "/login")
            logged = await post_form(client, "/login", {"token": key, "next": "/keys"})
            assert logged.status_code == 303, logged.text
            page = await client.get("/keys")
            assert page.status_code == 200
            assert f"{used.thread_bytes:,}" in page.text and "20,000 bytes" in page.text
            assert "full" in page.text

            # Deleting the session makes room.
            gone = await client.delete("/api/sessions/s1", headers=auth)
            assert gone.status_code in (200, 204), gone.text
            assert await store.usage(tenant) == Usage(tenant, 0, 0, 0)
            fits = await client.post("/api/sessions/s2/items", json={"items": [item]}, headers=auth)
            assert fits.status_code == 201, fits.text
    finally:
        serve.stop()
    reasons = [e["reason"] for e in await store.audit(50, resource_id=tenant)]
    assert reasons.count("quota") >= 6

    # The operator sees it in `popagent keys list`, text and JSON.
    runner = CliRunner()
    listing = ["--database-url", database_url, "keys", "list", "--resource-id", tenant]
    # The CLI runs its own event loop: in a thread of its own.
    listed = await asyncio.to_thread(runner.invoke, main, listing)
    assert listed.exit_code == 0, listed.output
    thread_bytes = (await store.usage(tenant)).thread_bytes
    assert f"{tenant} stores 0 memories (0 bytes), chats {thread_bytes:,} bytes" in listed.output
    as_json = await asyncio.to_thread(runner.invoke, main, [*listing, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert f'"thread_bytes": {thread_bytes}' in as_json.output


async def test_migration_counts_the_messages_already_stored(scratch_url: str) -> None:
    """0020 fills thread_bytes from the messages a database held before it: a scratch
    database migrated up to 0019, with chats of two resources (one with memories,
    one without), then migrated on."""
    async with await psycopg.AsyncConnection.connect(scratch_url, autocommit=True) as conn:
        await conn.execute(CREATE_MIGRATIONS_TABLE)
        await conn.execute(INSERT_APPLIED, (20, "thread_bytes"))  # held back for now
        await apply_migrations(conn)
        await conn.execute(
            "INSERT INTO popagent_sessions (resource_id, session_id)"
            " VALUES ('r1', 's'), ('r2', 's')"
        )
        await conn.execute(
            "INSERT INTO popagent_messages (resource_id, session_id, role, content, parts, item)"
            " VALUES ('r1', 's', 'user', 'héllo', '[]', NULL),"
            " ('r1', 's', 'assistant', 'hi', '[{\"type\": \"x\"}]', '{\"role\": \"a\"}'),"
            " ('r2', 's', 'user', 'only chat', '[]', NULL)"
        )
        await conn.execute(
            "INSERT INTO popagent_resource_stats (resource_id, documents, total_length,"
            " content_bytes) VALUES ('r1', 1, 3, 10)"
        )
        await conn.execute("DELETE FROM popagent_schema_migrations WHERE version = 20")
        assert await apply_migrations(conn) == [20]
        cur = await conn.execute(
            "SELECT resource_id, documents, content_bytes, thread_bytes"
            " FROM popagent_resource_stats ORDER BY resource_id"
        )
        rows = await cur.fetchall()
    hi = len("hi") + len('[{"type": "x"}]') + len('{"role": "a"}')
    assert rows == [("r1", 1, 10, len("héllo".encode()) + 2 + hi), ("r2", 0, 0, 9 + 2)]
