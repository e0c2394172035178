"""``popagent.client.sync`` is generated from ``async_.py`` by ``tools/async_to_sync.py``.

The tool runs as CI runs it (a subprocess, ``--check``), on the real files and
on copies in a temporary folder: an edited generated file and an edited source
must both be reported as stale, with the diff, and regeneration must make the
check pass again. The generated module is then compared with its source by
its syntax tree: nothing async is left, and the two clients have the same
methods under the blocking names.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
from pathlib import Path

import pytest

from popagent.client import AsyncClient, Client
from tests.cli_support import run_tool as run

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "async_to_sync.py"
SOURCE = ROOT / "src" / "popagent" / "client" / "async_.py"
TARGET = ROOT / "src" / "popagent" / "client" / "sync.py"
COMMAND = "python tools/async_to_sync.py"


def run_tool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run(TOOL, *args)


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    """``async_.py`` and ``sync.py`` copied to a temporary folder (source, target)."""
    source, target = tmp_path / "async_.py", tmp_path / "sync.py"
    source.write_text(SOURCE.read_text(encoding="utf-8"), encoding="utf-8")
    target.write_text(TARGET.read_text(encoding="utf-8"), encoding="utf-8")
    return source, target


def test_generated_client_is_current() -> None:
    done = run_tool("--check")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_generated_client_says_so_first() -> None:
    first = TARGET.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# Generated from src/popagent/client/async_.py")
    assert COMMAND in first and "DO NOT EDIT" in first


def test_check_fails_on_a_hand_edited_generated_file(copies: tuple[Path, Path]) -> None:
    source, target = copies
    text = target.read_text(encoding="utf-8")
    edited = text.replace('"""Run retention maintenance now', '"""Run maintenance at once', 1)
    assert edited != text
    target.write_text(edited, encoding="utf-8")

    done = run_tool("--check", "--source", source, "--target", target)

    assert done.returncode == 1
    assert '-        """Run maintenance at once' in done.stdout
    assert '+        """Run retention maintenance now' in done.stdout
    assert f"is stale: run `{COMMAND}`" in done.stderr
    assert target.read_text(encoding="utf-8") == edited  # --check never writes


def test_check_fails_on_a_changed_source_until_regenerated(copies: tuple[Path, Path]) -> None:
    source, target = copies
    text = source.read_text(encoding="utf-8")
    changed = text.replace(
        '"""``/healthz``: a server', '"""Awaits ``/healthz`` of ``AsyncClient``: a server', 1
    )
    assert changed != text
    # "Awaits" has no blocking phrase in the tool's table: the tool refuses (exit 2).
    source.write_text(changed, encoding="utf-8")
    refused = run_tool("--check", "--source", source, "--target", target)
    assert refused.returncode == 2
    assert "'Awaits' in text: add a phrase to TEXT" in refused.stderr

    source.write_text(changed.replace('"""Awaits ``/healthz``', '"""Asks ``/healthz``'), "utf-8")
    stale = run_tool("--check", "--source", source, "--target", target)
    assert stale.returncode == 1
    assert '+        """Asks ``/healthz`` of ``Client``: a server' in stale.stdout
    assert '-        """``/healthz``: a server' in stale.stdout

    written = run_tool("--source", source, "--target", target)
    assert written.returncode == 0
    assert run_tool("--check", "--source", source, "--target", target).returncode == 0
    tree = ast.parse(target.read_text(encoding="utf-8"))
    health = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "health"
    )
    assert (ast.get_docstring(health) or "").startswith("Asks ``/healthz`` of ``Client``: a server")


def test_check_fails_on_an_async_name_without_a_blocking_one(copies: tuple[Path, Path]) -> None:
    source, target = copies
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace("await self.aclose()", "await self.acloser()", 1), "utf-8")

    done = run_tool("--check", "--source", source, "--target", target)

    assert done.returncode == 2
    assert "'acloser' has no entry in NAMES" in done.stderr


def test_check_fails_when_a_phrase_of_the_table_is_gone(copies: tuple[Path, Path]) -> None:
    source, target = copies
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace("An asyncio client of", "A client of", 1), "utf-8")

    done = run_tool("--check", "--source", source, "--target", target)

    assert done.returncode == 2
    assert "no longer in the source: ['An asyncio client of']" in done.stderr


def test_generated_module_has_nothing_async_left() -> None:
    tree = ast.parse(TARGET.read_text(encoding="utf-8"))
    kinds = (ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith, ast.Await)
    assert [node for node in ast.walk(tree) if isinstance(node, kinds)] == []
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    async_names = {"aclose", "__aenter__", "__aexit__", "aread", "aiter_lines", "apaged"}
    assert {name for name in names if "async" in name.lower() or name in async_names} == set()
    assert {"Client", "close", "__enter__", "__exit__", "read", "iter_lines", "paged"} <= names


BLOCKING = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}


def test_clients_have_the_same_methods_and_signatures() -> None:
    def methods(cls: type) -> dict[str, list[str]]:
        found = {}
        for name, member in vars(cls).items():
            if isinstance(member, classmethod):
                member = member.__func__
            if callable(member):
                found[BLOCKING.get(name, name)] = list(inspect.signature(member).parameters)
        return found

    async_methods = methods(AsyncClient)
    assert len(async_methods) > 40
    assert async_methods == methods(Client)
    assert inspect.iscoroutinefunction(AsyncClient.recall)
    assert not inspect.iscoroutinefunction(Client.recall)
    assert inspect.isasyncgenfunction(AsyncClient.chat_stream)
    assert inspect.isgeneratorfunction(Client.chat_stream)


def test_every_call_names_the_client_method_that_makes_it() -> None:
    """Errors name the client's method before the route (``put_fact (PUT /api/...)``):
    each ``Call`` a builder of ``calls.py`` makes says which method, and both clients
    have it."""
    tree = ast.parse((ROOT / "src" / "popagent" / "client" / "calls.py").read_text("utf-8"))
    made = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Call"
    ]
    assert len(made) >= 30
    for node in made:
        names = [k.value for k in node.keywords if k.arg == "name"]
        assert len(names) == 1 and isinstance(names[0], ast.Constant), ast.unparse(node)
        method = names[0].value
        assert isinstance(method, str)
        assert callable(getattr(Client, method)) and callable(getattr(AsyncClient, method))
