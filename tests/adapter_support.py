"""Shared by the framework adapters' tests: a fresh interpreter without some
packages, and the offline examples run as a user would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "assert_import_hint", "run_example", "without_packages"]

ROOT = Path(__file__).resolve().parent.parent

_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {names!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, Block())
"""


def without_packages(packages: Iterable[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter in which importing any of ``packages``
    (top-level names) fails as if they were not installed."""
    prelude = _BLOCK.format(names=set(packages))
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


def assert_import_hint(blocked: Iterable[str], module: str, extra: str, prelude: str = "") -> None:
    """Importing ``module`` in an interpreter without ``blocked`` (after running ``prelude``,
    which may assert what is not imported yet) fails with an error that says to install
    ``popagent[extra]``; the interpreter itself exits cleanly."""
    done = without_packages(
        blocked,
        prelude + f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n",
    )
    assert done.returncode == 0, done.stderr
    assert f'pip install "popagent[{extra}]"' in done.stdout


def run_example(name: str, tmp_path: Path) -> dict[str, Any]:
    """Run ``examples/<name>`` in ``tmp_path`` with its own data dir; the JSON
    summary it prints last. Fails the test when the example exits non-zero."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "POPAGENT_DATA_DIR": str(tmp_path / "data")},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return summary
