"""Recall and write latency through a Citus coordinator against plain PostgreSQL.

The same data, loaded the same way, into two databases: a plain one (a scratch
database on a disposable embedded cluster, or on ``--plain-url``'s server) and
``--citus-url``, a database of a Citus cluster (Citus installed on every node,
the workers added) that popagent migrates and then distributes with the plan in
docs/scaling.md, read from that file. Then, in each:

1. lexical recall (no embedder) in one resource of ``--memories`` episodes (plus 20 facts),
   among ``--others`` resources of 200 episodes: 20 warm-up queries, then
   ``--recalls`` sequential recalls with access bookkeeping and as many
   previews; p50/p95/max in ms, and whether each recall returned the same
   memories (by content), in the same order and with the same scores (to
   1e-9), as the plain database;
2. writes, one call at a time: ``retain_episode``, ``remember`` (a new key and
   an update) and ``retain_episodes`` in batches of 100;

and a table of the ratios (Citus / plain). Text and queries are
``bench/latency.py``'s synthetic ones. Usage:

    python bench/distributed.py --citus-url URL [--plain-url URL] [--memories N]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

sys.path.insert(0, str(Path(__file__).resolve().parent))

import popagent
from latency import NOW, add_facts, admin_url, pct, queries, table, text, turns
from popagent import LongTermMemory, RecallResult

PLAN = Path(__file__).resolve().parent.parent / "docs" / "scaling.md"
_PLAN_BLOCK = re.compile(r"```sql\n(.*?create_distributed_table.*?)```", re.DOTALL)
TARGET = "bench-dist-target"


def plan() -> str:
    """docs/scaling.md's distribution plan, as written there."""
    blocks = _PLAN_BLOCK.findall(PLAN.read_text(encoding="utf-8"))
    if len(blocks) != 1:
        raise SystemExit(f"{PLAN}: expected one SQL block with the distribution plan")
    return str(blocks[0])


@asynccontextmanager
async def plain_database(url: str | None) -> AsyncIterator[str]:
    """A scratch database on ``url``'s server (or an embedded one), dropped on exit."""
    with admin_url() if url is None else nullcontext(url) as admin:
        name = f"popagent_bench_dist_{os.getpid()}"
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield make_conninfo(admin, dbname=name)
        finally:
            async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                await conn.execute(drop.format(sql.Identifier(name)))


async def distribute(url: str) -> str:
    """Migrate ``url`` and run the plan unless popagent's tables are distributed already."""
    async with popagent.connect(url, max_size=1, embedder=None):
        pass
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::text LIKE 'popagent%%'"
        )
        row = await cur.fetchone()
        if row and row[0]:
            return "already distributed"
        await conn.execute(plan().encode())
    return "distributed by docs/scaling.md's plan"


async def load(memory: LongTermMemory, args: argparse.Namespace) -> None:
    await add_facts(memory, TARGET)
    for offset in range(0, args.memories, 1_000):
        count = min(1_000, args.memories - offset)
        await memory.retain_episodes(TARGET, turns(f"dist:{offset}", count))
    for n in range(args.others):
        await memory.retain_episodes(f"bench-dist-other-{n}", turns(f"other:{n}", 200))
    async with memory.pool.connection() as conn:
        await conn.execute("ANALYZE")


def signature(results: list[RecallResult]) -> list[tuple[str, float]]:
    return [(r.memory.content, r.score) for r in results]


async def timed(calls: list[Callable[[], Awaitable[Any]]], out: list[float]) -> list[Any]:
    """Run ``calls`` one after another; their answers; each one's milliseconds go to ``out``."""
    answers = []
    for call in calls:
        start = time.perf_counter()
        answers.append(await call())
        out.append((time.perf_counter() - start) * 1000)
    return answers


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[str, list[float]] = {}
    # Lexical recall alone: semantic recall adds the query's embedding (the same on
    # both) and reads vectors that a background worker writes at its own pace.
    async with popagent.connect(url, max_size=4, embedder=None) as root:
        memory = root.memory
        await load(memory, args)
        asked = [q for q, _ in queries("dist:q", 20 + args.recalls, 9)]
        for q in asked[:20]:
            await memory.recall(TARGET, q)
        writer = "bench-dist-writer"
        episodes = turns("dist:writes", args.writes)
        facts = [text(random.Random(f"fact:{i}"), 10) for i in range(args.writes)]
        batches = [turns(f"dist:batch:{n}", 100) for n in range(max(1, args.writes // 20))]
        work: dict[str, list[Callable[[], Awaitable[Any]]]] = {
            # At the episodes' fixed clock (bench/latency.py's NOW): recency scores alike.
            "recall (preview)": [
                partial(memory.recall, TARGET, q, touch=False, now=NOW) for q in asked[20:]
            ],
            "recall (with access bookkeeping)": [
                partial(memory.recall, TARGET, q) for q in asked[20:]
            ],
            "retain_episode": [
                partial(memory.retain_episode, writer, t.session_id, t.user_text, t.assistant_text)
                for t in episodes
            ],
            "remember (new key)": [
                partial(memory.remember, writer, f, key=f"bench.k{i}") for i, f in enumerate(facts)
            ],
            "remember (update)": [
                partial(memory.remember, writer, f + " Updated.", key=f"bench.k{i}")
                for i, f in enumerate(facts)
            ],
            "retain_episodes (100)": [
                partial(memory.retain_episodes, "bench-dist-batches", b) for b in batches
            ],
        }
        answers = {
            name: await timed(calls, rows.setdefault(name, [])) for name, calls in work.items()
        }
        previews = answers["recall (preview)"]
    return {"times": rows, "previews": [signature(r) for r in previews]}


def same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and abs(x[1] - y[1]) <= 1e-9 for x, y in zip(a, b, strict=True)
    )


async def run(args: argparse.Namespace) -> None:
    print(f"citus: {await distribute(args.citus_url)}")
    async with plain_database(args.plain_url) as plain_url:
        plain = await measure(plain_url, args)
    citus = await measure(args.citus_url, args)
    rows = []
    for name, times in plain["times"].items():
        other = citus["times"][name]
        rows.append(
            {"measure": name, "n": len(times)}
            | {"plain p50": pct(times, 50), "plain p95": pct(times, 95)}
            | {"citus p50": pct(other, 50), "citus p95": pct(other, 95)}
            | {"p50 ratio": f"{pct(other, 50) / pct(times, 50):.2f}x"}
            | {"p95 ratio": f"{pct(other, 95) / pct(times, 95):.2f}x"}
        )
    title = (
        f"Through the coordinator vs plain PostgreSQL: {args.memories:,} episodes + 20 facts "
        f"in the recalled resource, {args.others} others of 200 (ms)"
    )
    table(title, "measure n plain_p50 plain_p95 citus_p50 citus_p95 p50_ratio p95_ratio", [
        {k.replace(" ", "_"): v for k, v in r.items()} for r in rows
    ])  # fmt: skip
    agree = sum(same(a, b) for a, b in zip(plain["previews"], citus["previews"], strict=True))
    print(f"\nsame memories, order and scores as plain PostgreSQL: {agree} of {args.recalls}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--citus-url", required=True, help="a database of a Citus cluster")
    parser.add_argument("--plain-url", help="a plain server (default: an embedded one)")
    parser.add_argument("--memories", type=int, default=10_000, help="episodes recalled over")
    parser.add_argument("--others", type=int, default=20, help="other resources of 200")
    parser.add_argument("--recalls", type=int, default=150, help="timed recalls of each kind")
    parser.add_argument("--writes", type=int, default=100, help="timed writes of each kind")
    args = parser.parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    started = time.perf_counter()
    asyncio.run(run(args))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
