"""``popagent import`` of large, shuffled and hostile files, against real PostgreSQL.

The import streams: a file of many batches is checked, staged and written in one
transaction (a bad last line writes nothing), a second import changes nothing,
and the lines after the header may come in any order. Every bad file, in both
formats, is exit 2 with a line-numbered error and no traceback, and nothing
written. Records are strict: a field a record type does not have is refused.
What the normal write paths screen (session metadata, titles, observation
actors) is screened on import too.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import popagent
from popagent.cli import main
from popagent.errors import ValidationError
from popagent.models import MemoryFilter
from popagent.offload import stop_processes, use_processes
from popagent.portable import export_resource, import_resource
from popagent.portable.importer import BATCH_LINES
from popagent.portable.reading import LINE_CAP, MAX_DEPTH
from popagent.portable.records import FIELDS
from popagent.secrets import SecretCipher
from tests.test_portable import populate, portable_view, raw_rows
from tests.test_recall_statistics import assert_statistics_exact

TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
T0 = "2026-02-01T10:00:00+00:00"


def header(resource: str) -> dict[str, Any]:
    return {"format": "popagent-export", "version": 1, "resource_id": resource}


def big_export(resource: str, sessions: int = 3, turns: int = 700) -> list[dict[str, Any]]:
    """Records of a resource with more lines than several batches: sessions of many
    turns (each a user and an assistant message), facts and episodes with provenance."""
    records: list[dict[str, Any]] = []
    message_id, turn_id = 100, 10
    for s in range(sessions):
        sid = f"chat-{s}"
        records.append(
            {
                "type": "session",
                "session_id": sid,
                "title": f"Chat {s}",
                "metadata": {"n": s},
                "created_at": T0,
                "updated_at": T0,
            }
        )
        for t in range(turns):
            turn_id += 1
            records.append(
                {
                    "type": "turn",
                    "session_id": sid,
                    "turn_id": turn_id,
                    "status": "completed",
                    "started_at": T0,
                    "ended_at": T0,
                }
            )
            for role, text in (("user", f"Question {s}.{t}"), ("assistant", f"Answer {s}.{t}")):
                message_id += 1
                records.append(
                    {
                        "type": "message",
                        "session_id": sid,
                        "id": message_id,
                        "turn_id": turn_id,
                        "role": role,
                        "content": text,
                        "parts": [],
                        "item": None,
                        "created_at": T0,
                    }
                )
            if t % 50 == 0:
                provenance = {
                    "origin": "agent",
                    "turn_id": turn_id,
                    "message_ids": [message_id],
                    "tool_call_id": None,
                }
                records.append(
                    {
                        "type": "fact",
                        "id": turn_id,
                        "key": f"topic.{s}.{t}",
                        "content": f"Topic {s}.{t} is settled",
                        "importance": 0.5,
                        "session_id": sid,
                        **provenance,
                        "expires_at": None,
                        "version": 1,
                        "created_at": T0,
                        "updated_at": T0,
                    }
                )
                records.append(
                    {
                        "type": "episode",
                        "id": turn_id,
                        "session_id": sid,
                        "content": f"User: Question {s}.{t}\nAssistant: Answer {s}.{t}",
                        "importance": 0.3,
                        **provenance,
                        "origin": "turn",
                        "created_at": T0,
                    }
                )
    return records


def write_file(path: Path, resource: str, records: list[dict[str, Any]]) -> Path:
    lines = [json.dumps(header(resource)), *(json.dumps(r) for r in records)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


async def cli_import(database_url: str, *args: str) -> Result:
    """``popagent --database-url URL import ARGS`` through click's runner (in a thread:
    the command runs its own event loop); a crash fails the test with its traceback."""

    def invoke() -> Result:
        return CliRunner().invoke(
            main, ["--database-url", database_url, "import", *args], catch_exceptions=False
        )

    return await asyncio.to_thread(invoke)


def nothing_in(rows: dict[str, list[dict[str, Any]]]) -> bool:
    return all(not r for r in rows.values())


# --- streaming ---------------------------------------------------------------------------------


async def test_a_file_of_many_batches_imports_in_one_transaction_and_again_changes_nothing(
    memory: popagent.LongTermMemory,
    database_url: str,
    tmp_path: Path,
    resource: str,
    other_resource: str,
) -> None:
    records = big_export(resource)
    assert len(records) > 3 * BATCH_LINES
    path = write_file(tmp_path / "big.jsonl", resource, records)

    # A bad last line: exit 2 naming it, and none of the batches before it written.
    episode = next(r for r in reversed(records) if r["type"] == "episode")
    bad = [*records, {**episode, "id": 10**6, "importance": 7}]
    bad_path = write_file(tmp_path / "bad.jsonl", resource, bad)
    result = await cli_import(database_url, str(bad_path), "--resource-id", other_resource)
    assert result.exit_code == 2, result.output
    assert f"line {len(bad) + 1}: episode.importance" in result.output
    assert nothing_in(await raw_rows(database_url, other_resource))

    result = await cli_import(database_url, str(path), "--resource-id", other_resource, "--json")
    assert result.exit_code == 0, result.output
    counts = json.loads(result.output)["counts"]
    assert counts["message"]["added"] == 3 * 700 * 2 and counts["turn"]["added"] == 2100
    assert counts["fact"]["added"] == 42 and counts["episode"]["added"] == 42
    rows = await raw_rows(database_url, other_resource)
    # Messages keep their order, and provenance points at the imported rows.
    messages = sorted(rows["messages"], key=lambda m: m["id"])
    assert [m["content"] for m in messages[:4]] == [
        "Question 0.0",
        "Answer 0.0",
        "Question 0.1",
        "Answer 0.1",
    ]
    by_id = {m["id"]: m for m in messages}
    turns = {t["turn_id"] for t in rows["turns"]}
    for fact in rows["facts"]:
        assert fact["turn_id"] in turns
        (message,) = fact["message_ids"]
        assert by_id[message]["content"].startswith("Answer")
    await assert_statistics_exact(memory, other_resource)
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM popagent_pending_vectors WHERE resource_id = %s",
            (other_resource,),
        )
        pending = await cur.fetchone()
    assert pending is not None and pending["n"] == 84  # every imported memory awaits vectors

    # From standard input, as a real process reads it: the same file again adds nothing.
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "popagent.cli", "--database-url", database_url),
        *("--resource-id", other_resource, "import", "-", "--json"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate(path.read_bytes())
    assert process.returncode == 0, stderr.decode()
    again = json.loads(stdout)
    assert sum(c["added"] for c in again["counts"].values()) == 0
    assert again["counts"]["message"]["unchanged"] == 4200
    assert await raw_rows(database_url, other_resource) == rows


async def test_worker_processes_check_the_lines_alike(
    memory: popagent.LongTermMemory, database_url: str, resource: str, other_resource: str
) -> None:
    """With ``use_processes`` (as a server runs) batches are checked in worker
    processes: the result, and a bad line's error, are the same."""
    padding = "x" * 40  # batches above the size that goes to a process
    records = big_export(resource, sessions=1, turns=400)
    for record in records:
        if record["type"] == "message":
            record["content"] += f" {padding}"
    lines = [json.dumps(header(resource)), *(json.dumps(r) for r in records)]
    use_processes(1)
    try:
        with pytest.raises(ValidationError) as caught:
            await import_resource(
                memory.pool, [*lines, '{"type": "turn", "bogus": 1}'], resource_id=other_resource
            )
        assert caught.value.field == f"line {len(lines) + 1}: turn.bogus"
        report = await import_resource(memory.pool, lines, resource_id=other_resource)
    finally:
        stop_processes()
    assert report.counts["message"]["added"] == 800
    assert len((await raw_rows(database_url, other_resource))["messages"]) == 800


async def test_the_lines_after_the_header_may_come_in_any_order(
    memory: popagent.LongTermMemory,
    cipher: SecretCipher,
    database_url: str,
    resource: str,
    other_resource: str,
) -> None:
    await populate(memory, cipher, resource)
    out = io.StringIO()
    await export_resource(memory.pool, resource, out)
    lines = out.getvalue().splitlines()
    # Every field an export writes is one its record type takes: strictness never
    # refuses a round trip.
    for line in lines[1:]:
        record = json.loads(line)
        assert set(record) - {"type"} == FIELDS[record["type"]], record["type"]
    expected = portable_view(await raw_rows(database_url, resource))
    shuffled = [lines[0], *random.Random(7).sample(lines[1:], len(lines) - 1)]
    assert shuffled[1:] != lines[1:]
    report = await import_resource(memory.pool, shuffled, resource_id=other_resource)
    assert report.counts["message"]["added"] == 6
    rows = await raw_rows(database_url, other_resource)
    assert portable_view(rows) == {**expected, "secrets": []}
    reversed_again = [lines[0], *reversed(lines[1:])]
    again = await import_resource(memory.pool, reversed_again, resource_id=other_resource)
    assert again.total("added") == 0 and again.total("skipped") == 0
    assert await raw_rows(database_url, other_resource) == rows


@pytest.fixture
def cipher() -> SecretCipher:
    return SecretCipher(b"\x01" * 32)


# --- bad files -----------------------------------------------------------------------------


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


_FACT = {
    "type": "fact",
    "id": 1,
    "key": "drink",
    "content": "Prefers tea",
    "importance": 0.5,
    "origin": "cli",
    "version": 1,
    "created_at": T0,
    "updated_at": T0,
}
_SESSION = {"type": "session", "session_id": "s1", "created_at": T0, "updated_at": T0}
_LOG = {
    "type": "observation_log",
    "session_id": "s1",
    "id": 1,
    "generation": 0,
    "origin": "observation",
    "observations": "x",
    "observation_tokens": 2**31,
    "covered_group_ids": [],
    "next_reflection_tokens": 0,
    "created_at": T0,
    "updated_at": T0,
}


def _meta(raw_value: str) -> bytes:
    """A session line whose metadata value is ``raw_value``, as JSON text."""
    text = json.dumps({**_SESSION, "metadata": {"x": "PLACEHOLDER"}})
    return text.replace('"PLACEHOLDER"', raw_value).encode()


#: Each bad file's third line (line 2 is a good fact), and the start of its error.
BAD_LINES: dict[str, tuple[Any, str]] = {
    "deep nesting": (lambda: _meta(_deep(100_000)), "line 3"),
    "nesting over the limit": (lambda: _meta(_deep(MAX_DEPTH + 5)), "line 3"),
    "a 5,000-digit integer": (lambda: _meta("1" * 5000), "line 3"),
    "not UTF-8": (lambda: b'{"type": "session", "title": "caf\xe9"}', "line 3"),
    "a raw NUL byte": (lambda: b'{"type": "session",\x00 "session_id": "s1"}', "line 3"),
    "an escaped NUL": (lambda: _meta('"a\\u0000b"'), "line 3: session.metadata"),
    "a lone surrogate": (lambda: _meta('"\\ud800"'), "line 3: session.metadata"),
    "a lone surrogate in a key": (lambda: b'{"type": "session", "\\udc00": 1}', "line 3"),
    "NaN": (lambda: _meta("NaN"), "line 3"),
    "an infinite number": (lambda: _meta("1e999"), "line 3"),
    "a truncated line": (lambda: b'{"type": "session", "session_id": "s', "line 3"),
    "a 32-bit count too large": (
        lambda: json.dumps(_LOG).encode(),
        "line 3: observation_log.observation_tokens",
    ),
    "a fact relabelled an episode": (
        lambda: json.dumps({**_FACT, "type": "episode"}).encode(),
        "line 3: episode.key",
    ),
    "a resource_id field": (
        lambda: json.dumps({**_FACT, "id": 2, "resource_id": "elsewhere"}).encode(),
        "line 3: fact.resource_id",
    ),
    "a second BOM": (lambda: b"\xef\xbb\xbf" + json.dumps(_FACT).encode(), "line 3"),
    "an enormous line": (
        lambda: b'{"type": "session", "title": "' + b"a" * (LINE_CAP + 10) + b'"}',
        "line 3",
    ),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
async def test_a_bad_file_is_exit_2_naming_the_line_and_writes_nothing(
    database_url: str, tmp_path: Path, resource: str, case: str
) -> None:
    third, expected = BAD_LINES[case]
    path = tmp_path / "bad.jsonl"
    good = json.dumps(header(resource)) + "\n" + json.dumps(_FACT) + "\n"
    path.write_bytes(good.encode() + third() + b"\n")
    result = await cli_import(database_url, str(path))
    assert result.exit_code == 2, result.output
    assert f"Error: {expected}" in result.output, result.output[-500:]
    assert "Traceback" not in result.output
    assert nothing_in(await raw_rows(database_url, resource))


async def test_unknown_fields_are_refused_by_name(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    fact = {
        "type": "fact",
        "id": 1,
        "key": None,
        "content": "Likes jazz",
        "importance": 0.5,
        "origin": "cli",
        "version": 1,
        "created_at": T0,
        "updated_at": T0,
        "expires_at": None,
    }
    cases = [
        ([header(resource), {**fact, "type": "episode"}], "line 2: episode.key"),
        ([header(resource), {**fact, "resource_id": "x"}], "line 2: fact.resource_id"),
        ([{**header(resource), "extra": 1}, fact], "line 1: header.extra"),
        ([header(resource), {**fact, "a\nb": 1}], 'line 2: fact."a\\nb"'),
    ]
    for lines, field in cases:
        with pytest.raises(ValidationError) as caught:
            await import_resource(memory.pool, [json.dumps(x) for x in lines])
        assert caught.value.field == field
        assert "unknown fields are refused" in caught.value.message


async def test_a_bom_and_crlf_line_ends_are_read(
    database_url: str, tmp_path: Path, resource: str
) -> None:
    lines = [json.dumps(header(resource)), json.dumps(big_export(resource, 1, 1)[0])]
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n\r\n")
    result = await cli_import(database_url, str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"]["session"]["added"] == 1


def _mem0_cases() -> list[tuple[str, bytes, str]]:
    def doc(raw_memory: str) -> bytes:
        return (
            '{"results": [\n{"memory": "Likes jazz", "user_id": "u"},\n' + raw_memory + "\n]}"
        ).encode()

    return [
        (
            "deep nesting",
            doc('{"memory": "x", "metadata": ' + _deep(100_000) + "}"),
            "line 3: results[1]",
        ),
        (
            "a 5,000-digit integer",
            doc('{"memory": "x", "n": ' + "9" * 5000 + "}"),
            "line 3: results[1]",
        ),
        ("not UTF-8", doc('{"memory": "caf').replace(b"caf", b"caf\xe9"), "line 3"),
        ("NaN", doc('{"memory": "x", "score": NaN}'), "line 3: results[1]"),
        ("truncated", doc('{"memory": "x"')[:-3], "line 3: results[1]"),
        ("garbage after", doc('{"memory": "x"}') + b" {}", "line 4: document"),
        ("a lone surrogate", doc('{"memory": "\\udc00 x"}'), "results[1].memory"),
        ("a bad shape", b'{"count": 2}', "document"),
    ]


@pytest.mark.parametrize("case", [c for c, _, _ in _mem0_cases()])
async def test_a_bad_mem0_document_is_exit_2_naming_the_place_and_writes_nothing(
    memory: popagent.LongTermMemory, database_url: str, tmp_path: Path, resource: str, case: str
) -> None:
    (content, expected) = next((f, e) for c, f, e in _mem0_cases() if c == case)
    path = tmp_path / "mem0.json"
    path.write_bytes(content)
    result = await cli_import(database_url, str(path), "--from", "mem0", "--resource-id", resource)
    assert result.exit_code == 2, result.output
    assert f"Error: {expected}" in result.output, result.output
    assert "Traceback" not in result.output
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


async def test_a_large_mem0_document_is_read_memory_by_memory(
    memory: popagent.LongTermMemory, database_url: str, tmp_path: Path, resource: str
) -> None:
    items = [{"memory": f"Fact number {i} about jazz", "user_id": resource} for i in range(3000)]
    document = {"count": 3000, "results": items, "relations": [{"a": [1, 2, {"b": "]"}]}]}
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    result = await cli_import(database_url, str(path), "--from", "mem0", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["resource_ids"] == [resource] and report["counts"]["fact"]["added"] == 3000
    again = await cli_import(database_url, str(path), "--from", "mem0", "--json")
    assert json.loads(again.output)["counts"]["fact"] == {
        "added": 0,
        "updated": 0,
        "unchanged": 3000,
        "skipped": 0,
    }
    await assert_statistics_exact(memory, resource)


# --- screening -----------------------------------------------------------------------------


async def test_imported_metadata_titles_and_actors_are_screened_like_any_write(
    memory: popagent.LongTermMemory, database_url: str, resource: str
) -> None:
    session = {
        "type": "session",
        "session_id": "s1",
        "title": f"deploy with {TOKEN}",
        "metadata": {"note": f"token {TOKEN}", f"k {TOKEN}": 1, "password": "hunter2!x"},
        "created_at": T0,
        "updated_at": T0,
    }
    actor = {
        "type": "observation_actor",
        "session_id": "s1",
        "actor": f"openai/{TOKEN}",
        "recorded_at": T0,
    }
    lines = [json.dumps(x) for x in (header(resource), session, actor)]
    await import_resource(memory.pool, lines)
    rows = await raw_rows(database_url, resource)
    dumped = json.dumps([rows["sessions"], rows["actors"]], default=str)
    assert TOKEN not in dumped and "hunter2" not in dumped
    (stored,) = rows["sessions"]
    assert "[REDACTED:" in stored["title"] and stored["metadata"]["password"].startswith(
        "[REDACTED"
    )
    assert rows["actors"][0]["actor"].startswith("openai/[REDACTED:")
