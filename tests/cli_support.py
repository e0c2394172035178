"""Helpers for the CLI tests: ``popagent`` run in process through click's runner, and
the project's own tools (``tools/*.py``) run as ``scripts/check`` runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from popagent.cli import main

__all__ = ["ROOT", "Env", "invoke", "run_tool"]

#: The repository's root (where ``scripts/check`` runs the tools).
ROOT = Path(__file__).resolve().parent.parent


def run_tool(tool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``python tool args...`` from the repository's root, as ``scripts/check`` runs it."""
    return subprocess.run(
        [sys.executable, str(tool), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


#: Environment overrides for one invocation (``None`` unsets a variable).
Env = dict[str, str | None]


def invoke(url: str, res: str, env: Env, *args: str, input: str | None = None) -> Result:
    """``popagent --database-url URL --resource-id RES ARGS`` with ``env``; exceptions propagate
    (``catch_exceptions=False``), so a crash fails the test with its traceback."""
    return CliRunner().invoke(
        main,
        ["--database-url", url, "--resource-id", res, *args],
        input=input,
        env=env,
        catch_exceptions=False,
    )
