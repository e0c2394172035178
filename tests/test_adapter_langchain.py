"""``popagent.adapters.langchain``: the tools and the retriever against real LangChain core.

Everything runs on the suite's PostgreSQL; the "model" is langchain_core's own
``GenericFakeChatModel`` emitting scripted tool calls (``tests/langchain_support.py``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

import popagent
from popagent import Popagent
from popagent.adapters.backend import LocalBackend
from popagent.adapters.langchain import PopagentRetriever, memory_tools
from popagent.agent import AuditLog
from popagent.models import MemoryFilter
from tests.adapter_support import assert_import_hint, run_example
from tests.agent_support import audit_text
from tests.langchain_support import ScriptedChatModel, calls, reply, script

SECRET = "My OpenAI API key is sk-proj-abcdefghijklmnopqrstuvwxyz123456"


def by_name(tools: list[BaseTool]) -> dict[str, BaseTool]:
    return {t.name: t for t in tools}


async def tool_loop(model: ScriptedChatModel, tools: list[BaseTool]) -> list[BaseMessage]:
    """LangChain's plain tool-calling loop, bounded."""
    named = by_name(tools)
    messages: list[BaseMessage] = [HumanMessage("hello")]
    for _round in range(10):
        answer = await model.ainvoke(messages)
        messages.append(answer)
        if not isinstance(answer, AIMessage) or not answer.tool_calls:
            return messages
        for tool_call in answer.tool_calls:
            messages.append(await named[tool_call["name"]].ainvoke(tool_call))
    raise AssertionError("the scripted model never stopped calling tools")


def results(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


async def test_tools_offer_no_resource_and_use_popagents_schemas(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    tools = by_name(memory_tools(root, resource))
    assert list(tools) == ["remember", "recall"]
    for tool in tools.values():
        schema = convert_to_openai_tool(tool)["function"]["parameters"]
        assert schema["additionalProperties"] is False
        assert not any("resource" in name for name in schema["properties"])
    assert set(tools["remember"].args) >= {"content", "key", "importance"}
    assert set(tools["recall"].args) == {"query", "limit"}


async def test_a_model_remembers_and_recalls_through_the_tools(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    model = script(
        calls(("remember", {"content": "Prefers tea over coffee", "key": "drink"})),
        calls(("remember", {"content": "Prefers green tea over coffee", "key": "drink"})),
        calls(("recall", {"query": "tea or coffee?", "limit": 3})),
        reply("Green tea it is."),
    )
    messages = await tool_loop(model, memory_tools(LocalBackend(root, resource)))
    texts = results(messages)
    assert texts[0].startswith("Stored: created fact #") and "'drink'" in texts[0]
    assert texts[1].startswith("Stored: updated fact #")
    assert "Prefers green tea over coffee" in texts[2]
    assert messages[-1].content == "Green tea it is."
    [fact] = await memory.list(resource, MemoryFilter(kind="fact"))
    assert (fact.key, fact.content) == ("drink", "Prefers green tea over coffee")
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []


async def test_a_resource_argument_is_refused_and_changes_nothing(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    model = script(
        calls(("remember", {"content": "Lives in Ghent", "resource_id": other_resource})),
        calls(("recall", {"query": "where does the user live?", "resource": other_resource})),
        calls(("remember", {"content": "Lives in Ghent", "importance": 2})),
        reply("ok"),
    )
    texts = results(await tool_loop(model, memory_tools(root, resource)))
    assert texts[0].startswith("Refused, nothing was done: unknown argument 'resource_id'")
    assert texts[1].startswith("Refused, nothing was done: unknown argument 'resource'")
    assert texts[2].startswith("Refused, nothing was done: argument 'importance'")
    assert other_resource not in "".join(texts)
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []
    rows = await AuditLog(memory.pool).list_audit(resource)
    after = [
        (r.tool, r.outcome, r.error_type) for r in reversed(rows) if r.hook == "after_tool_call"
    ]
    assert after == [
        ("remember", "refused", "InvalidArguments"),
        ("recall", "refused", "InvalidArguments"),
        ("remember", "refused", "InvalidArguments"),
    ]
    assert await AuditLog(memory.pool).list_audit(other_resource) == []


async def test_a_credential_is_a_refusal_the_model_reads(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    model = script(calls(("remember", {"content": SECRET})), reply("I can't keep that."))
    messages = await tool_loop(model, memory_tools(root, resource))
    [refusal] = results(messages)
    assert refusal.startswith(
        "Refused, nothing was stored: content: looks like it contains a credential"
    )
    assert "sk-proj" not in refusal
    assert messages[-1].content == "I can't keep that."
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    text = await audit_text(memory, resource)
    assert "SecretRefusedError" in text and "sk-proj" not in text and "OpenAI" not in text


async def test_tool_calls_are_audited_without_content(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    tools = by_name(memory_tools(root, resource, session_id="kitchen"))
    await tools["remember"].ainvoke({"content": "Grows basil on the balcony"})
    await tools["recall"].ainvoke(
        {"query": "what grows on the balcony?"}, {"configurable": {"thread_id": "garden"}}
    )
    rows = list(reversed(await AuditLog(memory.pool).list_audit(resource)))
    assert [(r.hook, r.tool, r.session_id) for r in rows] == [
        ("before_tool_call", "remember", "kitchen"),
        ("after_tool_call", "remember", "kitchen"),
        ("before_tool_call", "recall", "garden"),
        ("after_tool_call", "recall", "garden"),
    ]
    assert rows[1].argument_names == ("content",) and rows[1].outcome == "ok"
    assert rows[3].output_chars is not None and rows[3].output_chars > 0
    text = await audit_text(memory, resource)
    assert "basil" not in text and "balcony" not in text
    [fact] = await memory.list(resource, MemoryFilter(kind="fact"))
    assert fact.session_id == "kitchen"


async def test_no_hooks_means_no_audit_rows(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    tools = by_name(memory_tools(root, resource, hooks=[]))
    await tools["remember"].ainvoke({"content": "Plays the cello"})
    assert await AuditLog(memory.pool).list_audit(resource) == []
    assert len(await memory.list(resource, MemoryFilter(kind="fact"))) == 1


async def test_sync_tools_from_a_worker_thread(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    tools = by_name(memory_tools(root, resource))
    stored = await asyncio.to_thread(tools["remember"].invoke, {"content": "Runs on Sundays"})
    assert str(stored).startswith("Stored: created")
    found = await asyncio.to_thread(tools["recall"].invoke, {"query": "when does the user run?"})
    assert "Runs on Sundays" in str(found)
    with pytest.raises(RuntimeError, match="ainvoke"):
        tools["recall"].invoke({"query": "on the loop's own thread"})


async def test_the_retriever_returns_recall_results_as_documents(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    await memory.remember(resource, "Keeps bees in the garden", key="hobby.bees")
    await memory.remember(resource, "Sells honey at the Saturday market")
    await memory.remember(other_resource, "Keeps bees too, in another resource")
    # Vectors are written in the background: both recalls must see the same ones.
    assert await memory.wait_for_vectors(resource) == 0
    expected = await memory.recall(resource, "bees honey", limit=2, touch=False)
    retriever = PopagentRetriever.of(root, resource, k=2)
    docs = await retriever.ainvoke("bees honey")
    assert all(isinstance(d, Document) for d in docs)
    assert [d.id for d in docs] == [str(r.memory.id) for r in expected]
    assert [d.page_content for d in docs] == [r.memory.content for r in expected]
    for doc, result in zip(docs, expected, strict=True):
        assert doc.metadata["score"] == pytest.approx(result.score, abs=1e-6)
        assert doc.metadata["kind"] == "fact"
        assert set(doc.metadata["components"]) == {c.name for c in result.components}
        assert sum(doc.metadata["components"].values()) == pytest.approx(doc.metadata["score"])
    assert (
        docs[[d.page_content for d in docs].index("Keeps bees in the garden")].metadata["key"]
        == "hobby.bees"
    )
    assert "another resource" not in " ".join(d.page_content for d in docs)
    # Sync, from a worker thread; and the query is audited, without its text.
    sync_docs = await asyncio.to_thread(retriever.invoke, "bees honey")
    assert [d.id for d in sync_docs] == [d.id for d in docs]
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert [r.tool for r in rows if r.hook == "after_tool_call"] == ["retrieve", "retrieve"]
    assert "honey" not in await audit_text(memory, resource)


async def test_the_retriever_refuses_a_blank_query(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    retriever = PopagentRetriever.of(root, resource)
    with pytest.raises(popagent.ValidationError, match="query"):
        await retriever.ainvoke("   ")
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert [(r.tool, r.outcome) for r in rows if r.hook == "after_tool_call"] == [
        ("retrieve", "refused")
    ]


async def test_construction_needs_a_fixed_resource(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    with pytest.raises(TypeError, match="resource_id"):
        memory_tools(root)
    with pytest.raises(TypeError, match="resource_id"):
        memory_tools(LocalBackend(root, resource), resource)
    with pytest.raises(TypeError, match="MemoryBackend"):
        memory_tools("not a backend")  # type: ignore[arg-type]
    with pytest.raises(popagent.ValidationError, match="resource_id"):
        PopagentRetriever.of(root, "")


# --- packaging and the example ----------------------------------------------------------------


def test_without_langchain_core_the_import_error_says_what_to_install() -> None:
    assert_import_hint(["langchain_core"], "popagent.adapters.langchain", "langchain")


def test_example_runs_offline(tmp_path: Path) -> None:
    summary = run_example("langchain_memory.py", tmp_path)
    assert summary == {
        "stored": True,
        "refused_resource": True,
        "refused_credential": True,
        "recalled": True,
        "documents": ["Loves Ursula K. Le Guin's novels"],
        "prompt_has_context": True,
        "other_resource_facts": 0,
    }


async def test_a_models_expiry_and_the_adapters_origin_are_recorded(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    tools = by_name(memory_tools(root, resource))
    ahead = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    stored = await tools["remember"].ainvoke(
        {"content": "In Lisbon until Friday", "key": "trip.city", "expires_at": ahead}
    )
    assert "Stored: created" in str(stored) and "expiring" in str(stored)
    [fact] = await memory.list(resource, MemoryFilter(kind="fact", key="trip.city"))
    assert fact.origin == "langchain"
    assert fact.expires_at == datetime.fromisoformat(ahead)
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    refused = await tools["remember"].ainvoke(
        {"content": "In Porto last week", "key": "trip.past", "expires_at": past}
    )
    assert str(refused).startswith("Refused") and "expires_at" in str(refused)
    assert await memory.list(resource, MemoryFilter(kind="fact", key="trip.past")) == []


async def test_the_retriever_takes_k_per_call(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    """langchain-tests' ``test_invoke_with_k_kwarg``: ``invoke(query, k=n)`` gives ``n``."""
    for n in range(5):
        await memory.remember(resource, f"Keeps bees number {n} in the garden")
    retriever = PopagentRetriever.of(root, resource, k=4)
    assert len(await retriever.ainvoke("bees garden")) == 4
    assert len(await retriever.ainvoke("bees garden", k=1)) == 1
    assert len(await asyncio.to_thread(retriever.invoke, "bees garden", k=2)) == 2
    assert len(await retriever.ainvoke("bees garden")) == 4  # the default is unchanged
    with pytest.raises(popagent.ValidationError, match="k"):
        await retriever.ainvoke("bees garden", k=0)


async def test_sync_calls_on_the_loop_thread_raise_invalid_state(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    tools = by_name(memory_tools(root, resource))
    retriever = PopagentRetriever.of(root, resource)
    with pytest.raises(asyncio.InvalidStateError, match="ainvoke"):
        tools["recall"].invoke({"query": "on the loop's own thread"})
    with pytest.raises(asyncio.InvalidStateError, match="ainvoke"):
        retriever.invoke("on the loop's own thread")
