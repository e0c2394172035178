"""Helpers for the CLI tests: ``popagent`` run in process through click's runner."""

from __future__ import annotations

from click.testing import CliRunner, Result

from popagent.cli import main

__all__ = ["Env", "invoke"]

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
