"""Fault suite: what popagent guarantees when things go wrong, measured.

Each scenario of ``tests/fault_scenarios.py`` runs against real processes on a
fresh embedded data dir (``popagent serve``, the CLI, ``popagent mcp``),
injects its fault while writes stream in, and counts: writes acknowledged
(2xx, or an MCP result), acknowledged writes lost or stored twice, JSON 503s
while the database was away or full, other 5xx answers, and the seconds to
recovery (from the fault to the first write acknowledged after the last
failure; for a restart, until the new process answered; for the burst, the
whole burst's time), and the slowest 503 (``503_max_ms``: how long a request
waited to hear that the database is away). A row's ``ok`` is ``yes`` when no
guarantee broke in any try (the problems are printed below). ``burst`` sends
1,000 writes and 1,000 recalls at once through ``serve --workers 2`` on a
healthy database: every one must be answered 2xx (no 503: waiting in the
pools' queues is not an outage).

    python bench/faults.py [--tries 3] [--only NAME[,NAME...]] [--json PATH]

The disk-full scenario mounts a tmpfs and needs root; elsewhere it reports
why it could not run. Every scenario is bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fault_scenarios import (
    FaultResult,
    burst,
    disk_full,
    mcp_killed,
    mount_small_disk,
    postmaster_killed,
    serve_killed,
    shared_data_dir,
    unmount,
)

from latency import table


def _disk_full(tmp: Path) -> FaultResult:
    mount = tmp / "small-disk"
    try:
        mount_small_disk(mount)
    except OSError as exc:
        return FaultResult("disk full during writes", problems=[f"not run: {exc}"])
    try:
        return disk_full(tmp, mount)
    finally:
        unmount(mount)


SCENARIOS: dict[str, Callable[[Path], FaultResult]] = {
    "postmaster": postmaster_killed,
    "serve": lambda tmp: serve_killed(tmp, with_postgres=False),
    "powercut": lambda tmp: serve_killed(tmp, with_postgres=True),
    "mcp": mcp_killed,
    "shared": shared_data_dir,
    "diskfull": _disk_full,
    "burst": burst,
}
#: Scenarios run once whatever ``--tries`` says (slow, and deterministic enough).
ONCE = frozenset({"shared", "diskfull", "burst"})

COLUMNS = (
    "scenario tries acknowledged lost duplicated 503s 503_max_ms other_5xx recovery_p50_s "
    "recovery_max_s ok"
)


def _run(name: str, tries: int) -> list[FaultResult]:
    results = []
    for n in range(1 if name in ONCE else tries):
        with tempfile.TemporaryDirectory(prefix=f"popagent-fault-{name}-") as tmp:
            began = time.monotonic()
            try:
                result = SCENARIOS[name](Path(tmp))
            except Exception as exc:  # a scenario that crashes is a broken guarantee too
                result = FaultResult(name, problems=[f"crashed: {type(exc).__name__}: {exc}"])
            print(
                f"  {name} try {n + 1}: {time.monotonic() - began:.1f} s,"
                f" {len(result.problems)} problems",
                file=sys.stderr,
            )
            results.append(result)
    return results


def _row(results: list[FaultResult]) -> dict[str, object]:
    recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
    return {
        "scenario": results[0].scenario,
        "tries": len(results),
        "acknowledged": sum(r.acknowledged for r in results),
        "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "503s": sum(r.unavailable for r in results),
        "503_max_ms": f"{max(slow):.0f}"
        if (slow := [r.unavailable_max_ms for r in results if r.unavailable_max_ms is not None])
        else "-",
        "other_5xx": sum(r.other_5xx for r in results),
        "recovery_p50_s": f"{statistics.median(recoveries):.2f}" if recoveries else "-",
        "recovery_max_s": f"{max(recoveries):.2f}" if recoveries else "-",
        "ok": "yes" if not any(r.problems for r in results) else "NO",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    outcomes = {name: _run(name, args.tries) for name in names}
    table(
        "Fault suite: real popagent processes on fresh embedded data dirs; counts summed over tries",
        COLUMNS,
        [_row(results) for results in outcomes.values()],
    )
    for results in outcomes.values():
        for result in results:
            for problem in result.problems:
                print(f"  {result.scenario}: {problem}")
    if args.json:
        args.json.write_text(
            json.dumps({n: [asdict(r) for r in rs] for n, rs in outcomes.items()}, indent=2)
        )


if __name__ == "__main__":
    main()
