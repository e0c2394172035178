"""The newest value first: how often the newest of several evidence memories ranks
first, on the team's labelled updates and on LoCoMo, against another commit.

Issue 39 asks that, when the user told a change in conversation ("I have three
cats now" weeks after "I have two cats"), a present-tense question rank the
newer evidence first. Two data sets, each conversation one resource in a
disposable embedded PostgreSQL cluster, recall lexical (``--embedder none``,
the default, for the same signals on both sides) or with an embedder:

* ``updates``: ``bench/newest/updates.json``, written by the popagent team for
  this benchmark (24 small histories: an earlier value, a later one, a
  distractor or none; a present-tense question; the turns that are evidence);
* ``locomo``: LoCoMo (``bench/locomo.py`` reads it in place, never copies it;
  CC BY-NC 4.0), categories 1-4, the questions whose evidence lies in two or
  more episodes of different sessions.

Per question, with ``limit=10`` and ``now`` = a day after its last turn: among
the evidence episodes in the top 10 (questions with fewer than two there are not
counted), does the newest rank above the others? The rate is over the counted
questions; ``top-1`` is the rate at which the first result is the newest
evidence, over all questions. What the reordering costs general ranking is
measured on every LoCoMo question of categories 1-4 (``locomo-all``): ``hit@1``,
the first result is evidence, and evidence recall at 5 and 8 (``bench/locomo.py``'s
R@k). The same program runs three times, in child processes that each start
their own cluster: this tree's popagent with the newest value first switched off
(``off``: ``memory.recall.newest_applies`` answers no, the ranking alone), with
``--baseline`` (default ``main``, checked out with ``git worktree`` into a
temporary directory), and this tree, so all are measured in the same run;
recall's latency (p50, p95) is printed beside them.

    python bench/newest.py [--baseline REF] [--data PATH] [--conversations N]
                           [--embedder none|local]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import locomo
import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.embed import make_embedder
from popagent.memory.validation import episode_content
from popagent.models import RecallResult
from popagent.store.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[1]
UPDATES = Path(__file__).resolve().parent / "newest" / "updates.json"
LIMIT = 10


@dataclass
class Case:
    resource: str
    question: str
    now: datetime
    #: The stored content of each evidence episode, with its time.
    evidence: dict[str, datetime]


def updates_cases() -> tuple[list[Case], dict[str, list[EpisodeTurn]]]:
    data = json.loads(UPDATES.read_text(encoding="utf-8"))
    cases, turns = [], {}
    for s in data["scenarios"]:
        resource = f"updates-{s['id']}"
        rows = []
        evidence = {}
        for i, t in enumerate(s["turns"]):
            when = datetime.fromisoformat(t["date"]).replace(tzinfo=UTC)
            rows.append(EpisodeTurn("s", t["user"], t["assistant"], when))
            if i in s["evidence"]:
                built = episode_content(t["user"], t["assistant"])
                assert built is not None
                evidence[built[0]] = when
        turns[resource] = rows
        now = max(r.created_at for r in rows if r.created_at) + timedelta(days=1)
        cases.append(Case(resource, s["question"], now, evidence))
    return cases, turns


def locomo_cases(conversations: list[locomo.Conversation]) -> list[Case]:
    cases = []
    for conv in conversations:
        when = {}
        for t in conv.turns:
            built = episode_content(t.user_text, t.assistant_text)
            assert built is not None and t.created_at is not None
            when[built[0]] = t.created_at
        for q in conv.questions:
            evidence = {c: when[c] for c, ids in conv.covers.items() if ids & q.evidence}
            if len(set(evidence.values())) >= 2:
                cases.append(Case(conv.resource, q.text, conv.now, evidence))
    return cases


async def ask(
    memory: LongTermMemory, resource: str, question: str, now: datetime, mode: str
) -> list[RecallResult]:
    """One question, as every side asks it: the top ``LIMIT`` at ``now``."""
    return await memory.recall(resource, question, limit=LIMIT, now=now, mode=mode)  # type: ignore[arg-type]


async def general(
    memory: LongTermMemory, conversations: list[locomo.Conversation], mode: str
) -> dict[str, Any]:
    """Every LoCoMo question: the first result is evidence (hit@1), evidence R@5, R@8."""
    hit1, r5, r8 = [], [], []
    for conv in conversations:
        for q in conv.questions:
            results = await ask(memory, conv.resource, q.text, conv.now, mode)
            ranked = [conv.covers[r.memory.content] for r in results]
            hit1.append(float(bool(ranked) and bool(ranked[0] & q.evidence)))
            r5.append(locomo.recall_at(q.evidence, ranked, 5))
            r8.append(locomo.recall_at(q.evidence, ranked, 8))
    return {
        "questions": len(hit1),
        "hit1": statistics.fmean(hit1),
        "r5": statistics.fmean(r5),
        "r8": statistics.fmean(r8),
    }


async def score(memory: LongTermMemory, cases: list[Case], mode: str) -> dict[str, Any]:
    counted = first = top1 = 0
    latencies = []
    for case in cases:
        start = time.perf_counter()
        results = await ask(memory, case.resource, case.question, case.now, mode)
        latencies.append((time.perf_counter() - start) * 1000)
        newest = max(case.evidence.values())
        found = [r for r in results if r.memory.content in case.evidence]
        if results and case.evidence.get(results[0].memory.content) == newest:
            top1 += 1
        if len(found) >= 2:
            counted += 1
            first += case.evidence[found[0].memory.content] == newest
    q = (
        statistics.quantiles(latencies, n=100, method="inclusive")
        if len(latencies) > 1
        else [0] * 99
    )
    return {
        "questions": len(cases),
        "counted": counted,
        "newest_first": first / counted if counted else 0.0,
        "top1": top1 / len(cases) if cases else 0.0,
        "p50_ms": q[49],
        "p95_ms": q[94],
    }


async def measure(
    url: str, data: Path, conversations: int | None, embedder_name: str
) -> dict[str, Any]:
    embedder = make_embedder(embedder_name)
    mode = "lexical" if embedder is None else "fused"
    cases, turns = updates_cases()
    convs = locomo.load(data, conversations)
    async with popagent.connect(url, embedder=embedder) as root:
        memory = root.memory
        for resource, rows in turns.items():
            await memory.retain_episodes(resource, rows)
        await locomo.ingest(memory, convs)
        if embedder is not None:
            await memory.embed_missing(None)
        return {
            "updates": await score(memory, cases, mode),
            "locomo": await score(memory, locomo_cases(convs), mode),
            "locomo-all": await general(memory, convs, mode),
        }


def child(out: str, data: Path, conversations: int | None, embedder: str, off: bool) -> None:
    if off:
        from popagent.memory import recall

        # The ranking alone: recall asks this before it reorders.
        recall.newest_applies = lambda query, now: False
    tmp = tempfile.mkdtemp(prefix="popagent-newest-")
    server = None
    try:
        server = EmbeddedServer(tmp, delete=True)
        result = asyncio.run(measure(server.url, data, conversations, embedder))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    Path(out).write_text(json.dumps(result), encoding="utf-8")


def run_side(src: Path, args: argparse.Namespace, out: Path, off: bool = False) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{Path(__file__).resolve().parent}"}
    command = [sys.executable, __file__, "--child", str(out), "--embedder", args.embedder]
    command += ["--off"] if off else []
    command += ["--data", str(args.data)]
    if args.conversations:
        command += ["--conversations", str(args.conversations)]
    subprocess.run(command, env=env, check=True)
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="main", help="the commit to compare with")
    parser.add_argument(
        "--data", type=Path, default=locomo.DEFAULT_DATA, help="path to locomo10.json"
    )
    parser.add_argument("--conversations", type=int, metavar="N", help="only the first N of LoCoMo")
    parser.add_argument("--embedder", choices=("none", "local"), default="none")
    parser.add_argument("--child", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--off", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.data, args.conversations, args.embedder, args.off)
        return
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="popagent-newest-"))
    base = work / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), args.baseline],
        check=True,
    )
    try:
        sides = {
            "off": run_side(ROOT / "src", args, work / "off.json", off=True),
            args.baseline: run_side(base / "src", args, work / "baseline.json"),
            "this tree": run_side(ROOT / "src", args, work / "this.json"),
        }
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)])
        shutil.rmtree(work, ignore_errors=True)
    print(f"Newest evidence first (recall limit {LIMIT}, embedder {args.embedder})\n")
    header = f"{'data':<8} {'code':<10} {'questions':>9} {'counted':>7} {'newest 1st':>10} {'top-1':>6} {'p50 ms':>7} {'p95 ms':>7}"
    print(header)
    print("-" * len(header))
    for data in ("updates", "locomo"):
        for name, side in sides.items():
            r = side[data]
            print(
                f"{data:<8} {name:<10} {r['questions']:>9} {r['counted']:>7} "
                f"{r['newest_first']:>10.3f} {r['top1']:>6.3f} {r['p50_ms']:>7.1f} {r['p95_ms']:>7.1f}"
            )
        b, t = sides[args.baseline][data], sides["this tree"][data]
        ratio = t["p50_ms"] / b["p50_ms"] if b["p50_ms"] else float("nan")
        print(f"{data:<8} {'ratio':<10} {'':>9} {'':>7} {t['newest_first'] - b['newest_first']:>+10.3f} "
              f"{t['top1'] - b['top1']:>+6.3f} {ratio:>6.2f}x")  # fmt: skip
    print(
        f"\nGeneral ranking on every LoCoMo question ({sides['off']['locomo-all']['questions']})\n"
    )
    header = f"{'code':<10} {'hit@1':>6} {'R@5':>6} {'R@8':>6}"
    print(header)
    print("-" * len(header))
    for name, side in sides.items():
        g = side["locomo-all"]
        print(f"{name:<10} {g['hit1']:>6.3f} {g['r5']:>6.3f} {g['r8']:>6.3f}")
    off = sides["off"]["locomo-all"]
    for name in (args.baseline, "this tree"):
        g = sides[name]["locomo-all"]
        print(f"{name + '-off':<10} {g['hit1'] - off['hit1']:>+6.3f} {g['r5'] - off['r5']:>+6.3f} "
              f"{g['r8'] - off['r8']:>+6.3f}")  # fmt: skip
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
