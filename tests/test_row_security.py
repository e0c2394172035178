"""Row-level security (migration 0018): a connection serving one resource sees only it.

``store.tenant.serving(R)`` makes every pooled connection run as
``popagent_tenant`` with ``popagent.resource_id = R``; the policies then confine
every statement, whatever its WHERE says. These tests run on real PostgreSQL:
the schema check fails for a resource table without the policy; rows of one
resource, in every table, are invisible and unwritable from another; the
library's own calls, run with a mismatched setting, find nothing of the other
resource and change nothing of it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import popagent
from popagent.cli.workers import _preflight
from popagent.models import MemoryFilter
from popagent.observe.settings_store import MemorySettingsStore
from popagent.secrets import SecretCipher, SecretStore
from popagent.store.tenant import (
    TENANT_ROLE,
    boundary_problem,
    bypass,
    current_tenant,
    serving,
)
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from tests.db_support import runs_on_citus
from tests.web_support import cli_command

#: Read before a resource is known (by a key's or a login's hash): no policy, and
#: never touched while serving a resource (migration 0018).
CREDENTIAL_TABLES = {
    "popagent_api_keys",
    "popagent_logins",
    "popagent_login_failures",
    "popagent_access_audit",
}


async def _resource_tables(memory: popagent.LongTermMemory) -> dict[str, tuple[bool, int]]:
    """Every popagent table with ``resource_id``: (RLS enabled, policies named
    popagent_tenant_rows)."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT c.relname, c.relrowsecurity,
                   (SELECT count(*) FROM pg_policy p
                    WHERE p.polrelid = c.oid AND p.polname = 'popagent_tenant_rows') AS policies
            FROM pg_class c
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'resource_id'
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
              AND c.relname LIKE 'popagent\\_%%'
            ORDER BY 1
            """
        )
        return {r["relname"]: (r["relrowsecurity"], r["policies"]) for r in await cur.fetchall()}


async def test_every_resource_table_has_the_policy(memory: popagent.LongTermMemory) -> None:
    tables = await _resource_tables(memory)
    assert len(tables) >= 15 and "popagent_memories" in tables
    missing = [
        t for t, (enabled, policies) in tables.items()
        if t not in CREDENTIAL_TABLES and not (enabled and policies == 1)
    ]  # fmt: skip
    assert missing == [], f"resource tables without row-level security: {missing}"


async def test_the_schema_check_fails_for_a_table_without_a_policy(
    memory: popagent.LongTermMemory,
) -> None:
    """The check above is not vacuous: a new resource table shows up as missing."""
    name = f"popagent_probe_{uuid.uuid4().hex[:8]}"
    async with memory.pool.connection() as conn:
        await conn.execute(f"CREATE TABLE {name} (resource_id text NOT NULL)")
        try:
            tables = await _resource_tables(memory)
            assert tables[name] == (False, 0)
        finally:
            await conn.execute(f"DROP TABLE {name}")


async def _fill(memory: popagent.LongTermMemory, resource: str) -> int:
    """Rows of ``resource`` in many tables (memories and their triggers' tables,
    sessions, messages, settings, secrets); the fact's id."""
    fact = await memory.remember(resource, f"Tea at {resource}", key="drink")
    await memory.remember(resource, "Prefers green tea over coffee")
    threads = ThreadStore(memory.pool)
    await threads.create_session(resource, "s1")
    await threads.append_message(resource, "s1", "user", "hello there")
    await MemorySettingsStore(memory.pool).update(resource, observation_threshold_tokens=5000)
    await SecretStore(memory.pool, SecretCipher(os.urandom(32))).set(resource, "api", "v4lue")
    return fact.memory.id


async def _counts(
    memory: popagent.LongTermMemory, tables: list[str], resource: str
) -> dict[str, tuple[int, int]]:
    async with memory.pool.connection() as conn:
        found = {}
        for table in tables:
            cur = await conn.execute(
                f"SELECT count(*) AS all_rows, count(*) FILTER (WHERE resource_id = %s) AS mine"
                f" FROM {table}",
                (resource,),
            )
            row = await cur.fetchone()
            assert row is not None
            found[table] = (row["all_rows"], row["mine"])
        return found


@pytest.mark.plain_postgresql
async def test_a_mismatched_setting_sees_and_changes_nothing_of_the_other_resource(
    memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    fact_id = await _fill(memory, resource)
    tables = [t for t in await _resource_tables(memory) if t not in CREDENTIAL_TABLES]
    owner = await _counts(memory, tables, resource)
    filled = [t for t, (_, mine) in owner.items() if mine > 0]
    assert len(filled) >= 8, filled  # the check below covers real rows

    with serving(other_resource):
        assert current_tenant() == other_resource
        # Every table, every row, no WHERE at all: nothing of the other resource.
        seen = await _counts(memory, tables, resource)
        assert {t: n for t, n in seen.items() if n != (0, 0)} == {}
        # The library's own statements, asked for the other resource by name.
        assert await memory.list(resource, MemoryFilter(kind="fact")) == []
        assert await memory.recall(resource, "green tea") == []
        with pytest.raises(popagent.NotFoundError):
            await memory.get(resource, fact_id)
        with pytest.raises(popagent.NotFoundError):
            await memory.delete(resource, fact_id)
        assert await ThreadStore(memory.pool).list_sessions(resource) == []
        # Writing a row of the other resource is refused by the policy's check.
        with pytest.raises((psycopg.errors.InsufficientPrivilege, popagent.PopagentError)):
            await memory.remember(resource, "planted from another resource")
        async with memory.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE popagent_memories SET importance = 0.99 WHERE resource_id = %s", (resource,)
            )
            assert cur.rowcount == 0
            cur = await conn.execute("DELETE FROM popagent_messages")
            assert cur.rowcount == 0
            cur = await conn.execute("SELECT current_user AS u")
            assert (await cur.fetchone()) == {"u": "popagent_tenant"}
        # Its own resource works as usual.
        await memory.remember(other_resource, "Likes hiking")
        assert [
            f.content for f in await memory.list(other_resource, MemoryFilter(kind="fact"))
        ] == ["Likes hiking"]
        with bypass("test: the owner sees every resource"):
            assert (await memory.get(resource, fact_id)).id == fact_id

    # Nothing of the first resource changed (the vector worker's tables aside: it may
    # have embedded the memories meanwhile), and connections went back as the owner.
    steady = [
        t for t in filled if t not in ("popagent_pending_vectors", "popagent_memory_embeddings")
    ]
    after = await _counts(memory, steady, resource)
    assert {t: mine for t, (_, mine) in after.items()} == {t: owner[t][1] for t in steady}
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT importance FROM popagent_memories WHERE resource_id = %s AND id = %s",
            (resource, fact_id),
        )
        assert (await cur.fetchone()) == {"importance": 0.5}
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT current_user = session_user AS owner,"
            " current_setting('popagent.resource_id', true) AS setting"
        )
        assert await cur.fetchone() in (
            {"owner": True, "setting": ""},
            {"owner": True, "setting": None},
        )


@pytest.mark.plain_postgresql
async def test_the_same_setting_sees_its_own_rows(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    fact_id = await _fill(memory, resource)
    with serving(resource):
        assert (await memory.get(resource, fact_id)).id == fact_id
        assert len(await memory.list(resource, MemoryFilter(kind="fact"))) == 2
        results = await memory.recall(resource, "green tea")
        assert results and "green tea" in results[0].memory.content
        assert [s.session_id for s in await ThreadStore(memory.pool).list_sessions(resource)] == [
            "s1"
        ]


async def test_recall_operators_are_leakproof(memory: popagent.LongTermMemory) -> None:
    """Under a policy only LEAKPROOF functions may run before it: recall's index
    conditions need these three (else recall reads every row of the resource,
    25-35x slower; bench/latency.py --rls). The suite's server is a superuser's."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT proname, bool_and(proleakproof) AS leakproof FROM pg_proc"
            " WHERE proname IN ('arrayoverlap', 'similarity_op', 'popagent_scoped_lexemes')"
            " GROUP BY proname ORDER BY proname"
        )
        rows = await cur.fetchall()
    assert [(r["proname"], r["leakproof"]) for r in rows] == [
        ("arrayoverlap", True),
        ("popagent_scoped_lexemes", True),
        ("similarity_op", True),
    ]


@pytest.mark.plain_postgresql
async def test_shared_workers_run_as_the_owner(
    semantic: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    """The vector worker serves every resource. Started by a write confined to one
    resource, it must not inherit that confinement (tasks copy the context they are
    created in), or the next resource's memories would never get their vectors."""
    with serving(resource):
        await semantic.remember(resource, "Prefers green tea over coffee")
    with serving(other_resource):
        await semantic.remember(other_resource, "Walks the dog every morning")
    # Not ``wait_for_vectors``: it would embed in this (the owner's) task itself.
    pending = -1
    for _ in range(300):
        async with semantic.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM popagent_pending_vectors WHERE resource_id IN (%s, %s)",
                (resource, other_resource),
            )
            row = await cur.fetchone()
            assert row is not None
            pending = row["n"]
        if pending == 0:
            break
        await asyncio.sleep(0.05)
    assert pending == 0, "the worker left memories without vectors"
    async with semantic.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT resource_id, count(*) AS n FROM popagent_memory_embeddings"
            " WHERE resource_id IN (%s, %s) GROUP BY 1 ORDER BY 1",
            (resource, other_resource),
        )
        counts = {r["resource_id"]: r["n"] for r in await cur.fetchall()}
    assert set(counts) == {resource, other_resource} and min(counts.values()) >= 1


async def test_the_boundary_holds_where_the_suite_runs(
    memory: popagent.LongTermMemory, database_url: str
) -> None:
    """Multi-resource mode's startup check passes on plain PostgreSQL: the role exists
    and the user may act as it. On a Citus cluster (the suite run there with its tables
    distributed) it refuses, naming Citus: the policy could not see the resource on
    the nodes (a request then failed as "database unavailable", every time)."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL AS citus"
        )
        citus = await cur.fetchone()
        distributed = False
        if citus is not None and citus["citus"]:
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_catalog.pg_dist_partition"
                " WHERE logicalrelid = 'popagent_memories'::regclass"
            )
            counted = await cur.fetchone()
            distributed = counted is not None and counted["n"] > 0
        problem = await boundary_problem(conn)
    if distributed:
        assert problem is not None and "distributed by Citus" in problem
        # ``popagent mcp`` refuses as ``serve`` does, before it serves a request.
        refused = await asyncio.to_thread(_mcp_multi_resource, database_url)
        assert refused.returncode != 0, refused.stderr
        assert "multi-resource mode cannot start" in refused.stderr
        assert "distributed by Citus" in refused.stderr
    else:
        assert problem is None


def _mcp_multi_resource(database_url: str) -> subprocess.CompletedProcess[str]:
    """A real ``popagent mcp --transport http --multi-resource`` on ``database_url``,
    run until it exits (it is expected to refuse to start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
    env.update(POPAGENT_DATABASE_URL=database_url, POPAGENT_EMBEDDER="none")
    return subprocess.run(
        cli_command("mcp", "--transport", "http", "--port", "0", "--multi-resource"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


async def test_a_user_that_may_not_act_as_the_tenant_is_refused_before_serving(
    scratch_root: popagent.Popagent, scratch_url: str
) -> None:
    """A database user outside ``popagent_tenant`` could not confine a request to its
    resource: ``serve --multi-resource`` refuses to start (the workers' preflight,
    and the app's startup), saying what to grant, instead of failing every request."""
    name = f"popagent_probe_{uuid.uuid4().hex[:12]}"
    role = sql.Identifier(name)
    with psycopg.connect(scratch_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        # Enough to open a pool on a migrated database, nothing of the tenant role.
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(role))
        admin.execute(sql.SQL("GRANT SELECT ON popagent_schema_migrations TO {}").format(role))
    params = conninfo_to_dict(scratch_url)
    params["user"] = name
    probe_url = make_conninfo(**params)  # type: ignore[arg-type]
    try:
        async with await psycopg.AsyncConnection.connect(probe_url) as conn:
            problem = await boundary_problem(conn)
        assert problem is not None and f"GRANT popagent_tenant TO {name}" in problem
        with pytest.raises(popagent.DatabaseError, match="multi-resource mode cannot start"):
            await _preflight(probe_url, multi_resource=True)
        await _preflight(probe_url, multi_resource=False)  # one resource: no boundary needed
        config = ServerConfig(maintenance_interval_s=None, token="t" * 40, multi_resource=True)
        app = create_app(config, database_url=probe_url, model_from_env=False, embedder=None)
        with pytest.raises(popagent.DatabaseError, match=f"GRANT popagent_tenant TO {name}"):
            async with app.router.lifespan_context(app):
                pass
        # ``popagent mcp`` checks the same, with the same function, before serving.
        refused = await asyncio.to_thread(_mcp_multi_resource, probe_url)
        assert refused.returncode != 0, refused.stderr
        assert "multi-resource mode cannot start" in refused.stderr, refused.stderr
        assert f"GRANT popagent_tenant TO {name}" in refused.stderr
    finally:
        with psycopg.connect(scratch_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(role))
            admin.execute(sql.SQL("DROP ROLE {}").format(role))


# Citus's report of a node that refused its connection (``remote_commands.c``,
# ``ReportConnectionError``), SQLSTATE 08006 like a lost connection.
_NODE_REFUSED = (
    "connection to the remote node popagent_tenant@127.0.0.1:9701 failed with the following"
    ' error: connection to server at "127.0.0.1", port 9701 failed: FATAL:  role'
    ' "popagent_tenant" is not permitted to log in'
)


async def test_a_node_refusing_the_tenant_role_is_a_configuration_error(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    """A Citus node that will not let the tenant role log in is a configuration error
    that no retry fixes, and says so, naming the role and the node; the pool does not
    take the database for down. On a cluster, a confined statement over a distributed
    table meets exactly that; on plain PostgreSQL the server raises Citus's error."""
    with pytest.raises(popagent.DatabaseError) as raised:
        if runs_on_citus():
            with serving(resource):
                async with memory.pool.connection() as conn:
                    await conn.execute(
                        "SELECT count(*) FROM popagent_memories WHERE resource_id = %s",
                        (resource,),
                    )
        else:
            async with memory.pool.connection() as conn:
                await conn.execute(
                    "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'connection_failure',"
                    f" MESSAGE = '{_NODE_REFUSED.replace(chr(39), chr(39) * 2)}'; END $$"
                )
    message = str(raised.value)
    assert "configuration error" in message and "retrying cannot help" in message, message
    assert f"as the role {TENANT_ROLE}" in message and "without --multi-resource" in message
    assert "try again" not in message
    assert memory.pool.down_since is None  # the coordinator answered: not an outage
