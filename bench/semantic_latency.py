"""Recall latency with query embedding, and write throughput with embeddings.

Reuses ``bench/latency.py``'s synthetic corpus, queries and helpers, on a
disposable embedded PostgreSQL cluster (or ``POPAGENT_DATABASE_URL``):

1. recall in ONE resource of 10k and 100k episodes (plus 20 facts): 20 warm-up
   queries, then 200 sequential recalls per mode, ``lexical`` (the spec's
   path) and ``fused`` (query embedded by the local model, then lexical and
   vector candidates); p50/p95/max in ms, and the query embedding alone.
   The stored episodes' vectors are *bag-of-words* vectors of the same model
   (each episode: the normalized sum of the local model's vectors of its
   words, which are embedded once): the synthetic text is random words, so
   embedding 100k of them for real (about 25 minutes on two cores) would
   measure nothing but that. The queries are embedded for real, on every
   recall: that is the latency a user sees.
2. write throughput on real text: (a) ``retain_episode`` one call at a time,
   (b) ``retain_episodes`` in batches of 100, each with the local model (its
   vector worker embedding in the background, on the same cores) and without
   one; episodes/s and the ratio. Writes never embed: this is what the worker
   costs them.

    python bench/semantic_latency.py [--quick] [--sizes 10000,100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from latency import (
    LIMIT,
    VOCAB,
    add_facts,
    admin_url,
    database,
    load,
    pct,
    queries,
    table,
    turns,
)
from popagent import LongTermMemory
from popagent.embed import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder, Vectors
from popagent.embed.protocol import EmbedKind, normalize_rows
from popagent.store import vectors as vector_store

WORD_RE = re.compile(r"[a-z]+")


class BagOfWordsEmbedder:
    """The local model's word vectors, summed per text: fast stand-ins for stored
    episodes, in the local model's space and under its name (see the docstring)."""

    def __init__(self, words: Sequence[str], local: LocalEmbedder) -> None:
        self._index = {w: i for i, w in enumerate(words)}
        self._vectors = local.embed_sync(list(words))

    @property
    def model(self) -> str:
        return LOCAL_MODEL

    @property
    def dimensions(self) -> int:
        return LOCAL_DIMENSIONS

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        out = np.zeros((len(texts), LOCAL_DIMENSIONS), dtype=np.float32)
        for row, text in enumerate(texts):
            ids = [self._index[w] for w in WORD_RE.findall(text.lower()) if w in self._index]
            if ids:
                out[row] = self._vectors[ids].sum(axis=0)
        return normalize_rows(out)


async def measure(memory: LongTermMemory, rid: str, seed: str, budget_s: float) -> dict[str, Any]:
    """Per mode: 20 warm-up recalls, then up to 200 timed sequential ones."""
    asked = [q for q, _typo in queries(seed, 220, 9)]
    out: dict[str, Any] = {}
    for mode in ("lexical", "fused"):
        for q in asked[:20]:
            await memory.recall(rid, q, limit=LIMIT, mode=mode)
        times: list[float] = []
        deadline = time.perf_counter() + budget_s
        for q in asked[20:]:
            start = time.perf_counter()
            await memory.recall(rid, q, limit=LIMIT, mode=mode)
            times.append((time.perf_counter() - start) * 1000)
            if start > deadline:
                break
        out[mode] = {
            "n": len(times),
            "p50": pct(times, 50),
            "p95": pct(times, 95),
            "max": max(times),
        }
    assert memory.embedder is not None
    embed_ms: list[float] = []
    for q in asked[20:120]:
        start = time.perf_counter()
        await memory.embedder.embed([q], kind="query")
        embed_ms.append((time.perf_counter() - start) * 1000)
    out["embed"] = {"n": len(embed_ms), "p50": pct(embed_ms, 50), "p95": pct(embed_ms, 95)}
    return out


async def scenario_recall(args: argparse.Namespace, admin: str, out: dict[str, Any]) -> None:
    local = LocalEmbedder()
    bag = BagOfWordsEmbedder(VOCAB, local)
    async with database(admin, "semantic") as plain:
        writer = LongTermMemory(plain.pool, embedder=bag)
        reader = LongTermMemory(plain.pool, embedder=local)
        rid, have = "bench-semantic", 0
        await add_facts(reader, rid)
        await reader.wait_for_vectors(rid)
        # Writes no more: its worker would race the writer's for the rows it loads.
        await reader.aclose()
        for size in args.sizes:
            jobs = [(rid, min(2_000, size - o), f"s1:{o}") for o in range(have, size, 2_000)]
            loaded = await load(writer, f"one resource to {size:,}", jobs, args)
            # Vectors are written in the background, after each write commits.
            start = time.perf_counter()
            loaded["pending"] = await writer.wait_for_vectors(rid, timeout=args.load_budget_s)
            loaded["vectors_s"] = time.perf_counter() - start
            async with plain.pool.connection() as conn:
                await conn.execute("VACUUM (ANALYZE) popagent_memory_embeddings")
            out["loads"].append(loaded)
            have = size
            for run_no in (1, 2):
                m = await measure(reader, rid, f"q:{size}", args.recall_budget_s)
                for mode in ("lexical", "fused"):
                    out["recall"].append({"memories": size, "run": run_no, "mode": mode, **m[mode]})
                out["embed"].append({"memories": size, "run": run_no, **m["embed"]})
                out["recall"][-1]["vs_lexical"] = (
                    f"{out['recall'][-1]['p95'] / out['recall'][-2]['p95']:.2f}x p95"
                )
                out["recall"][-2]["vs_lexical"] = ""
        await writer.aclose()
    table(
        "Scenario 1: recall in one resource, lexical vs fused with query embedding (ms)",
        "memories run mode n p50 p95 max vs_lexical",
        out["recall"],
    )
    table("Query embedding alone (local model, ms)", "memories run n p50 p95", out["embed"])
    table(
        "Loads (retain_episodes with bag-of-words vectors, 4 tasks)",
        "load rows new seconds rows/s vacuum_s vectors_s pending complete",
        out["loads"],
    )
    print(f"exact search up to {vector_store.EXACT_SEARCH_MAX:,} memories, HNSW above")


async def scenario_throughput(args: argparse.Namespace, admin: str, out: dict[str, Any]) -> None:
    singles, batched = (100, 500) if args.quick else (300, 2_000)
    async with database(admin, "throughput") as plain:
        embedded = LongTermMemory(plain.pool, embedder=LocalEmbedder())
        await embedded.recall("warm-up", "load the model")  # not timed: load once
        rows: list[dict[str, Any]] = []
        for label, memory in (("without a model", plain), ("with the model", embedded)):
            rid = f"bench-{label.split()[0]}"
            items = turns(f"s3:{label}", singles)
            start = time.perf_counter()
            for t in items:
                await memory.retain_episode(rid, t.session_id, t.user_text, t.assistant_text)
            seconds = time.perf_counter() - start
            rows.append(
                {"variant": f"(a) single calls, {label}", "episodes": singles}
                | {"seconds": seconds, "episodes/s": singles / seconds}
            )
            items = turns(f"s3b:{label}", batched)
            start = time.perf_counter()
            for off in range(0, batched, 100):
                await memory.retain_episodes(rid, items[off : off + 100])
            seconds = time.perf_counter() - start
            rows.append(
                {"variant": f"(b) batches of 100, {label}", "episodes": batched}
                | {"seconds": seconds, "episodes/s": batched / seconds}
            )
        for row in rows:
            base = next(r for r in rows if r["variant"][:3] == row["variant"][:3])
            row["vs_plain"] = f"{row['episodes/s'] / base['episodes/s']:.2f}x"
        out["throughput"] = rows
        await embedded.aclose()
    table(
        "Scenario 2: write throughput (ms-scale synthetic episodes of 30-120 words)",
        "variant episodes seconds episodes/s vs_plain",
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k only, fewer writes")
    parser.add_argument("--sizes", help="comma-separated resource sizes (default 10000,100000)")
    parser.add_argument("--load-budget-s", type=float, default=900.0, help="cap per bulk load")
    parser.add_argument("--recall-budget-s", type=float, default=120.0, help="cap per 200 recalls")
    parser.add_argument("--json", metavar="PATH", help="write all numbers here")
    args = parser.parse_args()
    default = "10000" if args.quick else "10000,100000"
    args.sizes = [int(s) for s in (args.sizes or default).split(",")]
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    started = time.perf_counter()
    out: dict[str, Any] = {"sizes": args.sizes, "loads": [], "recall": [], "embed": []}
    with admin_url() as admin:
        asyncio.run(scenario_recall(args, admin, out))
        asyncio.run(scenario_throughput(args, admin, out))
    print("\nAims (best of the two runs; issue 23: query embedding included):")
    for size in args.sizes:
        p95 = min(r["p95"] for r in out["recall"] if r["memories"] == size and r["mode"] == "fused")
        aim = 15.0 if size <= 10_000 else 40.0
        label = f"fused recall p95 at {size:,} <= {aim:.0f} ms"
        print(f"  {'met ' if p95 <= aim else 'MISS'} {label}: {p95:.1f}")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)


if __name__ == "__main__":
    main()
