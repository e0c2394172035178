"""``popagent import`` of large export files: throughput and peak memory, old beside new.

Generates popagent export files of several sizes (default 10, 50 and 200 MB)
with realistic records: chat sessions with turns, messages (tool calls and
results, framework items), observation logs, groups and actors, facts with
earlier versions, and episodes; English-like text with numbers, dates, URLs
and code, and now and then a credential for the screen to redact. Each file is
imported by ``popagent import`` (the CLI, in a subprocess, into a fresh
resource of a scratch database on a disposable embedded PostgreSQL, or on the
server in ``POPAGENT_DATABASE_URL``), once by the code of this tree and once
by an older version (default: git's ``HEAD``, taken with ``git archive`` into
a temporary folder, with its own scratch database migrated by itself). It
prints, per file and version: seconds, MB/s and the peak resident memory of
the importing process (``ru_maxrss`` of the subprocess and its own children,
from ``wait4``), and memory over the file's size. A ``check`` row times the
new code's per-line check alone (parse, checks, credential screen; no
database) in this process: the bound the import cannot beat on one core. A
``floor`` row times PostgreSQL alone writing the same rows again, into another
resource of the same database: the rows the new import wrote, dumped beforehand
(``COPY ... TO``, not timed), are sent back with ``COPY`` into temporary tables
and written with one ``INSERT ... SELECT`` per table (memories with recall's
statistics counted as every write counts them, ``store.recall_stats``; every
index, constraint and trigger of the tables firing), in one transaction,
committed. No checks, no screen, no staging: the bound the database half of an
import cannot beat on this machine. The
first rows import a header-only file: each version's start (Python, the
connection, the migrations) and its memory before any record. An import still
running after ``--timeout`` seconds is stopped; its row says so, with the
memory it had reached.

Numbers from a machine other programs share are noisy: compare the old and
new rows of one run.

Usage: python bench/import.py [--sizes 10,50,200] [--old-ref HEAD | --old-src PATH]
       [--old-sizes 10,50,200] [--timeout 600] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from popagent.portable.importer import check_batch
from popagent.store.embedded import EmbeddedServer
from popagent.store.recall_stats import counted

ROOT = Path(__file__).resolve().parents[1]
SEED = 2718
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
_VOCABULARY = """the a to of and i you it is in that for on with we this my be was have are at so not
but can do your just if or about what when how there all would like will one time people year
way day thing world life hand part place case week company system program question work number
night point home water room mother area money story fact month lot right study book eye job word
business issue side kind head house service friend father power hour game line end member law car
city community name president team minute idea kid body information back parent face others level
office door health person art war history party result change morning reason research girl guy
moment air teacher force education trip garden kitchen recipe train ticket museum concert doctor
meeting project budget invoice deadline report draft review holiday flight hotel lisbon porto
berlin tokyo coffee tea bicycle guitar piano painting hiking running swimming weather"""
WORDS = _VOCABULARY.split()
TOKEN_SHAPES = (
    "ghp_{r36}",
    "sk-proj-{r40}",
    "AKIA{u16}",
    "xoxb-{d12}-{d12}-{r24}",
)


def _token(rng: random.Random) -> str:
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    shape = rng.choice(TOKEN_SHAPES)
    return shape.format(
        r36="".join(rng.choice(letters) for _ in range(36)),
        r40="".join(rng.choice(letters) for _ in range(40)),
        r24="".join(rng.choice(letters) for _ in range(24)),
        u16="".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16)),
        d12="".join(rng.choice("0123456789") for _ in range(12)),
    )


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
    roll = rng.random()
    if roll < 0.08:
        words.insert(
            rng.randrange(len(words)), f"{rng.randint(1, 28)} May {rng.randint(2019, 2026)}"
        )
    elif roll < 0.14:
        words.insert(rng.randrange(len(words)), f"${rng.randint(5, 900)}.{rng.randint(0, 99):02d}")
    elif roll < 0.18:
        words.insert(
            rng.randrange(len(words)),
            f"https://example.org/{rng.choice(WORDS)}?id={rng.randint(1, 9999)}",
        )
    elif roll < 0.20:
        words.insert(rng.randrange(len(words)), f"order {rng.randint(100000, 999999)}")
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".!?")


def paragraph(rng: random.Random, low: int, high: int, *, secrets: bool = True) -> str:
    target = rng.randint(low, high)
    out: list[str] = []
    size = 0
    while size < target:
        s = sentence(rng)
        out.append(s)
        size += len(s) + 1
    if rng.random() < 0.05:
        out.append("```python\ndef total(items):\n    return sum(i.price for i in items)\n```")
    if secrets and rng.random() < 0.004:
        out.append(f"my token is {_token(rng)}")
    return " ".join(out)


class Generator:
    """Deterministic export records, session by session."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.message_id = 1000
        self.turn_id = 500
        self.log_id = 10
        self.group_id = 20
        self.fact_id = 1
        self.episode_id = 1
        self.session = 0
        self.now = START

    def tick(self, seconds: float) -> str:
        self.now += timedelta(seconds=seconds)
        return self.now.isoformat()

    def records(self) -> Iterator[dict[str, Any]]:
        rng = self.rng
        self.session += 1
        sid = f"chat-{self.session:06d}"
        created = self.tick(60)
        yield {
            "type": "session",
            "session_id": sid,
            "title": paragraph(rng, 10, 40)[:60],
            "metadata": {"channel": rng.choice(["web", "cli", "slack"]), "pinned": False},
            "created_at": created,
            "updated_at": created,
        }
        messages: list[int] = []
        first_turn_message: list[tuple[int, int, str, str]] = []
        for _ in range(rng.randint(5, 10)):
            self.turn_id += 1
            turn = self.turn_id
            started = self.tick(30)
            yield {
                "type": "turn",
                "session_id": sid,
                "turn_id": turn,
                "status": "completed",
                "started_at": started,
                "ended_at": self.tick(5),
            }
            user = paragraph(rng, 40, 500)
            self.message_id += 1
            messages.append(self.message_id)
            item = (
                {"type": "message", "role": "user", "content": user} if rng.random() < 0.2 else None
            )
            yield {
                "type": "message",
                "session_id": sid,
                "id": self.message_id,
                "turn_id": turn,
                "role": "user",
                "content": user,
                "parts": [],
                "item": item,
                "created_at": self.tick(1),
            }
            if rng.random() < 0.3:
                call_id = f"call_{self.message_id}"
                arguments = json.dumps({"query": sentence(rng), "limit": 5})
                self.message_id += 1
                messages.append(self.message_id)
                yield {
                    "type": "message",
                    "session_id": sid,
                    "id": self.message_id,
                    "turn_id": turn,
                    "role": "assistant",
                    "content": "",
                    "parts": [
                        {
                            "type": "tool_call",
                            "id": call_id,
                            "name": "recall",
                            "arguments": arguments,
                        }
                    ],
                    "item": None,
                    "created_at": self.tick(1),
                }
                self.message_id += 1
                messages.append(self.message_id)
                yield {
                    "type": "message",
                    "session_id": sid,
                    "id": self.message_id,
                    "turn_id": turn,
                    "role": "tool",
                    "content": paragraph(rng, 100, 800),
                    "parts": [{"type": "tool_result", "tool_call_id": call_id}],
                    "item": None,
                    "created_at": self.tick(1),
                }
            answer = paragraph(rng, 200, 2500)
            self.message_id += 1
            messages.append(self.message_id)
            yield {
                "type": "message",
                "session_id": sid,
                "id": self.message_id,
                "turn_id": turn,
                "role": "assistant",
                "content": answer,
                "parts": [],
                "item": None,
                "created_at": self.tick(2),
            }
            first_turn_message.append((turn, messages[-1], user, answer))
        self.log_id += 1
        log = self.log_id
        groups = []
        for _ in range(2):
            self.group_id += 1
            groups.append(self.group_id)
        yield {
            "type": "observation_log",
            "session_id": sid,
            "id": log,
            "generation": 0,
            "origin": "observation",
            "observations": "\n".join(f"* 🔴 {sentence(rng)}" for _ in range(rng.randint(3, 12))),
            "observation_tokens": rng.randint(50, 400),
            "last_observed_message_id": messages[len(messages) // 2],
            "covered_group_ids": [],
            "next_reflection_tokens": 40000,
            "created_at": created,
            "updated_at": self.tick(1),
        }
        half = len(messages) // 2
        for n, group in enumerate(groups):
            span = messages[:half] if n == 0 else messages[half:]
            yield {
                "type": "observation_group",
                "session_id": sid,
                "id": group,
                "log_id": log,
                "kind": "observation",
                "status": "active" if n == 0 else "buffered",
                "first_message_id": span[0],
                "last_message_id": span[-1],
                "observations": "\n".join(
                    f"* 🟡 {sentence(rng)}" for _ in range(rng.randint(2, 6))
                ),
                "observation_tokens": rng.randint(20, 200),
                "message_tokens": rng.randint(200, 4000),
                "created_at": self.tick(1),
            }
        yield {
            "type": "observation_actor",
            "session_id": sid,
            "actor": "openai/gpt-test",
            "recorded_at": self.now.isoformat(),
        }
        for _ in range(rng.randint(1, 4)):
            self.fact_id += 1
            version = rng.randint(1, 3)
            fact_id = self.fact_id
            turn, message, _, _ = rng.choice(first_turn_message)
            provenance = {
                "origin": "agent",
                "turn_id": turn,
                "message_ids": [message],
                "tool_call_id": None,
            }
            for earlier in range(1, version):
                yield {
                    "type": "fact_version",
                    "fact_id": fact_id,
                    "version": earlier,
                    "key": f"topic.{fact_id}",
                    "content": paragraph(rng, 20, 200, secrets=False)[:300],
                    "content_sha256": "0" * 64,
                    "importance": 0.5,
                    "expires_at": None,
                    "session_id": sid,
                    **provenance,
                    "valid_from": created,
                    "valid_to": self.tick(1),
                    "ended": "updated",
                    "ended_origin": "agent",
                    "ended_session_id": sid,
                }
            yield {
                "type": "fact",
                "id": fact_id,
                "key": f"topic.{fact_id}",
                "content": paragraph(rng, 20, 200, secrets=False)[:300],
                "content_sha256": "0" * 64,
                "importance": round(rng.random(), 2),
                "session_id": sid,
                **provenance,
                "expires_at": None,
                "version": version,
                "created_at": created,
                "updated_at": self.now.isoformat(),
            }
        for turn, message, user, answer in first_turn_message:
            self.episode_id += 1
            yield {
                "type": "episode",
                "id": self.episode_id,
                "session_id": sid,
                "content": f"User: {user[:4000]}\nAssistant: {answer[:8000]}",
                "content_sha256": "0" * 64,
                "importance": 0.3,
                "origin": "turn",
                "turn_id": turn,
                "message_ids": [message],
                "tool_call_id": None,
                "created_at": self.now.isoformat(),
            }


def generate(path: Path, megabytes: int) -> int:
    """Write an export of about ``megabytes`` MB; its number of records."""
    target = megabytes * 1_000_000
    gen = Generator(SEED + megabytes)
    records = 0
    with path.open("w", encoding="utf-8", newline="\n") as out:
        header = {
            "format": "popagent-export",
            "version": 1,
            "resource_id": "bench",
            "exported_at": START.isoformat(),
            "popagent_version": "0.1.0",
        }
        size = out.write(json.dumps(header) + "\n")
        while size < target:
            for record in gen.records():
                size += out.write(json.dumps(record, ensure_ascii=False) + "\n")
                records += 1
    return records


# --- running ------------------------------------------------------------------------------


@contextmanager
def admin_url() -> Iterator[str]:
    """``POPAGENT_DATABASE_URL``, else a disposable embedded cluster removed on exit."""
    if url := os.environ.get("POPAGENT_DATABASE_URL"):
        yield url
        return
    tmp = tempfile.mkdtemp(prefix="popagent-bench-")
    server = EmbeddedServer(tmp, delete=True)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def scratch_database(admin: str, name: str) -> Iterator[str]:
    dbname = f"popagent_bench_import_{os.getpid()}_{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        yield make_conninfo(admin, dbname=dbname)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(dbname)))


def old_source(ref: str, into: Path) -> Path:
    """``src`` of git revision ``ref``, extracted with ``git archive`` (the tree untouched)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "src"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def run_import(src: Path, url: str, path: Path, resource: str, timeout: float) -> dict[str, Any]:
    """``popagent import`` of ``path`` in a subprocess: seconds, peak RSS, exit status."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("POPAGENT_RESOURCE_ID", None)
    args = [sys.executable, "-m", "popagent.cli", "--database-url", url]
    args += ["--resource-id", resource, "import", str(path), "--json"]
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = started + timeout
    status, usage = 0, None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - started
            return {"seconds": seconds, "rss_mb": usage.ru_maxrss / 1024, "ok": "timeout"}
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    code = os.waitstatus_to_exitcode(status)
    ok = "ok" if code == 0 else f"exit {code}: {err.decode(errors='replace')[-300:]}"
    added = 0
    if code == 0:
        report = json.loads(out)
        added = sum(c.get("added", 0) for c in report["counts"].values())
    return {"seconds": seconds, "rss_mb": usage.ru_maxrss / 1024, "ok": ok, "added": added}


def check_only(path: Path) -> float:
    """Seconds of the new code's per-line check over the whole file, in this process."""
    started = time.perf_counter()
    with path.open("rb") as f:
        f.readline()
        batch: list[tuple[int, bytes]] = []
        for lineno, raw in enumerate(f, 2):
            batch.append((lineno, raw))
            if len(batch) >= 2000:
                check_batch(batch)
                batch = []
        if batch:
            check_batch(batch)
    return time.perf_counter() - started


#: The tables an import writes, in the order their foreign keys need.
FLOOR_TABLES = (
    "popagent_sessions",
    "popagent_turns",
    "popagent_messages",
    "popagent_observation_logs",
    "popagent_observation_groups",
    "popagent_observation_actors",
    "popagent_memories",
    "popagent_fact_versions",
    "popagent_secrets",
)


def _as_resource(conn: psycopg.Connection[Any], resource: str) -> None:
    """Row-level security (migration 0018) shows a role that is not the tables' owner
    one resource's rows: this transaction's."""
    conn.execute("SELECT set_config('popagent.resource_id', %s, true)", (resource,))


def floor(url: str, source: str, target: str) -> tuple[float, float]:
    """Seconds PostgreSQL takes to write the rows of resource ``source`` again into
    ``target`` (module doc), and of them the seconds of the ``COPY`` into temporary
    tables. The rows keep their ids: every key of these tables leads with the resource."""
    with psycopg.connect(url) as conn:
        columns: dict[str, list[str]] = {}
        dumps: dict[str, bytes] = {}
        with conn.transaction():
            _as_resource(conn, source)
            for name in FLOOR_TABLES:
                cur = conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND is_generated = 'NEVER' AND column_name <> 'resource_id' "
                    "ORDER BY ordinal_position",
                    (name,),
                )
                columns[name] = [row[0] for row in cur.fetchall()]
                listed = sql.SQL(", ").join(map(sql.Identifier, columns[name]))
                dump = sql.SQL("COPY (SELECT {} FROM {} WHERE resource_id = {}) TO STDOUT")
                data = bytearray()
                with conn.cursor().copy(
                    dump.format(listed, sql.Identifier(name), sql.Literal(source))
                ) as copy:
                    for chunk in copy:
                        data += chunk
                dumps[name] = bytes(data)
        started = time.perf_counter()
        with conn.transaction():
            _as_resource(conn, target)
            for name in FLOOR_TABLES:
                listed = sql.SQL(", ").join(map(sql.Identifier, columns[name]))
                staged = sql.Identifier(f"floor_{name}")
                conn.execute(
                    sql.SQL(
                        "CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA"
                    ).format(staged, listed, sql.Identifier(name))
                )
                with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(staged)) as copy:
                    copy.write(dumps[name])
            copied = time.perf_counter() - started
            for name in FLOOR_TABLES:
                listed = sql.SQL(", ").join(map(sql.Identifier, columns[name]))
                insert = sql.SQL(
                    "INSERT INTO {} (resource_id, {}) OVERRIDING SYSTEM VALUE SELECT {}, {} FROM {}"
                ).format(
                    sql.Identifier(name),
                    listed,
                    sql.Literal(target),
                    listed,
                    sql.Identifier(f"floor_{name}"),
                )
                if name == "popagent_memories":
                    insert = sql.SQL(
                        "WITH written AS ({} RETURNING resource_id, search_vector, content), "
                        + counted("written", 1)
                        + " SELECT count(*) FROM written"
                    ).format(insert)
                conn.execute(insert)
        return time.perf_counter() - started, copied


def table(rows: list[dict[str, Any]]) -> None:
    keys = ["file_MB", "records", "code", "seconds", "MB/s", "peak_RSS_MB", "RSS/file", "result"]
    cells = [[str(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True)))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,200", help="file sizes in MB")
    parser.add_argument("--old-ref", default="HEAD", help="git revision of the old code")
    parser.add_argument("--old-src", help="the old code's src folder (instead of --old-ref)")
    parser.add_argument("--old-sizes", help="sizes the old code imports (default: all)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per import")
    parser.add_argument("--keep", help="a folder to keep (and reuse) the generated files in")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    old_sizes = {int(s) for s in args.old_sizes.split(",")} if args.old_sizes else set(sizes)
    work = Path(tempfile.mkdtemp(prefix="popagent-bench-import-"))
    files = Path(args.keep) if args.keep else work
    files.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        old = Path(args.old_src) if args.old_src else old_source(args.old_ref, work / "old")
        new = ROOT / "src"
        with (
            admin_url() as admin,
            scratch_database(admin, "old") as old_url,
            scratch_database(admin, "new") as new_url,
        ):
            empty = files / "header-only.jsonl"
            empty.write_text(
                json.dumps({"format": "popagent-export", "version": 1, "resource_id": "bench"})
                + "\n"
            )
            for name, src, url in (("old", old, old_url), ("new", new, new_url)):
                got = run_import(src, url, empty, "bench-empty", args.timeout)
                rows.append(
                    {
                        "file_MB": "0.0",
                        "records": "0",
                        "code": name,
                        "seconds": f"{got['seconds']:.1f}",
                        "peak_RSS_MB": f"{got['rss_mb']:.0f}",
                        "result": "startup: a header-only file (also migrates)",
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            for megabytes in sizes:
                path = files / f"export-{megabytes}mb.jsonl"
                meta = path.with_suffix(".records")
                if path.exists() and meta.exists():
                    records = int(meta.read_text())
                else:
                    records = generate(path, megabytes)
                    meta.write_text(str(records))
                size_mb = path.stat().st_size / 1e6
                base = {"file_MB": f"{size_mb:.1f}", "records": f"{records:,}"}
                seconds = check_only(path)
                rows.append(
                    {
                        **base,
                        "code": "check",
                        "seconds": f"{seconds:.1f}",
                        "MB/s": f"{size_mb / seconds:.2f}",
                        "result": "no database",
                    }
                )
                runs = [("new", new, new_url)]
                if megabytes in old_sizes:
                    runs.insert(0, ("old", old, old_url))
                for name, src, url in runs:
                    got = run_import(src, url, path, f"bench-{megabytes}", args.timeout)
                    rows.append(
                        {
                            **base,
                            "code": name,
                            "seconds": f"{got['seconds']:.1f}",
                            "MB/s": ("<" if got["ok"] == "timeout" else "")
                            + f"{size_mb / got['seconds']:.2f}",
                            "peak_RSS_MB": f"{got['rss_mb']:.0f}",
                            "RSS/file": f"{got['rss_mb'] / size_mb:.2f}",
                            "result": got["ok"]
                            if got["ok"] != "ok"
                            else f"ok, {got['added']:,} rows added",
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
                if got["ok"] != "ok":
                    continue  # the floor writes again what the new import wrote
                seconds, copied = floor(new_url, f"bench-{megabytes}", f"floor-{megabytes}")
                rows.append(
                    {
                        **base,
                        "code": "floor",
                        "seconds": f"{seconds:.1f}",
                        "MB/s": f"{size_mb / seconds:.2f}",
                        "result": f"PostgreSQL alone: the same rows written again "
                        f"(COPY {copied:.1f} s, then INSERT ... SELECT)",
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    table(rows)


if __name__ == "__main__":
    main()
