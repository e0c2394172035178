"""The schema and the SQL are ready to be distributed by ``resource_id`` (docs/scaling.md).

Citus is not installable where the suite runs, so this checks on plain
PostgreSQL what Citus requires of a table distributed by a column: every
primary key, unique constraint, unique index and foreign key includes it, and
every statement filters by it (a statement that does not is a multi-shard one:
allowed only for the named cross-resource maintenance statements below).
PostgreSQL's own hash partitioning has the same rule for unique keys, so each
table is also rebuilt as a table partitioned by ``hash(resource_id)``:
PostgreSQL refuses any unique index that leaves the column out.

And the rules Citus enforces on the statements themselves, each of which an
earlier version broke (found by running the suite on a cluster, docs/scaling.md):

- no statement-level trigger and no transition table on a distributed table;
- no function that is not immutable in ``ON CONFLICT ... DO UPDATE``, nor inside
  CASE or COALESCE of an UPDATE or DELETE, no stable one given a column in an
  UPDATE's SET or the conditions of an UPDATE or DELETE, and no volatile one
  (``clock_timestamp()``, ``random()``) in a write: on reference tables as on
  distributed ones, and for operators as for functions called by name
  (``timestamptz - interval`` is stable), which PostgreSQL's own parse tree of
  each statement shows (``tests/sql_tree.py``);
- every reference to a distributed table, at its own query level, carries an
  equality on its ``resource_id``: that is what sends a statement to the one
  shard of the resource;
- a unique violation is told by what was written, never by the constraint's
  name, which Citus does not report;
- the documented distribution plan names every table.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

import popagent
from popagent.store import recall as recall_sql
from popagent.store.citus import for_postgresql
from tests.sql_text import (
    calls,
    conditional_parts,
    do_update_clauses,
    filters_resource,
    level,
    references,
    statements,
    strip,
    writes,
)
from tests.sql_tree import parse_tree, write_rule_breaches

# Reference tables (replicated to every node, not distributed).
REFERENCE_TABLES = {
    "popagent_schema_migrations",
    # Credentials (migration 0017): looked up by a hash before the resource is known.
    "popagent_api_keys",
    "popagent_logins",
    "popagent_login_failures",
    "popagent_access_audit",
}

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
    # Not a statement over a table: the names of the id sequences an import draws from.
    ("portable_import", "SEQUENCES"),
    # Not over a table either: whether Citus's catalog lists the memories as distributed.
    ("tenant", "_DISTRIBUTED"),
}

# Statements over a list of resources, on purpose: the embedding backfill's batches
# (``resource_id = ANY(...)``; Citus sends them to those resources' shards).
MANY_RESOURCES = {
    ("vectors", "MISSING_VECTORS"),
    ("vectors", "COUNT_MISSING"),
    ("vectors", "DELETE_OTHER_MODELS"),
}

# The one statement that deletes memories without counting them in recall's
# statistics: the purge deletes the resource's statistics rows too, in its transaction.
UNCOUNTED_DELETES = {("purge", "DELETE_MEMORIES")}

# Statements as plain PostgreSQL runs them, without the equality only Citus needs
# (``store.citus.for_postgresql``); their Citus form is checked.
POSTGRESQL_FORMS = {("recall", "_CANDIDATES_POSTGRESQL")}

# Volatile, and harmless in a write: it sets the statement's own synchronous_commit.
ALLOWED_VOLATILE = {"set_config"}

_TABLE = re.compile(r"\bpopagent_[a-z_]+\b")
_SRC = Path(popagent.__file__).resolve().parent
_DOCS = _SRC.parent.parent / "docs"


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
    # Both queries read the tables from pg_class, which Citus filters: on a coordinator
    # that holds reference tables' shards, their constraints are the shards' own.
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
            SELECT c.relname AS table_name, conname,
                   ARRAY(SELECT a.attname::text FROM unnest(conkey) WITH ORDINALITY AS k(n, o)
                         JOIN pg_attribute a ON a.attrelid = conrelid AND a.attnum = k.n
                         ORDER BY k.o)
                       AS columns,
                   ARRAY(SELECT a.attname::text FROM unnest(confkey) WITH ORDINALITY AS k(n, o)
                         JOIN pg_attribute a ON a.attrelid = confrelid AND a.attnum = k.n
                         ORDER BY k.o)
                       AS referenced
            FROM pg_constraint JOIN pg_class c ON c.oid = conrelid
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
        if row["table_name"] in REFERENCE_TABLES:  # a reference table may refer to another
            continue
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
    return statements()


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
        if set(_TABLE.findall(text)) <= REFERENCE_TABLES:
            continue  # reference tables live whole on every node: no shard to cross
        for match in bare.finditer(text):
            start = max(0, match.start() - 120)
            window = text[start : match.end() + 60]
            assert "resource_id" in window, f"{module}.{name}: {match.group(0)} without resource_id"


# --- the rules Citus enforces on statements ----------------------------------------------------


async def _distributed(memory: popagent.LongTermMemory) -> set[str]:
    return {t for t in await _tables(memory) if t not in REFERENCE_TABLES}


async def _volatility(memory: popagent.LongTermMemory) -> dict[str, str]:
    """Per function name, the most volatile of its overloads: ``i``, ``s`` or ``v``."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT proname, (ARRAY['i', 's', 'v'])[max(CASE provolatile WHEN 'v' THEN 3 "
            "WHEN 's' THEN 2 ELSE 1 END)] AS volatility FROM pg_proc GROUP BY proname"
        )
        return {r["proname"]: r["volatility"] for r in await cur.fetchall()}


async def _sql_and_functions(memory: popagent.LongTermMemory) -> list[tuple[str, str, str]]:
    """The statements of ``store/`` and the bodies of popagent's own SQL functions (its
    triggers' functions run on the shards, where Citus plans their statements too)."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
            "WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'popagent\\_%%' "
            "AND l.lanname IN ('plpgsql', 'sql')"
        )
        bodies = [("function", r["proname"], r["prosrc"]) for r in await cur.fetchall()]
    assert len(bodies) >= 4, "the migrations' functions should be there"
    return _statements() + bodies


async def test_no_statement_level_trigger_and_no_transition_table(
    memory: popagent.LongTermMemory,
) -> None:
    """Citus runs only row-level triggers on a distributed table (with
    ``citus.enable_unsafe_triggers``), and never one that reads a transition table:
    each INSERT failed with "could not find named tuplestore"."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.relname, t.tgname, (t.tgtype & 1) = 1 AS row_level,"
            " t.tgoldtable IS NOT NULL OR t.tgnewtable IS NOT NULL AS transition"
            " FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace"
            " AND c.relname LIKE 'popagent\\_%%'"
        )
        triggers = await cur.fetchall()
    distributed = await _distributed(memory)
    assert len(triggers) >= 3, "the memories' row triggers should be there"
    wrong = [
        f"{t['relname']}.{t['tgname']}"
        for t in triggers
        if t["relname"] in distributed and (not t["row_level"] or t["transition"])
    ]
    assert wrong == [], f"statement-level or transition-table triggers: {wrong}"


async def test_do_update_calls_immutable_functions_only(memory: popagent.LongTermMemory) -> None:
    """Citus refuses a stable or volatile function (``now()``) in ``ON CONFLICT ... DO
    UPDATE``, its ``SET`` and its ``WHERE``; ``EXCLUDED.column`` (a default) is the way."""
    volatility = await _volatility(memory)
    found, wrong = 0, []
    for module, name, text in await _sql_and_functions(memory):
        for clause in do_update_clauses(text):
            found += 1
            bad = sorted(f for f in calls(clause) if volatility.get(f, "i") != "i")
            if bad:
                wrong.append(f"{module}.{name}: {bad}")
    assert found >= 10, "the scan should see the upserts"
    assert wrong == [], f"functions that are not immutable in DO UPDATE: {wrong}"


async def test_writes_call_no_volatile_function(memory: popagent.LongTermMemory) -> None:
    """Citus refuses a volatile function (``clock_timestamp()``, ``random()``) in an
    UPDATE and in the conditions of a write to a distributed table; ``now()`` and
    ``statement_timestamp()`` (stable) it evaluates once, on the coordinator."""
    volatility = await _volatility(memory)
    distributed = await _distributed(memory)
    found, wrong = 0, []
    for module, name, text in await _sql_and_functions(memory):
        if not writes(text) & distributed:
            continue
        found += 1
        bad = sorted(
            f for f in calls(text) if volatility.get(f) == "v" and f not in ALLOWED_VOLATILE
        )
        if bad:
            wrong.append(f"{module}.{name}: {bad}")
    assert found >= 30, "the scan should see the writes"
    assert wrong == [], f"volatile functions in writes to distributed tables: {wrong}"


async def test_every_reference_names_its_resource(memory: popagent.LongTermMemory) -> None:
    """Citus sends a statement to one shard only when every reference to a distributed
    table, at its own query level (CTE, subquery, join), has ``resource_id = ...``;
    lexical recall's candidate CTE filtered by its index keys alone, and Citus refused
    the statement. A trigger's function names the resource with ``NEW``/``OLD``."""
    distributed = await _distributed(memory)
    seen, wrong = 0, []
    for module, name, text in await _sql_and_functions(memory):
        if (module, name) in CROSS_RESOURCE | POSTGRESQL_FORMS:
            continue
        clean = strip(text)
        for reference in references(clean):
            if reference.table not in distributed:
                continue
            seen += 1
            many = (module, name) in MANY_RESOURCES
            if not filters_resource(level(clean, reference.position), reference, many=many):
                wrong.append(f"{module}.{name}: {reference}")
    assert seen > 100, "the scan should see the references"
    assert wrong == [], f"references without resource_id = ...: {wrong}"
    assert for_postgresql(recall_sql.LEXICAL_CANDIDATES, "m") == recall_sql._CANDIDATES_POSTGRESQL


async def test_inserts_and_deletes_of_memories_count_them(memory: popagent.LongTermMemory) -> None:
    """No trigger counts inserted or deleted memories in recall's statistics (the
    statement-level ones went, see above): every statement that does either counts them
    (``store.recall_stats.counted``); ``tests/test_recall_statistics.py`` checks the counts."""
    found, wrong = 0, []
    for module, name, text in _statements():
        clean = strip(text)
        if not re.search(r"\b(INSERT\s+INTO|DELETE\s+FROM)\s+popagent_memories\b", clean, re.I):
            continue
        found += 1
        counts = {"popagent_resource_stats", "popagent_lexeme_stats"} <= writes(clean)
        if not counts and (module, name) not in UNCOUNTED_DELETES:
            wrong.append(f"{module}.{name}")
    assert found >= 12, "the scan should see the inserts and deletes"
    assert wrong == [], f"statements that leave recall's statistics behind: {wrong}"


# A temporary (staging) table named after FROM, JOIN or UPDATE, and its alias if any.
_STAGED = re.compile(
    r"\b(?:FROM|JOIN|UPDATE)\s+(import_\w+)(?:\s+(?:AS\s+)?"
    r"(?!(?:WHERE|SET|ON|USING|JOIN|LEFT|RIGHT|FULL|INNER|CROSS|ORDER|GROUP|LIMIT|WINDOW)\b)"
    r"([a-z_]\w*))?",
    re.I,
)


def test_no_subquery_correlates_a_distributed_table_with_a_staging_table() -> None:
    """An import stages its file in temporary tables, which live on the coordinator
    alone; Citus refuses a query level over a distributed table that refers to a row
    of an enclosing level's staging table (every import failed: "found no worker with
    all shard placements"). Such a level reads its rows in one set instead."""
    seen, wrong = 0, []
    for module, name, text in _statements():
        clean = strip(text)
        staged = {m.group(2) or m.group(1) for m in _STAGED.finditer(clean)}
        if not staged:
            continue
        for reference in references(clean):
            if reference.table in REFERENCE_TABLES:
                continue
            seen += 1
            here = level(clean, reference.position)
            defined = {m.group(2) or m.group(1) for m in _STAGED.finditer(here)}
            outer = sorted(a for a in staged - defined if re.search(rf"\b{a}\.", here))
            if outer:
                wrong.append(f"{module}.{name}: {reference} refers to {outer}")
    assert seen >= 5, "the scan should see the import's statements"
    assert wrong == [], f"distributed tables correlated with staging tables: {wrong}"


def test_conflicts_are_told_without_constraint_names() -> None:
    """Citus reports a unique violation without the constraint's name: the error a
    caller gets must follow from what was written (``memories.conflict_error``)."""
    sources = sorted(_SRC.rglob("*.py"))
    assert len(sources) > 50
    named = [str(p.relative_to(_SRC)) for p in sources if "constraint_name" in p.read_text()]
    assert named == [], f"conflicts told by constraint name in {named}"


async def test_a_conflict_says_what_was_taken(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    """A taken key and an identical keyless fact are told apart on every database (on a
    Citus cluster a taken key was reported as an identical keyless fact)."""
    await memory.create_fact(resource, "Works at the harbour", key="work.place")
    await memory.create_fact(resource, "Keeps bees")
    with pytest.raises(popagent.ConflictError, match="a fact with this key already exists"):
        await memory.create_fact(resource, "Works at the mill", key="work.place")
    with pytest.raises(popagent.ConflictError, match="an identical fact without a key"):
        await memory.create_fact(resource, "Keeps bees")


_PLAN_BLOCK = re.compile(r"```sql\n(.*?create_distributed_table.*?)```", re.DOTALL)


async def test_the_documented_plan_distributes_every_table(
    memory: popagent.LongTermMemory,
) -> None:
    """docs/scaling.md's plan: every table co-located by ``resource_id`` with the
    sessions (or a reference table), with the triggers allowed first."""
    blocks = _PLAN_BLOCK.findall((_DOCS / "scaling.md").read_text(encoding="utf-8"))
    assert len(blocks) == 1, "one SQL block holds the plan"
    plan = re.sub(r"--[^\n]*", "", blocks[0])
    reference = re.findall(r"create_reference_table\('(\w+)'\)", plan)
    calls_ = re.findall(r"create_distributed_table\(([^)]*)\)", plan)
    distributed = {}
    for args in calls_:
        parts = [a.strip() for a in args.split(",")]
        distributed[parts[0].strip("'")] = parts[1:]
    assert set(reference) == REFERENCE_TABLES
    assert set(distributed) == await _distributed(memory), "the plan misses or adds a table"
    first = plan.index("create_distributed_table")
    assert distributed["popagent_sessions"] == ["'resource_id'"]
    assert plan.index("create_distributed_table('popagent_sessions'") == first
    for table, rest in distributed.items():
        if table != "popagent_sessions":
            assert rest == ["'resource_id'", "colocate_with => 'popagent_sessions'"], table
    allowed = plan.find("SET citus.enable_unsafe_triggers = on;")
    assert 0 <= allowed < first, "the plan allows the triggers before it distributes a table"


async def test_updates_and_deletes_keep_stable_functions_out_of_case_and_coalesce(
    memory: popagent.LongTermMemory,
) -> None:
    """Citus evaluates a stable function of an UPDATE or DELETE once, on the coordinator,
    but refuses one inside CASE or COALESCE: using a secret (``coalesce(%(now)s, now())``)
    failed, and so did every agent turn that read one. A reference table is no
    exception: every key's request failed on ``popagent_api_keys``."""
    volatility = await _volatility(memory)
    tables = set(await _tables(memory))
    seen, wrong = 0, []
    for module, name, text in await _sql_and_functions(memory):
        for table, part in conditional_parts(strip(text)):
            if table not in tables:
                continue
            seen += 1
            bad = sorted(f for f in calls(part) if volatility.get(f, "i") != "i")
            if bad:
                wrong.append(f"{module}.{name}: {bad}")
    assert seen >= 1, "the scan should see the conditional expressions of writes"
    assert wrong == [], f"stable or volatile functions in CASE or COALESCE of writes: {wrong}"


# What Citus refused on a cluster, each found by the parse tree where the scan of
# names saw nothing: a stable operator in DO UPDATE SET (every failed login
# answered 500), ``now()`` inside CASE of an UPDATE of a reference table, in a
# modifying CTE (every key's request was refused), a stable operator given a
# column in an UPDATE's SET (every read that refreshes a LangGraph item's TTL).
_REFUSED_BY_CITUS = {
    "login failures": (
        """
        INSERT INTO popagent_login_failures AS f (client, window_started, failures)
        VALUES (%(client)s, now(), 1)
        ON CONFLICT (client) DO UPDATE SET
            failures = CASE WHEN f.window_started <= EXCLUDED.window_started
                                 - %(window)s::interval
                            THEN 1 ELSE f.failures + 1 END
        """,
        ("popagent_login_failures", "do update", "timestamptz_mi_interval"),
    ),
    "key bucket": (
        """
        WITH used AS (
            UPDATE popagent_api_keys k SET
                rate_at = CASE WHEN k.rate_tokens IS NULL THEN NULL
                               ELSE greatest(now(), k.rate_at) END
            WHERE k.key_sha256 = %(key_sha256)s
            RETURNING k.id
        )
        SELECT id FROM used
        """,
        ("popagent_api_keys", "case", "now"),
    ),
    "fact expiry": (
        """
        UPDATE popagent_memories m
        SET expires_at = now() + t.minutes * interval '1 minute'
        FROM unnest(%(ids)s::bigint[], %(minutes)s::float8[]) AS t(id, minutes)
        WHERE m.resource_id = %(resource_id)s AND m.id = t.id AND m.kind = 'fact'
          AND m.expires_at > now()
        """,
        ("popagent_memories", "column", "timestamptz_pl_interval"),
    ),
}


async def _write_rule_breaches(
    memory: popagent.LongTermMemory, texts: list[tuple[str, str, str]]
) -> tuple[set[tuple[str, str]], list[tuple[str, str, tuple[str, str, str]]]]:
    """Which of ``texts`` PostgreSQL prepared, and each breach of Citus's rules for
    writes (``sql_tree.write_rule_breaches``) in them, over every popagent table."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT c.oid::text AS oid, c.relname FROM pg_class c"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"
            " AND c.relname LIKE 'popagent\\_%'"
        )
        tables = {r["oid"]: r["relname"] for r in await cur.fetchall()}
        cur = await conn.execute(
            "SELECT oid::text AS oid, proname, provolatile FROM pg_proc WHERE provolatile <> 'i'"
        )
        rows = await cur.fetchall()
        mutable = {r["oid"]: r["proname"] for r in rows}
        stable = {r["oid"] for r in rows if r["provolatile"] == "s"}
        parsed, found = set(), []
        for module, name, text in texts:
            tree = await parse_tree(conn, text)
            if tree is None:
                continue
            parsed.add((module, name))
            found += [(module, name, b) for b in write_rule_breaches(tree, tables, mutable, stable)]
    assert len(tables) >= 15, "the popagent tables should be there"
    return parsed, found


async def test_the_parse_tree_finds_what_citus_refused(memory: popagent.LongTermMemory) -> None:
    """The statements Citus refused on a cluster, in their earlier forms, each breach
    the rule it broke: by an operator's function, in a modifying CTE, on a
    reference table."""
    texts = [("refused", name, text) for name, (text, _) in _REFUSED_BY_CITUS.items()]
    parsed, found = await _write_rule_breaches(memory, texts)
    assert parsed == {("refused", name) for name in _REFUSED_BY_CITUS}
    assert sorted(found) == sorted(
        ("refused", name, breach) for name, (_, breach) in _REFUSED_BY_CITUS.items()
    )


async def test_writes_run_no_mutable_function_or_operator_where_citus_refuses_one(
    memory: popagent.LongTermMemory,
) -> None:
    """Every statement of ``store/`` that PostgreSQL prepares alone, read from its parse
    tree: nothing that is not immutable, function or operator, inside CASE or
    COALESCE of an UPDATE or DELETE, nor in ``ON CONFLICT ... DO UPDATE``, and no
    stable one given a column in an UPDATE's SET or the conditions of an UPDATE or
    DELETE, of any popagent table, distributed or reference."""
    statements = _statements()
    parsed, found = await _write_rule_breaches(memory, statements)
    credentials = {("keys", "AUTHENTICATE_KEY"), ("keys", "SPEND_KEY"), ("keys", "RECORD_FAILURE")}
    assert credentials <= parsed, "the credential statements should be read"
    assert len(parsed) >= 0.8 * len(statements), f"only {len(parsed)} of {len(statements)} read"
    wrong = [
        f"{module}.{name}: {function} in {rule} of {table}"
        for module, name, (table, rule, function) in found
    ]
    assert wrong == [], f"not immutable where Citus refuses it: {wrong}"


# A setting a migration's SQL reads; the row-level policies' resource (0018) is left
# out: multi-resource mode is refused on Citus (``store.tenant.require_boundary``).
_READ_SETTING = re.compile(r"current_setting\('(popagent\.\w+)'")
_SET_CONFIG = re.compile(r"set_config\('(popagent\.\w+)'")


def test_a_mark_a_trigger_reads_is_set_so_that_citus_passes_it_on() -> None:
    """A row trigger fires on the worker that holds the row's shard, in Citus's own
    connection: a transaction's mark set by ``set_config()`` stays on the
    coordinator (every TTL refresh on a cluster kept a fact version). Each setting
    the migrations read, but the tenant's, is set by ``SET LOCAL`` in ``store/``,
    which Citus passes on to the nodes once ``citus.propagate_set_commands`` is
    ``local``, and the statements that set it say so first."""
    migrations = "\n".join(p.read_text() for p in (_SRC / "store" / "migrations").glob("*.sql"))
    read = set(_READ_SETTING.findall(migrations)) - {"popagent.resource_id"}
    assert "popagent.extending_expiry" in read
    store = {p.name: p.read_text() for p in (_SRC / "store").glob("*.py")}
    by_function = {s for text in store.values() for s in _SET_CONFIG.findall(text)}
    assert read & by_function == set(), "set_config() of a setting a trigger reads"
    for setting in read:
        setters = [name for name, text in store.items() if f"SET LOCAL {setting}" in text]
        assert setters, f"{setting} is never set by SET LOCAL"
        for name in setters:
            assert "citus.propagate_set_commands = 'local'" in store[name], name
