"""Recall of LoCoMo's temporal questions (category 2) with the event clock, against
BM25 and the code of an earlier revision, in one run.

The protocol is ``bench/locomo.py``'s (each conversation a resource, each pair of
turns an episode whose ``created_at`` is its session's date, so that the event
clock of "I went to the support group yesterday" is read against the session's
day), restricted to the temporal questions: evidence recall at 5 and 10 of
``lexical`` and (with an embedder) ``fused`` recall, for this tree and for
``--baseline-ref`` (``git archive`` of its ``src``, default ``main``), each in a
subprocess of its own with its code first on ``sys.path`` and a disposable
embedded cluster of its own; BM25Okapi over the same episodes is the same in both.
Printed too: how many of the evidence episodes have an event clock (this tree).

    python bench/time_recall.py [--baseline-ref main] [--embedder none|local] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# ``../shared`` beside the repository; a worktree under ``wt/`` finds it one level up.
DATA = (
    next(
        (p for p in (ROOT.parent / "shared", ROOT.parents[1] / "shared") if p.is_dir()),
        ROOT.parent / "shared",
    )
    / "benchdata"
    / "locomo10.json"
)

# Runs bench/locomo.py's protocol on the temporal questions with the code on sys.path.
_CHILD = r"""
import asyncio, importlib.util, json, shutil, statistics, sys, tempfile
from pathlib import Path
from popagent.embed import make_embedder
from popagent.store.embedded import EmbeddedServer

locomo_py, data, embedder_name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
spec = importlib.util.spec_from_file_location("locomo_bench", locomo_py)
m = importlib.util.module_from_spec(spec)
sys.modules["locomo_bench"] = m  # its dataclasses look their module up
spec.loader.exec_module(m)
conversations = m.load(data, None)
for c in conversations:
    c.questions = [q for q in c.questions if q.category == 2]

def summarize(rows, names):
    return [{"category": "temporal", "n": len(rows),
             **{s: {k: statistics.fmean(r[s][k] for r in rows) for k in m.KS} for s in names}}]

m.summarize = summarize
dated = {}

async def count_dated(url):
    # How many stored episodes carry an event clock (none before migration 0021).
    import psycopg
    async with await psycopg.AsyncConnection.connect(url) as conn:
        try:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE happened_start IS NOT NULL), count(*) "
                "FROM popagent_memories WHERE kind = 'episode'")
            dated["episodes"] = list(await cur.fetchone())
        except psycopg.errors.UndefinedColumn:
            dated["episodes"] = None

embedder = make_embedder(embedder_name)
tmp = tempfile.mkdtemp(prefix="popagent-time-recall-")
server = EmbeddedServer(tmp, delete=True)
try:
    out = asyncio.run(m.evaluate(server.url, conversations, embedder))
    asyncio.run(count_dated(server.url))
finally:
    server.stop()
    shutil.rmtree(tmp, ignore_errors=True)
print(json.dumps({"summary": out["summary"][0], "systems": out["systems"],
                  "recall_ms": out["recall_ms"], "dated": dated["episodes"],
                  "episodes": out["episodes"]}))
"""


def run(src: Path, data: Path, embedder: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT / "bench" / "locomo.py"), str(data), embedder],
        env=env,
        capture_output=True,
        text=True,
        timeout=3_000,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-4_000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--embedder", choices=("none", "local"), default="local")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="popagent-time-base-") as old:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline_ref, "src"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
        baseline = run(Path(old) / "src", args.data, args.embedder)
    current = run(ROOT / "src", args.data, args.embedder)
    summary_b, summary_c = baseline["summary"], current["summary"]
    n = summary_c["n"]
    print(
        f"LoCoMo temporal questions (category 2): {n} questions over "
        f"{current['episodes']:,} episodes, embedder {args.embedder}; "
        f"baseline {args.baseline_ref}, current this tree, in one run\n"
    )
    print("| system | R@5 | R@10 | R@5 vs BM25 | R@10 vs BM25 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    bm25 = summary_c["bm25"]
    rows = [("BM25Okapi", bm25)]
    for name in current["systems"]:
        if name == "bm25":
            continue
        rows.append((f"{name} ({args.baseline_ref})", summary_b[name]))
        rows.append((f"{name} (this tree)", summary_c[name]))
    for label, values in rows:
        r5, r10 = values["5"], values["10"]
        print(
            f"| {label} | {r5:.3f} | {r10:.3f} | {r5 - bm25['5']:+.3f} | {r10 - bm25['10']:+.3f} |"
        )
    if current["dated"]:
        dated, total = current["dated"]
        print(f"\nEpisodes with an event clock (this tree): {dated:,} of {total:,}")
    print("\nrecall latency (ms, p50 / p95):")
    for name, lat in current["recall_ms"].items():
        old = baseline["recall_ms"].get(name, {})
        print(
            f"  {name:>8}: this tree {lat['p50']:.1f} / {lat['p95']:.1f}; "
            f"{args.baseline_ref} {old.get('p50', float('nan')):.1f} / "
            f"{old.get('p95', float('nan')):.1f}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"baseline": baseline, "current": current}, indent=2), encoding="utf-8"
        )


if __name__ == "__main__":
    main()
