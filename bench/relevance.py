"""Relevance: what recall lets into the block, this tree beside an earlier commit, in one run.

Data: ``bench/relevance/`` (written by the popagent team; its README says how):
five users' facts (most keyed) and episodes, and 156 questions of four kinds:
paraphrases that share no word with their answer, questions that share only a
common word with a wrong memory, questions naming a rare word, and questions
that nothing answers.

Protocol: each user is one resource in a fresh database of one disposable
embedded cluster, per code (the baseline revision's ``src`` and this tree's),
with the default embedder (semantic recall on, as a new user gets it); facts
go in with ``remember`` (their keys), episodes with ``retain_episodes``; then
``wait_for_vectors``. Every question is asked once with the default limit
(8). Reported per code, split and kind:

* ``hit@1`` / ``hit@3``: an answer among the first 1 / 3 results (answerable
  questions only);
* ``unrel/q``: returned memories that are neither an answer nor ``related``,
  per question;
* ``ret/q``: memories returned per question (for unanswerable questions: what
  the model is given for a question nothing answers).

    python bench/relevance.py [--baseline-ref 236007e] [--json PATH]
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
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().with_name("relevance")
KINDS = ("paraphrase", "common_word", "rare_word", "unanswerable")

_CHILD = r"""
import asyncio, json, sys
from datetime import UTC, datetime
import popagent

sys.path.insert(0, sys.argv[2])
import relevance

async def main():
    now = datetime.now(UTC)
    out = []
    users = relevance.load()
    async with popagent.connect(sys.argv[1]) as root:
        memory = root.memory
        ids = await relevance.ingest(memory, users, now)
        for user in users:
            for q in user["questions"]:
                results = await memory.recall(relevance.resource(user), q["q"], now=now, touch=False)
                out.append({"user": user["user"], "q": q["q"], "top": [ids[user["user"]][r.memory.id] for r in results]})
    print(json.dumps(out))

asyncio.run(main())
"""


def resource(user: dict[str, Any]) -> str:
    return f"relevance-{user['user']}"


async def ingest(
    memory: Any, users: list[dict[str, Any]], now: datetime
) -> dict[str, dict[int, str]]:
    """Write every user's memories (facts with their keys, episodes ``days_ago`` before
    ``now``) and their vectors; per user, stored memory id -> the data's id."""
    import popagent

    out: dict[str, dict[int, str]] = {}
    for user in users:
        rid = resource(user)
        ids = out[user["user"]] = {}
        for m in user["memories"]:
            if "fact" in m:
                done = await memory.remember(rid, m["fact"], key=m.get("key"))
                ids[done.memory.id] = m["id"]
        episodes = [m for m in user["memories"] if "user" in m]
        turns = [
            popagent.EpisodeTurn(
                "relevance", m["user"], m["assistant"], now - timedelta(days=m["days_ago"])
            )
            for m in episodes
        ]
        await memory.retain_episodes(rid, turns)
        for stored in await memory.list(rid, popagent.MemoryFilter(kind="episode", limit=500)):
            ids[stored.id] = next(m["id"] for m in episodes if m["user"] in stored.content)
        await memory.wait_for_vectors(rid)
    return out


def load() -> list[dict[str, Any]]:
    users = []
    for path in sorted(DATA.glob("*.json")):
        with path.open(encoding="utf-8") as f:
            users.append(json.load(f))
    return users


def run_child(src: Path, url: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("POPAGENT_EMBEDDER", None)  # the default, as a new user gets it
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, url, str(Path(__file__).resolve().parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{src}: {done.stderr[-3000:]}")
    rows: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def score(users: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One scored row per question: hit ranks, unrelated and returned counts."""
    by_q = {(r["user"], r["q"]): r["top"] for r in rows}
    out = []
    for user in users:
        for q in user["questions"]:
            top = by_q[(user["user"], q["q"])]
            answers = set(q["answers"])
            allowed = answers | set(q.get("related", ()))
            first = next((i for i, m in enumerate(top, 1) if m in answers), 0)
            out.append(
                {
                    "split": user["split"],
                    "kind": q["kind"],
                    "answerable": bool(answers),
                    "first": first,
                    "unrelated": sum(m not in allowed for m in top),
                    "returned": len(top),
                }
            )
    return out


def summary(scored: list[dict[str, Any]]) -> dict[str, float]:
    answerable = [r for r in scored if r["answerable"]]
    out = {
        "n": float(len(scored)),
        "unrel/q": statistics.fmean(r["unrelated"] for r in scored) if scored else 0.0,
        "ret/q": statistics.fmean(r["returned"] for r in scored) if scored else 0.0,
    }
    if answerable:
        out["hit@1"] = statistics.fmean(0 < r["first"] <= 1 for r in answerable)
        out["hit@3"] = statistics.fmean(0 < r["first"] <= 3 for r in answerable)
    return out


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| split | kind | n | code | hit@1 | hit@3 | unrel/q | ret/q |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    groups: list[tuple[str, str]] = []
    for split in ("dev", "check", "all"):
        groups += [(split, kind) for kind in (*KINDS, "all")]
    for split, kind in groups:
        for code, scored in results.items():
            rows = [
                r for r in scored if split in ("all", r["split"]) and kind in ("all", r["kind"])
            ]
            s = summary(rows)

            def cell(name: str, s: dict[str, float] = s) -> str:
                return f"{s[name]:.3f}" if name in s else "-"

            lines.append(
                f"| {split} | {kind} | {int(s['n'])} | {code} | {cell('hit@1')} | "
                f"{cell('hit@3')} | {cell('unrel/q')} | {cell('ret/q')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="236007e", help="git revision to compare with")
    parser.add_argument("--json", type=Path, help="write every question's results here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    import psycopg

    from popagent.store.embedded import EmbeddedServer
    from writes import baseline_tree

    users = load()
    results: dict[str, list[dict[str, Any]]] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="pa-relevance-") as tmp:
        old = baseline_tree(args.baseline_ref, Path(tmp))
        server = EmbeddedServer(Path(tmp) / "cluster", delete=True)
        try:
            for code, src in (("baseline", old / "src"), ("current", ROOT / "src")):
                name = f"relevance_{code}"
                with psycopg.connect(server.url, autocommit=True) as admin:
                    admin.execute(f"CREATE DATABASE {name}")
                url = server.url.replace("/postgres?", f"/{name}?")
                started = time.monotonic()
                raw[code] = run_child(src, url)
                results[code] = score(users, raw[code])
                print(f"{code}: {time.monotonic() - started:.1f} s", flush=True)
        finally:
            server.stop()
    print(
        f"\nRelevance ({sum(len(u['questions']) for u in users)} questions, "
        f"default embedder, limit 8): {args.baseline_ref} (baseline) vs this tree\n"
    )
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
