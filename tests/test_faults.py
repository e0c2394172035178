"""Faults survived by real popagent processes on their own embedded PostgreSQL.

Each test runs one scenario of ``tests/fault_scenarios.py`` (a real
``popagent serve``, CLI or ``popagent mcp`` subprocess, a fault injected while
writes stream in) and asserts its guarantees: no acknowledged write lost or
stored twice, clear JSON 503s (never a traceback, never another 5xx) while the
database is away or full, recovery by itself, JSON-only logs, and PostgreSQL
stopped by the last process out. ``bench/faults.py`` repeats the scenarios
and prints the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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


def _assert_survived(result: FaultResult, *, acknowledged: int) -> None:
    assert result.problems == []
    assert result.acknowledged >= acknowledged
    assert (result.lost, result.duplicated, result.other_5xx) == (0, 0, 0)
    assert result.recovery_s is not None


def test_postmaster_killed_during_api_writes(tmp_path: Path) -> None:
    result = postmaster_killed(tmp_path)
    _assert_survived(result, acknowledged=20)
    assert result.recovery_s is not None and result.recovery_s < 20
    # An outage is still said fast: queueing for a busy pool did not slow the 503s down.
    assert result.unavailable_max_ms is None or result.unavailable_max_ms < 3_500


def test_a_burst_through_two_workers_queues_instead_of_failing(tmp_path: Path) -> None:
    """1,000 writes and 1,000 recalls at once on a healthy database: every one answered
    2xx (the pools' queues absorb the burst), every write stored once, no 503."""
    result = burst(tmp_path)
    assert result.problems == []
    assert (result.unavailable, result.other_5xx) == (0, 0)
    assert (result.acknowledged, result.lost, result.duplicated) == (1_000, 0, 0)


@pytest.mark.parametrize("with_postgres", [False, True], ids=["serve", "serve-and-postgres"])
def test_serve_killed_during_writes_starts_again(tmp_path: Path, with_postgres: bool) -> None:
    _assert_survived(serve_killed(tmp_path, with_postgres=with_postgres), acknowledged=30)


def test_mcp_killed_during_writes_starts_again(tmp_path: Path) -> None:
    _assert_survived(mcp_killed(tmp_path), acknowledged=30)


def test_serve_cli_and_mcp_share_one_data_dir(tmp_path: Path) -> None:
    result = shared_data_dir(tmp_path)
    _assert_survived(result, acknowledged=1)
    assert result.unavailable == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs (the test fails, not skips, where it cannot be mounted)."""
    mount = tmp_path / "small-disk"
    try:
        mount_small_disk(mount)
    except OSError as exc:
        pytest.fail(str(exc))
    try:
        yield mount
    finally:
        unmount(mount)


def test_disk_full_during_writes(tmp_path: Path, small_disk: Path) -> None:
    result = disk_full(tmp_path, small_disk)
    _assert_survived(result, acknowledged=10)
    assert result.unavailable >= 1
