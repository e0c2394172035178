"""The OpenAI Agents SDK with popagent memory: a session on popagent threads, and
``remember``/``recall`` tools, so an agent remembers across sessions.

Runs offline: ``python examples/openai_agents_memory.py`` starts an embedded
PostgreSQL in a temporary folder (removed at the end), and the model is popagent's
scripted Chat Completions server (``tests/scripted_model.py``) on 127.0.0.1,
reached by the SDK's own ``OpenAIChatCompletionsModel`` over real HTTP, so no API
key or network is needed. For a real model, point ``AsyncOpenAI`` at your endpoint
and drop the script.

What it shows:
- ``PopagentSession``: the SDK keeps the run's items (the user's message, the
  function call, its output, the reply) in the popagent session ``trip-1``;
- ``memory_tools``: what the agent remembers in ``trip-1`` it recalls in ``trip-2``;
- a ``resource_id`` argument from the model is refused (the resource is fixed by
  the application), and so is a credential given to ``remember``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from openai import AsyncOpenAI

import popagent
from popagent.adapters.openai_agents import PopagentSession, memory_tools
from popagent.models import MemoryFilter

# The scripted model server lives with popagent's tests (standard library only).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.scripted_model import CallTools, Reply, ScriptedModelServer

RESOURCE = "traveller-1"


def agent(model: OpenAIChatCompletionsModel, tools: list[Any]) -> Agent[Any]:
    return Agent(
        name="travel assistant",
        instructions="Remember lasting preferences; recall them before answering.",
        model=model,
        tools=tools,
    )


async def main() -> dict[str, Any]:
    run_config = RunConfig(tracing_disabled=True)  # offline: no trace export
    with (
        tempfile.TemporaryDirectory(prefix="popagent-agents-") as folder,
        ScriptedModelServer() as server,
    ):
        client = AsyncOpenAI(base_url=server.base_url, api_key="offline", max_retries=0)
        model = OpenAIChatCompletionsModel(model="scripted", openai_client=client)
        async with popagent.connect(data_dir=folder) as app:
            # Session 1: the model remembers a preference (and tries two things it may not).
            server.script(
                CallTools(
                    [
                        ("remember", {"content": "Prefers aisle seats", "key": "travel.seat"}),
                        ("remember", {"content": "Vegetarian", "resource_id": "someone-else"}),
                        ("remember", {"content": "My card is 4111 1111 1111 1111"}),
                    ]
                ),
                Reply("Noted: aisle seats."),
            )
            first = PopagentSession.local("trip-1", app, RESOURCE)
            tools = memory_tools(app, RESOURCE, session_id="trip-1")
            result = await Runner.run(
                agent(model, tools),
                "I always sit on the aisle.",
                session=first,
                run_config=run_config,
            )
            print(f"trip-1: {result.final_output}")
            outputs = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
            for text in outputs:
                print(f"tool: {text}")

            # Session 2, a new conversation: the model recalls what session 1 stored.
            server.script(
                CallTools([("recall", {"query": "which seat does the traveller like?"})]),
                Reply("Aisle seat booked."),
            )
            second = PopagentSession.local("trip-2", app, RESOURCE)
            tools = memory_tools(app, RESOURCE, session_id="trip-2")
            result = await Runner.run(
                agent(model, tools), "Book my usual seat.", session=second, run_config=run_config
            )
            recalled = [m["content"] for m in server.requests[3]["messages"] if m["role"] == "tool"]
            print(f"recall: {recalled[0]}")
            print(f"trip-2: {result.final_output}")

            kinds = [item.get("type", "message") for item in await first.get_items()]
            facts = await app.memory.list(RESOURCE, MemoryFilter(kind="fact"))
            return {
                "stored": [f.key for f in facts] == ["travel.seat"],
                "recalled_in_second_session": "Prefers aisle seats" in recalled[0],
                "first_session_items": kinds,
                "refused_credential": outputs[2].startswith("Refused, nothing was stored"),
                "refused_resource": outputs[1].startswith("Refused")
                and not await app.memory.list("someone-else", MemoryFilter(kind="fact")),
            }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
