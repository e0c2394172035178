"""Implicit questions: does recall bring back the memory a question needs without naming it?

Data: ``bench/implicit/`` (written by the popagent team; its README says how):
synthetic users' facts and past conversation turns (episodes), and questions
whose answer depends on one of them but that mostly share no word with it
("recommend some Thai dishes" needs "Allergic to peanuts"). Two splits: ``dev``
(used to choose ranking parameters and the model) and ``check`` (never used to
choose anything; report it beside dev).

Protocol:

* each user is one resource, ``implicit-<split>-<user>``, in a disposable
  embedded PostgreSQL cluster; facts go in with ``remember`` (default
  importance), episodes with one ``retain_episodes`` whose ``created_at`` is
  ``days_ago`` before the run; then ``embed_missing`` writes any vector the
  write path did not (so the run measures ranking, whatever the write path does);
* every question is asked once with ``limit=8`` and ``now`` = the run's start;
  a question is *hit at k* when one of its answers is among the top k; MRR uses
  the first answer's rank (0 when none is in the top 8);
* parts: ``facts`` and ``episodes`` (the answer's kind, in stores of about 100
  memories with same-topic confusers) and ``few`` (stores of 3 to 7 memories).
  Questions without an answer (``few`` stores' unrelated questions, "what is
  the capital of Peru?") are scored apart: how often recall returns anything;
* baseline: ``rank_bm25.BM25Okapi`` over exactly the stored texts of the same
  user, tokens = ``\\w+`` of the lower-cased text, in the same run;
* systems: ``lexical``, ``vector`` and ``fused`` (the default with an
  embedder) of the library, and ``bm25``.

    python bench/implicit.py [--embedder local|e5|none|openai] [--split dev|check|all]
                             [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

import popagent
from embedders import CHOICES, embedder_named
from popagent import EpisodeTurn, LongTermMemory
from popagent.embed import Embedder
from popagent.memory.longterm import RecallMode
from popagent.memory.validation import episode_content, normalize_fact_content
from popagent.models import MemoryFilter
from popagent.store.embedded import EmbeddedServer

DATA = Path(__file__).resolve().with_name("implicit")
SPLITS = ("dev", "check")
PARTS = ("facts", "episodes", "few")
LIMIT = 8
KS = (1, 3, 8)
FEW_MAX = 10  # a store of at most this many memories is in the ``few`` part
TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class Item:
    id: str
    kind: str  # "fact" or "episode"
    content: str  # as stored
    user: str = ""
    assistant: str = ""
    days_ago: float = 0.0


@dataclass(frozen=True)
class Question:
    text: str
    answers: tuple[str, ...]
    topic: str
    part: str  # facts, episodes, few, or unrelated


@dataclass
class Store:
    split: str
    user: str
    items: list[Item] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def resource(self) -> str:
        return f"implicit-{self.split}-{self.user}"


def _item(raw: dict[str, Any]) -> Item:
    if "fact" in raw:
        return Item(raw["id"], "fact", normalize_fact_content(raw["fact"]))
    built = episode_content(raw["user"], raw["assistant"])
    if built is None:
        raise ValueError(f"{raw['id']}: an empty episode")
    return Item(
        raw["id"], "episode", built[0], raw["user"], raw["assistant"], float(raw["days_ago"])
    )


def load(data: Path = DATA, splits: Sequence[str] = SPLITS) -> list[Store]:
    """The stores of ``splits``, in file order; checks that every answer exists."""
    stores = []
    for split in splits:
        for path in sorted((data / split).glob("*.json")):
            with path.open(encoding="utf-8") as f:
                doc = json.load(f)
            if doc["split"] != split:
                raise ValueError(f"{path}: split {doc['split']!r} in the {split} folder")
            for raw in doc["stores"]:
                store = Store(split, raw["user"], [_item(m) for m in raw["memories"]])
                kinds = {i.id: i.kind for i in store.items}
                if len(kinds) != len(store.items):
                    raise ValueError(f"{path} {store.user}: duplicate memory ids")
                few = len(store.items) <= FEW_MAX
                for q in raw["questions"]:
                    answers = tuple(q["answers"])
                    if any(a not in kinds for a in answers):
                        raise ValueError(f"{path} {store.user}: {q['q']!r} names no memory")
                    part = (
                        "unrelated"
                        if not answers
                        else "few"
                        if few
                        else "facts"
                        if kinds[answers[0]] == "fact"
                        else "episodes"
                    )
                    store.questions.append(Question(q["q"], answers, q.get("topic", ""), part))
                stores.append(store)
    return stores


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def bm25_ranked(store: Store) -> list[list[str]]:
    """Per question, the item ids of the BM25 top 8 (ties keep the file order)."""
    bm25 = BM25Okapi([tokens(i.content) for i in store.items])
    out = []
    for q in store.questions:
        scores = np.asarray(bm25.get_scores(tokens(q.text)), dtype=float)
        top = np.argsort(-scores, kind="stable")[:LIMIT]
        # BM25 returns every document; one with no query word is no answer.
        out.append([store.items[i].id for i in top if scores[i] > 0])
    return out


async def ingest(memory: LongTermMemory, stores: list[Store], now: datetime) -> float:
    """Write every store's memories (and any missing vector); seconds taken."""
    start = time.perf_counter()
    for store in stores:
        for item in store.items:
            if item.kind == "fact":
                await memory.remember(store.resource, item.content)
        turns = [
            EpisodeTurn("implicit", item.user, item.assistant, now - timedelta(days=item.days_ago))
            for item in store.items
            if item.kind == "episode"
        ]
        if turns:
            await memory.retain_episodes(store.resource, turns)
    if memory.embedder is not None:
        await memory.embed_missing(None)
    seconds = time.perf_counter() - start
    async with memory.pool.connection() as conn:
        await conn.execute(
            "ANALYZE popagent_memories, popagent_lexeme_stats, popagent_resource_stats"
        )
    return seconds


async def stored_ids(memory: LongTermMemory, store: Store) -> dict[int, str]:
    """Stored memory id -> the item's id, matched by content; every item must be there."""
    by_content = {(i.kind, i.content): i.id for i in store.items}
    out: dict[int, str] = {}
    offset = 0
    while page := await memory.list(store.resource, MemoryFilter(limit=500, offset=offset)):
        offset += len(page)
        for m in page:
            out[m.id] = by_content[(m.kind, m.content)]
    if sorted(out.values()) != sorted(by_content.values()):
        raise RuntimeError(f"{store.resource}: stored memories differ from the data")
    return out


def first_rank(answers: Sequence[str], ranked: Sequence[str]) -> int:
    """1-based rank of the first answer among ``ranked``; 0 when none is there."""
    for position, item in enumerate(ranked, start=1):
        if item in answers:
            return position
    return 0


def systems(memory: LongTermMemory) -> dict[str, tuple[LongTermMemory, RecallMode]]:
    if memory.embedder is None:
        return {"lexical": (memory, "lexical")}
    return {
        "lexical": (memory, "lexical"),
        "vector": (memory, "vector"),
        "fused": (memory, "fused"),
    }


async def evaluate(
    url: str,
    stores: list[Store],
    embedder: Embedder | None,
    variants: Callable[[LongTermMemory], dict[str, tuple[LongTermMemory, RecallMode]]] = systems,
) -> dict[str, Any]:
    """Ingest, ask every question of every system; per-question rows and latencies.

    ``variants`` names the systems (a service over the same pool and a mode) for
    the opened memory."""
    now = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    latencies: dict[str, list[float]] = {}
    async with popagent.connect(url, embedder=embedder) as root:
        memory = root.memory
        ingest_s = await ingest(memory, stores, now)
        chosen = variants(memory)
        for store in stores:
            ids = await stored_ids(memory, store)
            baseline = bm25_ranked(store)
            for q, bm in zip(store.questions, baseline, strict=True):
                row: dict[str, Any] = {"split": store.split, "user": store.user, "part": q.part}
                row |= {"question": q.text, "answers": list(q.answers), "topic": q.topic}
                for name, (service, mode) in chosen.items():
                    start = time.perf_counter()
                    results = await service.recall(
                        store.resource, q.text, limit=LIMIT, now=now, mode=mode, touch=False
                    )
                    latencies.setdefault(name, []).append((time.perf_counter() - start) * 1000)
                    ranked = [ids[r.memory.id] for r in results]
                    row[name] = {"rank": first_rank(q.answers, ranked), "returned": len(ranked)}
                    row[f"{name}_top"] = ranked
                row["bm25"] = {"rank": first_rank(q.answers, bm), "returned": len(bm)}
                row["bm25_top"] = bm
                rows.append(row)
    names = [*chosen, "bm25"]
    return {
        "ingest_s": ingest_s,
        "embedder": embedder.model if embedder is not None else None,
        "memories": sum(len(s.items) for s in stores),
        "systems": names,
        "recall_ms": latency_summary(latencies),
        "summary": summarize(rows, names),
        "questions": rows,
    }


def latency_summary(latencies: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out = {}
    for name, values in latencies.items():
        q = statistics.quantiles(values, n=100, method="inclusive")
        out[name] = {"n": len(values), "p50": q[49], "p95": q[94]}
    return out


def scores(rows: list[dict[str, Any]], system: str) -> dict[str, float]:
    """hit@1/3/8 and MRR of ``system`` over answered ``rows``."""
    ranks = [r[system]["rank"] for r in rows]
    out = {f"hit@{k}": statistics.fmean(0 < rank <= k for rank in ranks) for k in KS}
    out["mrr"] = statistics.fmean(1.0 / rank if rank else 0.0 for rank in ranks)
    return out


def summarize(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """One entry per (split, part) and system, plus each split's unrelated questions."""
    out = []
    for split in SPLITS:
        for part in (*PARTS, "all"):
            group = [
                r
                for r in rows
                if r["split"] == split and r["part"] != "unrelated" and part in (r["part"], "all")
            ]
            if not group:
                continue
            entry: dict[str, Any] = {"split": split, "part": part, "n": len(group)}
            entry |= {name: scores(group, name) for name in names}
            out.append(entry)
        unrelated = [r for r in rows if r["split"] == split and r["part"] == "unrelated"]
        if unrelated:
            entry = {"split": split, "part": "unrelated", "n": len(unrelated)}
            for name in names:
                returned = [r[name]["returned"] for r in unrelated]
                entry[name] = {
                    "answered": statistics.fmean(n > 0 for n in returned),
                    "mean_returned": statistics.fmean(returned),
                }
            out.append(entry)
    return out


def table(head: list[str], cells: list[list[str]]) -> str:
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    lines = [head, ["-" * w for w in widths], *cells]
    return "\n".join(
        "| " + " | ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) + " |"
        for line in lines
    )


def print_summary(summary: list[dict[str, Any]], names: list[str]) -> None:
    answered = [e for e in summary if e["part"] != "unrelated"]
    print("top-8 hit rate (hit@1 / hit@3 / MRR in the second table)")
    head = ["split", "part", "n", *(f"{s} @8" for s in names)]
    best = "fused" if "fused" in names else "lexical"
    head += [f"{best}-bm25"]
    cells = [
        [e["split"], e["part"], str(e["n"])]
        + [f"{e[s]['hit@8']:.3f}" for s in names]
        + [f"{e[best]['hit@8'] - e['bm25']['hit@8']:+.3f}"]
        for e in answered
    ]
    print(table(head, cells))
    print()
    head = ["split", "part", *(f"{s} @1/@3/MRR" for s in names)]
    cells = [
        [e["split"], e["part"]]
        + [f"{e[s]['hit@1']:.2f}/{e[s]['hit@3']:.2f}/{e[s]['mrr']:.2f}" for s in names]
        for e in answered
    ]
    print(table(head, cells))
    unrelated = [e for e in summary if e["part"] == "unrelated"]
    if unrelated:
        print("\nunrelated questions (no answer stored): share answered with anything")
        head = ["split", "n", *names]
        cells = [
            [e["split"], str(e["n"])]
            + [f"{e[s]['answered']:.2f} ({e[s]['mean_returned']:.1f})" for s in names]
            for e in unrelated
        ]
        print(table(head, cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the data folder")
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    parser.add_argument("--embedder", choices=CHOICES, default="local")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers here")
    args = parser.parse_args()
    embedder = embedder_named(args.embedder)
    started = time.perf_counter()
    stores = load(args.data, SPLITS if args.split == "all" else (args.split,))
    tmp = tempfile.mkdtemp(prefix="popagent-implicit-")
    server = None
    try:
        server = EmbeddedServer(tmp, delete=True)
        out = asyncio.run(evaluate(server.url, stores, embedder))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    questions = sum(len(s.questions) for s in stores)
    print(
        f"Implicit questions: {len(stores)} users, {out['memories']:,} memories, "
        f"{questions} questions, embedder {out['embedder']}\n"
    )
    print_summary(out["summary"], out["systems"])
    print(f"\ningest {out['ingest_s']:.2f} s")
    for name, lat in out["recall_ms"].items():
        print(
            f"recall {name:>7} over {lat['n']:,} questions: "
            f"p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms"
        )
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
