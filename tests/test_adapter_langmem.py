"""LangMem (LangChain's memory library) on ``PopagentStore``.

LangMem's memory tools (``create_manage_memory_tool``, ``create_search_memory_tool``)
in a ``create_react_agent``, and its store-backed memory manager
(``create_memory_store_manager``), each on a ``PopagentStore`` with an ``index=``
config, as LangMem's docs give one. The chat model is LangChain's ``ChatOpenAI``
talking over HTTP to the scripted Chat Completions server
(``tests/scripted_model.py``), so LangMem's real prompts and tool calls run; the
embeddings are a deterministic function (letter counts), so the search ranking is
known.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_openai import ChatOpenAI
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore, IndexConfig
from langgraph.warnings import LangGraphDeprecatedSinceV10
from pydantic import SecretStr

with warnings.catch_warnings():
    # LangMem's trustcall imports ``Send`` from where LangGraph 1.x deprecates it.
    warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
    from langmem import (
        create_manage_memory_tool,
        create_memory_store_manager,
        create_search_memory_tool,
    )

import popagent
from popagent import Popagent
from popagent.adapters.langgraph import PopagentStore
from popagent.models import MemoryFilter
from tests.scripted_model import CallTools, Reply, ScriptedModelServer

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
USER: RunnableConfig = {"configurable": {"langgraph_user_id": "user-7", "thread_id": "t1"}}


def embed(texts: Sequence[str]) -> list[list[float]]:
    """Letter and digit counts: texts that share letters are near."""
    return [[float(t.lower().count(ch)) for ch in ALPHABET] for t in texts]


@pytest.fixture
def store(root: Popagent, resource: str) -> PopagentStore:
    index: IndexConfig = {"dims": len(ALPHABET), "embed": embed}
    return PopagentStore(root, resource, index=index)


def chat(scripted: ScriptedModelServer) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=scripted.base_url,
        api_key=SecretStr("test-key"),
        model="scripted",
        max_retries=0,
    )


def agent_of(
    model: ChatOpenAI, tools: Sequence[BaseTool], store: BaseStore
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``create_react_agent``, as LangMem's docs use it (deprecated in LangGraph 1.x)."""
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        return create_react_agent(model, list(tools), store=store)


def tool_results(messages: list[Any]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


async def test_langmems_tools_write_and_find_memories(
    store: PopagentStore,
    scripted: ScriptedModelServer,
    memory: popagent.LongTermMemory,
    resource: str,
) -> None:
    namespace = ("memories", "{langgraph_user_id}")
    tools = [
        create_manage_memory_tool(namespace=namespace),
        create_search_memory_tool(namespace=namespace),
    ]
    agent = agent_of(chat(scripted), tools, store)

    scripted.script(
        CallTools(
            [
                (
                    "manage_memory",
                    {"content": "Prefers aisle seats on short flights", "action": "create"},
                )
            ]
        ),
        CallTools([("manage_memory", {"content": "Allergic to peanuts", "action": "create"})]),
        Reply("Noted both."),
    )
    result = await agent.ainvoke(
        {"messages": [HumanMessage("I like aisle seats, and I'm allergic to peanuts.")]}, USER
    )
    created = tool_results(result["messages"])
    assert [r.startswith("created memory ") for r in created] == [True, True]
    assert result["messages"][-1].content == "Noted both."

    items = await store.asearch(("memories", "user-7"))
    assert {i.value["content"] for i in items} == {
        "Prefers aisle seats on short flights",
        "Allergic to peanuts",
    }
    # Each memory is a popagent fact of the resource, with the caller's vectors.
    facts = await memory.list(resource, MemoryFilter(kind="fact"))
    assert len(facts) == 2 and all(f.origin == "langgraph" for f in facts)

    scripted.script(
        CallTools([("search_memory", {"query": "peanut allergy"})]),
        Reply("You are allergic to peanuts."),
    )
    result = await agent.ainvoke({"messages": [HumanMessage("What am I allergic to?")]}, USER)
    [found] = tool_results(result["messages"])
    # Both memories, ranked by the index's similarity: the allergy first.
    assert found.index("Allergic to peanuts") < found.index("Prefers aisle seats")
    assert result["messages"][-1].content == "You are allergic to peanuts."

    # The tool's update and delete reach the same facts.
    allergy = next(i for i in items if i.value["content"] == "Allergic to peanuts")
    scripted.script(
        CallTools(
            [
                (
                    "manage_memory",
                    {
                        "content": "Allergic to peanuts and shellfish",
                        "action": "update",
                        "id": allergy.key,
                    },
                )
            ]
        ),
        Reply("Updated."),
    )
    await agent.ainvoke({"messages": [HumanMessage("Also shellfish.")]}, USER)
    updated = await store.aget(("memories", "user-7"), allergy.key)
    assert updated is not None and updated.value["content"] == "Allergic to peanuts and shellfish"
    scripted.script(
        CallTools([("manage_memory", {"action": "delete", "id": allergy.key})]), Reply("Deleted.")
    )
    await agent.ainvoke({"messages": [HumanMessage("Forget my allergies.")]}, USER)
    assert await store.aget(("memories", "user-7"), allergy.key) is None
    # Another user's namespace stays empty.
    assert await store.asearch(("memories", "someone-else")) == []


async def test_langmems_store_manager_extracts_and_updates_memories(
    store: PopagentStore, scripted: ScriptedModelServer
) -> None:
    manager = create_memory_store_manager(
        chat(scripted), namespace=("memories", "{langgraph_user_id}"), store=store
    )
    scripted.script(CallTools([("Memory", {"content": "The user's dog is called Biscuit"})]))
    conversation = [{"role": "user", "content": "My dog Biscuit needs a walk."}]
    written = await manager.ainvoke({"messages": conversation}, USER)
    assert [w["value"]["content"]["content"] for w in written] == [
        "The user's dog is called Biscuit"
    ]
    [item] = await store.asearch(("memories", "user-7"), query="dog Biscuit")
    assert item.value == {
        "kind": "Memory",
        "content": {"content": "The user's dog is called Biscuit"},
    }
    assert item.score is not None

    # A second conversation: the manager searches the store, hands the model the
    # existing memory, and the model's patch updates that item in place.
    request_count = len(scripted.requests)
    # LangMem names an existing memory to the model by this id (its ``_stable_id``).
    stable_id = uuid.uuid5(uuid.NAMESPACE_DNS, str(("memories", "user-7", item.key))).hex
    scripted.script(
        CallTools(
            [
                (
                    "PatchDoc",
                    {
                        "json_doc_id": stable_id,
                        "planned_edits": "add the breed",
                        "patches": [
                            {
                                "op": "replace",
                                "path": "/content",
                                "value": "The user's dog Biscuit is a beagle",
                            }
                        ],
                    },
                )
            ]
        )
    )

    conversation = [{"role": "user", "content": "Biscuit is a beagle, by the way."}]
    written = await manager.ainvoke({"messages": conversation}, USER)
    # The existing memory, found by the manager's search, reached the model.
    assert stable_id in str(scripted.requests[request_count]["messages"])
    assert [w["key"] for w in written] == [item.key]
    [updated] = await store.asearch(("memories", "user-7"))
    assert updated.key == item.key
    assert updated.value["content"] == {"content": "The user's dog Biscuit is a beagle"}
