"""The exported names are the contract; this pins them."""

from __future__ import annotations

import popagent


def test_all_is_exactly_the_public_api() -> None:
    assert len(popagent.__all__) == len(set(popagent.__all__))
    public = {n for n in dir(popagent) if not n.startswith("_")}
    # Submodules are importable, not part of the API.
    modules = {
        "access",
        "adapters",
        "agent",
        "checks",
        "cli",
        "client",
        "credentials",
        "connection",
        "defaults",
        "embed",
        "errors",
        "llm",
        "mcp",
        "memory",
        "models",
        "keys",
        "observe",
        "offload",
        "portable",
        "root",
        "secrets",
        "store",
        "threads",
        "web",
    }
    assert public - modules == set(popagent.__all__)
    assert set(popagent.__all__) <= public
