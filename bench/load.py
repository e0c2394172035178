"""Load test of ``popagent serve`` over loopback: recall previews and fact creates.

A real server (``python -m popagent.cli serve``, uvicorn, its default JSON logs
on) serves one resource of 10,000 memories (9,980 episodes + 20 facts, the
synthetic text of ``bench/latency.py``) in a scratch database of a disposable
embedded PostgreSQL cluster (or of ``POPAGENT_DATABASE_URL``). The clients run
in this process on keep-alive HTTP/1.1 connections (a few lines of asyncio, so
the client costs little of the two cores the server also needs).

Scenarios, each bounded by a request count and a time limit:

1. baselines: ``LongTermMemory.recall`` in process (no HTTP), then one client
   sending recall previews one after another over HTTP, then the same client
   asking for an unknown path (a 404): what any request costs the server
   before a route runs, so that the preview's own cost reads as the difference;
2. closed loop, 50 concurrent clients, each sending its next request as soon
   as the previous one is answered: recall previews; fact creates; a 90/10 mix;
3. paced, 50 concurrent clients sharing a fixed total rate (open loop: latency
   counts from the moment a request was due, so a slow server cannot hide its
   queue): recall previews at several rates.

Printed per scenario: requests, errors (non-2xx or transport), seconds, req/s,
latency p50/p95/p99/max in ms, p95 against the one-client baseline, and
``cpu_ms/req``: the CPU time the serving processes (every worker, not
PostgreSQL) spent per request, or for the in-process row this process's own
CPU per recall: what one recall costs in Python, whatever the machine's load.

4. ``--burst``, instead of the above: a burst of ``--burst-size`` writes and as
   many recalls, all at once on a healthy database, through the API (``serve
   --workers 2``, each request on a connection of its own), the library
   (``popagent.connect``, a pool of 10) and each framework adapter (LangGraph's
   store, LangChain's tools and retriever, the OpenAI Agents SDK's tools and
   session, Pydantic AI's toolset). Printed per scenario: requests, answered
   ok, errors by kind (``busy``: ``DatabaseBusyError`` / 503 ``database_busy``;
   ``down``: another ``DatabaseError`` / 503 ``database_unavailable``;
   ``other``), p50/p95/max latency from the burst's start, and audit rows
   missing (every adapter call writes two); for the API, the p99 of ``GET
   /healthz`` asked during the burst (each on a new connection) and how many of
   those were not 200 ok (``bench/edges.py`` does the same on one worker, under
   attacks too). Waiting in line is not an outage:
   the aim is zero errors of any kind.

``--baseline PATH`` (a checkout of an earlier commit, e.g. ``git worktree add
/tmp/base <commit>``) runs the in-process and recall scenarios of that code
too (with ``--burst``, every burst scenario), on the same data in the same run (its server with ``PYTHONPATH=PATH/src``),
for before/after tables; ``--workers 1,2`` serves the current code with each
worker count (the recall scenarios), to show how throughput scales.

    python bench/load.py [--requests N] [--clients 50] [--rates 50,100,200,300]
                         [--baseline PATH] [--workers 1,2] [--json PATH]
    python bench/load.py --burst [--burst-size 1000] [--baseline PATH] [--json PATH]
    python bench/load.py --tenants [--tenant-requests 300] [--quiet-rate 5] [--key-rate 600]
                         [--clients 50]

5. ``--tenants``, instead of the above: multi-resource mode (``serve
   --multi-resource``), two resources with a key each. The quiet key is a paced
   client: ``--quiet-rate`` recall previews a second (well under its limit, so
   it is never limited itself; latency counts from when a request was due). It
   is measured on an idle server, then while the noisy key's clients send
   creates and recalls back to back: without a per-key rate limit, and with
   ``--key-rate`` (a token bucket: the noisy key's burst of ``BURST_SECONDS``
   of its rate passes, then its excess gets 429 at once). Printed per key:
   requests, errors, 429s, p50/p95/max, and the quiet key's p95 against its
   idle p95 under the same limit setting (aim: within 2x).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import popagent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.web_support import free_port

from latency import add_facts, admin_url, pct, queries, table, turns

RESOURCE = "load-user"
MEMORIES = 10_000
FLOOR = "unknown route (404), 1 client"
COLUMNS = "code workers scenario clients requests errors seconds req/s p50 p95 p99 max p95_vs_1 cpu_ms/req"


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    cpu_s: float | None = None


class Connection:
    """One keep-alive HTTP/1.1 connection: send a request, read the whole response."""

    def __init__(self, port: int, key: str | None = None) -> None:
        self.port = port
        self.key = key
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        #: The last response's Retry-After seconds (0 when it had none).
        self.retry_after = 0.0

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if self.key is not None:
            head += f"Authorization: Bearer {self.key}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        self.retry_after = 0.0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
            elif name.lower() == b"retry-after":
                self.retry_after = float(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


Request = tuple[str, str, bytes | None]


def recall_requests(count: int) -> list[Request]:
    return [
        ("POST", "/api/recall", json.dumps({"query": q}).encode())
        for q, _ in queries("load", count, count // 10)
    ]


def create_requests(count: int, seed: str) -> list[Request]:
    rng = random.Random(seed)
    words = [q.split() for q, _ in queries(f"facts-{seed}", 50, 0)]
    return [
        (
            "POST",
            "/api/facts",
            json.dumps(
                {
                    "content": f"{' '.join(rng.choice(words))} ({seed} {i})",
                    "importance": round(rng.random(), 2),
                }
            ).encode(),
        )
        for i in range(count)
    ]


async def exchange(conn: Connection, request: Request, tally: Tally, since: float) -> Connection:
    """Send ``request``; tally its latency from ``since`` and its status. A transport
    error counts as an error and returns a fresh connection."""
    try:
        status, _ = await conn.request(*request)
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        tally.errors += 1
        conn.close()
        return Connection(conn.port, conn.key)
    tally.latencies_ms.append((time.perf_counter() - since) * 1000)
    tally.statuses[status] = tally.statuses.get(status, 0) + 1
    if not 200 <= status < 300:
        tally.errors += 1
    return conn


async def closed_loop(
    port: int, clients: int, requests: list[Request], limit_s: float, key: str | None = None
) -> tuple[Tally, float]:
    """``clients`` connections sending ``requests`` back to back until done or ``limit_s``
    (with ``key``: as that API key, multi-resource mode)."""
    tally, cursor = Tally(), iter(range(len(requests)))
    deadline = time.perf_counter() + limit_s

    async def client() -> None:
        conn = Connection(port, key)
        try:
            for i in cursor:
                if time.perf_counter() > deadline:
                    return
                conn = await exchange(conn, requests[i], tally, time.perf_counter())
        finally:
            conn.close()

    began = time.perf_counter()
    await asyncio.gather(*[client() for _ in range(clients)])
    return tally, time.perf_counter() - began


async def paced(
    port: int,
    clients: int,
    requests: list[Request],
    rate: float,
    limit_s: float,
    key: str | None = None,
) -> tuple[Tally, float]:
    """Request ``j`` is due at ``start + j / rate`` and sent by client ``j % clients``;
    its latency counts from when it was due (with ``key``: as that API key)."""
    tally = Tally()
    start = time.perf_counter() + 0.05
    deadline = start + limit_s

    async def client(k: int) -> None:
        conn = Connection(port, key)
        try:
            for j in range(k, len(requests), clients):
                due = start + j / rate
                if due > deadline:
                    return
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                conn = await exchange(conn, requests[j], tally, due)
        finally:
            conn.close()

    await asyncio.gather(*[client(k) for k in range(clients)])
    return tally, time.perf_counter() - start


def row(
    name: str, clients: int, tally: Tally, seconds: float, base_p95: float | None
) -> dict[str, Any]:
    lat = tally.latencies_ms
    p95 = pct(lat, 95)
    return {
        "scenario": name,
        "clients": clients,
        "requests": len(lat),
        "errors": tally.errors,
        "seconds": round(seconds, 1),
        "req/s": round(len(lat) / seconds, 1),
        "p50": round(statistics.median(lat), 1),
        "p95": round(p95, 1),
        "p99": round(pct(lat, 99), 1),
        "max": round(max(lat), 1),
        "p95_vs_1": f"{p95 / base_p95:.2f}x" if base_p95 else "",
        "cpu_ms/req": round(tally.cpu_s * 1000 / len(lat), 2) if tally.cpu_s and lat else "",
    }


async def load_resource(url: str, episodes: int = MEMORIES - 20) -> None:
    async with popagent.connect(url, max_size=4, embedder=None) as root:
        memory = root.memory
        batch = turns("load", episodes)
        for i in range(0, len(batch), 1000):
            await memory.retain_episodes(RESOURCE, batch[i : i + 1000])
        await add_facts(memory, RESOURCE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


# Run in a subprocess per source tree, so the baseline's code is measured by the
# same loop: 30 warm-up recalls, then ``n`` timed ones; prints JSON.
IN_PROCESS = """
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[3])
import popagent
from latency import queries
async def main():
    url, n = sys.argv[1], int(sys.argv[2])
    async with popagent.connect(url, max_size=2) as root:
        memory = root.memory
        qs = queries("load-baseline", n + 30, (n + 30) // 10)
        for query, _ in qs[:30]:
            await memory.recall("load-user", query)
        out, cpu = [], time.process_time()
        for query, _ in qs[30:]:
            began = time.perf_counter()
            await memory.recall("load-user", query)
            out.append((time.perf_counter() - began) * 1000)
        print(json.dumps({"latencies_ms": out, "cpu_s": time.process_time() - cpu}))
asyncio.run(main())
"""


def _env(url: str, src: Path | None) -> dict[str, str]:
    # Lexical recall, as in every code this compares (no model loaded, no vectors).
    env = {**os.environ, "POPAGENT_DATABASE_URL": url, "POPAGENT_EMBEDDER": "none"}
    env.pop("POPAGENT_MODEL", None)
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    return env


def in_process_baseline(url: str, n: int, src: Path | None) -> Tally:
    bench = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, url, str(n), bench],
        env=_env(url, src),
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Tally(latencies_ms=data["latencies_ms"], cpu_s=data["cpu_s"])


def start_server(
    url: str, port: int, log: Path, src: Path | None, workers: int | None
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "popagent.cli", "--resource-id", RESOURCE,
        "serve", "--port", str(port), "--maintenance-interval", "0",
    ]  # fmt: skip
    if workers is not None:
        command += ["--workers", str(workers)]
    process = subprocess.Popen(command, env=_env(url, src), stderr=log.open("wb"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(url):
                pass
            import urllib.request

            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return process
        except OSError:
            if process.poll() is not None:
                raise SystemExit(f"the server exited; see {log}") from None
            time.sleep(0.1)
    raise SystemExit("the server did not come up")


def server_cpu_s(process: subprocess.Popen[bytes]) -> float:
    """CPU seconds of the server and its workers so far (not PostgreSQL's)."""
    total = 0.0
    root = psutil.Process(process.pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            if "postgres" in p.name():
                continue
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


async def measured(process: subprocess.Popen[bytes], loop: Any, *args: Any) -> tuple[Tally, float]:
    """Run a load loop and charge the server's CPU time over it to the tally."""
    before = server_cpu_s(process)
    tally, seconds = await loop(*args)
    tally.cpu_s = server_cpu_s(process) - before
    return tally, seconds


async def recall_scenarios(
    args: argparse.Namespace, port: int, process: subprocess.Popen[bytes], base: Tally
) -> tuple[list[dict[str, Any]], float]:
    """The in-process row, 1-client recall and closed-loop recall; and the 1-client p95."""
    n, clients, limit = args.requests, args.clients, args.limit_s
    rows = [row("recall in process (no HTTP)", 1, base, sum(base.latencies_ms) / 1000, None)]
    # Warm the server (connections, caches, every worker) before measuring it.
    await closed_loop(port, clients, recall_requests(300), limit)
    one, seconds = await measured(process, closed_loop, port, 1, recall_requests(300), limit)
    one_p95 = pct(one.latencies_ms, 95)
    rows.append(row("recall preview, 1 client", 1, one, seconds, one_p95))
    # What any request costs this server (uvicorn, the middleware, routing, the
    # access log, the socket writes) before a route does anything: an unknown path.
    unknown = [("GET", "/api/no-such-route", None)] * 300
    floor, seconds = await measured(process, closed_loop, port, 1, unknown, limit)
    floor.errors -= floor.statuses.get(404, 0)  # the expected answer
    rows.append(row(FLOOR, 1, floor, seconds, None))
    tally, seconds = await measured(process, closed_loop, port, clients, recall_requests(n), limit)
    rows.append(row("recall preview, closed loop", clients, tally, seconds, one_p95))
    return rows, one_p95


async def other_scenarios(
    args: argparse.Namespace, port: int, process: subprocess.Popen[bytes], one_p95: float
) -> list[dict[str, Any]]:
    n, clients, limit = args.requests, args.clients, args.limit_s
    rows: list[dict[str, Any]] = []

    def measure(name: str, tally: Tally, seconds: float, k: int = clients) -> None:
        rows.append(row(name, k, tally, seconds, one_p95))
        print(f"  {name}: done ({tally.statuses})", file=sys.stderr)

    measure(
        "fact create, closed loop",
        *await measured(process, closed_loop, port, clients, create_requests(n, "c"), limit),
    )
    mixed: list[Request] = []
    reads, writes = recall_requests(n), create_requests(n // 10 + 1, "m")
    for i in range(n):
        mixed.append(writes[i // 10] if i % 10 == 9 else reads[i])
    measure(
        "90% recall / 10% create, closed loop",
        *await measured(process, closed_loop, port, clients, mixed, limit),
    )
    for rate in args.rates:
        count = min(n, int(rate * limit))
        tally, seconds = await measured(
            process, paced, port, clients, recall_requests(count), rate, limit
        )
        measure(f"recall preview, paced {rate:g}/s", tally, seconds)
    return rows


def serve_and_measure(
    args: argparse.Namespace,
    url: str,
    tmp: Path,
    *,
    code: str,
    src: Path | None,
    workers: int | None,
    base: Tally,
    everything: bool,
) -> list[dict[str, Any]]:
    port = free_port()
    shown = "" if workers is None else str(workers)
    print(f"serving {code} with {shown or 'its default'} workers", file=sys.stderr)
    server = start_server(url, port, tmp / f"server-{code}-{shown}.log", src, workers)
    try:
        rows, one_p95 = asyncio.run(recall_scenarios(args, port, server, base))
        if everything:
            rows += asyncio.run(other_scenarios(args, port, server, one_p95))
    finally:
        server.terminate()
        server.wait(timeout=60)
    return [{"code": code, "workers": shown or "1", **r} for r in rows]


# --- bursts: everything at once, on a healthy database ----------------------------------

BURST_COLUMNS = (
    "code scenario requests ok busy down other seconds p50 p95 max audit_missing "
    "healthz_p99 healthz_not_ok"
)
BURST_SCENARIOS = (
    "library",
    "langgraph store",
    "langchain tools+retriever",
    "openai-agents tools",
    "openai-agents session",
    "pydantic-ai toolset",
)

# Run in a subprocess per source tree and scenario (the baseline's code too): ``n``
# writes and ``n`` recalls (or reads) at once through one surface; prints JSON.
BURST_CHILD = """
import asyncio, json, sys, time
import popagent
from popagent import errors

def kind_of(exc):
    if isinstance(exc, getattr(errors, "DatabaseBusyError", ())):
        return "busy"
    if isinstance(exc, errors.DatabaseError):
        return "down"
    return "other:" + type(exc).__name__

def kind_of_text(text):
    # Tools answer a failure as text the model reads ("Refused, nothing was stored: ...").
    if not text.startswith("Refused"):
        return None
    if "busy" in text or "stayed in use" in text:
        return "busy"
    return "down" if ("PostgreSQL" in text or "database" in text) else "other:refused"

async def main():
    url, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rid = "load-user"  # the seeded resource, as the API's
    async def audit_rows(memory):
        async with memory.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) AS c FROM popagent_audit WHERE resource_id = %s", (rid,))
            return (await cur.fetchone())["c"]
    async with popagent.connect(url, max_size=10, embedder=None) as root:
        memory = root.memory
        before = await audit_rows(memory)
        write, read = await surfaces(root, rid, scenario)
        began = time.perf_counter()
        out = []
        async def timed(work):
            try:
                result = await work
                kind = kind_of_text(result) if isinstance(result, str) else None
            except Exception as exc:
                kind = kind_of(exc)
            out.append(((time.perf_counter() - began) * 1000, kind))
        await asyncio.gather(*(timed(f(i)) for i in range(n) for f in (write, read)))
        seconds = time.perf_counter() - began
        calls = 0 if scenario in ("library", "openai-agents session") else 2 * n
        rows = await audit_rows(memory) - before
    print(json.dumps({"results": out, "seconds": seconds, "audit_missing": 2 * calls - rows}))

async def surfaces(root, rid, scenario):
    # The adapters take the Popagent and the resource they act for, as an application
    # gives them; the library row calls the long-term memory directly.
    n, tag = int(sys.argv[3]), sys.argv[4]  # tag: each run's writes are new writes
    memory = root.memory
    if scenario == "library":
        return (lambda i: memory.remember(rid, f"Burst fact number {i} about the garden ({tag})"),
                lambda i: memory.recall(rid, f"garden fact number {i}"))
    if scenario == "langgraph store":
        from popagent.adapters.langgraph import PopagentStore
        store = PopagentStore(root, rid)
        return (lambda i: store.aput(("burst", tag), f"k{i}", {"text": f"garden item {i}"}),
                lambda i: store.asearch(("burst",), query=f"garden item number {i}"))
    if scenario == "langchain tools+retriever":
        from popagent.adapters.langchain import PopagentRetriever, memory_tools
        remember = memory_tools(root, rid)[0]
        retriever = PopagentRetriever.of(root, rid)
        return (lambda i: remember.ainvoke({"content": f"Burst fact number {i} about the garden ({tag})"}),
                lambda i: retriever.ainvoke(f"garden fact number {i}"))
    if scenario == "openai-agents tools":
        from popagent.adapters.openai_agents import memory_tools
        remember, recall = memory_tools(root, rid)
        return (lambda i: remember.on_invoke_tool(None, json.dumps({"content": f"Burst fact number {i} about the garden ({tag})"})),
                lambda i: recall.on_invoke_tool(None, json.dumps({"query": f"garden fact number {i}"})))
    if scenario == "openai-agents session":
        from popagent.adapters.openai_agents import PopagentSession
        def session(i):
            return PopagentSession.local(f"burst-{tag}-{i}", root, rid)
        return (lambda i: session(i).add_items([{"role": "user", "content": f"Burst message {i} ({tag})"}]),
                lambda i: session(i + n).get_items())
    if scenario == "pydantic-ai toolset":
        from popagent.adapters.pydantic_ai import memory_toolset
        tools = memory_toolset(root, rid).tools
        return (lambda i: tools["remember"].function(content=f"Burst fact number {i} about the garden ({tag})"),
                lambda i: tools["recall"].function(query=f"garden fact number {i}"))
    raise SystemExit(f"unknown scenario {scenario}")

asyncio.run(main())
"""


def burst_row(code: str, scenario: str, latencies: list[float], kinds: list[str | None],
              seconds: float, audit_missing: int | str,
              health: tuple[list[float], int] | None = None) -> dict[str, Any]:  # fmt: skip
    """One row; ``health``: the ``/healthz`` probes' latencies (ms) during the burst and
    how many were not 200 ok (over HTTP only)."""
    errors = [k for k in kinds if k is not None]
    return {
        "code": code,
        "scenario": scenario,
        "requests": len(kinds),
        "ok": len(kinds) - len(errors),
        "busy": errors.count("busy"),
        "down": errors.count("down"),
        "other": len(errors) - errors.count("busy") - errors.count("down"),
        "seconds": round(seconds, 1),
        "p50": round(statistics.median(latencies), 1),
        "p95": round(pct(latencies, 95), 1),
        "max": round(max(latencies), 1),
        "audit_missing": audit_missing,
        "healthz_p99": round(pct(health[0], 99), 1) if health and health[0] else "-",
        "healthz_not_ok": health[1] if health else "-",
    }


def burst_in_process(
    url: str, scenario: str, n: int, src: Path | None, code: str
) -> dict[str, Any]:
    slug = "-".join(re.findall(r"[a-z0-9]+", scenario))  # a tag for this run's writes
    done = subprocess.run(
        [sys.executable, "-c", BURST_CHILD, url, scenario, str(n), f"{code}-{slug}"],
        env=_env(url, src),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        print(f"  {code} {scenario}: the run failed: {done.stderr[-800:]}", file=sys.stderr)
        return burst_row(code, scenario, [0.0], ["other"], 0.0, "-")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    latencies = [ms for ms, _kind in data["results"]]
    kinds = [kind for _ms, kind in data["results"]]
    return burst_row(code, scenario, latencies, kinds, data["seconds"], data["audit_missing"])


async def burst_over_http(
    port: int, n: int, seed: str = "burst"
) -> tuple[list[float], list[str | None], float, tuple[list[float], int]]:
    """``n`` fact creates and ``n`` recall previews at once, each on a connection of its own
    (the facts' text from ``seed``: each code tree's burst writes facts of its own, so no
    write is a 409 for a fact an earlier burst stored), while ``GET /healthz`` is asked
    one after another, each on a new connection (an orchestrator's probe): its
    latencies (ms) and how many answers were not 200 ok."""
    began = time.perf_counter()
    latencies: list[float] = []
    kinds: list[str | None] = []

    async def one(request: Request) -> None:
        conn = Connection(port)
        try:
            status, body = await conn.request(*request)
            kind = None
            if status == 503:
                kind = "busy" if b"database_busy" in body else "down"
            elif not 200 <= status < 300:
                kind = f"other:{status}"
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            kind = f"other:{type(exc).__name__}"
        finally:
            conn.close()
        latencies.append((time.perf_counter() - began) * 1000)
        kinds.append(kind)

    async def probe(done: asyncio.Event) -> tuple[list[float], int]:
        probes: list[float] = []
        not_ok = 0
        while not done.is_set():
            asked = time.perf_counter()
            conn = Connection(port)
            try:
                status, body = await conn.request("GET", "/healthz")
                not_ok += status != 200 or b'"database": "ok"' not in body.replace(b'":"', b'": "')
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                not_ok += 1
            finally:
                conn.close()
            probes.append((time.perf_counter() - asked) * 1000)
            await asyncio.sleep(0.05)
        return probes, not_ok

    writes, reads = create_requests(n, seed), recall_requests(n)
    done = asyncio.Event()
    prober = asyncio.ensure_future(probe(done))
    await asyncio.gather(*(one(r) for pair in zip(writes, reads, strict=True) for r in pair))
    done.set()
    return latencies, kinds, time.perf_counter() - began, await prober


def burst_scenarios(args: argparse.Namespace, url: str, tmp: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    trees = [("current", None)]
    if args.baseline is not None:
        trees.insert(0, ("baseline", args.baseline))
    for code, src in trees:
        port = free_port()
        server = start_server(url, port, tmp / f"burst-{code}.log", src, 2)
        try:
            asyncio.run(closed_loop(port, 20, recall_requests(100), 60))  # warm both workers
            latencies, kinds, seconds, health = asyncio.run(
                burst_over_http(port, args.burst_size, f"burst-{code}")
            )
            rows.append(
                burst_row(code, "API, serve --workers 2", latencies, kinds, seconds, "-", health)
            )
            print(f"  {code} API: done", file=sys.stderr)
        finally:
            server.terminate()
            server.wait(timeout=60)
        for scenario in BURST_SCENARIOS:
            rows.append(burst_in_process(url, scenario, args.burst_size, src, code))
            print(f"  {code} {scenario}: done", file=sys.stderr)
    return rows


# --- two tenants: one key's burst against another key's latency ----------------------------

TENANT_COLUMNS = "key_rate scenario requests errors 429s p50 p95 max p95_vs_idle"
TENANT_MEMORIES = 2_000


TENANTS = ("tenant-quiet", "tenant-noisy")


async def load_tenants(url: str) -> None:
    """Two resources of ``TENANT_MEMORIES`` episodes and 20 facts each."""
    async with popagent.connect(url, max_size=4, embedder=None) as root:
        memory = root.memory
        for tenant in TENANTS:
            batch = turns(tenant, TENANT_MEMORIES)
            for i in range(0, len(batch), 1000):
                await memory.retain_episodes(tenant, batch[i : i + 1000])
            await add_facts(memory, tenant)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


async def tenant_keys(url: str, name: str) -> tuple[str, str, str]:
    """Fresh write keys (fresh: a key's rate bucket starts full): the quiet tenant's,
    the noisy one's, and another of the quiet tenant's to warm the server up with
    (so the measured keys' buckets are untouched)."""
    from popagent.keys import KeyStore

    async with popagent.connect(url, max_size=2, embedder=None) as root:
        memory = root.memory
        store = KeyStore(memory.pool)
        quiet, noisy = [(await store.create(t, name, "write"))[1] for t in TENANTS]
        warm = (await store.create(TENANTS[0], f"{name}-warm", "write"))[1]
    return quiet, noisy, warm


def tenant_row(key_rate: str, name: str, tally: Tally, idle_p95: float | None) -> dict[str, Any]:
    lat = tally.latencies_ms
    p95 = pct(lat, 95)
    refused = tally.statuses.get(429, 0)
    return {
        "key_rate": key_rate,
        "scenario": name,
        "requests": len(lat),
        "errors": tally.errors - refused,
        "429s": refused,
        "p50": round(statistics.median(lat), 1),
        "p95": round(p95, 1),
        "max": round(max(lat), 1),
        "p95_vs_idle": f"{p95 / idle_p95:.2f}x" if idle_p95 else "",
    }


async def quiet_during(
    port: int,
    quiet: str,
    noisy: str,
    n: int,
    rate: float,
    clients: int,
    limit_s: float,
    seed: str,
    honor: bool = False,
) -> tuple[Tally, Tally]:
    """The quiet key's recalls, paced at ``rate`` a second, while the noisy key's
    ``clients`` send creates and recalls back to back; the noise starts half a
    second before and lasts until the quiet key's ``n`` are done. With ``honor``, a
    noisy client that gets 429 waits its Retry-After before its next request."""
    stop = asyncio.Event()

    async def noise() -> Tally:
        tally = Tally()
        # Enough distinct facts for the whole burst (a repeated one is refused).
        reads, writes = recall_requests(n * 100), create_requests(n * 100, seed)
        mixed = [w if i % 2 else r for i, (r, w) in enumerate(zip(reads, writes, strict=True))]
        # Round and round until the quiet key is done: the burst lasts its whole
        # measurement (refused requests come back fast and would end it early).
        cursor = itertools.cycle(mixed)

        async def client() -> None:
            conn = Connection(port, noisy)
            try:
                for request in cursor:
                    if stop.is_set():
                        return
                    conn = await exchange(conn, request, tally, time.perf_counter())
                    if honor and conn.retry_after:
                        await asyncio.sleep(conn.retry_after)
            finally:
                conn.close()

        await asyncio.gather(*[client() for _ in range(clients)])
        return tally

    noisy_task = asyncio.ensure_future(noise())
    await asyncio.sleep(0.5)  # the burst is under way
    quiet_tally, _ = await paced(port, 2, recall_requests(n), rate, limit_s, quiet)
    stop.set()
    return quiet_tally, await noisy_task


def tenant_scenarios(args: argparse.Namespace, url: str, tmp: Path) -> list[dict[str, Any]]:
    asyncio.run(load_tenants(url))
    rows: list[dict[str, Any]] = []
    for key_rate in (0, args.key_rate):
        shown = "off" if key_rate == 0 else f"{key_rate}/min"
        quiet, noisy, warm = asyncio.run(tenant_keys(url, f"bench-{key_rate}"))
        port = free_port()
        command = [
            sys.executable, "-m", "popagent.cli", "serve", "--multi-resource",
            "--port", str(port), "--maintenance-interval", "0", "--workers", "1",
            "--key-rate", str(key_rate),
        ]  # fmt: skip
        log = tmp / f"tenants-{key_rate}.log"
        process = subprocess.Popen(command, env=_env(url, None), stderr=log.open("wb"))
        try:
            wait_healthy(port, process, log)
            n = args.tenant_requests
            asyncio.run(closed_loop(port, 10, recall_requests(100), 60, warm))  # warm up
            rate = args.quiet_rate
            idle, _ = asyncio.run(paced(port, 2, recall_requests(n), rate, args.limit_s, quiet))
            idle_p95 = pct(idle.latencies_ms, 95)
            rows.append(tenant_row(shown, f"quiet key, {rate:g}/s, idle server", idle, idle_p95))
            # Without a limit Retry-After never comes, so one burst; with one, a noisy
            # client that ignores it (hammers on) and one that waits it out.
            for honor in (False, True) if key_rate else (False,):
                if honor:  # fresh keys: full buckets, as for the first burst
                    quiet, noisy, _ = asyncio.run(tenant_keys(url, f"bench-{key_rate}-honor"))
                seed = f"noisy-{key_rate}-{honor}"
                during, burst = asyncio.run(
                    quiet_during(
                        port, quiet, noisy, n, rate, args.clients, args.limit_s, seed, honor
                    )
                )
                how = (
                    ", waits Retry-After"
                    if honor
                    else (", ignores Retry-After" if key_rate else "")
                )
                rows.append(
                    tenant_row(
                        shown, f"quiet key, {rate:g}/s, during the burst{how}", during, idle_p95
                    )
                )
                rows.append(
                    tenant_row(shown, f"noisy key, {args.clients} clients{how}", burst, None)
                )
            print(f"  tenants, key rate {shown}: done", file=sys.stderr)
        finally:
            process.terminate()
            process.wait(timeout=60)
    return rows


def wait_healthy(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    import urllib.request

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            if process.poll() is not None:
                raise SystemExit(f"the server exited; see {log}") from None
            time.sleep(0.1)
    raise SystemExit("the server did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per scenario")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--limit-s", type=float, default=60.0, help="time limit per scenario")
    parser.add_argument("--rates", default="50,100,200,300", help="paced rates, requests/s")
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--workers", default="1", help="worker counts to serve, e.g. 1,2")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--burst", action="store_true", help="run the burst scenarios only")
    parser.add_argument("--burst-size", type=int, default=1000, help="writes (and recalls)")
    parser.add_argument(
        "--tenants", action="store_true", help="run the two-tenant scenario only (multi-resource)"
    )
    parser.add_argument("--tenant-requests", type=int, default=300, help="the quiet key's recalls")
    parser.add_argument("--key-rate", type=int, default=600, help="per-key requests/minute")
    parser.add_argument(
        "--quiet-rate", type=float, default=5.0, help="the quiet key's paced requests/second"
    )
    args = parser.parse_args()
    if args.tenants and args.key_rate and args.quiet_rate * 60 > args.key_rate / 2:
        parser.error("--quiet-rate must stay well under --key-rate (at most half of it)")
    args.rates = [float(r) for r in args.rates.split(",") if r]
    worker_counts = [int(w) for w in args.workers.split(",") if w]
    rows: list[dict[str, Any]] = []
    with admin_url() as admin, tempfile.TemporaryDirectory() as tmp:
        dbname = f"popagent_load_{os.getpid()}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        url = make_conninfo(admin, dbname=dbname)
        try:
            if args.tenants:
                rows = tenant_scenarios(args, url, Path(tmp))
                table(
                    f"Two tenants, serve --multi-resource --workers 1: the quiet key's recall "
                    f"previews (paced, {args.quiet_rate:g}/s) idle and while the noisy key's "
                    f"{args.clients} clients "
                    f"send creates and recalls back to back; each resource "
                    f"{TENANT_MEMORIES:,} episodes; latency in ms (aim: p95_vs_idle <= 2x)",
                    TENANT_COLUMNS,
                    rows,
                )
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=2))
                return
            if args.burst:
                asyncio.run(load_resource(url, episodes=2_000))
                burst = burst_scenarios(args, url, Path(tmp))
                table(
                    f"Bursts on a healthy database: {args.burst_size:,} writes + "
                    f"{args.burst_size:,} recalls at once per surface (lexical recall, a "
                    "resource of 2,000 episodes); latency in ms from the burst's start; "
                    "errors by kind (aim: none)",
                    BURST_COLUMNS,
                    burst,
                )
                if args.json:
                    args.json.write_text(json.dumps(burst, indent=2))
                return
            began = time.perf_counter()
            asyncio.run(load_resource(url))
            print(
                f"loaded {MEMORIES:,} memories in {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
            if args.baseline is not None:
                # The baseline's code has no --workers: it serves one process.
                old = in_process_baseline(url, 300, args.baseline)
                rows += serve_and_measure(
                    args, url, Path(tmp), code="baseline", src=args.baseline,
                    workers=None, base=old, everything=False,
                )  # fmt: skip
            new = in_process_baseline(url, 300, None)
            for i, workers in enumerate(worker_counts):
                rows += serve_and_measure(
                    args, url, Path(tmp), code="current", src=None,
                    workers=workers, base=new, everything=i == 0,
                )  # fmt: skip
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(dbname)
                    )
                )
    table(
        f"popagent serve under load: {MEMORIES:,} memories in one resource; "
        f"latency in ms; p95_vs_1 = p95 / the 1-client p95; cpu_ms/req: server CPU per request",
        COLUMNS,
        rows,
    )
    summary(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


def summary(rows: list[dict[str, Any]]) -> None:
    """Before/after ratios, throughput per core, and the p95 aim."""
    cores = len(os.sched_getaffinity(0))

    def find(code: str, scenario: str, workers: str = "1") -> dict[str, Any] | None:
        return next(
            (
                r
                for r in rows
                if r["code"] == code and r["scenario"] == scenario and r["workers"] == workers
            ),
            None,
        )

    print()
    for scenario in (
        "recall in process (no HTTP)",
        "recall preview, 1 client",
        "recall preview, closed loop",
    ):
        old, new = find("baseline", scenario), find("current", scenario)
        if old and new and old["cpu_ms/req"] and new["cpu_ms/req"]:
            print(
                f"  {scenario}: cpu {old['cpu_ms/req']} -> {new['cpu_ms/req']} ms/req "
                f"({old['cpu_ms/req'] / new['cpu_ms/req']:.2f}x less), "
                f"p95 {old['p95']} -> {new['p95']} ms, req/s {old['req/s']} -> {new['req/s']}"
            )
    floors = [
        (find(code, "recall preview, 1 client"), find(code, FLOOR))
        for code in ("baseline", "current")
    ]
    if all(one and floor and one["cpu_ms/req"] and floor["cpu_ms/req"] for one, floor in floors):
        old, new = (one["cpu_ms/req"] - floor["cpu_ms/req"] for one, floor in floors)  # type: ignore[index]
        print(
            f"  recall preview, 1 client, less the cost of any request (a 404): cpu "
            f"{old:.2f} -> {new:.2f} ms/req ({old / new:.2f}x less)"
        )
    for r in rows:
        if r["code"] == "current" and r["scenario"] == "recall preview, closed loop":
            print(
                f"  {r['workers']} worker(s): {r['req/s']} req/s on {cores} cores = "
                f"{r['req/s'] / cores:.0f} req/s per core; p95 {r['p95']} ms "
                f"({'met ' if r['p95'] <= 50 and r['errors'] == 0 else 'MISS'} p95 <= 50 ms)"
            )


if __name__ == "__main__":
    main()
