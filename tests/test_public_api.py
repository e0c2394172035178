"""The public API, pinned: each public package's ``__all__``, written out here.

popagent's public surface is the packages and modules in ``PUBLIC`` below (and
docs/library.md's "Public API" section, which lists the same); every other module
is internal and may change in any release. For each public one:

- its ``__all__``, sorted, equals the literal list here, with no duplicates;
- every name in it can be imported, and none starts with ``_``;
- ``from package import *`` binds exactly ``__all__`` (nothing more, nothing less);
- a package binds no other public name (a name dropped from ``__all__`` is dropped
  from the package's namespace too, so it cannot be imported from there by accident).

Every module directly under ``popagent`` and ``popagent.adapters`` is either public
(a key of ``PUBLIC``) or named in ``INTERNAL``: a new module fails here until someone
decides which it is.

Changing a pinned list is an API change: adding a name makes a promise to users,
removing or renaming one breaks their code. Edit the list here in the same change,
say so in the change's description (and in the docs, if the name is documented),
and prefer adding to removing. Do not regenerate the lists blindly from the code.
"""

import __future__

import importlib
import pkgutil
import re
import types
from pathlib import Path

import pytest

import popagent
import popagent.adapters

LIBRARY_DOC = Path(__file__).resolve().parent.parent / "docs" / "library.md"

#: Every public package or module and its exported names, sorted.
PUBLIC: dict[str, list[str]] = {
    "popagent": [
        "Agent",
        "BackupError",
        "ClientError",
        "ConflictError",
        "DEFAULT_WEIGHTS",
        "DatabaseBusyError",
        "DatabaseError",
        "DatabaseUnavailableError",
        "EmbeddingError",
        "EpisodeTurn",
        "HEADER",
        "LongTermMemory",
        "MaintenanceReport",
        "Memory",
        "MemoryFilter",
        "ModelError",
        "NotFoundError",
        "ObservationFailed",
        "Popagent",
        "PopagentError",
        "RankingWeights",
        "RecallResult",
        "RememberResult",
        "SUPERVISOR_GUIDANCE",
        "ScoreComponent",
        "SecretDecryptError",
        "SecretKeyError",
        "SecretRefusedError",
        "ServerBusyError",
        "ServerError",
        "TransportError",
        "TurnFailedError",
        "TurnResult",
        "UnauthorizedError",
        "ValidationError",
        "connect",
        "render",
    ],
    "popagent.adapters": [],
    "popagent.adapters.backend": [
        "LocalBackend",
        "MemoryBackend",
        "StoreBackend",
    ],
    "popagent.adapters.langchain": [
        "PopagentRetriever",
        "document_of",
        "memory_tools",
        "recall_tool",
        "remember_tool",
    ],
    "popagent.adapters.langgraph": [
        "DEFAULT_PREFIX",
        "PopagentStore",
        "SCAN_LIMIT",
        "decode_fact",
        "encode_item",
        "fact_key",
        "memory_tools",
    ],
    "popagent.adapters.openai_agents": [
        "PopagentSession",
        "memory_tools",
    ],
    "popagent.adapters.pydantic_ai": [
        "RecallProcessor",
        "memory_capabilities",
        "memory_toolset",
    ],
    "popagent.agent": [
        "Agent",
        "AuditHook",
        "AuditLog",
        "ConditionalTool",
        "HistoryRequest",
        "HistorySource",
        "Hook",
        "HookSet",
        "ModelCallEnd",
        "ModelCallStart",
        "OBSERVATIONS_LABEL",
        "ObservationalHistory",
        "ReadHistoryTool",
        "RecentMessages",
        "RememberTool",
        "SUPERVISOR_GUIDANCE",
        "SecretScrubber",
        "Tool",
        "ToolCallEnd",
        "ToolCallRecord",
        "ToolCallStart",
        "ToolContext",
        "ToolOutcome",
        "ToolRunner",
        "TurnResult",
        "TurnTimings",
        "build_agent",
        "check_arguments",
        "to_chat_messages",
    ],
    "popagent.client": [
        "AsyncClient",
        "ChatDelta",
        "ChatReply",
        "Client",
        "ClientError",
        "DatabaseUnavailableError",
        "FactHistory",
        "Health",
        "ItemPage",
        "MaintenanceSchedule",
        "MessagePage",
        "ObservationGeneration",
        "ObservationGroupInfo",
        "Observations",
        "Page",
        "PurgeReport",
        "RecallPreview",
        "RemoteBackend",
        "RevertReport",
        "ServerBusyError",
        "ServerError",
        "ServerInfo",
        "SessionItem",
        "SessionWrites",
        "Setting",
        "Settings",
        "ToolCallSummary",
        "TransportError",
        "UNSET",
        "UnauthorizedError",
        "Unset",
        "apaged",
        "paged",
    ],
    "popagent.embed": [
        "DEFAULT_PROVIDER",
        "E5Embedder",
        "EmbedKind",
        "Embedder",
        "EmbeddingError",
        "LOCAL_DIMENSIONS",
        "LOCAL_MODEL",
        "LocalEmbedder",
        "OpenAIEmbedder",
        "PROVIDERS",
        "Vectors",
        "chunk_text",
        "configured_embedder",
        "embedder_from_env",
        "make_embedder",
        "normalize_rows",
    ],
    "popagent.errors": [
        "BackupError",
        "ClientError",
        "ConflictError",
        "DatabaseBusyError",
        "DatabaseError",
        "DatabaseUnavailableError",
        "EmbeddingError",
        "ModelError",
        "NotFoundError",
        "ObservationFailed",
        "PopagentError",
        "SecretDecryptError",
        "SecretKeyError",
        "SecretRefusedError",
        "ServerBusyError",
        "ServerError",
        "TransportError",
        "TurnFailedError",
        "UnauthorizedError",
        "ValidationError",
    ],
    "popagent.llm": [
        "ChatMessage",
        "ChatModel",
        "ChatRole",
        "Completion",
        "ContentPart",
        "DEFAULT_BASE_URL",
        "FilePart",
        "ImagePart",
        "ModelError",
        "ModelSettings",
        "OpenAIChatModel",
        "TextCallback",
        "ToolCall",
        "ToolSpec",
    ],
    "popagent.mcp": [
        "MCP_PATH",
        "MemoryServer",
        "SERVER_INSTRUCTIONS",
        "SESSION_PREFIX",
        "bind",
        "http_app",
        "http_server",
        "memory_tools",
        "serve_http",
        "serve_stdio",
    ],
    "popagent.models": [
        "AuditHookName",
        "AuditRecord",
        "Candidate",
        "ChatReply",
        "CorpusStats",
        "EpisodeTurn",
        "FactHistory",
        "FactOptions",
        "FactVersion",
        "Health",
        "ItemPage",
        "ItemPopped",
        "ItemsAdded",
        "Kind",
        "MaintenanceReport",
        "Memory",
        "MemoryFilter",
        "Message",
        "MessagePage",
        "Neighbour",
        "ORIGINS",
        "ObservationGeneration",
        "ObservationGroup",
        "ObservationGroupInfo",
        "ObservationLog",
        "Observations",
        "Outcome",
        "Page",
        "Provenance",
        "PurgeReport",
        "RecallPreview",
        "RecallResult",
        "RememberResult",
        "RevertReport",
        "Role",
        "ScoreComponent",
        "Session",
        "SessionItem",
        "SessionWrites",
        "Setting",
        "Settings",
        "ToolCallSummary",
        "TurnStatus",
        "Vectors",
        "turn_marker",
        "unfinished_turn_ends",
    ],
    "popagent.observe": [
        "ExecutionSnapshot",
        "HistoryPage",
        "MAX_REFLECTION_ATTEMPTS",
        "MemorySettings",
        "MemorySettingsStore",
        "ObservationFailed",
        "ObservationalMemory",
        "ObservedContext",
        "Reflection",
        "SETTINGS",
        "Setting",
        "StoredSettings",
        "UNTRUSTED_LABEL",
        "auto_idle_seconds",
        "execution_snapshot",
        "read_history",
    ],
    "popagent.portable": [
        "FORMAT",
        "FORMAT_VERSION",
        "ImportReport",
        "RECORD_TYPES",
        "export_resource",
        "import_mem0",
        "import_resource",
    ],
    "popagent.secrets": [
        "Sealed",
        "SecretCipher",
        "SecretDecryptError",
        "SecretInfo",
        "SecretKeyError",
        "SecretStore",
        "generate_key",
        "load_cipher",
        "scrub",
    ],
    "popagent.threads": [
        "SessionItems",
        "ThreadStore",
    ],
    "popagent.web": [
        "ServerConfig",
        "create_app",
    ],
}

#: The modules directly under ``popagent`` and ``popagent.adapters`` that are internal:
#: imported by popagent itself, never promised to users.
INTERNAL: frozenset[str] = frozenset(
    {
        "popagent.access",
        "popagent.adapters.batching",
        "popagent.adapters.langgraph_index",
        "popagent.adapters.langgraph_items",
        "popagent.adapters.sweeper",
        "popagent.adapters.tool_calls",
        "popagent.adapters.toolkit",
        "popagent.checks",
        "popagent.cli",
        "popagent.connection",
        "popagent.root",
        "popagent.credentials",
        "popagent.defaults",
        "popagent.keys",
        "popagent.memory",
        "popagent.offload",
        "popagent.store",
    }
)


def _module(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def test_every_module_is_public_or_internal() -> None:
    found = {"popagent"}
    for package in (popagent, popagent.adapters):
        found |= {
            info.name for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}.")
        }
    assert not set(PUBLIC) & INTERNAL
    assert found - set(PUBLIC) - INTERNAL == set(), "new modules: add each to PUBLIC or INTERNAL"
    assert set(PUBLIC) | INTERNAL == found, "modules listed here that no longer exist"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_exports_are_pinned(name: str) -> None:
    assert sorted(PUBLIC[name]) == PUBLIC[name], f"keep the pinned list of {name} sorted"
    exported = list(_module(name).__all__)
    assert len(exported) == len(set(exported)), f"{name}.__all__ names something twice"
    assert sorted(exported) == PUBLIC[name], (
        f"{name}.__all__ changed: an API change (see this module's docstring)"
    )


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_export_imports(name: str) -> None:
    module = _module(name)
    for export in module.__all__:
        value = getattr(module, export)  # lazy names (PEP 562) are imported here
        assert not isinstance(value, types.ModuleType), f"{name}.{export} is a module"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_star_import_gives_exactly_all(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    del namespace["__builtins__"]
    assert sorted(namespace) == sorted(_module(name).__all__)


def test_no_private_name_is_exported() -> None:
    for name in PUBLIC:
        private = [export for export in _module(name).__all__ if export.startswith("_")]
        assert private == [], f"{name}.__all__ exports private names {private}"


@pytest.mark.parametrize("name", sorted(n for n in PUBLIC if hasattr(_module(n), "__path__")))
def test_package_binds_no_other_public_name(name: str) -> None:
    """A package's ``__init__`` binds its exports, its submodules and private helpers only."""
    module = _module(name)
    stray = sorted(
        attribute
        for attribute, value in vars(module).items()
        if not attribute.startswith("_")
        and not isinstance(value, types.ModuleType)
        and value is not __future__.annotations  # ``from __future__ import annotations``
        and attribute not in module.__all__
    )
    assert stray == [], f"{name} binds names outside __all__: {stray}"


def test_the_docs_list_the_same_public_modules() -> None:
    """docs/library.md's "Public API" table names each public module, and no other."""
    section = LIBRARY_DOC.read_text(encoding="utf-8").split("## Public API", 1)[1]
    table = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = set(re.findall(r"`(popagent(?:\.\w+)*)`", "".join(table)))
    assert documented == set(PUBLIC) - {"popagent.adapters"}
