"""The schema and the SQL are ready to be distributed by ``resource_id`` (docs/scaling.md).

Citus is not installable here, so this checks on plain PostgreSQL what Citus
requires of a table distributed by a column: every primary key, unique
constraint, unique index and foreign key includes it, and every statement
filters by it (a statement that does not is a multi-shard one: allowed only
for the named cross-resource maintenance statements below). PostgreSQL's own
hash partitioning has the same rule for unique keys, so each table is also
rebuilt as a table partitioned by ``hash(resource_id)``: PostgreSQL refuses
any unique index that leaves the column out.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import uuid

import popagent
import popagent.store

# Reference tables (replicated to every node, not distributed).
REFERENCE_TABLES = {"popagent_schema_migrations"}

# Statements that run over every resource on purpose (Citus fans them out to all
# shards): retention maintenance, expiry sweeps and the schema bookkeeping.
CROSS_RESOURCE = {
    ("backup", "SCHEMA_VERSION"),
    ("memories", "DELETE_EXPIRED_EPISODES"),
    ("memories", "DELETE_OVER_CAP_EPISODES"),
    ("memories", "EXPIRE_FACTS"),
    ("migrate", "SELECT_APPLIED"),
    ("migrate", "INSERT_APPLIED"),
    ("secrets", "DELETE_EXPIRED_SECRETS"),
    ("vectors", "ALL_RESOURCES"),
    # Not a statement over a table: the next value of the memories' id sequence.
    ("portable", "RESERVE_FACT_ID"),
}

_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)
_TABLE = re.compile(r"\bpopagent_[a-z_]+\b")


async def _tables(memory: popagent.LongTermMemory) -> list[str]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' "
            "AND table_name LIKE 'popagent\\_%' ORDER BY 1"
        )
        return [r["table_name"] for r in await cur.fetchall()]


async def test_every_table_leads_with_resource_id(memory: popagent.LongTermMemory) -> None:
    tables = await _tables(memory)
    assert "popagent_memories" in tables
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT table_name, is_nullable FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name = 'resource_id'"
        )
        columns = {r["table_name"]: r["is_nullable"] for r in await cur.fetchall()}
    for table in tables:
        if table in REFERENCE_TABLES:
            continue
        assert columns.get(table) == "NO", f"{table} needs a NOT NULL resource_id"


async def test_every_key_includes_resource_id(memory: popagent.LongTermMemory) -> None:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            """
            SELECT c.relname AS table_name, i.indexrelid::regclass::text AS index_name,
                   ARRAY(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY AS k(n, o)
                         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n
                         ORDER BY k.o)
                       AS columns
            FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
            WHERE c.relnamespace = 'public'::regnamespace AND i.indisunique
              AND c.relname LIKE 'popagent\\_%'
            """
        )
        unique = await cur.fetchall()
        cur = await conn.execute(
            """
            SELECT conrelid::regclass::text AS table_name, conname,
                   ARRAY(SELECT a.attname::text FROM unnest(conkey) WITH ORDINALITY AS k(n, o)
                         JOIN pg_attribute a ON a.attrelid = conrelid AND a.attnum = k.n
                         ORDER BY k.o)
                       AS columns,
                   ARRAY(SELECT a.attname::text FROM unnest(confkey) WITH ORDINALITY AS k(n, o)
                         JOIN pg_attribute a ON a.attrelid = confrelid AND a.attnum = k.n
                         ORDER BY k.o)
                       AS referenced
            FROM pg_constraint
            WHERE contype = 'f' AND connamespace = 'public'::regnamespace
            """
        )
        foreign = await cur.fetchall()
    assert len(unique) >= 15 and len(foreign) >= 8
    for row in unique:
        if row["table_name"] in REFERENCE_TABLES:
            continue
        assert "resource_id" in row["columns"], f"{row['index_name']} leaves out resource_id"
    for row in foreign:
        pairs = dict(zip(row["columns"], row["referenced"], strict=True))
        assert pairs.get("resource_id") == "resource_id", (
            f"{row['conname']} must join on resource_id"
        )


async def test_each_table_can_be_hash_partitioned_by_resource(
    memory: popagent.LongTermMemory,
) -> None:
    """PostgreSQL rejects a partitioned table whose unique keys leave out the
    partition column, exactly Citus's rule: every table passes."""
    schema = f"dist_{uuid.uuid4().hex[:8]}"
    tables = [t for t in await _tables(memory) if t not in REFERENCE_TABLES]
    async with memory.pool.connection() as conn:
        await conn.execute(f"CREATE SCHEMA {schema}")
        try:
            for table in tables:
                await conn.execute(
                    f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING ALL) "
                    "PARTITION BY HASH (resource_id)"
                )
                for n in range(4):
                    await conn.execute(
                        f"CREATE TABLE {schema}.{table}_p{n} PARTITION OF {schema}.{table} "
                        f"FOR VALUES WITH (MODULUS 4, REMAINDER {n})"
                    )
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_partitioned_table p JOIN pg_class c "
                "ON c.oid = p.partrelid WHERE c.relnamespace = %s::regnamespace",
                (schema,),
            )
            row = await cur.fetchone()
            assert row is not None and row["n"] == len(tables)
        finally:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _statements() -> list[tuple[str, str, str]]:
    found = []
    for info in pkgutil.iter_modules(popagent.store.__path__):
        module = importlib.import_module(f"popagent.store.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, str) and _STATEMENT.match(value) and _TABLE.search(value):
                found.append((info.name, name, value))
    return found


def test_every_statement_filters_by_resource() -> None:
    statements = _statements()
    assert len(statements) > 60, "the scan should see the store's SQL"
    unfiltered = {
        (module, name)
        for module, name, text in statements
        if "resource_id" not in text
        and not set(_TABLE.findall(text)) <= REFERENCE_TABLES | {"popagent_scoped_lexemes"}
    }
    assert unfiltered <= CROSS_RESOURCE, f"statements without resource_id: {unfiltered}"


def test_joins_on_ids_also_join_on_resource() -> None:
    """A join or filter on a row id alone would be a cross-shard lookup."""
    bare = re.compile(r"\b(\w+)\.id\s*=\s*(\w+)\.(id|memory_id|log_id)\b")
    for module, name, text in _statements():
        for match in bare.finditer(text):
            start = max(0, match.start() - 120)
            window = text[start : match.end() + 60]
            assert "resource_id" in window, f"{module}.{name}: {match.group(0)} without resource_id"
