"""Write paths on plain PostgreSQL, this tree beside an earlier commit, in one run.

Since migrations 0015 (recall statistics kept by the writing statements instead
of statement-level triggers, so that the tables can be distributed with Citus)
and 0016 (a row trigger queues each new memory for the background vector
worker), every insert and delete of a memory does its bookkeeping differently.
This times the library's write paths with recall by words alone (no model, so
only the SQL differs) in the same disposable cluster: each code runs in a
subprocess of its own, on a database of its own, and the two alternate
``--rounds`` times so that a busy moment of the machine hits both.

Since migration 0020 every statement that writes or deletes messages also counts
their bytes in the resource's statistics row (the storage quota); the thread
writes (a message, a session item, batches of items, a session's delete) are
timed too, where the baseline has them.

Printed per operation: calls, p50/p95 in ms (single calls) or rows/s (batches),
and the ratio of this tree to the baseline (below 1.00x: faster).

    python bench/writes.py [--baseline-ref 9a2ab5e] [--rounds 3] [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Run in a subprocess with the code under test first on sys.path: prints one JSON line.
_CHILD = r"""
import asyncio, json, statistics, sys, time
from datetime import UTC, datetime, timedelta
import popagent
from popagent import EpisodeTurn

URL, CALLS = sys.argv[1], int(sys.argv[2])
WORDS = ("garden tomato bicycle piano lisbon coffee budget doctor kitchen holiday "
         "guitar meeting office recipe river mountain teacher window summer").split()

def text(i, n=12):
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)) + f" {i}"

def ms(samples):
    samples = sorted(samples)
    return [round(statistics.median(samples) * 1000, 2),
            round(samples[int(0.95 * (len(samples) - 1))] * 1000, 2)]

async def main():
    out = {}
    async with popagent.connect(URL, embedder=None) as root:
        # Before the composition root, connect() yielded the memory itself.
        memory = getattr(root, "memory", root)
        rid = "bench-writes"
        now = datetime.now(UTC)
        t = []
        for i in range(CALLS):
            s = time.perf_counter()
            await memory.remember(rid, f"Fact {text(i)}", key=f"k.{i}")
            t.append(time.perf_counter() - s)
        out["remember (new key)"] = ms(t)
        t = []
        for i in range(CALLS):
            s = time.perf_counter()
            await memory.remember(rid, f"Fact changed {text(i + 1)}", key=f"k.{i}")
            t.append(time.perf_counter() - s)
        out["remember (update)"] = ms(t)
        t = []
        for i in range(CALLS):
            s = time.perf_counter()
            await memory.retain_episode(rid, f"s{i % 10}", text(i), text(i + 5, 30))
            t.append(time.perf_counter() - s)
        out["retain_episode"] = ms(t)
        turns = [EpisodeTurn(f"s{i % 50}", text(i + 1000), text(i + 2000, 40),
                             now - timedelta(minutes=i)) for i in range(10_000)]
        s = time.perf_counter()
        for k in range(0, len(turns), 500):
            await memory.retain_episodes(rid, turns[k:k + 500])
        out["retain_episodes (rows/s)"] = round(len(turns) / (time.perf_counter() - s), 1)
        t = []
        try:
            for i in range(CALLS):
                s = time.perf_counter()
                await memory.recall(rid, text(i * 13, 4), touch=False)
                t.append(time.perf_counter() - s)
            out["recall (lexical)"] = ms(t)
        except Exception as exc:  # an older commit's bug is a result too
            out["recall (lexical)"] = f"error: {type(exc).__name__}: {exc}"
        facts = await memory.list(rid, popagent.MemoryFilter(kind="fact", limit=CALLS))
        t = []
        for m in facts:
            s = time.perf_counter()
            await memory.delete(rid, m.id)
            t.append(time.perf_counter() - s)
        out["delete (fact)"] = ms(t)
        s = time.perf_counter()
        removed = await memory.cleanup(rid, kind="episode")
        out["cleanup (rows/s)"] = round(removed / (time.perf_counter() - s), 1)
        # Thread writes (since 0020 each counts its bytes for the storage quota).
        threads, items = getattr(root, "threads", None), getattr(root, "items", None)
        if threads is not None and items is not None:
            await threads.create_session(rid, "chat")
            t = []
            for i in range(CALLS):
                s = time.perf_counter()
                await threads.append_message(rid, "chat", "user", text(i, 40))
                t.append(time.perf_counter() - s)
            out["append_message"] = ms(t)
            t = []
            for i in range(CALLS):
                s = time.perf_counter()
                await items.append(rid, "items", [{"role": "user", "content": text(i, 40)}])
                t.append(time.perf_counter() - s)
            out["items.append (1 item)"] = ms(t)
            batch = [{"role": "assistant", "content": text(i, 40)} for i in range(100)]
            s = time.perf_counter()
            for k in range(20):
                await items.append(rid, f"bulk{k}", batch)
            out["items.append 100 (rows/s)"] = round(2000 / (time.perf_counter() - s), 1)
            s = time.perf_counter()
            for k in range(20):
                await threads.delete_session(rid, f"bulk{k}")
            out["delete_session 100 (rows/s)"] = round(2000 / (time.perf_counter() - s), 1)
    print(json.dumps(out))

asyncio.run(main())
"""


def baseline_tree(ref: str, tmp: Path) -> Path:
    """The ``src`` of git revision ``ref``, written under ``tmp/old`` (its ``src``
    is what a child process puts on ``PYTHONPATH``); ``tmp/old``."""
    old = tmp / "old"
    old.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    return old


def run_child(src: Path, url: str, calls: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src), "POPAGENT_EMBEDDER": "none"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, url, str(calls)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{src}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="9a2ab5e", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--only-current", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    from popagent.store.embedded import EmbeddedServer

    with tempfile.TemporaryDirectory(prefix="pa-writes-") as tmp:
        old = baseline_tree(args.baseline_ref, Path(tmp))
        server = EmbeddedServer(Path(tmp) / "cluster", delete=True)
        try:
            import psycopg

            results: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
            for r in range(args.rounds):
                codes = [("baseline", old / "src"), ("current", ROOT / "src")]
                for code, src in codes[1:] if args.only_current else codes:
                    name = f"w_{code}_{r}"
                    with psycopg.connect(server.url, autocommit=True) as admin:
                        admin.execute(f"CREATE DATABASE {name}")
                    url = server.url.replace("/postgres?", f"/{name}?")
                    started = time.monotonic()
                    results[code].append(run_child(src, url, args.calls))
                    print(f"round {r + 1} {code}: {time.monotonic() - started:.1f} s", flush=True)
        finally:
            server.stop()

    print(
        f"\nWrite paths, plain PostgreSQL, recall by words: {args.baseline_ref} (baseline) vs "
        f"this tree, {args.rounds} alternating rounds, median of rounds"
    )
    print("| operation | baseline | current | ratio |")
    print("| --- | --- | --- | --- |")
    for op in results["current"][0]:
        failed = {
            code: next((run[op] for run in results[code] if isinstance(run[op], str)), None)
            for code in results
        }
        if any(failed.values()):
            cells = []
            for code in ("baseline", "current"):
                if failed[code]:
                    cells.append(str(failed[code])[:70])
                else:
                    p50 = statistics.median(run[op][0] for run in results[code])
                    p95 = statistics.median(run[op][1] for run in results[code])
                    cells.append(f"p50 {p50:.2f} ms, p95 {p95:.2f} ms")
            print(f"| {op} | {cells[0]} | {cells[1]} | |")
            continue

        def med(code: str, i: int | None, op: str = op) -> float:
            values = [run[op][i] if i is not None else run[op] for run in results[code]]
            return float(statistics.median(values))

        if isinstance(results["current"][0][op], list):
            for i, label in ((0, "p50 ms"), (1, "p95 ms")):
                base, cur = med("baseline", i), med("current", i)
                print(f"| {op} {label} | {base:.2f} | {cur:.2f} | {cur / base:.2f}x |")
        else:
            base, cur = med("baseline", None), med("current", None)
            print(f"| {op} | {base:,.0f} | {cur:,.0f} | {base / cur:.2f}x (time) |")


if __name__ == "__main__":
    main()
