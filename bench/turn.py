"""Turn overhead: the time popagent adds to a chat turn, everything but the model call.

Runs ``Agent.run_turn`` against the scripted OpenAI-compatible server of the
tests (real HTTP on 127.0.0.1, the real ``OpenAIChatModel``) on a disposable
embedded PostgreSQL (or the server in ``POPAGENT_DATABASE_URL``, in a scratch
database dropped afterwards). The resource holds 10,000 synthetic episodes
(``bench/latency.py``'s generator) and 20 facts before the timed turns.

Per turn, ``TurnResult.timings.overhead_ms`` is the wall time of the turn
minus the time inside model calls: input checks, loading secrets, storing the
user message, recall and rendering, loading history, assembling the prompt,
audit rows, storing the assistant (and tool) messages, and the episode.
Two kinds of turns, 200 timed each after 20 warm-up turns, spread over 10
sessions so history grows as in a real chat:

* ``plain``: the model answers with text;
* ``remember``: the model first calls the ``remember`` tool, then answers
  (two model calls; the tool call's storage and audit count as overhead).

The aim (p95 <= 25 ms) is for the plain turn, what every turn pays; a turn
with tool calls adds each tool's own work and two stored messages per call,
shown for comparison.

The baseline, measured in the same run on the same resource, is recall alone
(``LongTermMemory.recall`` with the same questions), the largest single step.

Each is measured twice in the same run on the same resource: ``lexical`` (no
model, as before semantic recall was the default) and ``model`` (the default:
the local model embeds each question, and the vector worker embeds each turn's
new memories in the background, on the same cores). The stored episodes'
vectors are ``bench/semantic_latency.py``'s bag-of-words vectors of the same
model (embedding 10,000 synthetic episodes for real would take minutes and
measure nothing here); questions and new memories use the real model.
Usage: python bench/turn.py [--memories N] [--turns N] [--modes lexical,model]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from popagent.agent import Agent
from popagent.llm import ModelSettings, OpenAIChatModel
from popagent.threads import ThreadStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.scripted_model import CallTools, Reply, ScriptedModelServer

from latency import VOCAB, add_facts, admin_url, database, pct, queries, table, turns
from popagent import LongTermMemory
from popagent.embed import LocalEmbedder
from semantic_latency import BagOfWordsEmbedder

RESOURCE = "bench-turn"
REPLY = (
    "Here is what I found in our earlier conversations, and a suggestion for the next step: "
    "book the train early, keep the hotel near the station, and pack for rain."
)


def summary(name: str, values: list[float], baseline: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"measure": name, "n": len(values)}
    row |= {"p50": pct(values, 50), "p95": pct(values, 95), "max": max(values)}
    row["p95_vs_recall"] = f"{row['p95'] / baseline:.2f}x" if baseline else ""
    return row


async def run(args: argparse.Namespace, admin: str) -> list[dict[str, Any]]:
    async with database(admin, "turn") as lexical:
        await add_facts(lexical, RESOURCE)
        for offset in range(0, args.memories, 2_000):
            count = min(2_000, args.memories - offset)
            await lexical.retain_episodes(RESOURCE, turns(f"turn:{offset}", count))
        async with lexical.pool.connection() as conn:
            await conn.execute(
                "VACUUM (ANALYZE) popagent_memories, popagent_lexeme_stats, popagent_resource_stats"
            )
        services: dict[str, LongTermMemory] = {"lexical": lexical}
        if "model" in args.modes:
            local = LocalEmbedder()
            writer = LongTermMemory(lexical.pool, embedder=BagOfWordsEmbedder(VOCAB, local))
            assert await writer.wait_for_vectors(RESOURCE, timeout=900) == 0
            await writer.aclose()
            async with lexical.pool.connection() as conn:
                await conn.execute("VACUUM (ANALYZE) popagent_memory_embeddings")
            services["model"] = LongTermMemory(lexical.pool, embedder=local)
            assert await services["model"].warm_up()  # as a server does at start
        rows: list[dict[str, Any]] = []
        for mode in args.modes:
            rows += await measure(services[mode], mode, args.turns)
        for service in services.values():
            await service.aclose()
        return rows


async def measure(memory: LongTermMemory, mode: str, count: int) -> list[dict[str, Any]]:
    """Recall alone, then plain and ``remember`` turns, with ``memory``'s recall."""
    asked = [q for q, _ in queries("turn-questions", 2 * (count + 20), 0)]
    recall_ms: list[float] = []
    for q in asked[: count + 20]:
        start = time.perf_counter()
        await memory.recall(RESOURCE, q)
        recall_ms.append((time.perf_counter() - start) * 1000)
    recall_ms = recall_ms[20:]
    rows = [summary(f"{mode}: recall alone (baseline)", recall_ms)]
    with ScriptedModelServer() as server:
        settings = ModelSettings(base_url=server.base_url, api_key=None, model="scripted")
        async with OpenAIChatModel(settings) as model:
            agent = Agent(memory.pool, memory, ThreadStore(memory.pool), model)
            for kind in ("plain", "remember"):
                timings: dict[str, list[float]] = {"overhead": [], "model": [], "total": []}
                for i, q in enumerate(asked[: count + 20]):
                    if kind == "remember":
                        fact = {"content": f"Prefers option {i} for the trip", "key": "trip.pref"}
                        server.script(CallTools([("remember", fact)]), Reply(REPLY))
                    else:
                        server.script(Reply(REPLY))
                    result = await agent.run_turn(
                        RESOURCE, f"{mode}-{kind}-{i % 10}", q, now=datetime.now(UTC)
                    )
                    if i >= 20:
                        timings["overhead"].append(result.timings.overhead_ms)
                        timings["model"].append(result.timings.model_ms)
                        timings["total"].append(result.timings.total_ms)
                base = rows[0]["p95"]
                rows.append(summary(f"{mode}: {kind}: overhead", timings["overhead"], base))
                rows.append(summary(f"{mode}: {kind}: model (scripted HTTP)", timings["model"]))
                rows.append(summary(f"{mode}: {kind}: whole turn", timings["total"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="episodes in the resource")
    parser.add_argument("--turns", type=int, default=200, help="timed turns of each kind")
    parser.add_argument("--modes", default="lexical,model", help="lexical, model or both")
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or set(args.modes) - {"lexical", "model"}:
        parser.error("--modes takes lexical, model or both")
    started = time.perf_counter()
    with admin_url() as admin:
        rows = asyncio.run(run(args, admin))
    title = f"Turn overhead with {args.memories:,} episodes + 20 facts in the resource (ms)"
    table(title, "measure n p50 p95 max p95_vs_recall", rows)
    print()
    p95 = {
        m: next(r["p95"] for r in rows if r["measure"] == f"{m}: plain: overhead")
        for m in args.modes
    }
    for mode, plain in p95.items():
        print(
            f"  {'met ' if plain <= 25 else 'MISS'} {mode}: plain turn overhead p95 <= 25 ms: {plain:.2f}"
        )
    if len(p95) == 2:
        print(f"  model / lexical plain turn overhead p95: {p95['model'] / p95['lexical']:.2f}x")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
