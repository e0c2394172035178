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

Aims: ``--version`` and ``--help`` <= 0.3 s, lexical ``remember``/``recall`` <= 1 s
(medians, current tree).

Usage: python bench/cli_startup.py [--runs N] [--baseline REF]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
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
        rows: list[dict[str, Any]] = []
        for label, _, embedder in COMMANDS:
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
