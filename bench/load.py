"""Load test of ``popagent serve`` over loopback: recall previews and fact creates.

A real server (``python -m popagent.cli serve``, uvicorn, its default JSON logs
on) serves one resource of 10,000 memories (9,980 episodes + 20 facts, the
synthetic text of ``bench/latency.py``) in a scratch database of a disposable
embedded PostgreSQL cluster (or of ``POPAGENT_DATABASE_URL``). The clients run
in this process on keep-alive HTTP/1.1 connections (a few lines of asyncio, so
the client costs little of the two cores the server also needs).

Scenarios, each bounded by a request count and a time limit:

1. baselines: ``LongTermMemory.recall`` in process (no HTTP), then one client
   sending recall previews one after another over HTTP;
2. closed loop, 50 concurrent clients, each sending its next request as soon
   as the previous one is answered: recall previews; fact creates; a 90/10 mix;
3. paced, 50 concurrent clients sharing a fixed total rate (open loop: latency
   counts from the moment a request was due, so a slow server cannot hide its
   queue): recall previews at several rates.

Printed per scenario: requests, errors (non-2xx or transport), seconds, req/s,
latency p50/p95/p99/max in ms, and p95 against the one-client baseline.

    python bench/load.py [--requests N] [--clients 50] [--rates 50,100,200,300] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import popagent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.web_support import free_port

from latency import add_facts, admin_url, pct, queries, table, turns

RESOURCE = "load-user"
MEMORIES = 10_000
COLUMNS = "scenario clients requests errors seconds req/s p50 p95 p99 max p95_vs_1"


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


class Connection:
    """One keep-alive HTTP/1.1 connection: send a request, read the whole response."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
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
        return Connection(conn.port)
    tally.latencies_ms.append((time.perf_counter() - since) * 1000)
    tally.statuses[status] = tally.statuses.get(status, 0) + 1
    if not 200 <= status < 300:
        tally.errors += 1
    return conn


async def closed_loop(
    port: int, clients: int, requests: list[Request], limit_s: float
) -> tuple[Tally, float]:
    """``clients`` connections sending ``requests`` back to back until done or ``limit_s``."""
    tally, cursor = Tally(), iter(range(len(requests)))
    deadline = time.perf_counter() + limit_s

    async def client() -> None:
        conn = Connection(port)
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
    port: int, clients: int, requests: list[Request], rate: float, limit_s: float
) -> tuple[Tally, float]:
    """Request ``j`` is due at ``start + j / rate`` and sent by client ``j % clients``;
    its latency counts from when it was due."""
    tally = Tally()
    start = time.perf_counter() + 0.05
    deadline = start + limit_s

    async def client(k: int) -> None:
        conn = Connection(port)
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
    }


async def load_resource(url: str) -> None:
    async with popagent.connect(url, max_size=4) as memory:
        batch = turns("load", MEMORIES - 20)
        for i in range(0, len(batch), 1000):
            await memory.retain_episodes(RESOURCE, batch[i : i + 1000])
        await add_facts(memory, RESOURCE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


async def in_process_baseline(url: str, n: int) -> Tally:
    tally = Tally()
    async with popagent.connect(url, max_size=2) as memory:
        for query, _ in queries("load-baseline", n, n // 10):
            began = time.perf_counter()
            await memory.recall(RESOURCE, query)
            tally.latencies_ms.append((time.perf_counter() - began) * 1000)
    return tally


def start_server(url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "POPAGENT_DATABASE_URL": url}
    env.pop("POPAGENT_MODEL", None)
    command = [
        sys.executable, "-m", "popagent.cli", "--resource-id", RESOURCE,
        "serve", "--port", str(port), "--maintenance-interval", "0",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stderr=log.open("wb"))
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


async def scenarios(args: argparse.Namespace, port: int, url: str) -> list[dict[str, Any]]:
    n, clients, limit = args.requests, args.clients, args.limit_s
    rows: list[dict[str, Any]] = []
    base = await in_process_baseline(url, 300)
    rows.append(row("recall in process (no HTTP)", 1, base, sum(base.latencies_ms) / 1000, None))
    # Warm the server (connections, caches) before measuring it.
    await closed_loop(port, clients, recall_requests(300), limit)
    one, seconds = await closed_loop(port, 1, recall_requests(300), limit)
    one_p95 = pct(one.latencies_ms, 95)
    rows.append(row("recall preview, 1 client", 1, one, seconds, one_p95))

    def measure(name: str, tally: Tally, seconds: float, k: int = clients) -> None:
        rows.append(row(name, k, tally, seconds, one_p95))
        print(f"  {name}: done ({tally.statuses})", file=sys.stderr)

    measure(
        "recall preview, closed loop", *await closed_loop(port, clients, recall_requests(n), limit)
    )
    measure(
        "fact create, closed loop",
        *await closed_loop(port, clients, create_requests(n, "c"), limit),
    )
    mixed: list[Request] = []
    reads, writes = recall_requests(n), create_requests(n // 10 + 1, "m")
    for i in range(n):
        mixed.append(writes[i // 10] if i % 10 == 9 else reads[i])
    measure("90% recall / 10% create, closed loop", *await closed_loop(port, clients, mixed, limit))
    for rate in args.rates:
        count = min(n, int(rate * limit))
        tally, seconds = await paced(port, clients, recall_requests(count), rate, limit)
        measure(f"recall preview, paced {rate:g}/s", tally, seconds)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per scenario")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--limit-s", type=float, default=60.0, help="time limit per scenario")
    parser.add_argument("--rates", default="50,100,200,300", help="paced rates, requests/s")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",") if r]
    with admin_url() as admin, tempfile.TemporaryDirectory() as tmp:
        dbname = f"popagent_load_{os.getpid()}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        url = make_conninfo(admin, dbname=dbname)
        server: subprocess.Popen[bytes] | None = None
        try:
            began = time.perf_counter()
            asyncio.run(load_resource(url))
            print(
                f"loaded {MEMORIES:,} memories in {time.perf_counter() - began:.1f} s",
                file=sys.stderr,
            )
            port = free_port()
            server = start_server(url, port, Path(tmp) / "server.log")
            rows = asyncio.run(scenarios(args, port, url))
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=60)
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(dbname)
                    )
                )
    table(
        f"popagent serve under load: {MEMORIES:,} memories in one resource; "
        f"latency in ms; p95_vs_1 = p95 / the 1-client p95",
        COLUMNS,
        rows,
    )
    recall_rows = [
        r for r in rows if r["scenario"].startswith("recall preview") and r["clients"] > 1
    ]
    print()
    for r in recall_rows:
        verdict = "met " if r["p95"] <= 50 and r["errors"] == 0 else "MISS"
        print(f"  {verdict} {r['scenario']}: p95 {r['p95']} ms <= 50 ms, errors {r['errors']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
