"""Evidence recall of popagent's ``recall`` on LoCoMo, against a BM25 baseline.

Data: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory
of LLM Agents", ACL 2024; github.com/snap-research/LoCoMo), ``locomo10.json``,
licensed CC BY-NC 4.0 (non-commercial use, attribution required). It is read in
place (default ``../shared/benchdata/locomo10.json`` from the repository root),
never copied; see ``shared/benchdata/README.md`` for its layout.

Protocol:

* each conversation is one resource, ``locomo-<sample_id>``, in a disposable
  embedded PostgreSQL cluster; its episodes go in with one ``retain_episodes``;
* within each session, turns (0, 1), (2, 3), ... form one episode each: the first
  turn is the user text, the second the assistant text. A session with an odd
  number of turns folds its last turn into the previous episode (assistant text
  = turns n-2 and n-1 joined by a newline), so no episode carries invented text;
  a session of one turn would get the assistant text "(no reply)" (none has);
* a turn's text is ``"<speaker>: <text>"``, plus `` [image: <blip_caption>]`` when
  it has one; each episode's ``created_at`` is its session's date (UTC) and it
  covers the dia_ids of its turns (identical episodes, stored once, cover the
  union);
* every question of categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain,
  4 single-hop; 5, adversarial, is left out) is asked once with ``limit=10`` and
  ``now`` = the last session's time + 1 day; the top 5, 8 and 10 are scored;
* R@k of a question = the fraction of its evidence dia_ids (split on ``;`` and
  spaces, normalized: ``D30:05`` -> ``D30:5``, ``D:11:26`` -> ``D11:26``; the bare
  ``D`` is dropped, the two ids that name no turn are kept and never match) that
  the top-k episodes cover; no evidence counts as 1.0. Reported per category and
  overall (the mean over all category 1-4 questions);
* baseline: ``rank_bm25.BM25Okapi`` over exactly the stored episode texts of the
  same conversation, tokens = ``\\w+`` of the lower-cased text (no stemming, no
  stop words); its top-k always has k episodes, recall's may have fewer.
* systems, all over the same stored episodes in one run: ``lexical`` (the
  spec's ranking, ``mode="lexical"``), ``vector`` (the vector index alone),
  ``fused`` (lexical and vector candidates, weighted blend: the default) and
  ``rrf`` (the same candidates, reciprocal-rank fusion). The episodes'
  vectors are written by ``retain_episodes`` in its transaction, with the
  embedder ``--embedder`` names (``local``: all-MiniLM-L6-v2 int8, the
  default; ``none``: lexical only; ``openai``: ``POPAGENT_EMBEDDING_*``).

    python bench/locomo.py [--data PATH] [--conversations N] [--embedder local|none|openai]
                           [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.embed import Embedder, make_embedder
from popagent.memory.longterm import RecallMode
from popagent.memory.ranking import RankingWeights
from popagent.memory.validation import episode_content
from popagent.models import MemoryFilter
from popagent.store.embedded import EmbeddedServer

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (5, 8, 10)
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared/benchdata/locomo10.json"
TOKEN = re.compile(r"\w+")
EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
EPOCH = datetime.min.replace(tzinfo=UTC)


@dataclass
class Question:
    category: int
    text: str
    evidence: frozenset[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[EpisodeTurn] = field(default_factory=list)
    covers: dict[str, frozenset[str]] = field(default_factory=dict)  # stored content -> dia_ids
    now: datetime = EPOCH
    questions: list[Question] = field(default_factory=list)

    @property
    def resource(self) -> str:
        return f"locomo-{self.sample_id}"


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    return text + (f" [image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def normalize_evidence(raw: list[str]) -> frozenset[str]:
    ids = set()
    for token in (t for item in raw for t in re.split(r"[;\s]+", item) if t):
        if m := EVIDENCE_ID.fullmatch(token):
            ids.add(f"D{int(m[1])}:{int(m[2])}")
    return frozenset(ids)


def pair_turns(turns: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """(user, assistant, dia_ids) per episode; an odd last turn joins the previous episode."""
    groups = [turns[i : i + 2] for i in range(0, len(turns), 2)]
    if len(groups) > 1 and len(groups[-1]) == 1:
        groups[-2:] = [groups[-2] + groups[-1]]
    out = []
    for group in groups:
        rest = "\n".join(turn_text(t) for t in group[1:]) or "(no reply)"
        out.append((turn_text(group[0]), rest, [t["dia_id"] for t in group]))
    return out


def load(path: Path, limit: int | None) -> list[Conversation]:
    with path.open(encoding="utf-8") as f:
        samples: list[dict[str, Any]] = json.load(f)
    conversations = []
    for sample in samples[:limit]:
        conv, dialog = Conversation(sample["sample_id"]), sample["conversation"]
        last = conv.now
        for key, turns in dialog.items():
            if not re.fullmatch(r"session_\d+", key) or not turns:
                continue
            when = datetime.strptime(dialog[f"{key}_date_time"], DATE_FORMAT).replace(tzinfo=UTC)
            last = max(last, when)
            for user, assistant, ids in pair_turns(turns):
                built = episode_content(user, assistant)
                if built is None:
                    raise ValueError(f"{conv.sample_id} {ids}: an empty episode")
                conv.turns.append(EpisodeTurn(key, user, assistant, when))
                conv.covers[built[0]] = conv.covers.get(built[0], frozenset()) | frozenset(ids)
        conv.now = last + timedelta(days=1)
        for qa in sample["qa"]:
            if qa["category"] in CATEGORIES:
                evidence = normalize_evidence(qa["evidence"])
                conv.questions.append(Question(qa["category"], qa["question"], evidence))
        conversations.append(conv)
    return conversations


def recall_at(evidence: frozenset[str], ranked: list[frozenset[str]], k: int) -> float:
    if not evidence:
        return 1.0
    covered = frozenset().union(*ranked[:k])
    return len(evidence & covered) / len(evidence)


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def bm25_ranked(conv: Conversation) -> list[list[frozenset[str]]]:
    """Per question, the covers of the BM25 top-10 (ties keep insertion order)."""
    contents = list(conv.covers)
    bm25 = BM25Okapi([tokens(c) for c in contents])
    out = []
    for q in conv.questions:
        scores = np.asarray(bm25.get_scores(tokens(q.text)), dtype=float)
        top = np.argsort(-scores, kind="stable")[: max(KS)]
        out.append([conv.covers[contents[i]] for i in top])
    return out


async def ingest(memory: LongTermMemory, conversations: list[Conversation]) -> float:
    """Retain every conversation, check stored episodes against ours, ANALYZE; seconds taken."""
    start = time.perf_counter()
    for conv in conversations:
        await memory.retain_episodes(conv.resource, conv.turns)
    if memory.embedder is not None:
        # Whatever the write path left for later: every episode has its vector.
        await memory.embed_missing(None)
    seconds = time.perf_counter() - start
    for conv in conversations:
        stored: list[str] = []
        while page := await memory.list(
            conv.resource, MemoryFilter(kind="episode", limit=1000, offset=len(stored))
        ):
            stored += [m.content for m in page]
        if sorted(stored) != sorted(conv.covers):
            raise RuntimeError(f"{conv.resource}: stored episodes differ from those retained")
    async with memory.pool.connection() as conn:
        # As autovacuum soon would after a bulk load: the memories and the
        # recall statistics their triggers filled.
        await conn.execute(
            "ANALYZE popagent_memories, popagent_lexeme_stats, popagent_resource_stats"
        )
    return seconds


def systems(memory: LongTermMemory) -> dict[str, tuple[LongTermMemory, RecallMode]]:
    """The recall variants compared, each a service over the same pool and embedder."""
    if memory.embedder is None:
        return {"lexical": (memory, "lexical")}
    rrf = LongTermMemory(
        memory.pool, weights=RankingWeights(fusion="rrf"), embedder=memory.embedder
    )
    return {
        "lexical": (memory, "lexical"),
        "vector": (memory, "vector"),
        "fused": (memory, "fused"),
        "rrf": (rrf, "fused"),
    }


async def evaluate(
    url: str, conversations: list[Conversation], embedder: Embedder | None
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    latencies: dict[str, list[float]] = {}
    async with popagent.connect(url, embedder=embedder) as root:
        memory = root.memory
        ingest_s = await ingest(memory, conversations)
        variants = systems(memory)
        for conv in conversations:
            baseline = bm25_ranked(conv)
            for q, bm in zip(conv.questions, baseline, strict=True):
                row: dict[str, Any] = {"sample": conv.sample_id, "category": q.category}
                row |= {"question": q.text, "evidence": sorted(q.evidence)}
                for name, (service, mode) in variants.items():
                    start = time.perf_counter()
                    results = await service.recall(
                        conv.resource, q.text, limit=max(KS), now=conv.now, mode=mode
                    )
                    latencies.setdefault(name, []).append((time.perf_counter() - start) * 1000)
                    ranked = [conv.covers[r.memory.content] for r in results]
                    row[name] = {k: recall_at(q.evidence, ranked, k) for k in KS}
                    row[f"{name}_top"] = [sorted(c) for c in ranked]
                row["bm25"] = {k: recall_at(q.evidence, bm, k) for k in KS}
                row["bm25_top"] = [sorted(c) for c in bm]
                rows.append(row)
    names = [*variants, "bm25"]
    recall_ms = {}
    for name, values in latencies.items():
        quantiles = statistics.quantiles(values, n=100, method="inclusive")
        recall_ms[name] = {"n": len(values), "p50": quantiles[49], "p95": quantiles[94]}
    return {
        "ingest_s": ingest_s,
        "embedder": embedder.model if embedder is not None else None,
        "episodes": sum(len(c.covers) for c in conversations),
        "systems": names,
        "recall_ms": recall_ms,
        "summary": summarize(rows, names),
        "questions": rows,
    }


def summarize(rows: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    groups = [(name, [r for r in rows if r["category"] == c]) for c, name in CATEGORIES.items()]
    out = []
    for name, group in [*groups, ("overall", rows)]:
        entry: dict[str, Any] = {"category": name, "n": len(group)}
        for system in names:
            entry[system] = {k: statistics.fmean(r[system][k] for r in group) for k in KS}
        out.append(entry)
    return out


def print_table(summary: list[dict[str, Any]], names: list[str], k: int) -> None:
    best = "fused" if "fused" in names else "lexical"  # the default recall
    against = ["bm25"] if best == "lexical" else ["bm25", "lexical"]
    label = {"bm25": "BM25", "lexical": "lexical"}
    head = [
        "category",
        "n",
        *(f"{s} R@{k}" for s in names),
        *(f"{best}-{label[a]}" for a in against),
    ]
    cells = [
        [e["category"], str(e["n"])]
        + [f"{e[s][k]:.3f}" for s in names]
        + [f"{e[best][k] - e[a][k]:+.3f}" for a in against]
        for e in summary
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    for line in [head, ["-" * w for w in widths], *cells]:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo10.json")
    parser.add_argument("--conversations", type=int, metavar="N", help="only the first N")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers here")
    parser.add_argument(
        "--embedder",
        choices=("local", "e5", "none", "openai"),
        default="local",
        help="vectors from",
    )
    args = parser.parse_args()
    embedder = make_embedder(
        args.embedder,
        model=os.environ.get("POPAGENT_EMBEDDING_MODEL"),
        base_url=os.environ.get("POPAGENT_EMBEDDING_BASE_URL"),
        api_key=os.environ.get("POPAGENT_EMBEDDING_API_KEY"),
    )
    started = time.perf_counter()
    conversations = load(args.data, args.conversations)
    tmp = tempfile.mkdtemp(prefix="popagent-locomo-")
    server = None
    try:
        server = EmbeddedServer(tmp, delete=True)
        out = asyncio.run(evaluate(server.url, conversations, embedder))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"LoCoMo: {len(conversations)} conversations, {out['episodes']:,} episodes, "
        f"embedder {out['embedder']}"
    )
    for k in KS:
        print(f"\nEvidence recall@{k}")
        print_table(out["summary"], out["systems"], k)
    vectors = ", with vectors" if out.get("embedder") else ""
    print(f"\ningest (retain_episodes{vectors}) {out['ingest_s']:.2f} s")
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
