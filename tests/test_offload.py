"""CPU-heavy work leaves the event loop (``popagent.offload``): small work runs inline,
larger work in a thread, the largest in a worker process once a server turned them on;
and a real ``popagent serve`` answers ``/healthz`` quickly while worst-case writes are
being screened."""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from popagent import offload
from popagent.errors import ValidationError
from popagent.threads.service import screen_message
from tests.web_support import cli_command, free_port, wait_healthy

# Among the slowest inputs for the screen (bench/screening.py): a credential word
# before every unclosed guillemet makes each word a candidate that fails late.
WORST = "password « "


def _where() -> tuple[int, int]:
    return os.getpid(), threading.get_ident()


@pytest.fixture
def processes() -> Iterator[None]:
    offload.use_processes(1)
    try:
        yield
    finally:
        offload.stop_processes()


async def test_small_work_runs_inline_and_larger_work_in_a_thread() -> None:
    here = _where()
    assert await offload.off_loop(offload.OFF_LOOP_CHARS, _where) == here
    pid, thread = await offload.off_loop(offload.OFF_LOOP_CHARS + 1, _where)
    assert pid == os.getpid() and thread != threading.get_ident()
    # Without worker processes even the largest work stays in this process.
    pid, thread = await offload.off_loop(10**9, _where)
    assert pid == os.getpid() and thread != threading.get_ident()


async def test_the_largest_work_goes_to_a_worker_process(processes: None) -> None:
    pid, _ = await offload.off_loop(offload.PROCESS_CHARS + 1, _where)
    assert pid != os.getpid()
    # Between the two sizes, a thread of this process.
    pid, thread = await offload.off_loop(offload.PROCESS_CHARS, _where)
    assert pid == os.getpid() and thread != threading.get_ident()


async def test_a_check_failing_in_a_worker_process_raises_the_same_error(
    processes: None,
) -> None:
    content = "x" * (offload.PROCESS_CHARS + 1)
    with pytest.raises(ValidationError) as caught:
        await offload.off_loop(len(content), screen_message, "user", content, [{"type": 1}])
    assert caught.value.field.startswith("parts[0]")
    screened, parts = await offload.off_loop(
        len(content), screen_message, "user", content + " password: Hunter2go", []
    )
    assert screened.endswith("password: [REDACTED:password]") and parts == []


def test_json_size_is_bounded_by_its_limit() -> None:
    assert offload.json_size({"ab": ["cd", 1, None]}) == 1 + 2 + 1 + 2 + 1 + 1
    huge = [["x" * 10] * 1000] * 1000  # ten million characters
    began = time.perf_counter()
    assert offload.PROCESS_CHARS < offload.json_size(huge) <= offload.PROCESS_CHARS + 10
    assert time.perf_counter() - began < 1.0  # bounded, not a timing claim: it stops early


def test_healthz_keeps_answering_while_worst_case_writes_are_screened(
    database_url: str, tmp_path: Path
) -> None:
    """The largest body the server accepts, filled with the screen's worst input,
    sent by several clients at once; meanwhile ``/healthz`` is asked every 20 ms.
    The writes must keep the server busy for at least half a second (more clients
    are added until they do), or the test would prove nothing.

    No wall-clock margin: a screen run on the event loop would hold most probes for
    a good part of a write's screening, so the typical probe would take a sizeable
    share of the busy time; off the loop it takes a small one. The milliseconds
    themselves are a benchmark's (``bench/edges.py``, ``bench/load.py``)."""
    port = free_port()
    env = {**os.environ, "POPAGENT_EMBEDDER": "none", "XDG_RUNTIME_DIR": str(tmp_path)}
    for name in ("POPAGENT_TOKEN", "POPAGENT_TOKEN_FILE", "POPAGENT_MODEL"):
        env.pop(name, None)
    process = subprocess.Popen(
        cli_command(
            "--database-url",
            database_url,
            "--resource-id",
            "offload-test",
            "serve",
            "--port",
            str(port),
            "--maintenance-interval",
            "0",
        ),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process)
        # Just under the 256 KiB body limit, as one user item.
        content = (WORST * 30_000)[:240_000]
        body = {"items": [{"role": "user", "content": content}]}
        # Warm up: the worker process starts on first use.
        with httpx.Client(base_url=base, timeout=120) as client:
            assert client.post("/api/sessions/warm/items", json=body).status_code == 201
        clients = 2
        while True:
            busy_s, latencies = _writes_with_health_probes(base, body, clients)
            if busy_s >= 0.5 or clients >= 32:
                break
            clients *= 2
        assert busy_s >= 0.5, f"{clients} writes took only {busy_s:.3f} s: nothing to prove"
        assert len(latencies) >= 10
        typical = statistics.median(latencies)
        assert typical < busy_s / (4 * clients), (
            f"/healthz took {typical * 1000:.0f} ms (median) while {clients} "
            f"worst-case writes ran for {busy_s:.2f} s"
        )
    finally:
        process.terminate()
        process.communicate(timeout=60)


def _writes_with_health_probes(
    base: str, body: Mapping[str, object], clients: int
) -> tuple[float, list[float]]:
    """``clients`` concurrent writes of ``body``; how long they kept the server busy,
    and the latency of every ``/healthz`` asked meanwhile."""
    statuses: list[int] = []
    done = threading.Event()

    def write(i: int) -> None:
        with httpx.Client(base_url=base, timeout=120) as client:
            statuses.append(client.post(f"/api/sessions/burst-{i}/items", json=body).status_code)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(clients)]
    began = time.perf_counter()
    for writer in writers:
        writer.start()
    latencies: list[float] = []
    with httpx.Client(base_url=base, timeout=10) as probe:
        time.sleep(0.02)  # let the writes arrive first
        while any(w.is_alive() for w in writers):
            asked = time.perf_counter()
            assert probe.get("/healthz").status_code == 200
            latencies.append(time.perf_counter() - asked)
            time.sleep(0.02)
    busy_s = time.perf_counter() - began
    for writer in writers:
        writer.join()
    done.set()
    assert statuses == [201] * clients
    return busy_s, latencies
