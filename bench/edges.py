"""The server's edges under attack: ``/healthz`` latency while ``popagent serve --workers 1``
takes a 100 MB header, 300 slow-header clients and a burst of 3,000 creates.

A real server (``python -m popagent.cli serve --workers 1``) on a scratch database of a
disposable embedded PostgreSQL cluster (or of ``POPAGENT_DATABASE_URL``). One prober
asks ``GET /healthz`` one request after another, each on a new connection (as an
orchestrator's probe does), for as long as each attack lasts. The prober is a process
of its own with blocking sockets: in the attackers' event loop its time would include
theirs (300 slow clients' timers, 3,000 responses read) and not only the server's.
Scenarios, each bounded in bytes, clients and time:

1. idle: the probe alone for ``--idle-s`` seconds (the reference);
2. requests whose header value is ``--header-mb`` MB, one after another for
   ``--header-s`` seconds, each sent until the server answers or closes (one such
   request is refused within a few MB: one alone lasts too little to be probed);
3. ``--slow-clients`` connections each sending one header line a second, until the
   server answers them or ``--attack-s`` seconds pass;
4. ``--burst-size`` fact creates at once, each on a connection of its own.

Printed per scenario: what the attack got (statuses, seconds), the probes, those not
200 ``{"status": "ok", "database": "ok"}``, and the probe's p50/p95/p99/max in ms,
with p99 against the idle p99 of the same code. ``--baseline PATH`` (a checkout of
another commit, e.g. ``git worktree add /tmp/base main``) runs every scenario on that
code too, in the same run, on the same database.

    python bench/edges.py [--burst-size 3000] [--slow-clients 300] [--header-mb 100]
                          [--header-s 5] [--attack-s 60] [--baseline PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
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
#: Seconds between one probe's answer and the next probe.
PROBE_GAP_S = 0.05

Attack = Callable[[], Awaitable[str]]


def probe(port: int, gap_s: float) -> None:
    """The prober's process (``--probe PORT``): ``GET /healthz`` on a new connection,
    one after another ``gap_s`` apart, until its stdin closes; a line per probe: the
    milliseconds it took and whether it was 200 database ok."""
    import threading

    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    # As an orchestrator's probe asks: a connection of its own, closed after the answer.
    ask = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    while not stop.is_set():
        asked = time.perf_counter()
        answer = b""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                sock.sendall(ask.encode())
                while chunk := sock.recv(65536):  # the server closes after /healthz
                    answer += chunk
        except OSError:
            pass
        head, _, body = answer.partition(b"\r\n\r\n")
        good = head.startswith(b"HTTP/1.1 200 ") and body.replace(b" ", b"") == OK
        print(f"{(time.perf_counter() - asked) * 1000:.3f} {int(good)}", flush=True)
        time.sleep(gap_s)


async def probe_while(
    port: int, attack: Callable[[], Awaitable[str]], limit_s: float
) -> tuple[str, float, list[float], int]:
    """Run ``attack`` while the prober (a process of its own) probes ``/healthz``: the
    attack's outcome and seconds, the probes' latencies (ms) and how many were not a
    200 ok. The attack starts once the prober has answered once."""
    prober = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--probe", str(port),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert prober.stdin is not None and prober.stdout is not None
    lines = [await prober.stdout.readline()]
    began = time.perf_counter()
    try:
        outcome = await asyncio.wait_for(attack(), limit_s)
    except TimeoutError:
        outcome = "still running at the limit"
    seconds = time.perf_counter() - began
    prober.stdin.close()
    lines += (await prober.stdout.read()).splitlines()
    await prober.wait()
    # The first probe was before the attack: the idle scenario's reference only.
    probes = [line.split() for line in lines[1:] if line.strip()]
    latencies = [float(ms) for ms, _ in probes]
    return outcome, seconds, latencies, sum(good == b"0" for _, good in probes)


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


async def huge_headers(port: int, megabytes: int, seconds: float) -> str:
    """``huge_header`` again and again for ``seconds``: what each got, counted."""
    answers: Counter[str] = Counter()
    most_mb = 0
    ends = time.perf_counter() + seconds
    while time.perf_counter() < ends:
        status, _, sent = (await huge_header(port, megabytes)).partition(" after ")
        answers[status] += 1
        most_mb = max(most_mb, int(sent.split()[0]))
    counted = ", ".join(f"{n} {what}" for what, n in sorted(answers.items()))
    return f"{counted} (each after <= {most_mb} MB)"


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


def attacks(args: argparse.Namespace, port: int, code: str) -> list[tuple[str, Attack]]:
    """The scenarios (module doc), in order, against the server on ``port``."""
    return [
        ("idle", lambda: idle(port, args.idle_s)),
        (
            f"{args.header_mb} MB headers for {args.header_s:g} s",
            lambda: huge_headers(port, args.header_mb, args.header_s),
        ),
        (
            f"{args.slow_clients} slow-header clients",
            lambda: slow_clients(port, args.slow_clients, args.attack_s),
        ),
        (
            f"{args.burst_size:,} creates at once",
            lambda: burst(port, args.burst_size, f"edges-{code}-{os.getpid()}"),
        ),
    ]


def scenarios(args: argparse.Namespace, url: str, tmp: Path,
              codes: dict[str, Path | None]) -> list[dict[str, Any]]:  # fmt: skip
    """Every scenario on a server of each code, the codes taking turns scenario by
    scenario (a shared machine's load then weighs on both alike)."""
    servers: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
    rows: list[dict[str, Any]] = []
    try:
        for code, src in codes.items():
            port = free_port()
            servers[code] = port, start_server(url, port, tmp / f"edges-{code}.log", src, 1)
        runs = {code: attacks(args, port, code) for code, (port, _) in servers.items()}
        idle_p99: dict[str, float] = {}
        for step in range(len(next(iter(runs.values())))):
            for code, (port, _) in servers.items():
                name, attack = runs[code][step]
                result = asyncio.run(probe_while(port, attack, args.attack_s + 30))
                rows.append(row(code, name, result, idle_p99.get(code)))
                if name == "idle":
                    idle_p99[code] = pct(result[2], 99)
                print(f"  {code} {name}: done", file=sys.stderr)
    finally:
        for _, server in servers.values():
            server.terminate()
            server.wait(timeout=60)
    return sorted(rows, key=lambda r: r["code"] != "baseline")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burst-size", type=int, default=3000)
    parser.add_argument("--slow-clients", type=int, default=300)
    parser.add_argument("--header-mb", type=int, default=100)
    parser.add_argument("--header-s", type=float, default=5.0, help="seconds of huge headers")
    parser.add_argument("--attack-s", type=float, default=60.0, help="time limit per attack")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--probe", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe is not None:
        probe(args.probe, PROBE_GAP_S)
        return
    with (
        admin_url() as admin,
        scratch_url(admin, "edges") as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        codes = {"current": None} if args.baseline is None else {"baseline": args.baseline}
        rows = scenarios(args, url, Path(tmp), {**codes, "current": None})
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
