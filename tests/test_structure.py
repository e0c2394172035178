"""One clear place for each thing: the package's structure, checked from its source.

- every ``PopagentError`` subclass is defined in ``popagent.errors`` and exported
  from ``popagent``, and the modules that raise it re-export the same class;
- ``popagent.defaults.ENV_VARS`` lists every ``POPAGENT_*`` variable the code
  names, and the docs agree with it both ways;
- imports point downward: ``popagent.store`` never imports ``popagent.embed``,
  and ``popagent.agent`` never imports ``popagent.store``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import popagent
import popagent.defaults as defaults
import popagent.errors as errors
from popagent.defaults import ENV_VARS, env_var
from popagent.errors import PopagentError

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "popagent"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A variable name, not a prefix such as ``POPAGENT_*`` or ``POPAGENT_EMBEDDER*``.
ENV_NAME = re.compile(r"\bPOPAGENT_[A-Z0-9]+(?:_[A-Z0-9]+)*")
# Names of ``popagent.store`` the agent layer may import directly: the pool's types,
# to name the pool the composition root (``popagent.root``) hands it; never a query.
AGENT_STORE_ALLOWED: frozenset[str] = frozenset(
    {"popagent.store.database.Pool", "popagent.store.database.Conn"}
)


def all_modules() -> list[str]:
    """Every module of the package; ``__main__`` modules run the CLI when imported."""
    names = ["popagent"]
    for info in pkgutil.walk_packages(popagent.__path__, "popagent."):
        if not info.name.endswith(".__main__"):
            names.append(info.name)
    return names


def test_every_error_lives_in_the_one_tree() -> None:
    found: dict[str, type[PopagentError]] = {}
    for name in all_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, PopagentError) and value.__module__.startswith("popagent"):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    assert len(found) > 15
    for where, cls in found.items():
        assert cls.__module__ == "popagent.errors", f"{where} is defined outside popagent.errors"
        assert cls.__name__ in errors.__all__, cls.__name__
        assert cls.__name__ in popagent.__all__, f"popagent does not export {cls.__name__}"
        assert getattr(popagent, cls.__name__) is cls
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, PopagentError)
    }
    assert defined == set(errors.__all__)


def test_old_import_paths_name_the_same_classes() -> None:
    from popagent.client import errors as client_errors
    from popagent.embed import protocol as embed_protocol
    from popagent.llm import protocol as llm_protocol
    from popagent.observe import observer
    from popagent.secrets import cipher
    from popagent.store import backup

    moved = {
        llm_protocol: ["ModelError"],
        embed_protocol: ["EmbeddingError"],
        observer: ["ObservationFailed"],
        cipher: ["SecretKeyError", "SecretDecryptError"],
        backup: ["BackupError"],
        client_errors: [
            "ClientError",
            "TransportError",
            "UnauthorizedError",
            "ServerError",
            "DatabaseUnavailableError",
            "ServerBusyError",
        ],
    }
    for module, names in moved.items():
        for name in names:
            assert getattr(module, name) is getattr(errors, name), (module.__name__, name)
            assert name in module.__all__, (module.__name__, name)
    assert issubclass(errors.DatabaseUnavailableError, errors.DatabaseError)
    assert issubclass(errors.DatabaseUnavailableError, errors.ServerError)
    assert issubclass(errors.DatabaseBusyError, errors.DatabaseError)
    assert issubclass(errors.ServerBusyError, errors.DatabaseUnavailableError)
    assert issubclass(errors.ServerBusyError, errors.DatabaseBusyError)


def _env_names(text: str) -> set[str]:
    return set(ENV_NAME.findall(text))


def test_env_table_covers_the_code() -> None:
    names = [var.name for var in ENV_VARS]
    assert len(names) == len(set(names))
    assert all(var.scope in ("public", "internal", "test") for var in ENV_VARS)
    in_code: set[str] = set()
    for path in SRC.rglob("*.py"):
        in_code |= _env_names(path.read_text(encoding="utf-8"))
    assert in_code, "the scan found no variable at all"
    assert in_code <= set(names), f"not in popagent.defaults.ENV_VARS: {in_code - set(names)}"
    for name in in_code:
        assert env_var(name).name == name


def test_every_env_constant_is_read_through_its_name() -> None:
    # Each table entry has its constant, and some module other than the table uses it.
    constants = {
        value: key
        for key, value in vars(defaults).items()
        if key.endswith("_ENV") and isinstance(value, str)
    }
    sources = {
        path: path.read_text(encoding="utf-8")
        for path in SRC.rglob("*.py")
        if path.name != "defaults.py"
    }
    for var in ENV_VARS:
        assert var.name in constants, f"{var.name} has no constant in popagent.defaults"
        if var.scope == "test":
            continue
        constant = constants[var.name]
        users = [p for p, text in sources.items() if re.search(rf"\b{constant}\b", text)]
        assert users, f"no module reads {var.name} through {constant}"


def test_env_table_and_docs_agree() -> None:
    documented: set[str] = set()
    for path in DOCS:
        documented |= _env_names(path.read_text(encoding="utf-8"))
    table = {var.name for var in ENV_VARS}
    assert documented <= table, f"the docs name unknown variables: {documented - table}"
    public = {var.name for var in ENV_VARS if var.scope == "public"}
    assert public <= documented, f"undocumented variables: {public - documented}"


def _imports(path: Path) -> set[str]:
    """The absolute names of every module ``path`` imports (anywhere in the file),
    and of ``module.name`` for ``from module import name``."""
    # The package a relative import starts from: the folder, for a module and an __init__.
    package = path.relative_to(SRC.parent).parent.parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_import_scan_resolves_relative_imports() -> None:
    # The scan must see what it is meant to forbid, or the tests below prove nothing.
    assert "popagent.store.threads" in _imports(SRC / "threads" / "service.py")
    assert "popagent.models.Vectors" in _imports(SRC / "store" / "vectors.py")
    assert "popagent.threads.turns" in _imports(SRC / "agent" / "history.py")


def test_store_never_imports_embed() -> None:
    paths = sorted((SRC / "store").rglob("*.py"))
    assert paths
    for path in paths:
        bad = {n for n in _imports(path) if _under(n, "popagent.embed")}
        assert not bad, f"{path.relative_to(SRC)} imports {bad}"


def test_agent_reaches_the_database_through_threads() -> None:
    paths = sorted((SRC / "agent").glob("*.py"))
    assert len(paths) > 5
    for path in paths:
        imported = _imports(path)
        allowed = AGENT_STORE_ALLOWED & imported
        # ``from ..store.database import Pool`` names the module as well as ``Pool``.
        allowed_modules = {name.rsplit(".", 1)[0] for name in allowed}
        bad = {
            name
            for name in imported
            if _under(name, "popagent.store") and name not in allowed | allowed_modules
        }
        assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


def test_no_service_borrows_the_memorys_pool() -> None:
    """The composition root (``popagent.root.Popagent``) hands every service the pool;
    none reaches into the long-term memory for it."""
    paths = sorted(SRC.rglob("*.py"))
    assert len(paths) > 100
    borrowing = re.compile(r"\bmemory\.pool\b")
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert not borrowing.search(text), f"{path.relative_to(SRC)} borrows memory.pool"
    # The scan sees what it forbids.
    assert borrowing.search("ThreadStore(self.memory.pool)")


def test_threads_re_exports_no_pool_types() -> None:
    import popagent.threads.turns as turns

    assert "Pool" not in turns.__all__ and "Conn" not in turns.__all__


def test_only_the_layers_above_the_root_import_it() -> None:
    """``popagent.root`` composes the services: none of them may import it back."""
    below = ["store", "memory", "threads", "observe", "agent", "llm", "embed", "secrets"]
    paths = [p for layer in below for p in sorted((SRC / layer).rglob("*.py"))]
    paths += [SRC / "keys.py", SRC / "models.py", SRC / "errors.py"]
    assert len(paths) > 50
    for path in paths:
        bad = {n for n in _imports(path) if _under(n, "popagent.root")}
        assert not bad, f"{path.relative_to(SRC)} imports {bad}"
    # The scan sees what it forbids.
    assert any(_under(n, "popagent.root") for n in _imports(SRC / "mcp" / "server.py"))
