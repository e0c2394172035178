"""CLI start-up: ``popagent --version``, ``--help``, ``remember`` and ``recall``, end to end.

Each command runs as a user runs it: a new ``python -m popagent.cli`` process,
timed from start to exit. ``remember`` and ``recall`` talk to an embedded
PostgreSQL that is already running (this program holds it open, as a running
``popagent serve`` would), so their time is the command's own: imports,
connecting, checking the migrations, the statement, printing.

The baseline is the same commands of an earlier commit (``--baseline``,
default the commit before the lazy imports), taken out of git with ``git
archive`` into a temporary folder and run by the same interpreter with its
``src`` first on ``PYTHONPATH``; the current tree runs the same way. Each
side has its own data folder and cluster (an older commit may know fewer
migrations). Old and new runs alternate, so that load on the machine falls on
both alike; the ratio (baseline / current) is the number to read when the
machine is busy.

``remember`` and ``recall`` are measured twice: lexical (``POPAGENT_EMBEDDER=none``)
and with the local embedding model (``POPAGENT_EMBEDDER=local``: ``recall``
then loads the model and embeds the query, and ``remember`` embeds the fact
or leaves it to a background worker, depending on the version), so the
numbers stay honest whichever default the commands have.

Last, ``facts list`` and ``recall`` again "with ``serve`` running and the other
core busy": each side's own ``popagent serve`` (one worker) runs on its data
folder and one process spins on a core, as on a laptop whose server and
browser are busy. A command there needs only to connect to the running
cluster; before, it took the embedded server's cross-process start-up lock
(``store.embedded.running_url``), which waited seconds on a busy machine.

Aims: ``--version`` and ``--help`` <= 0.3 s, lexical ``remember``/``recall`` <= 1 s
(medians, current tree).

Usage: python bench/cli_startup.py [--runs N] [--baseline REF]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from io import BytesIO
from pathlib import Path
from typing import Any

from latency import pct, table
from popagent.store.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent
#: The last commit before ``popagent.cli`` imported lazily.
BASELINE = "9a2ab5e"
#: (label, arguments, embedder) of each measured command; ``{n}`` is the run number.
COMMANDS: list[tuple[str, list[str], str]] = [
    ("--version", ["--version"], "none"),
    ("--help", ["--help"], "none"),
    ("remember", ["remember", "Drinks green tea, run {n}"], "none"),
    ("recall", ["recall", "which tea?"], "none"),
    ("remember", ["remember", "Drinks black tea, run {n}"], "local"),
    ("recall", ["recall", "which tea?"], "local"),
]
#: Measured again with ``serve`` running and the other core busy (``busy_beside_serve``).
LOADED: list[tuple[str, list[str], str]] = [
    ("facts list", ["facts", "list"], "none"),
    ("recall", ["recall", "which tea?"], "none"),
]
LOADED_LABEL = " (serve running, other core busy)"
AIMS = {("--version", "none"): 0.3, ("--help", "none"): 0.3}
AIMS |= {("remember", "none"): 1.0, ("recall", "none"): 1.0}


@contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """``src`` of commit ``ref``, extracted from git (the repository is only read)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "src"],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="popagent-baseline-") as folder:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder) / "src"


def environment(src: Path, data: Path, embedder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPAGENT_")}
    env |= {
        "PYTHONPATH": str(src),
        "POPAGENT_DATA_DIR": str(data),
        "POPAGENT_EMBEDDER": embedder,
        "POPAGENT_RESOURCE_ID": "bench-cli",
        "XDG_RUNTIME_DIR": str(data.parent),
    }
    return env


def run(src: Path, data: Path, args: list[str], embedder: str) -> float:
    """Seconds from start to exit of ``popagent ARGS`` from ``src``."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "popagent.cli", *args],
        env=environment(src, data, embedder),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"popagent {' '.join(args)} from {src} failed:\n{done.stderr}")
    return elapsed


def check_source(src: Path, data: Path) -> None:
    """The process really imports popagent from ``src`` (not the installed one)."""
    done = subprocess.run(
        [sys.executable, "-c", "import popagent; print(popagent.__file__)"],
        env=environment(src, data, "none"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip().startswith(str(src)), (src, done.stdout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(src: Path, data: Path) -> Iterator[None]:
    """``popagent serve`` of ``src`` on ``data``'s cluster, one worker, until the block ends."""
    port = _free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "popagent.cli", "serve", "--port", str(port)),
            *("--workers", "1", "--maintenance-interval", "0"),
        ],
        env=environment(src, data, "none"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"popagent serve from {src} exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10):
                    break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield
    finally:
        process.terminate()
        process.wait(timeout=120)


@contextmanager
def busy_core() -> Iterator[None]:
    """One process that keeps a core busy for as long as the block runs."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def busy_beside_serve(
    sides: dict[str, Path], data: dict[str, Path], runs: int
) -> dict[tuple[str, str, str], list[float]]:
    """``LOADED``'s commands with each side's ``serve`` running and the other core busy."""
    times: dict[tuple[str, str, str], list[float]] = {}
    with ExitStack() as stack:
        for name, src in sides.items():
            stack.enter_context(serving(src, data[name]))
        stack.enter_context(busy_core())
        for n in range(1, runs + 1):
            for label, command, embedder in LOADED:
                for name, src in sides.items():
                    argv = [a.format(n=n) for a in command]
                    elapsed = run(src, data[name], argv, embedder)
                    times.setdefault((label + LOADED_LABEL, embedder, name), []).append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command and side")
    parser.add_argument("--baseline", default=BASELINE, help="git commit to compare with")
    args = parser.parse_args()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="popagent-cli-")))
        old_src = stack.enter_context(baseline_tree(args.baseline))
        sides = {"baseline": old_src, "current": ROOT / "src"}
        data = {name: tmp / name for name in sides}
        for name, src in sides.items():
            check_source(src, data[name])
            # Held open for the whole run, as a running `popagent serve` would hold it.
            server = EmbeddedServer(data[name])
            stack.callback(server.stop)
            # Warm-up: migrations, the first model load, the file cache.
            for _label, command, embedder in COMMANDS:
                run(src, data[name], [a.format(n=0) for a in command], embedder)
        times: dict[tuple[str, str, str], list[float]] = {}
        for n in range(1, args.runs + 1):
            for label, command, embedder in COMMANDS:
                for name, src in sides.items():
                    argv = [a.format(n=n) for a in command]
                    elapsed = run(src, data[name], argv, embedder)
                    times.setdefault((label, embedder, name), []).append(elapsed)
        times |= busy_beside_serve(sides, data, args.runs)
        loaded = [(label + LOADED_LABEL, c, e) for label, c, e in LOADED]
        rows: list[dict[str, Any]] = []
        for label, _, embedder in COMMANDS + loaded:
            old = times[(label, embedder, "baseline")]
            new = times[(label, embedder, "current")]
            rows.append(
                {
                    "command": label,
                    "embedder": embedder,
                    "runs": len(new),
                    "base_p50_s": f"{statistics.median(old):.3f}",
                    "base_p95_s": f"{pct(old, 95):.3f}",
                    "cur_p50_s": f"{statistics.median(new):.3f}",
                    "cur_p95_s": f"{pct(new, 95):.3f}",
                    "ratio_p50": f"{statistics.median(old) / statistics.median(new):.1f}x",
                }
            )
        table(
            f"popagent CLI, new process per command: baseline {args.baseline} vs current tree "
            f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})",
            "command embedder runs base_p50_s base_p95_s cur_p50_s cur_p95_s ratio_p50",
            rows,
        )
        print()
        for (label, embedder), aim in AIMS.items():
            median = statistics.median(times[(label, embedder, "current")])
            verdict = "met " if median <= aim else "MISS"
            print(f"  {verdict} {label} ({embedder}) median <= {aim} s: {median:.3f} s")


if __name__ == "__main__":
    main()
