"""The server's edges under attack: ``/healthz`` latency while ``popagent serve --workers 1``
takes a 100 MB header, 300 slow-header clients and a burst of 3,000 creates.

A real server (``python -m popagent.cli serve --workers 1``) on a scratch database of a
disposable embedded PostgreSQL cluster (or of ``POPAGENT_DATABASE_URL``). One prober
asks ``GET /healthz`` one request after another, each on a new connection (as an
orchestrator's probe does), for as long as each attack lasts. Scenarios, each bounded
in bytes, clients and time:

1. idle: the probe alone for ``--idle-s`` seconds (the reference);
2. one request whose header value is ``--header-mb`` MB, sent until the server answers
   or closes (at most ``--attack-s`` seconds);
3. ``--slow-clients`` connections each sending one header line a second, until the
   server answers them or ``--attack-s`` seconds pass;
4. ``--burst-size`` fact creates at once, each on a connection of its own.

Printed per scenario: what the attack got (statuses, seconds), the probes, those not
200 ``{"status": "ok", "database": "ok"}``, and the probe's p50/p95/p99/max in ms,
with p99 against the idle p99 of the same code. ``--baseline PATH`` (a checkout of
another commit, e.g. ``git worktree add /tmp/base main``) runs every scenario on that
code too, in the same run, on the same database.

    python bench/edges.py [--burst-size 3000] [--slow-clients 300] [--header-mb 100]
                          [--attack-s 60] [--baseline PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tests.web_support import free_port

from latency import admin_url, pct, scratch_url, table
from load import Connection, create_requests, start_server

COLUMNS = "code scenario attack attack_s probes not_ok p50 p95 p99 max p99_vs_idle"
OK = b'{"status":"ok","database":"ok"}'


async def probe_while(
    port: int, attack: Awaitable[str], limit_s: float
) -> tuple[str, float, list[float], int]:
    """Run ``attack`` while probing ``/healthz``: the attack's outcome and seconds, the
    probes' latencies (ms) and how many were not a 200 ok."""
    began = time.perf_counter()
    task = asyncio.ensure_future(attack)
    latencies: list[float] = []
    not_ok = 0
    while not task.done() and time.perf_counter() - began < limit_s:
        asked = time.perf_counter()
        conn = Connection(port)
        try:
            status, body = await asyncio.wait_for(conn.request("GET", "/healthz"), limit_s)
            good = status == 200 and body.replace(b" ", b"") == OK
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
            good = False
        finally:
            conn.close()
        latencies.append((time.perf_counter() - asked) * 1000)
        not_ok += not good
        await asyncio.sleep(0.05)
    try:
        outcome = await asyncio.wait_for(task, max(1.0, limit_s - (time.perf_counter() - began)))
    except TimeoutError:
        outcome = "still running at the limit"
    return outcome, time.perf_counter() - began, latencies, not_ok


async def idle(port: int, seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "-"


async def huge_header(port: int, megabytes: int) -> str:
    """One request with a ``megabytes`` MB header value, sent until the server answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    chunk = b"a" * (1 << 20)
    answer = asyncio.ensure_future(reader.read(200))
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: ")
        while sent < megabytes << 20 and not answer.done():
            writer.write(chunk)
            await writer.drain()
            sent += len(chunk)
        if sent >= megabytes << 20:
            writer.write(b"\r\n\r\n")
            await writer.drain()
        head = await answer
    except (ConnectionResetError, BrokenPipeError):
        head = answer.result() if answer.done() and not answer.exception() else b"reset"
    finally:
        writer.close()
    status = head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") else head[:20].decode()
    return f"{status} after {sent / (1 << 20):.0f} MB sent"


async def slow_clients(port: int, clients: int, limit_s: float) -> str:
    """``clients`` connections, each sending one header line a second until answered."""

    async def one() -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        began = time.perf_counter()
        try:
            writer.write(b"GET /api/facts HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            line = 0
            while time.perf_counter() - began < limit_s:
                try:
                    head = await asyncio.wait_for(reader.read(200), 1.0)
                    return head.split(b" ", 2)[1].decode() if head else "closed"
                except TimeoutError:
                    line += 1
                    writer.write(f"X-Slow-{line}: a\r\n".encode())
                    await writer.drain()
            return "held"
        except (ConnectionResetError, BrokenPipeError):
            return "reset"
        finally:
            writer.close()

    answers = Counter(await asyncio.gather(*(one() for _ in range(clients))))
    return ", ".join(f"{n} {what}" for what, n in sorted(answers.items()))


async def burst(port: int, size: int, seed: str) -> str:
    """``size`` fact creates at once, each on a connection of its own."""

    async def one(request: tuple[str, str, bytes | None]) -> str:
        conn = Connection(port)
        try:
            status, body = await conn.request(*request)
            if status == 503 and b"database_busy" in body:
                return "503 busy"
            return str(status)
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
            return type(exc).__name__
        finally:
            conn.close()

    answers = Counter(await asyncio.gather(*(one(r) for r in create_requests(size, seed))))
    return ", ".join(f"{n} {what}" for what, n in sorted(answers.items()))


def row(code: str, scenario: str, result: tuple[str, float, list[float], int],
        idle_p99: float | None) -> dict[str, Any]:  # fmt: skip
    outcome, seconds, latencies, not_ok = result
    p99 = pct(latencies, 99) if latencies else float("nan")
    return {
        "code": code,
        "scenario": scenario,
        "attack": outcome,
        "attack_s": round(seconds, 1),
        "probes": len(latencies),
        "not_ok": not_ok,
        "p50": round(statistics.median(latencies), 1) if latencies else "-",
        "p95": round(pct(latencies, 95), 1) if latencies else "-",
        "p99": round(p99, 1),
        "max": round(max(latencies), 1) if latencies else "-",
        "p99_vs_idle": f"{p99 / idle_p99:.1f}x" if idle_p99 else "-",
    }


def scenarios(args: argparse.Namespace, url: str, tmp: Path, code: str,
              src: Path | None) -> list[dict[str, Any]]:  # fmt: skip
    port = free_port()
    server = start_server(url, port, tmp / f"edges-{code}.log", src, 1)
    rows: list[dict[str, Any]] = []
    try:
        runs: list[tuple[str, Callable[[], Awaitable[str]]]] = [
            ("idle", lambda: idle(port, args.idle_s)),
            (f"one {args.header_mb} MB header", lambda: huge_header(port, args.header_mb)),
            (
                f"{args.slow_clients} slow-header clients",
                lambda: slow_clients(port, args.slow_clients, args.attack_s),
            ),
            (
                f"{args.burst_size:,} creates at once",
                lambda: burst(port, args.burst_size, f"edges-{code}-{os.getpid()}"),
            ),
        ]
        idle_p99 = None
        for name, attack in runs:
            result = asyncio.run(probe_while(port, attack(), args.attack_s + 30))
            rows.append(row(code, name, result, idle_p99))
            if name == "idle":
                idle_p99 = pct(result[2], 99)
            print(f"  {code} {name}: done", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst-size", type=int, default=3000)
    parser.add_argument("--slow-clients", type=int, default=300)
    parser.add_argument("--header-mb", type=int, default=100)
    parser.add_argument("--attack-s", type=float, default=60.0, help="time limit per attack")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with (
        admin_url() as admin,
        scratch_url(admin, "edges") as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        if args.baseline is not None:
            rows += scenarios(args, url, Path(tmp), "baseline", args.baseline)
        rows += scenarios(args, url, Path(tmp), "current", None)
    table(
        "popagent serve --workers 1 under attack: GET /healthz (a new connection each) "
        "while it lasts; latency in ms; not_ok: probes not 200 database ok",
        COLUMNS,
        rows,
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
