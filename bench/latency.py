"""Recall latency and retain throughput of popagent's long-term memory.

Runs on a disposable embedded PostgreSQL cluster (or the server in
``POPAGENT_DATABASE_URL``), in scratch databases that are dropped afterwards:

1. recall in ONE resource of 1k, 10k, 100k episodes (plus 20 facts): 20 warm-up
   queries, then 200 sequential recalls; p50/p95/max in ms, also split by path:
   ``known`` (every query word is in the resource) or ``fuzzy`` (some word is
   unknown to it, e.g. a misspelling, so its look-alikes are searched for in the
   resource's vocabulary); ``typo`` is the misspelled queries alone.
2. isolation: scenario 1's 1k resource, loaded again into a database of 1M rows
   (1,000 resources of 1,000 rows); its recall latency against scenario 1's.
3. retain episodes/s: (a) one writer, one ``retain_episode`` per episode;
   (b) eight such writers; (c) ``retain_episodes`` in batches of 1,000;
   (d) batches, eight writers; each against (a).
4. EXPLAIN (ANALYZE, BUFFERS) of the two SQL statements recall runs, with the
   parameters it builds, for one query and one misspelled query at 100k.
5. ``--rls`` (instead of the above): recall in one resource of 10k episodes
   beside another of 10k, as the owner (row-level security does not apply) and
   as multi-resource mode runs it (``store.tenant.serving``: the role
   ``popagent_tenant`` under migration 0018's policies, set and reset per pooled
   connection), interleaved, three runs each; p50/p95 against the owner's.

Text is synthetic and deterministic: a 3,000-word vocabulary drawn Zipf-like
(user 10-40 words, assistant 20-80, created over the last 80 days); queries are
5-12-word questions. Each bulk load ends with VACUUM ANALYZE, as autovacuum
soon would. Usage: python bench/latency.py [--quick] [--rows-1m N] [--rls] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import popagent
from popagent import EpisodeTurn, LongTermMemory
from popagent.embed import Embedder
from popagent.memory.longterm import candidate_idfs, recall_pool
from popagent.store import recall as recall_sql
from popagent.store.embedded import EmbeddedServer

SEED = 1729
NOW = datetime.now(UTC)
LIMIT = 8  # recall's default limit
WORDS = """the a to of and i you it is in that for on with we this my be was have are at so not but can do your just if or
| say remember remind plan tell decide discuss note mention idea
| time year people way day thing world life hand part place case week company system program
question work number night point home water room mother area money story fact month lot right study
book eye job word business issue side kind head house service friend father power hour game line
end member law car city name team minute office door health person art war history party result
change morning reason research girl guy moment air teacher force education foot boy age policy
music market sense nation college interest death experience effect class control care field
development role effort rate heart drug show leader light voice wife police mind price report
decision son view relationship town road arm difference value building action model season society
tax director position player record paper space ground form event official matter center couple
site project activity star table need court oil situation cost industry figure street image phone
data picture practice piece land product doctor wall patient worker news test movie north love
support technology step baby computer type attention film tree source organization hair window
evidence population truth song garden river stone kitchen budget travel ticket flight hotel dinner
lunch recipe coffee email meeting deadline invoice contract server database backup wallet keyboard
screen laptop printer camera bike train bus airport beach mountain lake forest winter summer spring
autumn birthday wedding holiday vacation dentist gym workout yoga bread cheese apple orange tomato
pasta salad soup chicken fish rice tea wine beer cake sugar salt blue green red yellow black white
quiet loud early late happy tired busy ready simple quick slow cheap expensive fresh old young big
small long short hot cold warm dark bright heavy clean broken
| what did I say about, do you remember the, remind me of my, what was the plan for, tell me what
we decided about, any notes on, did I mention"""
STOP, ASKED, BASE, _prefixes = (part.split() for part in WORDS.split("|"))
PREFIXES = " ".join(_prefixes).split(", ")


def build_vocabulary(size: int = 3_000) -> list[str]:
    """Stop words (most frequent), then real words, then compounds (the long tail)."""
    rng = random.Random(SEED)
    common = list(dict.fromkeys(w for w in ASKED + BASE if w not in STOP))
    seen, tail = set(STOP) | set(common), list[str]()
    while len(STOP) + len(common) + len(tail) < size:
        word = rng.choice(BASE) + rng.choice(BASE)
        if word not in seen:
            seen.add(word)
            tail.append(word)
    rng.shuffle(common)
    return STOP + common + tail


VOCAB = build_vocabulary()
CUM = list(accumulate(1.0 / (rank + 1) ** 1.05 for rank in range(len(VOCAB))))
CONTENT = VOCAB[len(STOP) :]  # query words: flatter, so rarer words are asked about too
CONTENT_CUM = list(accumulate(1.0 / (rank + 1) ** 0.8 for rank in range(len(CONTENT))))


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCAB, cum_weights=CUM, k=n)).capitalize() + "."


def turns(seed: str, count: int) -> list[EpisodeTurn]:
    rng, out = random.Random(seed), []
    for i in range(count):
        created = NOW - timedelta(seconds=rng.uniform(0, 80 * 86_400))
        user, assistant = text(rng, rng.randint(10, 40)), text(rng, rng.randint(20, 80))
        out.append(EpisodeTurn(f"session-{i // 25}", user, assistant, created))
    return out


def misspell(rng: random.Random, word: str) -> str:
    """Swap two neighbouring letters, or drop one; never a vocabulary word."""
    i = rng.randrange(1, len(word) - 2)
    typo = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    return typo if typo not in VOCAB else word[:i] + word[i + 1 :]


def queries(seed: str, count: int, misspelled: int) -> list[tuple[str, bool]]:
    """``count`` 5-12-word questions; ``misspelled`` of them carry one misspelled word."""
    rng = random.Random(seed)
    typo_at = set(rng.sample(range(count), misspelled))
    out = []
    for k in range(count):
        prefix = rng.choice(PREFIXES).split()
        n = rng.randint(max(5, len(prefix) + 1), 12) - len(prefix)
        words = rng.choices(CONTENT, cum_weights=CONTENT_CUM, k=n)
        if k in typo_at:
            i = next((i for i, w in enumerate(words) if len(w) >= 5), 0)
            words[i] = misspell(rng, words[i] if len(words[i]) >= 5 else "breakfast")
        out.append((" ".join(prefix + words) + "?", k in typo_at))
    return out


def pct(values: Sequence[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else math.nan
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


async def takes_fuzzy(memory: LongTermMemory, rid: str, query: str) -> bool:
    """Whether recall searches the vocabulary for look-alikes: a query lexeme unknown here."""
    async with memory.pool.connection() as conn:
        df = (await recall_sql.corpus_stats(conn, rid, query)).document_frequency
    return 0 in df.values()


async def measure(memory: LongTermMemory, rid: str, seed: str, budget_s: float) -> dict[str, Any]:
    """20 warm-up recalls, then up to 200 timed sequential recalls (stops after budget_s)."""
    asked = queries(seed, 220, 9)
    for q, _ in asked[:20]:
        await memory.recall(rid, q, limit=LIMIT)
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    for q, _ in asked[20:]:
        start = time.perf_counter()
        await memory.recall(rid, q, limit=LIMIT)
        times.append((time.perf_counter() - start) * 1000)
        if start > deadline:
            break
    timed = asked[20 : 20 + len(times)]
    paths = [await takes_fuzzy(memory, rid, q) for q, _ in timed]
    known = [t for t, fuzzy in zip(times, paths, strict=True) if not fuzzy]
    fuzzy = [t for t, fuzzy in zip(times, paths, strict=True) if fuzzy]
    typos = [t for t, (_, typo) in zip(times, timed, strict=True) if typo]
    out = {"n": len(times), "p50": pct(times, 50), "p95": pct(times, 95), "max": max(times)}
    out |= {"known_p50": pct(known, 50), "known_p95": pct(known, 95)}
    out |= {"fuzzy_n": len(fuzzy), "fuzzy_p50": pct(fuzzy, 50)}
    return out | {"typo_p50": pct(typos, 50)}


async def load(
    memory: LongTermMemory, name: str, jobs: list[tuple[str, int, str]], args: argparse.Namespace
) -> dict[str, Any]:
    """``(resource, count, seed)`` batches through ``retain_episodes`` on 4 tasks; no new
    batch starts after ``--load-budget-s``. Then VACUUM ANALYZE."""
    pending, start = iter(jobs), time.perf_counter()
    done: dict[str, Any] = {"rows": 0, "new": 0, "report": 200_000}

    async def worker() -> None:
        for rid, count, seed in pending:
            if time.perf_counter() - start > args.load_budget_s:
                return
            new = await memory.retain_episodes(rid, turns(seed, count))
            done["new"] += new  # not `+= await`: that loses concurrent updates
            done["rows"] += count
            if done["rows"] >= done["report"]:
                done["report"] += 200_000
                print(f"  {name}: {done['rows']:,} rows in {time.perf_counter() - start:.0f} s")

    await asyncio.gather(*(worker() for _ in range(4)))
    seconds, vacuum_start = time.perf_counter() - start, time.perf_counter()
    async with memory.pool.connection() as conn:
        await conn.execute(
            "VACUUM (ANALYZE) popagent_memories, popagent_lexeme_stats, popagent_resource_stats"
        )
    done |= {"seconds": seconds, "rows/s": done["rows"] / seconds}
    done["vacuum_s"] = time.perf_counter() - vacuum_start
    return {"load": name, **done, "complete": done["rows"] == sum(j[1] for j in jobs)}


async def explain(memory: LongTermMemory, rid: str, query: str) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the SQL ``recall`` runs for ``query``, same parameters."""
    lines = [f"query: {query!r}"]
    async with memory.pool.connection() as conn:
        stats = await recall_sql.corpus_stats(conn, rid, query)
        pool = recall_pool(LIMIT)
        found = await recall_sql.candidates(conn, rid, stats, idfs=candidate_idfs(stats), pool=pool)
        lines.append(f"document frequencies: {stats.document_frequency}")
        lines.append(f"neighbours: {stats.neighbours}; candidates: {len(found)}")
        plans = [("CORPUS_STATS", recall_sql.CORPUS_STATS, {"resource_id": rid, "query": query})]
        if params := recall_sql.candidate_parameters(rid, stats, candidate_idfs(stats), pool):
            plans.append(("LEXICAL_CANDIDATES", recall_sql.LEXICAL_CANDIDATES, params))
        for title, statement, values in plans:
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, values)
            lines += [f"-- {title}"] + [next(iter(r.values())) for r in await cur.fetchall()]
    return lines


async def retain_throughput(memory: LongTermMemory, quick: bool) -> list[dict[str, Any]]:
    singles, per_writer, batches = (400, 100, 3) if quick else (2_000, 500, 10)

    async def one_by_one(rid: str, items: list[EpisodeTurn]) -> None:
        for t in items:
            user, assistant = t.user_text, t.assistant_text
            await memory.retain_episode(rid, t.session_id, user, assistant, created_at=t.created_at)

    async def batched(rid: str, items: list[EpisodeTurn]) -> None:
        for off in range(0, len(items), 1_000):
            await memory.retain_episodes(rid, items[off : off + 1_000])

    variants: list[tuple[str, Any, int, int]] = [
        ("(a) single calls, 1 writer", one_by_one, 1, singles),
        ("(b) single calls, 8 writers", one_by_one, 8, per_writer),
        ("(c) batches of 1,000, 1 writer", batched, 1, batches * 1_000),
        ("(d) batches of 1,000, 8 writers", batched, 8, max(1, batches // 5) * 1_000),
    ]
    rows: list[dict[str, Any]] = []
    for v, (label, fn, writers, each) in enumerate(variants):
        work = [(f"bench-writer-{v}-{w}", turns(f"s3:{v}:{w}", each)) for w in range(writers)]
        start = time.perf_counter()
        await asyncio.gather(*(fn(rid, items) for rid, items in work))
        seconds = time.perf_counter() - start
        rate = writers * each / seconds
        vs_a = f"{rate / (rows[0]['episodes/s'] if rows else rate):.2f}x"
        rows.append(
            {"variant": label, "episodes": writers * each, "seconds": seconds}
            | {"episodes/s": rate, "vs_a": vs_a}
        )
    return rows


@contextmanager
def admin_url() -> Iterator[str]:
    """``POPAGENT_DATABASE_URL``, else a disposable embedded cluster removed on exit."""
    if url := os.environ.get("POPAGENT_DATABASE_URL"):
        yield url
        return
    tmp = tempfile.mkdtemp(prefix="popagent-bench-")
    server = EmbeddedServer(tmp, delete=True)
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def scratch_url(admin: str, name: str) -> Iterator[str]:
    """The URL of a scratch database (empty, not migrated) on ``admin``'s server,
    dropped on exit."""
    dbname = f"popagent_bench_{os.getpid()}_{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        yield make_conninfo(admin, dbname=dbname)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
            )


@asynccontextmanager
async def database(
    admin: str, name: str, embedder: Embedder | None = None
) -> AsyncIterator[LongTermMemory]:
    """A scratch database, migrated by ``popagent.connect``, dropped on exit.

    Lexical unless given an ``embedder``: this program measures the lexical path
    (``bench/semantic_latency.py`` measures fused recall beside it), and with the
    default model a bulk load would have the vector worker embed every episode."""
    dbname = f"popagent_bench_{os.getpid()}_{name}"
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        async with popagent.connect(
            make_conninfo(admin, dbname=dbname), max_size=10, embedder=embedder
        ) as root:
            memory = root.memory
            yield memory
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            await conn.execute(drop.format(sql.Identifier(dbname)))


SINGLE_COLUMNS = "memories run n p50 p95 max known_p50 known_p95 fuzzy_n fuzzy_p50 typo_p50"
SPREAD_COLUMNS = "database run n p50 p95 max known_p50 known_p95 fuzzy_n fuzzy_p50"
LOAD_COLUMNS = "load rows new seconds rows/s vacuum_s complete"


def table(title: str, columns: str, rows: list[dict[str, Any]]) -> None:
    """A plain-text table of ``rows`` over the space-separated ``columns``."""
    keys = columns.split()
    fmt = {float: "{:,.1f}", int: "{:,}"}
    cells = [[fmt.get(type(r[k]), "{}").format(r[k]) for k in keys] for r in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    print(f"\n{title}")
    for line in [keys, ["-" * w for w in widths], *cells]:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) + " |")


async def add_facts(memory: LongTermMemory, rid: str) -> None:
    for i in range(20):
        fact = text(random.Random(f"fact:{i}"), 12)
        await memory.remember(rid, fact, key=f"bench.fact{i}", importance=0.7)


async def one_resource(args: argparse.Namespace, admin: str, out: dict[str, Any]) -> None:
    """Scenarios 1, 4 and 3, on one database."""
    async with database(admin, "single") as memory:
        rid, have = "bench-single", 0
        await add_facts(memory, rid)
        for size in out["sizes"]:
            jobs = [(rid, min(2_000, size - o), f"s1:{o}") for o in range(have, size, 2_000)]
            out["loads"].append(await load(memory, f"one resource to {size:,}", jobs, args))
            have = size
            for run_no in (1, 2):
                m = await measure(memory, rid, f"q:{size}", args.recall_budget_s)
                out["single"].append({"memories": size, "run": run_no, **m})
        table("Scenario 1: recall in one resource (ms)", SINGLE_COLUMNS, out["single"])
        asked = queries(f"q:{have}", 220, 9)
        out["explain"] = await explain(memory, rid, next(q for q, t in asked if not t))
        out["explain"] += await explain(memory, rid, next(q for q, t in asked if t))
        print(f"\nScenario 4: EXPLAIN (ANALYZE, BUFFERS) at {have:,} memories")
        print("\n".join(out["explain"]))
        out["retain"] = await retain_throughput(memory, args.quick)
    title = "Scenario 3: retain throughput (the table already holds the scenario 1 rows)"
    table(title, "variant episodes seconds episodes/s vs_a", out["retain"])


async def many_resources(args: argparse.Namespace, admin: str, out: dict[str, Any]) -> None:
    """Scenario 2: the 1k resource of scenario 1, again, among many others."""
    resources = max(1, (min(args.rows_1m, 100_000) if args.quick else args.rows_1m) // 1_000)
    async with database(admin, "spread") as memory:
        jobs = [(f"bench-r{i:05d}", 1_000, f"s2:{i}") for i in range(resources)]
        jobs[resources // 2] = ("bench-target", 1_000, "s1:0")  # scenario 1's episodes
        await add_facts(memory, "bench-target")
        name = f"{resources * 1_000:,} over {resources:,} resources"
        out["loads"].append(await load(memory, name, jobs, args))
        spread = [await measure(memory, "bench-target", "q:1000", args.recall_budget_s)]
        spread.append(await measure(memory, "bench-target", "q:1000", args.recall_budget_s))
    alone = [r for r in out["single"] if r["memories"] == 1_000]
    keys = ("p50", "p95", "known_p50", "known_p95")
    ratio = {k: min(r[k] for r in spread) / min(r[k] for r in alone) for k in keys}
    out["spread"] = {"runs": spread, "ratio_best_runs": ratio}
    rows = [{"database": "1k alone (scenario 1)", **r} for r in alone]
    among = f"1k among {resources:,}"
    rows += [{"database": among, "run": i + 1, **r} for i, r in enumerate(spread)]
    rows.append({"database": "ratio (best runs)", "run": ""} | {k: "" for k in spread[0]})
    rows[-1] |= {k: f"{v:.2f}x" for k, v in ratio.items()}
    table("Scenario 2: the same 1,000-row resource, alone vs among many (ms)", SPREAD_COLUMNS, rows)
    table("Loads (retain_episodes, 4 tasks; then VACUUM ANALYZE)", LOAD_COLUMNS, out["loads"])


def aims(out: dict[str, Any]) -> None:
    print("\nAims (best of the two runs):")

    def verdict(label: str, value: float, met: bool) -> None:
        print(f"  {'met ' if met else 'MISS'} {label}: {value:,.2f}")

    for size, limit in ((10_000, 15.0), (100_000, 50.0)):
        if p95 := [r["p95"] for r in out["single"] if r["memories"] == size]:
            verdict(f"recall p95 at {size:,} <= {limit:.0f} ms", min(p95), min(p95) <= limit)
    ratio = out["spread"]["ratio_best_runs"]["p95"]
    verdict("recall p95 among many resources / alone <= 1.5", ratio, ratio <= 1.5)
    rate = max(r["episodes/s"] for r in out["retain"][2:])
    verdict("batched retain >= 1,000 episodes/s", rate, rate >= 1_000)


RLS_COLUMNS = "memories mode run n p50 p95 max known_p50 fuzzy_p50 p50_vs_owner p95_vs_owner"


async def row_security(args: argparse.Namespace, admin: str, out: dict[str, Any]) -> None:
    """Scenario 5: recall as the owner and as a tenant under row-level security."""
    from contextlib import nullcontext

    from popagent.store.tenant import serving

    size = 2_000 if args.quick else 10_000
    rid, other = "bench-rls", "bench-rls-other"
    async with database(admin, "rls") as memory:
        jobs = [(r, 2_000, f"rls:{r}:{o}") for r in (rid, other) for o in range(0, size, 2_000)]
        out["loads"].append(await load(memory, f"two resources of {size:,}", jobs, args))
        await add_facts(memory, rid)
        rows: list[dict[str, Any]] = []
        for run_no in (1, 2, 3):
            for mode in ("owner", "tenant (RLS)"):
                with serving(rid) if mode != "owner" else nullcontext():
                    m = await measure(memory, rid, "q:rls", args.recall_budget_s)
                rows.append({"memories": size, "mode": mode, "run": run_no, **m})
    owner = [r for r in rows if r["mode"] == "owner"]
    base50 = statistics.mean(r["p50"] for r in owner)
    base95 = statistics.mean(r["p95"] for r in owner)
    for r in rows:
        r["p50_vs_owner"] = f"{r['p50'] / base50:.2f}x"
        r["p95_vs_owner"] = f"{r['p95'] / base95:.2f}x"
    out["rls"] = rows
    title = "Scenario 5: recall with row-level security (ms; ratios against the owner's mean)"
    table(title, RLS_COLUMNS, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    parser.add_argument("--rows-1m", type=int, default=1_000_000, help="rows in scenario 2")
    parser.add_argument("--load-budget-s", type=float, default=600.0, help="cap per bulk load")
    parser.add_argument("--recall-budget-s", type=float, default=120.0, help="cap per 200 recalls")
    parser.add_argument("--json", metavar="PATH", help="write all numbers here")
    parser.add_argument("--rls", action="store_true", help="scenario 5 only (row-level security)")
    args = parser.parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # progress shows when redirected
    started = time.perf_counter()
    with admin_url() as admin:
        sizes = [1_000, 10_000, 20_000] if args.quick else [1_000, 10_000, 100_000]
        out: dict[str, Any] = {"sizes": sizes, "loads": [], "single": []}
        if args.rls:
            asyncio.run(row_security(args, admin, out))
        else:
            asyncio.run(one_resource(args, admin, out))
            asyncio.run(many_resources(args, admin, out))
            aims(out)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)


if __name__ == "__main__":
    main()
