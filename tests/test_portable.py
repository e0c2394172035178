"""``popagent export`` / ``import`` and the Mem0 importer, against real PostgreSQL.

A resource with everything (facts with versions, provenance and expiry, a
deleted fact's history, episodes, sessions with turns and messages,
observations, settings, a secret) is exported, imported into another resource
and into a second database, and compared row by row with ids mapped away.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.rows import dict_row

import popagent
from popagent.cli import main
from popagent.errors import ConflictError, SecretRefusedError, ValidationError
from popagent.models import MemoryFilter, Provenance
from popagent.observe import MemorySettingsStore
from popagent.portable import (
    ImportReport,
    export_resource,
    import_mem0,
    import_resource,
)
from popagent.secrets import SecretCipher, SecretStore
from popagent.store import observations as obs_sql
from popagent.store import session_items
from popagent.threads import ThreadStore
from tests.observe_support import insert_chunk, insert_observed

SECRET_VALUE = "s3cr3t-value-for-the-export-test"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
CALLER_MODEL = "caller:langgraph:langgraph:test-model:3"
OWN_MODEL = "popagent-own-test-model"


# --- databases ---------------------------------------------------------------------------------


@pytest.fixture
def cipher() -> SecretCipher:
    return SecretCipher(os.urandom(32))


# --- a resource with everything ----------------------------------------------------------------


async def populate(memory: popagent.LongTermMemory, cipher: SecretCipher, resource: str) -> None:
    threads = ThreadStore(memory.pool)
    first = await threads.append_message(
        resource, "chat-1", "user", "I moved to Lisbon; remember it.", turn="start"
    )
    assert first.turn_id is not None
    call = {"type": "tool_call", "id": "call_1", "name": "remember", "arguments": "{}"}
    await threads.append_message(
        resource, "chat-1", "assistant", "", parts=[call], turn_id=first.turn_id
    )
    final = await threads.append_message(
        resource, "chat-1", "assistant", "Noted: Lisbon.", turn="complete", turn_id=first.turn_id
    )
    failed = await threads.append_message(resource, "chat-1", "user", "And?", turn="start")
    assert failed.turn_id is not None
    await threads.create_session(resource, "chat-2", title="Plans", metadata={"pinned": True})
    plain = await threads.append_message(resource, "chat-2", "user", "A plain note.")
    async with memory.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_turns SET status = 'failed', ended_at = statement_timestamp() "
            "WHERE resource_id = %s AND turn_id = %s",
            (resource, failed.turn_id),
        )
        _, group = await insert_observed(
            conn,
            resource,
            "chat-1",
            first.id,
            final.id,
            "* 🔴 User moved to Lisbon",
            tokens=7,
            message_tokens=30,
        )
        head = await obs_sql.insert_log(
            conn,
            resource,
            "chat-1",
            generation=1,
            origin="reflection",
            observations="* Lives in Lisbon",
            observation_tokens=4,
            last_observed_message_id=final.id,
            covered_group_ids=[group.id],
            next_reflection_tokens=500,
        )
        await insert_chunk(
            conn,
            head,
            failed.id,
            failed.id,
            "* 🔴 User asked a follow-up",
            tokens=5,
            message_tokens=3,
        )
        await obs_sql.record_actor(conn, resource, "chat-1", "openai:gpt-test")
        item = {"type": "message", "role": "user", "content": "Hello from an SDK session"}
        await session_items.append_items(
            conn,
            resource,
            "sdk-1",
            [{"role": "user", "content": "Hello from an SDK session", "parts": [], "item": item}],
        )

    provenance = Provenance(
        origin="agent", turn_id=first.turn_id, message_ids=(first.id,), tool_call_id="call_1"
    )
    await memory.remember(
        resource, "Lives in Porto", key="home.city", session_id="chat-1", provenance=provenance
    )
    await memory.remember(
        resource, "Lives in Lisbon", key="home.city", session_id="chat-1", provenance=provenance
    )
    await memory.remember(
        resource,
        "Is on holiday this week",
        importance=0.8,
        expires_at=datetime.now(UTC) + timedelta(days=7),
    )
    drink = await memory.remember(resource, "Prefers green tea", key="drink", importance=0.3)
    gone = await memory.remember(resource, "Owns a red bicycle", key="bike")
    await memory.update_fact(resource, gone.memory.id, content="Owns a blue bicycle")
    await memory.delete(resource, gone.memory.id, kind="fact", origin="cli")
    await memory.retain_episode(
        resource,
        "chat-1",
        "I moved to Lisbon; remember it.",
        "Noted: Lisbon.",
        provenance=Provenance(
            origin="turn", turn_id=first.turn_id, message_ids=(first.id, final.id)
        ),
    )
    note = await memory.retain_episode(resource, "chat-2", "A plain note.", "Plain reply.")
    assert plain.turn_id is None and note is not None
    # Vectors made with a caller's own model (LangGraph's ``index=``): two chunks of a
    # fact, one of an episode; values float32 holds exactly and not.
    fact = drink.memory
    await memory.write_caller_vectors(
        resource, fact.id, fact.content_sha256, CALLER_MODEL, [[0.1, -2.5, 3e-8], [1.0, 0.0, 7.0]]
    )
    await memory.write_caller_vectors(
        resource, note.id, note.content_sha256, CALLER_MODEL, [[1 / 3, 2.0, -3.4028235e38]]
    )
    # popagent's own model's vector of the fact: remade after an import, never exported.
    async with memory.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO popagent_memory_embeddings (resource_id, memory_id, model, chunk, "
            "dimensions, content_sha256, embedding) VALUES (%s, %s, %s, 0, 3, %s, '[1,2,3]')",
            (resource, fact.id, OWN_MODEL, fact.content_sha256),
        )
    await MemorySettingsStore(memory.pool).update(
        resource, observation_threshold_tokens=5_000, temporal_markers=True
    )
    await SecretStore(memory.pool, cipher).set(resource, "API_TOKEN", SECRET_VALUE)


# --- comparing resources -----------------------------------------------------------------------

_TABLES = {
    "facts": "SELECT * FROM popagent_memories WHERE resource_id = %(r)s AND kind = 'fact'",
    "episodes": "SELECT * FROM popagent_memories WHERE resource_id = %(r)s AND kind = 'episode'",
    "versions": "SELECT * FROM popagent_fact_versions WHERE resource_id = %(r)s",
    "sessions": "SELECT * FROM popagent_sessions WHERE resource_id = %(r)s",
    "turns": "SELECT * FROM popagent_turns WHERE resource_id = %(r)s",
    "messages": "SELECT * FROM popagent_messages WHERE resource_id = %(r)s",
    "logs": "SELECT * FROM popagent_observation_logs WHERE resource_id = %(r)s",
    "groups": "SELECT * FROM popagent_observation_groups WHERE resource_id = %(r)s",
    "actors": "SELECT * FROM popagent_observation_actors WHERE resource_id = %(r)s",
    "settings": "SELECT * FROM popagent_memory_settings WHERE resource_id = %(r)s",
    "secrets": "SELECT * FROM popagent_secrets WHERE resource_id = %(r)s",
    "vectors": "SELECT memory_id, model, chunk, dimensions, content_sha256, embedding::text "
    "FROM popagent_memory_embeddings WHERE resource_id = %(r)s AND model LIKE 'caller:%%'",
}


async def raw_rows(url: str, resource: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the resource, ids and all (equal only if nothing changed)."""
    async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
        out = {}
        for name, query in _TABLES.items():
            cur = await conn.execute(query, {"r": resource})
            rows = await cur.fetchall()
            for row in rows:
                row.pop("search_vector", None)
            out[name] = sorted(rows, key=repr)
        return out


def portable_view(rows: dict[str, list[dict[str, Any]]]) -> dict[str, list[Any]]:
    """The resource with every id replaced by what it points at, and without the
    resource ID and the per-database bookkeeping: equal across resources and databases."""
    messages = {m["id"]: m for m in rows["messages"]}
    turns = {t["turn_id"]: t for t in rows["turns"]}
    groups = {g["id"]: g for g in rows["groups"]}
    logs = {g["id"]: g for g in rows["logs"]}
    facts = {f["id"]: f for f in rows["facts"]}
    memories = {m["id"]: m for m in (*rows["facts"], *rows["episodes"])}

    def message(id: int | None) -> Any:
        m = messages.get(id) if id is not None else None
        return None if m is None else (m["session_id"], m["role"], m["content"], m["created_at"])

    def turn(id: int | None) -> Any:
        t = turns.get(id) if id is not None else None
        return None if t is None else (t["session_id"], t["started_at"])

    def provenance(row: dict[str, Any]) -> Any:
        return (
            row["origin"],
            turn(row["turn_id"]),
            [message(m) for m in row["message_ids"] or []],
            row["tool_call_id"],
        )

    def memory(row: dict[str, Any]) -> Any:
        keep = ("session_id", "kind", "key", "content", "content_sha256", "importance")
        times = ("created_at", "updated_at", "expires_at", "version")
        return (*(row[k] for k in keep), *(row[k] for k in times), provenance(row))

    def version(row: dict[str, Any]) -> Any:
        fact = facts.get(row["fact_id"])
        owner = fact["key"] if fact else ("deleted", row["key"])
        fields = ("version", "key", "content", "importance", "expires_at", "session_id")
        ends = ("valid_from", "valid_to", "ended", "ended_origin", "ended_session_id")
        return (owner, *(row[k] for k in fields), *(row[k] for k in ends), provenance(row))

    def owner(memory_id: int) -> tuple[str, str]:
        """A memory by what it is: its kind and content."""
        return memories[memory_id]["kind"], memories[memory_id]["content"]

    def drop(row: dict[str, Any], *names: str) -> Any:
        return sorted((k, repr(v)) for k, v in row.items() if k not in {"resource_id", *names})

    view: dict[str, list[Any]] = {
        "facts": sorted(map(memory, rows["facts"]), key=repr),
        "episodes": sorted(map(memory, rows["episodes"]), key=repr),
        "versions": sorted(map(version, rows["versions"]), key=repr),
        "sessions": [drop(s) for s in rows["sessions"]],
        "turns": sorted((drop(t, "turn_id") for t in rows["turns"]), key=repr),
        "messages": sorted(
            ((*drop(m, "id", "turn_id"), turn(m["turn_id"])) for m in rows["messages"]),
            key=repr,
        ),
        "logs": sorted(
            (
                (
                    *drop(lg, "id", "last_observed_message_id", "covered_group_ids"),
                    message(lg["last_observed_message_id"]),
                    [groups[g]["observations"] for g in lg["covered_group_ids"]],
                )
                for lg in rows["logs"]
            ),
            key=repr,
        ),
        "groups": sorted(
            (
                (
                    *drop(g, "id", "log_id", "first_message_id", "last_message_id"),
                    logs[g["log_id"]]["generation"],
                    message(g["first_message_id"]),
                    message(g["last_message_id"]),
                )
                for g in rows["groups"]
            ),
            key=repr,
        ),
        "actors": [drop(a) for a in rows["actors"]],
        "settings": [drop(s, "version", "updated_at") for s in rows["settings"]],
        "secrets": [drop(s) for s in rows["secrets"]],
        "vectors": sorted(
            ((*owner(v["memory_id"]), *drop(v, "memory_id")) for v in rows["vectors"]),
            key=repr,
        ),
    }
    return view


async def export_text(
    memory: popagent.LongTermMemory, resource: str, *, include_secrets: bool = False
) -> str:
    out = io.StringIO()
    await export_resource(memory.pool, resource, out, include_secrets=include_secrets)
    return out.getvalue()


def everything_unchanged(report: ImportReport) -> bool:
    return report.total("added") == 0 and report.total("updated") == 0


# --- round trips -------------------------------------------------------------------------------


async def test_export_imports_into_another_resource_and_database_and_again_changes_nothing(
    memory: popagent.LongTermMemory,
    scratch: popagent.LongTermMemory,
    scratch_url: str,
    database_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    text = await export_text(memory, resource)
    lines = text.splitlines()
    head = json.loads(lines[0])
    assert head["format"] == "popagent-export" and head["version"] == 1
    assert head["resource_id"] == resource and head["popagent_version"]
    types = [json.loads(line)["type"] for line in lines[1:]]
    assert types == sorted(types, key=popagent.portable.RECORD_TYPES.index)
    assert set(types) == set(popagent.portable.RECORD_TYPES) - {"secret"}
    assert SECRET_VALUE not in text and "API_TOKEN" not in text
    # The vectors a caller made are exported, tied to their memory's record by its id;
    # popagent's own model's are not.
    records = [json.loads(x) for x in lines[1:]]
    vectors = [r for r in records if r["type"] == "caller_vector"]
    (drink,) = [r for r in records if r["type"] == "fact" and r["key"] == "drink"]
    (note,) = [r for r in records if r["type"] == "episode" and "plain note" in r["content"]]
    assert [(v["memory_id"], v["model"], v["chunk"]) for v in vectors] == [
        (drink["id"], CALLER_MODEL, 0),
        (drink["id"], CALLER_MODEL, 1),
        (note["id"], CALLER_MODEL, 0),
    ]
    assert vectors[0]["content_sha256"] == drink["content_sha256"]
    assert OWN_MODEL not in text
    # Each number as float32 holds it, in its shortest exact form.
    assert [v["embedding"] for v in vectors][:2] == [[0.1, -2.5, 3e-8], [1.0, 0.0, 7.0]]
    assert vectors[2]["embedding"] == [0.33333334, 2.0, -3.4028235e38]  # float32's largest
    assert await export_text(memory, resource) != text  # the header's time only
    assert (await export_text(memory, resource)).splitlines()[1:] == lines[1:]

    source = portable_view(await raw_rows(database_url, resource))
    assert len(source["versions"]) == 3 and len(source["groups"]) == 2
    assert len(source["vectors"]) == 3

    into_other = await import_resource(memory.pool, lines, resource_id=other_resource)
    assert into_other.counts["fact"]["added"] == 3
    assert into_other.counts["fact_version"]["added"] == 3
    assert into_other.counts["message"]["added"] == 6
    assert into_other.counts["settings"]["added"] == 1
    assert into_other.counts["caller_vector"]["added"] == 3
    other_rows = await raw_rows(database_url, other_resource)
    expected = {**source, "secrets": []}
    assert portable_view(other_rows) == expected

    into_scratch = await import_resource(scratch.pool, lines)
    assert into_scratch.resource_ids == (resource,)
    scratch_rows = await raw_rows(scratch_url, resource)
    assert portable_view(scratch_rows) == expected

    # Idempotent: a second import adds nothing, and no row changes at all; so is an
    # import back into the resource it came from.
    source_rows = await raw_rows(database_url, resource)
    home = await import_resource(memory.pool, lines)
    assert everything_unchanged(home) and home.total("skipped") == 0
    assert await raw_rows(database_url, resource) == source_rows
    again = await import_resource(memory.pool, lines, resource_id=other_resource)
    assert everything_unchanged(again) and again.total("unchanged") == into_other.total("added")
    assert await raw_rows(database_url, other_resource) == other_rows
    again = await import_resource(scratch.pool, lines)
    assert everything_unchanged(again)
    assert await raw_rows(scratch_url, resource) == scratch_rows

    # Imported memory works: recall, expiry, and the deleted fact's history restores.
    recalled = await scratch.recall(resource, "where do I live?")
    assert recalled[0].memory.content == "Lives in Lisbon"
    deleted = [v for v in scratch_rows["versions"] if v["key"] == "bike"]
    fact_id = deleted[0]["fact_id"]
    history = await scratch.fact_history(resource, fact_id)
    assert [v.content for v in history] == ["Owns a blue bicycle", "Owns a red bicycle"]
    restored = await scratch.restore_fact(resource, fact_id, history[0].version)
    assert restored.id == fact_id and restored.content == "Owns a blue bicycle"
    restored_rows = await raw_rows(scratch_url, resource)
    again = await import_resource(scratch.pool, lines)  # the restored history is matched
    assert everything_unchanged(again)
    assert await raw_rows(scratch_url, resource) == restored_rows
    lisbon = await scratch.list(resource, MemoryFilter(kind="fact", key="home.city"))
    assert lisbon[0].version == 2 and lisbon[0].origin == "agent"
    assert lisbon[0].tool_call_id == "call_1" and len(lisbon[0].message_ids) == 1


async def test_secrets_travel_only_when_asked_and_stay_encrypted(
    memory: popagent.LongTermMemory,
    scratch: popagent.LongTermMemory,
    scratch_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    text = await export_text(memory, resource, include_secrets=True)
    assert SECRET_VALUE not in text
    (secret,) = [json.loads(x) for x in text.splitlines()[1:] if '"type":"secret"' in x]
    assert secret["name"] == "API_TOKEN" and secret["key_id"] == cipher.key_id
    report = await import_resource(scratch.pool, text.splitlines())
    assert report.counts["secret"]["added"] == 1
    assert await SecretStore(scratch.pool, cipher).reveal(resource, "API_TOKEN") == SECRET_VALUE
    again = await import_resource(scratch.pool, text.splitlines())
    assert again.counts["secret"] == {"added": 0, "updated": 0, "unchanged": 1, "skipped": 0}

    # Sealed for its resource: another resource could never decrypt it.
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, text.splitlines(), resource_id=other_resource)
    assert caught.value.field.startswith("line ") and caught.value.field.endswith("secret.name")
    assert all(not rows for rows in (await raw_rows(scratch_url, other_resource)).values())


# --- refusals ----------------------------------------------------------------------------------


def _corrupt(lines: list[str], record_type: str, **changes: Any) -> tuple[list[str], int]:
    """``lines`` with the first ``record_type`` record changed; its line number."""
    for i, line in enumerate(lines):
        if i and json.loads(line)["type"] == record_type:
            record = {**json.loads(line), **changes}
            return [*lines[:i], json.dumps(record), *lines[i + 1 :]], i + 1
    raise AssertionError(f"no {record_type} record")


@pytest.mark.parametrize(
    ("record_type", "changes", "field", "error"),
    [
        ("fact", {"content": f"my token is {TOKEN}"}, "fact.content", SecretRefusedError),
        ("fact", {"key": f"token.{TOKEN}"}, "fact.key", SecretRefusedError),
        ("fact", {"content": "x" * 2001}, "fact.content", ValidationError),
        ("fact", {"importance": 2}, "fact.importance", ValidationError),
        ("fact_version", {"origin": "elsewhere"}, "fact_version.origin", ValidationError),
        ("message", {"role": "narrator"}, "message.role", ValidationError),
        ("message", {"created_at": "yesterday"}, "message.created_at", ValidationError),
        ("message", {"session_id": "no-such"}, "message.session_id", ValidationError),
        ("turn", {"status": "running"}, "turn.ended_at", ValidationError),
        ("episode", {"content": "   "}, "episode.content", ValidationError),
        (
            "settings",
            {"settings": {"observation_threshold_tokens": 5}},
            "settings.observation_threshold_tokens",
            ValidationError,
        ),
        ("observation_group", {"log_id": 1}, "observation_group.log_id", ValidationError),
        ("session", {"type": "sesion"}, "record.type", ValidationError),
        # A caller's vector: checked as the library's write of one, and tied to a memory.
        (
            "caller_vector",
            {"embedding": [3.41e38, 0, 0]},
            "caller_vector.embedding",
            ValidationError,
        ),
        ("caller_vector", {"embedding": [1, "2", 3]}, "caller_vector.embedding", ValidationError),
        ("caller_vector", {"embedding": [True, 0, 0]}, "caller_vector.embedding", ValidationError),
        ("caller_vector", {"embedding": []}, "caller_vector.embedding", ValidationError),
        (
            "caller_vector",
            {"embedding": [0.5] * 16_001},
            "caller_vector.embedding",
            ValidationError,
        ),
        ("caller_vector", {"embedding": "[1,2,3]"}, "caller_vector.embedding", ValidationError),
        ("caller_vector", {"model": "test-model"}, "caller_vector.model", ValidationError),
        ("caller_vector", {"model": "caller:" + "m" * 194}, "caller_vector.model", ValidationError),
        ("caller_vector", {"chunk": 1000}, "caller_vector.chunk", ValidationError),
        ("caller_vector", {"chunk": -1}, "caller_vector.chunk", ValidationError),
        (
            "caller_vector",
            {"content_sha256": "AB"},
            "caller_vector.content_sha256",
            ValidationError,
        ),
        ("caller_vector", {"memory_id": 2**40}, "caller_vector.memory_id", ValidationError),
        ("caller_vector", {"memory_id": None}, "caller_vector.memory_id", ValidationError),
        ("caller_vector", {"dimensions": 3}, "caller_vector.dimensions", ValidationError),
    ],
)
async def test_a_bad_record_names_its_line_and_field_and_nothing_is_written(
    memory: popagent.LongTermMemory,
    database_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
    record_type: str,
    changes: dict[str, Any],
    field: str,
    error: type[ValidationError],
) -> None:
    await populate(memory, cipher, resource)
    lines, lineno = _corrupt(
        (await export_text(memory, resource)).splitlines(), record_type, **changes
    )
    with pytest.raises(error) as caught:
        await import_resource(memory.pool, lines, resource_id=other_resource)
    assert caught.value.field == f"line {lineno}: {field}"
    assert f"line {lineno}" in str(caught.value)
    assert all(not rows for rows in (await raw_rows(database_url, other_resource)).values())


@pytest.fixture
async def exported(memory: popagent.LongTermMemory, cipher: SecretCipher, resource: str) -> str:
    """The export of a resource with everything (``populate``)."""
    await populate(memory, cipher, resource)
    return await export_text(memory, resource)


async def test_caller_vectors_go_to_their_memory_whole_or_not_at_all(
    memory: popagent.LongTermMemory,
    database_url: str,
    resource: str,
    other_resource: str,
    exported: str,
) -> None:
    lines = exported.splitlines()
    # The chunks of one memory and model have one size: the first that differs is named.
    bad, lineno = _corrupt(lines, "caller_vector", embedding=[1.0, 2.0])
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, bad, resource_id=other_resource)
    assert caught.value.field == f"line {lineno + 1}: caller_vector.embedding"
    # A memory has one id: a fact's and an episode's may not be the same.
    records = [json.loads(x) for x in lines]
    fact_id = next(r["id"] for r in records if r.get("type") == "fact")
    bad, lineno = _corrupt(lines, "episode", id=fact_id)
    bad, vector_line = _corrupt(bad, "caller_vector", memory_id=fact_id)
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, bad, resource_id=other_resource)
    assert caught.value.field == f"line {vector_line}: caller_vector.memory_id"
    assert all(not rows for rows in (await raw_rows(database_url, other_resource)).values())

    # Vectors made from other content than their memory holds (the hash they name) are
    # skipped, all of that memory's; the other memory's are written.
    stale, _ = _corrupt(lines, "caller_vector", content_sha256="0" * 64)
    report = await import_resource(memory.pool, stale, resource_id=other_resource)
    outcomes = {"added": 1, "updated": 0, "unchanged": 0, "skipped": 2}
    assert report.counts["caller_vector"] == outcomes
    assert len((await raw_rows(database_url, other_resource))["vectors"]) == 1
    # The whole file then adds the fact's two and leaves the episode's.
    report = await import_resource(memory.pool, lines, resource_id=other_resource)
    outcomes = {"added": 2, "updated": 0, "unchanged": 1, "skipped": 0}
    assert report.counts["caller_vector"] == outcomes
    source = portable_view(await raw_rows(database_url, resource))
    assert (
        portable_view(await raw_rows(database_url, other_resource))["vectors"] == source["vectors"]
    )
    # A memory that has other vectors of the model in the target keeps them.
    (drink,) = await memory.list(other_resource, MemoryFilter(kind="fact", key="drink"))
    await memory.write_caller_vectors(
        other_resource, drink.id, drink.content_sha256, CALLER_MODEL, [[9.0, 9.0, 9.0]]
    )
    kept = await raw_rows(database_url, other_resource)
    report = await import_resource(memory.pool, lines, resource_id=other_resource)
    outcomes = {"added": 0, "updated": 0, "unchanged": 1, "skipped": 2}
    assert report.counts["caller_vector"] == outcomes
    assert await raw_rows(database_url, other_resource) == kept


async def test_broken_files_are_refused(
    memory: popagent.LongTermMemory,
    database_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    lines = (await export_text(memory, resource)).splitlines()
    cases: list[tuple[list[str], str]] = [
        ([*lines[:3], lines[3][:-5], *lines[4:]], "line 4"),
        (lines[1:], "line 1: header.format"),
        (
            [json.dumps({**json.loads(lines[0]), "version": 2}), *lines[1:]],
            "line 1: header.version",
        ),
        ([], "line 1"),
        ([*lines, lines[-1]], f"line {len(lines) + 1}: caller_vector.chunk"),
    ]
    for broken, field in cases:
        with pytest.raises(ValidationError) as caught:
            await import_resource(memory.pool, broken, resource_id=other_resource)
        assert caught.value.field == field, caught.value
    rows = await raw_rows(database_url, other_resource)
    assert all(not r for r in rows.values())


async def test_a_different_value_for_a_key_is_a_conflict_and_rolls_everything_back(
    memory: popagent.LongTermMemory,
    database_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    lines = (await export_text(memory, resource)).splitlines()
    await memory.remember(other_resource, "Prefers black coffee", key="drink")
    before = await raw_rows(database_url, other_resource)
    with pytest.raises(ConflictError, match=r"line \d+: fact\.key"):
        await import_resource(memory.pool, lines, resource_id=other_resource)
    # The sessions, written before the facts in the same transaction, are gone too.
    assert await raw_rows(database_url, other_resource) == before


async def test_dry_run_counts_and_writes_nothing(
    memory: popagent.LongTermMemory,
    database_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    lines = (await export_text(memory, resource)).splitlines()
    report = await import_resource(memory.pool, lines, resource_id=other_resource, dry_run=True)
    assert report.dry_run and report.counts["fact"]["added"] == 3
    assert all(not rows for rows in (await raw_rows(database_url, other_resource)).values())


async def test_a_session_present_with_other_messages_is_skipped_not_merged(
    memory: popagent.LongTermMemory,
    database_url: str,
    cipher: SecretCipher,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    lines = (await export_text(memory, resource)).splitlines()
    threads = ThreadStore(memory.pool)
    await threads.append_message(other_resource, "chat-2", "user", "Mine.", create_session=True)
    report = await import_resource(memory.pool, lines, resource_id=other_resource)
    assert report.skipped_sessions == ("chat-2",)
    assert report.counts["session"]["added"] == 2 and report.counts["session"]["skipped"] == 1
    stored = await threads.list_messages(other_resource, "chat-2", limit=10)
    assert [m.content for m in stored] == ["Mine."]


async def test_imported_messages_are_redacted_like_any_write(
    memory: popagent.LongTermMemory, cipher: SecretCipher, resource: str, other_resource: str
) -> None:
    await populate(memory, cipher, resource)
    lines, _ = _corrupt(
        (await export_text(memory, resource)).splitlines(), "message", content=f"use {TOKEN}"
    )
    await import_resource(memory.pool, lines, resource_id=other_resource)
    stored = await ThreadStore(memory.pool).list_messages(other_resource, "chat-1", limit=10)
    assert TOKEN not in stored[0].content and "use " in stored[0].content


# --- Mem0 --------------------------------------------------------------------------------------


def _mem0(user: str | None, *texts: str) -> list[dict[str, Any]]:
    return [
        {
            "id": str(uuid.uuid4()),
            "memory": text,
            "hash": "0" * 32,
            "metadata": {"category": "preferences"},
            "categories": ["preferences"],
            "created_at": "2024-07-20T01:30:00.000000-07:00",
            "updated_at": None,
            **({"user_id": user} if user else {}),
        }
        for text in texts
    ]


async def test_mem0_exports_import_as_facts_in_both_shapes(
    memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    get_all = {"results": _mem0(resource, "Loves  hiking in the Alps", "Is vegetarian")}
    report = await import_mem0(memory.pool, json.dumps(get_all))
    assert report.resource_ids == (resource,) and report.counts["fact"]["added"] == 2
    facts = await memory.list(resource, MemoryFilter(kind="fact"))
    assert {f.content for f in facts} == {"Loves hiking in the Alps", "Is vegetarian"}
    assert all(f.origin == "import" and f.key is None and f.importance == 0.5 for f in facts)
    assert all(f.created_at == datetime(2024, 7, 20, 8, 30, tzinfo=UTC) for f in facts)
    assert (await memory.recall(resource, "hiking"))[0].memory.content.startswith("Loves hiking")
    again = await import_mem0(memory.pool, json.dumps(get_all))
    assert again.counts["fact"]["unchanged"] == 2 and again.total("added") == 0

    plain = _mem0(None, "Has a cat named Miso", "Is vegetarian")
    with pytest.raises(ValidationError) as caught:
        await import_mem0(memory.pool, json.dumps(plain))
    assert caught.value.field == "[0].user_id"
    report = await import_mem0(memory.pool, json.dumps(plain), resource_id=other_resource)
    assert report.counts["fact"]["added"] == 2
    assert (await memory.recall(other_resource, "cat"))[0].memory.content == "Has a cat named Miso"


async def test_mem0_memories_with_credentials_are_refused_and_nothing_is_written(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    document = {"results": _mem0(resource, "Likes jazz", f"Their GitHub token is {TOKEN}")}
    with pytest.raises(SecretRefusedError) as caught:
        await import_mem0(memory.pool, json.dumps(document))
    assert caught.value.field == "results[1].memory"
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    with pytest.raises(ValidationError) as invalid:
        await import_mem0(memory.pool, json.dumps({"results": [{"id": "1"}]}), resource_id=resource)
    assert invalid.value.field == "results[0].memory"
    with pytest.raises(ValidationError, match="document"):
        await import_mem0(memory.pool, "{not json", resource_id=resource)


# --- the CLI -----------------------------------------------------------------------------------


def test_cli_export_and_import_round_trip(
    database_url: str, tmp_path: Path, resource: str, other_resource: str
) -> None:
    cli = CliRunner()

    def invoke(*args: str) -> Any:
        return cli.invoke(main, ["--database-url", database_url, *args], catch_exceptions=False)

    assert (
        invoke("--resource-id", resource, "remember", "Prefers tea", "--key", "drink").exit_code
        == 0
    )
    assert (
        invoke("--resource-id", resource, "remember", "Prefers coffee", "--key", "drink").exit_code
        == 0
    )
    out = tmp_path / "export.jsonl"
    result = invoke("export", "--resource-id", resource, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"exported {resource}: 1 fact, 1 fact_version" in result.output
    assert [json.loads(x)["type"] for x in out.read_text().splitlines()[1:]] == [
        "fact",
        "fact_version",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["export.jsonl"]  # no partial file left

    result = invoke("import", str(out), "--resource-id", other_resource)
    assert result.exit_code == 0, result.output
    assert f"imported into {other_resource}:" in result.output
    assert "fact: 1 added" in result.output and "fact_version: 1 added" in result.output
    result = invoke("--resource-id", other_resource, "import", str(out), "--json")
    report = json.loads(result.output)
    assert report["counts"]["fact"]["unchanged"] == 1 and report["counts"]["fact"]["added"] == 0
    shown = invoke("--resource-id", other_resource, "facts", "list", "--json")
    assert [f["content"] for f in json.loads(shown.output)] == ["Prefers coffee"]

    stdout = invoke("--resource-id", resource, "export")
    assert json.loads(stdout.stdout.splitlines()[0])["resource_id"] == resource

    bad = tmp_path / "bad.jsonl"
    bad.write_text(out.read_text().replace("Prefers coffee", f"token {TOKEN}"))
    result = cli.invoke(main, ["--database-url", database_url, "import", str(bad)])
    assert result.exit_code == 2 and "line 2: fact.content" in result.output

    mem0 = tmp_path / "mem0.json"
    mem0.write_text(json.dumps(_mem0(None, "Plays the cello")))
    result = invoke("import", str(mem0), "--from", "mem0", "--resource-id", other_resource)
    assert result.exit_code == 0 and "fact: 1 added" in result.output
    recalled = invoke("--resource-id", other_resource, "recall", "cello")
    assert "Plays the cello" in recalled.output
