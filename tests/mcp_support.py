"""Helpers for the MCP tests: spawning ``popagent mcp`` over stdio or HTTP, reading results.

The servers are real subprocesses of the installed CLI, pointed at the test
cluster with ``POPAGENT_DATABASE_URL``; their stderr goes to a file the test
owns, so a failure can show it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.web_support import cli_command

__all__ = ["TOOLS", "cli_command", "http_server", "server_env", "stdio_params", "text_of"]

#: The tools ``popagent mcp`` offers, in the order it lists them.
TOOLS = [
    "remember",
    "recall",
    "list_facts",
    "forget_fact",
    "fact_history",
    "restore_fact",
    "list_episodes",
    "get_episode",
]

_SERVING = re.compile(r"at (http://\S+/mcp)")


def server_env(database_url: str, resource_id: str, **extra: str) -> dict[str, str]:
    """What a spawned server needs: the test cluster, the resource, and nothing of ours
    (no token unless given)."""
    env = {
        "POPAGENT_DATABASE_URL": database_url,
        "POPAGENT_RESOURCE_ID": resource_id,
        "PYTHONUNBUFFERED": "1",
    }
    env.update(extra)
    return env


def stdio_params(database_url: str, resource_id: str) -> StdioServerParameters:
    """How the SDK's client starts ``popagent mcp`` (stdio) for ``resource_id``."""
    command, *args = cli_command("mcp")
    return StdioServerParameters(
        command=command, args=args, env=server_env(database_url, resource_id)
    )


def text_of(result: CallToolResult) -> str:
    """The one text block of a tool result."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@contextmanager
def http_server(
    database_url: str, resource_id: str, log: Path, *extra_args: str, **env: str
) -> Iterator[str]:
    """Run ``popagent mcp --transport http --port 0`` and yield its URL (from stderr)."""
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("POPAGENT_TOKEN", "POPAGENT_TOKEN_FILE")
    }
    full_env.update(server_env(database_url, resource_id, **env))
    with log.open("w") as err:
        process = subprocess.Popen(
            cli_command("mcp", "--transport", "http", "--port", "0", *extra_args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=full_env,
        )
        try:
            yield _wait_for_url(process, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for_url(process: subprocess.Popen[Any], log: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _SERVING.search(log.read_text())
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise AssertionError(
                f"popagent mcp exited with {process.returncode}:\n{log.read_text()}"
            )
        time.sleep(0.05)
    raise AssertionError(f"popagent mcp did not start in {timeout}s:\n{log.read_text()}")
