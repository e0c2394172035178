"""Fault-injection helpers shared by ``tests/test_faults.py`` and ``bench/faults.py``.

A ``ServeProcess`` is a real ``popagent serve`` subprocess on its own embedded
data dir and loopback port; ``WriteStream`` drives it with API writes from a
few threads and records every answer, so a scenario can compare what was
acknowledged with what the database holds afterwards (``audit_writes``).
Everything here is bounded in count and time and cleans up after itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.web_support import free_port

__all__ = [
    "Answer",
    "HealthProbe",
    "ServeProcess",
    "WriteAudit",
    "WriteStream",
    "audit_writes",
    "clean_env",
    "cluster_url",
    "pid_alive",
    "postmaster_pid",
    "serving",
    "stop_orphan_cluster",
    "wait_for",
]

_UNSET_ENV = (
    "POPAGENT_DATABASE_URL",
    "POPAGENT_DATA_DIR",
    "POPAGENT_MODEL",
    "POPAGENT_TOKEN",
    "POPAGENT_TOKEN_FILE",
    "POPAGENT_EMBEDDER",
)


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a popagent subprocess: no developer settings leak in."""
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp)}
    for name in _UNSET_ENV:
        env.pop(name, None)
    env.update(extra)
    return env


def _pid_file(data_dir: Path) -> Path:
    return data_dir / "pgdata" / "postmaster.pid"


def postmaster_pid(data_dir: Path) -> int | None:
    """The postmaster's PID from the embedded cluster's ``postmaster.pid``, if any."""
    try:
        first = _pid_file(data_dir).read_text().splitlines()[0]
    except (FileNotFoundError, IndexError):
        return None
    return int(first)


def cluster_url(data_dir: Path) -> str:
    """A libpq URL for the embedded cluster of ``data_dir`` (over its Unix socket)."""
    lines = _pid_file(data_dir).read_text().splitlines()
    return f"postgresql://postgres@/postgres?host={lines[4].strip()}&port={lines[3].strip()}"


def wait_for(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.05) -> float:
    """Poll ``predicate`` until true; the seconds it took. Raises ``TimeoutError``."""
    began = time.monotonic()
    while True:
        try:
            if predicate():
                return time.monotonic() - began
        except (httpx.TransportError, OSError, psycopg.Error):
            pass
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(interval_s)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ServeProcess:
    """``popagent serve`` as a subprocess; stderr goes to a file (``log_lines``)."""

    def __init__(
        self,
        data_dir: Path,
        tmp: Path,
        *,
        resource_id: str = "fault-user",
        port: int | None = None,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.tmp = tmp
        self.resource_id = resource_id
        self.port = port or free_port()
        self.env = env or clean_env(tmp)
        self.args = list(args)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = tmp / f"serve-{self.port}.log"
        self._starts = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> float:
        """Start and wait for ``/healthz``; the seconds until it answered 200."""
        self._starts += 1
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "popagent.cli",
                "--resource-id",
                self.resource_id,
                "--data-dir",
                str(self.data_dir),
                "serve",
                "--port",
                str(self.port),
                "--maintenance-interval",
                "0",
                *self.args,
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        began = time.monotonic()
        while True:
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - began
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"popagent serve exited ({self.process.returncode}):\n{self.log()}"
                )
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"popagent serve did not come up:\n{self.log()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would; the cluster may live on."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM and wait; the exit code (``None`` if it was not running)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=30)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self) -> list[str]:
        return [line for line in self.log().splitlines() if line.strip()]

    def non_json_log_lines(self) -> list[str]:
        """Lines of stderr that are not one JSON object (there should be none)."""
        bad = []
        for line in self.log_lines():
            try:
                if not isinstance(json.loads(line), dict):
                    bad.append(line)
            except ValueError:
                bad.append(line)
        return bad


@contextmanager
def serving(data_dir: Path, tmp: Path, **kwargs: Any) -> Iterator[ServeProcess]:
    """A started ``ServeProcess``, stopped (and its cluster with it) on exit."""
    server = ServeProcess(data_dir, tmp, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        stop_orphan_cluster(data_dir)


def stop_orphan_cluster(data_dir: Path) -> None:
    """Stop a postmaster still running on ``data_dir`` (after a SIGKILLed server)."""
    pid = postmaster_pid(data_dir)
    if pid is None or not pid_alive(pid):
        return
    os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


@dataclass
class Answer:
    """One write's outcome: HTTP status (0 for a transport error), when, and its body."""

    content: str
    status: int
    at: float
    ms: float
    body: Any = None


@dataclass
class WriteStream:
    """Fact creates from ``threads`` threads until stopped; every answer recorded.

    Each write has content no other write has, so the database can be asked
    afterwards how many times each acknowledged write is stored.
    """

    base_url: str
    label: str
    threads: int = 4
    max_writes: int = 5_000
    timeout_s: float = 10.0
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)
    _next: int = 0

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.max_writes:
                return None
            self._next += 1
            return self._next

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                seq = self._take()
                if seq is None:
                    return
                content = f"Fault write {self.label} number {seq} keeps its words"
                began = time.monotonic()
                try:
                    response = client.post("/api/facts", json={"content": content})
                    status = response.status_code
                    try:
                        body = response.json()
                    except ValueError:
                        body = response.text
                except httpx.TransportError:
                    status, body = 0, None
                    time.sleep(0.02)  # the server is gone; do not spin
                with self._lock:
                    now = time.monotonic()
                    self.answers.append(Answer(content, status, now, (now - began) * 1000, body))

    def start(self) -> WriteStream:
        for _ in range(self.threads):
            worker = threading.Thread(target=self._run, daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=self.timeout_s + 5)

    def snapshot(self) -> list[Answer]:
        with self._lock:
            return list(self.answers)

    @property
    def acknowledged(self) -> list[str]:
        return [a.content for a in self.snapshot() if 200 <= a.status < 300]

    def statuses(self) -> Counter[int]:
        return Counter(a.status for a in self.snapshot())

    def recovery_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` (a fault) to the first write acknowledged after the
        last failure that followed it: 0 when nothing failed; ``None`` while writes
        still fail."""
        answers = [a for a in self.snapshot() if a.at > moment]
        failed = [a.at for a in answers if not 200 <= a.status < 300]
        if not failed:
            return 0.0
        last = max(failed)
        later = [a.at for a in answers if a.at > last and 200 <= a.status < 300]
        return min(later) - moment if later else None


@dataclass
class HealthProbe:
    """Polls ``/healthz`` from a thread and records each status (0: no answer)."""

    base_url: str
    interval_s: float = 0.05
    statuses: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=5) as client:
            while not self._stop.wait(self.interval_s):
                try:
                    status = client.get("/healthz").status_code
                except httpx.TransportError:
                    status = 0
                self.statuses.append((time.monotonic(), status))

    def start(self) -> HealthProbe:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def saw(self, status: int, after: float = 0.0) -> bool:
        return any(s == status and at > after for at, s in list(self.statuses))


@dataclass(frozen=True)
class WriteAudit:
    acknowledged: int
    lost: int
    duplicated: int
    stored: int


def audit_writes(url: str, resource_id: str, acknowledged: Sequence[str], label: str) -> WriteAudit:
    """Compare acknowledged writes with what the database holds for them."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT content, count(*) FROM popagent_memories"
            " WHERE resource_id = %s AND kind = 'fact' AND content LIKE %s GROUP BY content",
            (resource_id, f"Fault write {label} number %"),
        ).fetchall()
    stored = {content: int(n) for content, n in rows}
    acked = set(acknowledged)
    return WriteAudit(
        acknowledged=len(acked),
        lost=sum(1 for c in acked if c not in stored),
        duplicated=sum(n - 1 for n in stored.values() if n > 1),
        stored=sum(stored.values()),
    )
