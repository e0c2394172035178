"""Purge on the real database: everything of one resource goes, nothing of another moves.

Two resources are filled with every kind of row popagent stores (facts with
versions, a deleted fact's history, episodes, vectors from a real embedder
client, recall statistics, an agent turn's session, messages, turn and audit
rows, observations, settings, a secret), each text carrying a marker of its
resource. After one is purged, every text-like column of every popagent table
(found in ``information_schema``, so a new table cannot be missed) is searched
for its markers and its ID, and the other resource's rows are compared with a
digest taken before.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from psycopg import sql
from pydantic import TypeAdapter

import popagent
from popagent import Popagent
from popagent.agent import Agent
from popagent.cli import main
from popagent.errors import ValidationError
from popagent.keys import KeyStore
from popagent.llm import OpenAIChatModel
from popagent.memory.purge import count_resource_rows, purge_resource
from popagent.models import PurgeReport
from popagent.observe.settings_store import MemorySettingsStore
from popagent.secrets import SecretCipher, SecretStore
from popagent.store import observations as obs_sql
from popagent.store import threads as thread_sql
from popagent.store.citus import distributed
from popagent.store.database import Conn
from popagent.store.purge import PURGE_TABLES, purge_rows
from popagent.threads import ThreadStore
from popagent.web.logins import LoginStore
from tests.gui_support import post_form
from tests.observe_support import insert_chunk, insert_observed
from tests.scripted_model import CallTools, Reply, ScriptedModelServer
from tests.web_support import api_client

#: Column types whose text form can hold content (``ARRAY`` covers ``text[]``).
TEXT_TYPES = ("text", "character varying", "character", "jsonb", "json", "ARRAY", "tsvector")


@pytest.fixture
def embedding_dimensions() -> int:
    return 384


def marker() -> str:
    """A distinctive word: letters and digits, so full-text search keeps it whole."""
    return f"zq{uuid.uuid4().hex[:12]}x7"


async def fill(
    memory: popagent.LongTermMemory,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
    resource: str,
    mark: str,
) -> None:
    """Every kind of row popagent stores for ``resource``, each text holding ``mark``."""
    threads = ThreadStore(memory.pool)
    session = f"{mark}-chat"
    # A fact with three values (two versions kept), and a deleted fact's history.
    for drink in ("tea", "coffee", "mate"):
        await memory.remember(resource, f"{mark} drinks {drink} every morning", key="drink.pref")
    gone = await memory.create_fact(resource, f"{mark} once lived in Lisbon")
    await memory.delete(resource, gone.id, kind="fact")
    await memory.retain_episode(resource, session, f"{mark} asked", f"{mark} answered")
    # A turn: session, messages with tool-call parts, a turn row, audit rows, an episode.
    scripted.script(
        CallTools(
            [
                (
                    "remember",
                    {"content": f"{mark} is allergic to hazelnuts", "key": "health.allergy"},
                )
            ],
            text="Noting that.",
        ),
        Reply(f"Noted, {mark}."),
    )
    agent = Agent(memory.pool, memory, threads, chat_model)
    await agent.run_turn(resource, session, f"Remember my allergy, {mark}.")
    # Observational memory: a log, an active and a buffered group, the actor.
    messages = await threads.list_messages(resource, session)
    first, last = messages[0].id, messages[-1].id
    async with memory.pool.connection() as conn, conn.transaction():
        log, _ = await insert_observed(
            conn,
            resource,
            session,
            first,
            first,
            f"* {mark} observed",
            tokens=5,
            message_tokens=20,
            group_observations=f"* {mark} active group",
        )
        await insert_chunk(
            conn, log, last, last, f"* {mark} buffered chunk", tokens=5, message_tokens=20
        )
        await obs_sql.record_actor(conn, resource, session, f"scripted/{mark}")
    await MemorySettingsStore(memory.pool).update(resource, observer_guidance=f"Note {mark}.")
    secrets = SecretStore(memory.pool, SecretCipher(os.urandom(32)))
    await secrets.set(resource, f"{mark}_token", f"value-of-{mark}")
    # An API key, a GUI login made with it, and their access audit (migration 0017).
    keys = KeyStore(memory.pool)
    principal = await keys.authenticate((await keys.create(resource, f"{mark}-key"))[1])
    assert principal is not None
    await LoginStore(memory.pool).open(principal)
    # Vectors, written by the background worker; then, the worker stopped, a memory
    # whose vectors stay pending (as one written where no model runs).
    assert await memory.wait_for_vectors(resource) == 0
    await memory.aclose()
    lexical = popagent.LongTermMemory(memory.pool, embedder=None)
    await lexical.remember(resource, f"{mark} noted where no model runs")


async def text_columns(memory: popagent.LongTermMemory) -> dict[str, list[str]]:
    """Every text-like column of every popagent table, by table."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c"
            " JOIN information_schema.tables t"
            "   ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
            "   AND c.table_name LIKE 'popagent%%'"
            "   AND (c.data_type = ANY(%s) OR c.udt_name = 'tsvector')"
            " ORDER BY c.table_name, c.ordinal_position",
            (list(TEXT_TYPES),),
        )
        columns: dict[str, list[str]] = {}
        for row in await cur.fetchall():
            columns.setdefault(row["table_name"], []).append(row["column_name"])
    return columns


async def holders(memory: popagent.LongTermMemory, needle: str) -> list[str]:
    """``table.column`` for every text-like column that holds ``needle`` in some row."""
    found = []
    columns = await text_columns(memory)
    async with memory.pool.connection() as conn:
        for table, names in columns.items():
            for name in names:
                query = sql.SQL(
                    "SELECT count(*) AS n FROM {} WHERE strpos({}::text, %s) > 0"
                ).format(sql.Identifier(table), sql.Identifier(name))
                cur = await conn.execute(query, (needle,))
                row = await cur.fetchone()
                assert row is not None
                if row["n"]:
                    found.append(f"{table}.{name}")
    return found


async def resource_tables(memory: popagent.LongTermMemory) -> set[str]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.table_name FROM information_schema.columns c"
            " JOIN information_schema.tables t"
            "   ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
            "   AND c.column_name = 'resource_id'"
        )
        return {row["table_name"] for row in await cur.fetchall()}


async def digest(memory: popagent.LongTermMemory, resource: str) -> dict[str, tuple[int, str]]:
    """Per table: the resource's row count and an md5 of its rows' whole text forms."""
    out = {}
    async with memory.pool.connection() as conn:
        for table in sorted(await resource_tables(memory)):
            query = sql.SQL(
                "SELECT count(*) AS n, md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))"
                " AS h FROM {} AS t WHERE resource_id = %s"
            ).format(sql.Identifier(table))
            cur = await conn.execute(query, (resource,))
            row = await cur.fetchone()
            assert row is not None
            out[table] = (int(row["n"]), str(row["h"]))
    return out


async def vacuum_counts(memory: popagent.LongTermMemory) -> dict[str, int]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (list(PURGE_TABLES),),
        )
        return {row["relname"]: int(row["vacuum_count"]) for row in await cur.fetchall()}


# --- the table list -----------------------------------------------------------------------------


async def test_the_purge_covers_every_table_with_a_resource_id(
    memory: popagent.LongTermMemory,
) -> None:
    assert await resource_tables(memory) == set(PURGE_TABLES)
    assert len(PURGE_TABLES) == len(set(PURGE_TABLES))


# --- everything of one resource, nothing of another ---------------------------------------------


async def test_purge_leaves_no_trace_of_the_resource_and_moves_no_other_row(
    semantic: popagent.LongTermMemory,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
    resource: str,
    other_resource: str,
) -> None:
    mark, other_mark = marker(), marker()
    await fill(semantic, chat_model, scripted, resource, mark)
    await fill(semantic, chat_model, scripted, other_resource, other_mark)
    before = dict(await count_resource_rows(semantic.pool, resource))
    # The fill reaches every table: a table the purge skipped would show here.
    assert [t for t, n in before.items() if n == 0] == []
    # The scan finds the marker wherever the fill put it, so finding none later means something.
    assert {
        "popagent_memories.content",
        "popagent_memories.search_vector",
        "popagent_memories.session_id",
        "popagent_fact_versions.content",
        "popagent_lexeme_stats.lexeme",
        "popagent_memory_embeddings.resource_id",
        "popagent_sessions.session_id",
        "popagent_messages.content",
        "popagent_messages.parts",
        "popagent_turns.session_id",
        "popagent_observation_logs.observations",
        "popagent_observation_groups.observations",
        "popagent_observation_actors.actor",
        "popagent_memory_settings.observer_guidance",
        "popagent_secrets.name",
        "popagent_audit.session_id",
    } <= set(await holders(semantic, mark)) | set(await holders(semantic, resource))
    kept = await digest(semantic, other_resource)
    vacuums = await vacuum_counts(semantic)

    report = await semantic.purge(resource)

    assert report.deleted == before
    assert list(report.deleted) == list(PURGE_TABLES)
    assert report.total == sum(before.values())
    assert report.count("popagent_fact_versions") == 3  # tea, coffee, the deleted fact
    assert report.count("popagent_memories") >= 4  # the fact, the allergy, two episodes
    assert await holders(semantic, mark) == []
    assert await holders(semantic, resource) == []
    assert all(n == 0 for _, n in await count_resource_rows(semantic.pool, resource))
    assert await digest(semantic, other_resource) == kept
    assert await holders(semantic, other_mark)
    # Plain VACUUM ran after the commit on every table rows left.
    assert report.vacuum_error is None
    assert set(report.vacuumed) == set(PURGE_TABLES)
    after = await vacuum_counts(semantic)
    assert [t for t in PURGE_TABLES if after[t] <= vacuums.get(t, 0)] == []
    # The purged resource is empty, not broken: it starts again from nothing.
    assert await semantic.recall(resource, f"{mark} drinks") == []
    assert (await semantic.remember(resource, "A fresh start")).action == "created"
    assert (await semantic.recall(other_resource, f"{other_mark} drinks"))[0].memory.key == (
        "drink.pref"
    )


async def test_purging_an_empty_resource_deletes_nothing_and_vacuums_nothing(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    report = await memory.purge(resource)
    assert report.total == 0 and report.vacuumed == () and report.vacuum_error is None
    assert list(report.deleted) == list(PURGE_TABLES) and set(report.deleted.values()) == {0}


async def test_bad_ids_and_flags_are_refused_before_anything_runs(
    memory: popagent.LongTermMemory,
) -> None:
    for bad in ("", "   ", "x" * 257, 7):
        with pytest.raises(ValidationError) as caught:
            await memory.purge(bad)  # type: ignore[arg-type]
        assert caught.value.field == "resource_id"
    with pytest.raises(ValidationError) as caught:
        await purge_resource(memory.pool, "r", vacuum="yes")  # type: ignore[arg-type]
    assert caught.value.field == "vacuum"


async def test_the_statements_refuse_to_run_outside_a_transaction(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    async with memory.pool.connection() as conn:
        with pytest.raises(RuntimeError, match="transaction"):
            await purge_rows(conn, resource)


async def test_vacuum_can_be_skipped(memory: popagent.LongTermMemory, resource: str) -> None:
    await memory.remember(resource, "Keeps bees")
    report = await memory.purge(resource, vacuum=False)
    assert report.count("popagent_memories") == 1 and report.vacuumed == ()


# On a Citus cluster the statement waits on a worker, where its shard's lock is held;
# the coordinator lists such waits, by the statement the client sent, in citus_lock_waits.
_LOCK_WAITS = """
SELECT count(*) AS n FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND starts_with(ltrim(query, E' \\n'), %(prefix)s)
"""
_CITUS_LOCK_WAITS = """
SELECT count(*) AS n FROM citus_lock_waits
WHERE starts_with(ltrim(blocked_statement, E' \\n'), %(prefix)s)
"""


async def wait_for_lock(conn: Conn, statement_prefix: str) -> None:
    """Until a backend waits on a lock in a statement starting with ``statement_prefix``
    (``conn`` autocommit, so each poll sees ``pg_stat_activity`` afresh); at most ~10 s."""
    query = _CITUS_LOCK_WAITS if await distributed(conn) else _LOCK_WAITS
    for _ in range(200):
        cur = await conn.execute(query, {"prefix": statement_prefix})
        row = await cur.fetchone()
        if row is not None and row["n"]:
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"nothing waited on a lock in {statement_prefix!r}")


async def test_an_interrupted_purge_deletes_nothing(
    memory: popagent.LongTermMemory, database_url: str, resource: str
) -> None:
    """The deletes share one transaction: a purge stopped at its last table (the
    audit rows, locked by another session) leaves every earlier table as it was."""
    await memory.remember(resource, "Grows tomatoes", key="garden.crop")
    await memory.remember(resource, "Grows peppers", key="garden.crop")
    await ThreadStore(memory.pool).append_message(
        resource, "s1", "user", "hello", create_session=True
    )
    async with memory.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO popagent_audit (resource_id, session_id, call_id, hook, model, started_at)"
            " VALUES (%s, 's1', gen_random_uuid(), 'before_model_call', 'm', now())",
            (resource,),
        )
    assert await memory.wait_for_vectors(resource) == 0  # no worker writes meanwhile
    before = await count_resource_rows(memory.pool, resource)
    async with (
        popagent.connect(database_url, max_size=2) as other_root,
        other_root.pool.connection() as blocker,
        other_root.pool.connection() as watcher,
    ):
        await blocker.execute("BEGIN")
        await blocker.execute(
            "SELECT 1 FROM popagent_audit WHERE resource_id = %s FOR UPDATE", (resource,)
        )
        task = asyncio.ensure_future(memory.purge(resource))
        try:
            await wait_for_lock(watcher, "DELETE FROM popagent_audit")
        finally:
            task.cancel()
            await blocker.execute("ROLLBACK")
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await count_resource_rows(memory.pool, resource) == before


async def test_a_turn_finishing_during_a_purge_queues_behind_it_without_deadlock(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    """A turn's final transaction (its message, then its episode) that is open when
    the purge starts: the purge waits for it at its first statement, holding
    nothing the turn needs, and then deletes what the turn wrote too."""
    async with memory.pool.connection() as conn:
        started = await thread_sql.start_turn(conn, resource, "s1", "user", "Plant beans?", [])
    assert started.turn_id is not None
    draft = await memory.draft_episode(resource, "s1", "Plant beans?", "In May.")
    assert draft is not None
    async with memory.pool.connection() as turn, memory.pool.connection() as watcher:
        await turn.execute("BEGIN")
        try:
            done = await thread_sql.complete_turn(
                turn, resource, "s1", started.turn_id, "assistant", "In May.", []
            )
            assert done is not None
            purge = asyncio.ensure_future(memory.purge(resource, vacuum=False))
            await wait_for_lock(watcher, "SELECT session_id FROM popagent_sessions")
            # The purge holds no statistics row: the episode goes in at once.
            await asyncio.wait_for(memory.write_episode(turn, draft), timeout=5)
            await turn.execute("COMMIT")
        except BaseException:
            await turn.execute("ROLLBACK")
            raise
    report = await asyncio.wait_for(purge, timeout=10)
    assert report.count("popagent_messages") == 2
    assert report.count("popagent_turns") == 1
    assert report.count("popagent_memories") == 1
    assert all(n == 0 for _, n in await count_resource_rows(memory.pool, resource))


# --- the CLI ------------------------------------------------------------------------------------


def invoke(url: str, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, ["--database-url", url, *args], input=input)


def test_cli_purge_needs_the_resource_and_a_confirmation(database_url: str) -> None:
    resource = f"cli-{uuid.uuid4().hex}"
    mark = marker()

    async def seed() -> None:
        async with popagent.connect(database_url) as root:
            memory = root.memory
            await memory.remember(resource, f"{mark} keeps bees")
            await ThreadStore(memory.pool).append_message(
                resource, "s1", "user", f"{mark} hello", create_session=True
            )

    async def rows() -> int:
        async with popagent.connect(database_url) as root:
            memory = root.memory
            return sum(n for _, n in await count_resource_rows(memory.pool, resource))

    asyncio.run(seed())
    stored = asyncio.run(rows())
    # The resource must be named on the command line: not the default, not the environment.
    unnamed = invoke(database_url, "purge", "--yes")
    assert unnamed.exit_code == 2 and "--resource-id" in unnamed.output
    from_env = CliRunner().invoke(
        main,
        ["--database-url", database_url, "purge", "--yes"],
        env={"POPAGENT_RESOURCE_ID": resource},
    )
    assert from_env.exit_code == 2 and "--resource-id" in from_env.output
    refused = invoke(database_url, "purge", "--resource-id", resource, input="n\n")
    assert refused.exit_code == 1 and "Purge EVERYTHING" in refused.output
    no_terminal = invoke(database_url, "--resource-id", resource, "purge")
    assert no_terminal.exit_code == 1
    assert asyncio.run(rows()) == stored
    bad = invoke(database_url, "purge", "--resource-id", " ", "--yes")
    assert bad.exit_code == 2 and "resource_id: must not be empty" in bad.output
    spaced = invoke(database_url, "purge", "--resource-id", f"{resource} x", "--yes")
    assert spaced.exit_code == 2 and "resource_id: must not contain whitespace" in spaced.output
    assert asyncio.run(rows()) == stored

    # The one flag, given before the command, as the group's option.
    out = invoke(database_url, "--resource-id", resource, "purge", "--yes", "--json")
    assert out.exit_code == 0, out.output
    body = json.loads(out.output)
    assert list(body) == ["resource_id", "deleted", "total", "vacuumed", "vacuum_error"]
    assert body["resource_id"] == resource
    assert body["deleted"]["popagent_memories"] == 1
    assert body["deleted"]["popagent_messages"] == 1
    assert body["total"] == stored and body["vacuum_error"] is None
    assert "popagent_memories" in body["vacuumed"]
    assert list(body["deleted"]) == list(PURGE_TABLES)
    assert asyncio.run(rows()) == 0

    asyncio.run(seed())
    confirmed = invoke(database_url, "purge", "--resource-id", resource, input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert f"purged {stored} rows of resource {resource!r}" in confirmed.output
    assert "popagent_sessions" in confirmed.output and "vacuumed" in confirmed.output
    again = invoke(database_url, "purge", "--resource-id", resource, "--yes", "--no-vacuum")
    assert again.exit_code == 0 and "purged 0 rows" in again.output
    assert "vacuumed" not in again.output


# --- the API ------------------------------------------------------------------------------------


async def test_api_purge_needs_the_json_boolean_and_acts_on_the_servers_resource(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    for owner in (resource, other_resource):
        await memory.remember(owner, "Grows tomatoes")
        await ThreadStore(memory.pool).append_message(
            owner, "s1", "user", "hello", create_session=True
        )
        assert await memory.wait_for_vectors(owner) == 0  # no worker writes meanwhile
    kept = await count_resource_rows(memory.pool, other_resource)
    stored = await count_resource_rows(memory.pool, resource)
    async with api_client(root, resource) as api:
        for body in (
            {},
            {"confirm": 1},
            {"confirm": "true"},
            {"confirm": False},
            {"confirm": None},
        ):
            refused = await api.post("/api/purge", json=body)
            assert refused.status_code == 422, (body, refused.text)
            assert refused.json()["field"] == "confirm"
        other = await api.post("/api/purge", json={"confirm": True, "resource_id": other_resource})
        assert other.status_code == 422 and other.json()["field"] == "resource_id"
        assert await count_resource_rows(memory.pool, resource) == stored

        done = await api.post("/api/purge", json={"confirm": True})
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["deleted"] == dict(stored)
        assert body["total"] == sum(n for _, n in stored)
        assert body["vacuum_error"] is None and "popagent_sessions" in body["vacuumed"]
        # The library's PurgeReport, field by field in order; ``deleted`` in purge order.
        assert list(body) == ["deleted", "total", "vacuumed", "vacuum_error"]
        assert list(body["deleted"]) == list(PURGE_TABLES)
    assert all(n == 0 for _, n in await count_resource_rows(memory.pool, resource))
    assert await count_resource_rows(memory.pool, other_resource) == kept


# --- the GUI ------------------------------------------------------------------------------------


async def test_gui_purge_is_a_confirmed_post(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Grows tomatoes")
    await memory.retain_episode(resource, "s1", "hello", "hi")
    assert await memory.wait_for_vectors(resource) == 0  # no worker writes meanwhile
    stored = await count_resource_rows(memory.pool, resource)
    total = sum(n for _, n in stored)
    async with api_client(root, resource) as gui:
        cleanup = await gui.get("/cleanup")
        assert cleanup.status_code == 200 and 'href="/purge"' in cleanup.text
        review = await gui.get("/purge")
        assert review.status_code == 200
        assert f"<strong>{total}</strong>" in review.text
        assert "<code>popagent_memories</code></td><td>2</td>" in review.text
        assert await count_resource_rows(memory.pool, resource) == stored

        no_csrf = await post_form(
            gui, "/purge", {"confirm": "yes", "confirm_resource": resource}, csrf=False
        )
        assert no_csrf.status_code == 403
        unconfirmed = await post_form(gui, "/purge", {"confirm_resource": resource})
        assert unconfirmed.status_code == 422 and "confirm" in unconfirmed.text
        wrong = await post_form(gui, "/purge", {"confirm": "yes", "confirm_resource": "other"})
        assert wrong.status_code == 422 and "confirm_resource" in wrong.text
        smuggled = await post_form(
            gui, "/purge", {"confirm": "yes", "confirm_resource": resource, "resource_id": "x"}
        )
        assert smuggled.status_code == 422
        assert await count_resource_rows(memory.pool, resource) == stored

        done = await post_form(gui, "/purge", {"confirm": "yes", "confirm_resource": resource})
        assert done.status_code == 303
        assert done.headers["location"] == f"/?notice=purge&n={total}"
        landing = await gui.get(done.headers["location"])
        assert f"Purge done: {total} rows deleted" in landing.text
    assert all(n == 0 for _, n in await count_resource_rows(memory.pool, resource))


def test_a_report_is_plain_json_and_the_api_sends_the_same() -> None:
    """One shape: the library's ``to_json`` and the API's response (pydantic's reading of
    the same dataclass, which the client decodes: ``test_client_decode``) agree."""
    report = PurgeReport({"popagent_memories": 2, "popagent_audit": 0}, 2, ("x",))
    body = {
        "deleted": {"popagent_memories": 2, "popagent_audit": 0},
        "total": 2,
        "vacuumed": ["x"],
        "vacuum_error": None,
    }
    assert report.to_json() == body
    assert json.loads(TypeAdapter(PurgeReport).dump_json(report)) == body
    assert report.count("popagent_audit") == 0 and report.count("unknown") == 0
