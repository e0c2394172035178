"""``popagent.adapters.pydantic_ai``: the memory toolset and the recall history
processor, driven by Pydantic AI's real ``Agent``.

Two models: ``OpenAIChatModel`` against the suite's scripted Chat Completions
server (real HTTP on 127.0.0.1), and Pydantic AI's own ``FunctionModel``, which
hands the test the exact ``ModelMessage`` list of each request. Facts live in the
suite's PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import popagent
from popagent import Popagent
from popagent.adapters.backend import LocalBackend
from popagent.adapters.pydantic_ai import RecallProcessor, memory_capabilities, memory_toolset
from popagent.agent import AuditLog
from popagent.memory.render import HEADER
from popagent.models import MemoryFilter
from tests.adapter_support import assert_import_hint, run_example
from tests.agent_support import audit_text, tool_results
from tests.scripted_model import CallTools, Reply, ScriptedModelServer
from tests.web_support import count_rows

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"


def scripted_model(scripted: ScriptedModelServer) -> OpenAIChatModel:
    provider = OpenAIProvider(base_url=scripted.base_url, api_key="scripted")
    return OpenAIChatModel("scripted-1", provider=provider)


class Recorder:
    """A ``FunctionModel`` function: answers from a script, keeps every request's messages."""

    def __init__(self, *steps: ModelResponse) -> None:
        self.steps = list(steps)
        self.requests: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        return self.steps.pop(0)


def call(name: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c-{name}-{len(args)}")])


def text(value: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(value)])


def returns(messages: list[ModelMessage]) -> list[str]:
    return [
        str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]


def blocks(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, SystemPromptPart) and p.content.startswith(HEADER)
    ]


async def test_toolset_over_http(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        CallTools([("remember", {"content": "Prefers dark mode", "key": "ui.theme"})]),
        Reply("Noted."),
    )
    agent = Agent(
        scripted_model(scripted), toolsets=[memory_toolset(root, resource, session_id="p-1")]
    )
    result = await agent.run("I like dark mode.")
    assert result.output == "Noted."
    assert tool_results(scripted.requests[1])[0].startswith("Stored: created fact #")
    tools = {
        t["function"]["name"]: t["function"]["parameters"] for t in scripted.requests[0]["tools"]
    }
    assert set(tools) == {"remember", "recall"}
    assert "resource" not in json.dumps(tools)
    facts = await memory.list(resource, MemoryFilter(kind="fact"))
    assert [(f.key, f.content, f.session_id) for f in facts] == [
        ("ui.theme", "Prefers dark mode", "p-1")
    ]


async def test_processor_puts_the_labelled_block_first(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Prefers dark mode in every app", key="ui.theme")
    model = Recorder(call("recall", {"query": "theme"}), text("Dark."), text("Still dark."))
    agent = Agent(
        FunctionModel(model),
        instructions="Be brief.",
        capabilities=memory_capabilities(root, resource),
    )
    result = await agent.run("Which theme do I like in every app?")
    first = model.requests[0][0]
    assert isinstance(first, ModelRequest)
    assert isinstance(first.parts[0], SystemPromptPart)
    assert first.parts[0].content.startswith(HEADER)
    assert "Prefers dark mode in every app" in first.parts[0].content
    # The tool round's request: the block again, once, still first.
    assert len(blocks(model.requests[1])) == 1 and blocks(model.requests[1]) == blocks(
        model.requests[1][:1]
    )
    assert returns(model.requests[1])[0].startswith(HEADER)
    # A later run over this run's history replaces the block rather than stacking it.
    await agent.run("Which theme in every app on my phone?", message_history=result.all_messages())
    assert len(blocks(model.requests[2])) == 1
    assert blocks(model.requests[2][:1]) == blocks(model.requests[2])


@pytest.mark.parametrize("instructions", [None, "Be brief."])
async def test_a_block_from_an_earlier_run_is_never_sent_again(
    database_url: str, resource: str, instructions: str | None
) -> None:
    """Pydantic AI merges the block's request into the first user request, so the
    history of a run holds it inside that request; the next run must not stack it.

    Lexical recall (no embedder), so which facts are relevant to each prompt is
    decided by their words alone, whenever the background vector writer runs."""
    async with popagent.connect(database_url, embedder=None) as root:
        memory = root.memory
        await memory.remember(resource, "Prefers dark mode in every app", key="ui.theme")
        await memory.remember(resource, "Drinks green tea at breakfast", key="drink")
        model = Recorder(text("Dark."), text("Tea."), text("Hello."))
        agent = Agent(
            FunctionModel(model),
            instructions=instructions,
            capabilities=[ProcessHistory(RecallProcessor(root, resource))],
        )
        first = await agent.run("Which theme do I like in every app?")
        assert len(blocks(first.all_messages())) == 1
        second = await agent.run(
            "What do I drink at breakfast?", message_history=first.all_messages()
        )
        sent = blocks(model.requests[1])
        assert len(sent) == 1 and "green tea" in sent[0]  # this request's block, once
        assert len(blocks(second.all_messages())) == 1
        # Nothing relevant now: no block at all, not the stale one.
        await agent.run("Hello there", message_history=second.all_messages())
        assert blocks(model.requests[2]) == []


async def test_processor_over_http_sends_the_block_as_the_first_message(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, scripted: ScriptedModelServer
) -> None:
    await memory.remember(resource, "Allergic to peanuts", importance=0.9)
    scripted.script(Reply("No peanuts, then."))
    agent = Agent(
        scripted_model(scripted),
        instructions="Be brief.",
        capabilities=[ProcessHistory(RecallProcessor(root, resource))],
    )
    await agent.run("Any peanuts allergy I told you about?")
    first, second, *_ = scripted.requests[0]["messages"]
    assert first["role"] == "system" and first["content"].startswith(HEADER)
    assert "Allergic to peanuts" in first["content"]
    assert second == {"role": "system", "content": "Be brief."}  # ahead of the instructions


async def test_no_memories_no_block(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    model = Recorder(text("hi"))
    agent = Agent(
        FunctionModel(model), capabilities=[ProcessHistory(RecallProcessor(root, resource))]
    )
    await agent.run("hello there")
    assert blocks(model.requests[0]) == []


async def test_the_resource_is_fixed_and_credentials_are_refused(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    model = Recorder(
        call("remember", {"content": "Likes tea", "resource_id": other_resource}),
        call("recall", {"query": "tea", "resource_id": other_resource}),
        call("remember", {"content": f"My OpenAI API key is {KEY}"}),
        text("done"),
    )
    agent = Agent(FunctionModel(model), toolsets=[memory_toolset(LocalBackend(root, resource))])
    await agent.run("hi")
    seen = returns(model.requests[-1])
    assert seen[0].startswith("Refused, nothing was done: unknown argument 'resource_id'")
    assert seen[1].startswith("Refused, nothing was done: unknown argument 'resource_id'")
    assert seen[2].startswith("Refused, nothing was stored:") and "sk-proj" not in seen[2]
    assert await count_rows(memory, resource) == 0
    assert await count_rows(memory, other_resource) == 0
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert [r.outcome for r in reversed(rows) if r.hook == "after_tool_call"] == ["refused"] * 3


async def test_calls_are_audited_without_content(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    model = Recorder(call("remember", {"content": "Owns a red bicycle"}), text("ok"))
    agent = Agent(
        FunctionModel(model), toolsets=[memory_toolset(root, resource, session_id="bike")]
    )
    await agent.run("remember my bicycle")
    rows = await AuditLog(memory.pool).list_audit(resource)
    assert sorted((r.hook, r.tool, r.outcome, r.session_id) for r in rows) == [
        ("after_tool_call", "remember", "ok", "bike"),
        ("before_tool_call", "remember", None, "bike"),
    ]
    assert "bicycle" not in await audit_text(memory, resource)


# --- packaging and the example -----------------------------------------------------------------


def test_without_pydantic_ai_the_import_error_says_what_to_install() -> None:
    assert_import_hint(
        ["pydantic_ai"],
        "popagent.adapters.pydantic_ai",
        "pydantic-ai",
        prelude="import popagent, popagent.adapters.backend, popagent.adapters.tool_calls\n"
        "assert 'pydantic_ai' not in sys.modules and 'agents' not in sys.modules\n",
    )


def test_example_runs_offline(tmp_path: Path) -> None:
    summary = run_example("pydantic_ai_memory.py", tmp_path)
    assert summary == {
        "stored": True,
        "first_message_is_the_block": True,
        "block_recalls_the_fact": True,
        "refused_credential": True,
        "refused_resource": True,
    }
