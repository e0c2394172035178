"""Write paths on plain PostgreSQL, this tree beside an earlier commit, in one run.

Since migrations 0015 (recall statistics kept by the writing statements instead
of statement-level triggers, so that the tables can be distributed with Citus)
and 0016 (a row trigger queues each new memory for the background vector
worker), every insert and delete of a memory does its bookkeeping differently.
This times the library's write paths with recall by words alone (no model, so
only the SQL and the Python around it differ) in the same disposable cluster:
each code runs in a subprocess of its own, on a database of its own.

The two codes take turns step by step: each operation is cut into steps (10
single calls, one batch, one slice of a cleanup), and the baseline and this
tree run each step one after the other, in an order that alternates, so that a
busy moment of a shared machine hits both (a whole round each, as an earlier
version of this bench ran them, let one code's round fall into a busy minute:
ratios moved by up to 2x between runs). ``--rounds`` repeats it all on fresh
databases; the samples of all rounds are pooled.

Since migration 0020 every statement that writes or deletes messages also counts
their bytes in the resource's statistics row (the storage quota); the thread
writes (a message, a session item, batches of items, a session's delete) are
timed too, where the baseline has them.

Printed per operation: the p50 and p95 of its samples in ms (a single call, a
batch of 500 episodes or 100 items, a cleanup of 1,000 episodes), and the ratio
of this tree to the baseline (below 1.00x: faster).

    python bench/writes.py [--baseline-ref 236007e] [--rounds 3] [--calls 200]
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
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]

# Run in a subprocess with the code under test first on sys.path. It prints the
# operations it has (one JSON line), then runs one step per line read from stdin
# (``[operation, step]``) and prints its samples in seconds (or ``{"error": ...}``).
_CHILD = r"""
import asyncio, json, math, sys, time
from datetime import UTC, datetime, timedelta
import popagent
from popagent import EpisodeTurn

URL, CALLS, STEP = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WORDS = ("garden tomato bicycle piano lisbon coffee budget doctor kitchen holiday "
         "guitar meeting office recipe river mountain teacher window summer").split()
BULK, SLICE = 500, 1_000

def text(i, n=12):
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)) + f" {i}"

async def main():
    async with popagent.connect(URL, embedder=None) as root:
        # Before the composition root, connect() yielded the memory itself.
        memory = getattr(root, "memory", root)
        threads, items = getattr(root, "threads", None), getattr(root, "items", None)
        rid = "bench-writes"
        now = datetime.now(UTC)
        turns = [EpisodeTurn(f"s{i % 50}", text(i + 1000), text(i + 2000, 40),
                             now - timedelta(minutes=i)) for i in range(10_000)]
        state = {}

        async def calls(step, call):
            samples = []
            for i in range(step * STEP, min((step + 1) * STEP, CALLS)):
                s = time.perf_counter()
                await call(i)
                samples.append(time.perf_counter() - s)
            return samples

        async def once(call):
            s = time.perf_counter()
            await call()
            return [time.perf_counter() - s]

        async def delete_fact(i):
            if "facts" not in state:
                state["facts"] = await memory.list(
                    rid, popagent.MemoryFilter(kind="fact", limit=CALLS))
            await memory.delete(rid, state["facts"][i].id)

        async def cleanup_slice(step):
            # Slice k removes the bulk episodes told 9000 - 1000k .. 10000 - 1000k
            # minutes ago; the last one everything left (and the single episodes).
            cut = None
            if step < 9:
                cut = now - timedelta(minutes=(9 - step) * SLICE, seconds=30)
            s = time.perf_counter()
            removed = await memory.cleanup(rid, kind="episode", older_than=cut)
            return [(time.perf_counter() - s) / max(removed, 1) * SLICE]

        async def thread_call(step, call):
            if "session" not in state:
                state["session"] = await threads.create_session(rid, "chat")
            return await calls(step, call)

        batch = [{"role": "assistant", "content": text(i, 40)} for i in range(100)]
        per_call = math.ceil(CALLS / STEP)
        ops = {
            "remember (new key)": (per_call, lambda k: calls(k, lambda i: memory.remember(
                rid, f"Fact {text(i)}", key=f"k.{i}"))),
            "remember (update)": (per_call, lambda k: calls(k, lambda i: memory.remember(
                rid, f"Fact changed {text(i + 1)}", key=f"k.{i}"))),
            "retain_episode": (per_call, lambda k: calls(k, lambda i: memory.retain_episode(
                rid, f"s{i % 10}", text(i), text(i + 5, 30)))),
            "retain_episodes (500 rows)": (len(turns) // BULK, lambda k: once(
                lambda: memory.retain_episodes(rid, turns[k * BULK:(k + 1) * BULK]))),
            "recall (lexical)": (per_call, lambda k: calls(k, lambda i: memory.recall(
                rid, text(i * 13, 4), touch=False))),
            "delete (fact)": (per_call, lambda k: calls(k, delete_fact)),
            "cleanup (1,000 episodes)": (10, cleanup_slice),
        }
        if threads is not None and items is not None:
            ops |= {
                "append_message": (per_call, lambda k: thread_call(
                    k, lambda i: threads.append_message(rid, "chat", "user", text(i, 40)))),
                "items.append (1 item)": (per_call, lambda k: calls(k, lambda i: items.append(
                    rid, "items", [{"role": "user", "content": text(i, 40)}]))),
                "items.append (100 items)": (20, lambda k: once(
                    lambda: items.append(rid, f"bulk{k}", batch))),
                "delete_session (100 items)": (20, lambda k: once(
                    lambda: threads.delete_session(rid, f"bulk{k}"))),
            }
        print(json.dumps({op: steps for op, (steps, _) in ops.items()}), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            op, step = json.loads(line)
            try:
                reply = await ops[op][1](step)
            except Exception as exc:  # an older commit's bug is a result too
                reply = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            print(json.dumps(reply), flush=True)

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


class Child:
    """One code's subprocess on its own database: ``ops`` maps each operation it
    has to its number of steps; ``step`` runs one and returns its samples."""

    def __init__(self, src: Path, url: str, calls: int, step: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(src), "POPAGENT_EMBEDDER": "none"}
        self.src = src
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, str(calls), str(step)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.ops: dict[str, int] = self._reply()

    def _reply(self) -> Any:
        out: IO[str] | None = self.process.stdout
        assert out is not None
        line = out.readline()
        if not line:
            err = self.process.stderr.read() if self.process.stderr else ""
            raise SystemExit(f"{self.src}: {err[-2000:]}")
        return json.loads(line)

    def step(self, op: str, step: int) -> list[float] | dict[str, str]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps([op, step]) + "\n")
        self.process.stdin.flush()
        reply: list[float] | dict[str, str] = self._reply()
        return reply

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="236007e", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--step", type=int, default=10, help="single calls per step")
    parser.add_argument("--only-current", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "src"))
    from popagent.store.embedded import EmbeddedServer

    codes = ["current"] if args.only_current else ["baseline", "current"]
    samples: dict[str, dict[str, list[float]]] = {code: {} for code in codes}
    errors: dict[str, dict[str, str]] = {code: {} for code in codes}
    order: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pa-writes-") as tmp:
        old = baseline_tree(args.baseline_ref, Path(tmp))
        server = EmbeddedServer(Path(tmp) / "cluster", delete=True)
        try:
            import psycopg

            for r in range(args.rounds):
                started = time.monotonic()
                children: dict[str, Child] = {}
                try:
                    for code in codes:
                        name = f"w_{code}_{r}"
                        with psycopg.connect(server.url, autocommit=True) as admin:
                            admin.execute(f"CREATE DATABASE {name}")
                        url = server.url.replace("/postgres?", f"/{name}?")
                        src = old / "src" if code == "baseline" else ROOT / "src"
                        children[code] = Child(src, url, args.calls, args.step)
                    ops = children["current"].ops
                    order = list(ops)
                    for op, steps in ops.items():
                        for k in range(steps):
                            # Who goes first alternates with the step (and the round).
                            turn = codes if (k + r) % 2 == 0 else codes[::-1]
                            for code in turn:
                                if op not in children[code].ops:
                                    continue
                                reply = children[code].step(op, k)
                                if isinstance(reply, dict):
                                    errors[code].setdefault(op, reply["error"])
                                else:
                                    samples[code].setdefault(op, []).extend(reply)
                finally:
                    for child in children.values():
                        child.close()
                print(f"round {r + 1}: {time.monotonic() - started:.1f} s", flush=True)
        finally:
            server.stop()

    print(
        f"\nWrite paths, plain PostgreSQL, recall by words: {args.baseline_ref} (baseline) vs "
        f"this tree, {args.rounds} rounds, the codes alternating step by step, "
        "samples of all rounds pooled"
    )
    print("| operation | samples | baseline | current | ratio |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for op in order:
        cells: dict[str, tuple[float, float] | str] = {}
        for code in ("baseline", "current"):
            if code not in samples:
                cells[code] = "not run"
            elif op in errors[code]:
                cells[code] = errors[code][op][:70]
            elif op not in samples[code]:
                cells[code] = "not in this code"
            else:
                cells[code] = _ms(samples[code][op])
        count = len(samples["current"].get(op, []))
        base, cur = cells["baseline"], cells["current"]
        if isinstance(base, str) or isinstance(cur, str):
            shown = [
                c if isinstance(c, str) else f"p50 {c[0]:.2f}, p95 {c[1]:.2f}" for c in (base, cur)
            ]
            print(f"| {op} | {count} | {shown[0]} | {shown[1]} | |")
            continue
        for i, label in ((0, "p50 ms"), (1, "p95 ms")):
            print(
                f"| {op} {label} | {count} | {base[i]:.2f} | {cur[i]:.2f} | {cur[i] / base[i]:.2f}x |"
            )


if __name__ == "__main__":
    main()
