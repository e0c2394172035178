"""Pydantic AI with popagent memory: the memory toolset, and recalled memories put in
front of the model's messages by a history processor.

Runs offline: ``python examples/pydantic_ai_memory.py`` starts an embedded
PostgreSQL in a temporary folder (removed at the end), and the model is popagent's
scripted Chat Completions server (``tests/scripted_model.py``) on 127.0.0.1,
reached by Pydantic AI's own ``OpenAIChatModel`` over real HTTP, so no API key or
network is needed. For a real model, give ``OpenAIProvider`` your endpoint and key
and drop the script.

What it shows:
- ``memory_capabilities``: the ``remember``/``recall`` toolset and the
  ``RecallProcessor`` in one list for ``Agent(capabilities=...)``;
- the first run stores a preference; a second run, with no shared history, gets
  popagent's labelled block ("Relevant long-term memories ...") as its first message;
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

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import popagent
from popagent import HEADER
from popagent.adapters.pydantic_ai import memory_capabilities
from popagent.models import MemoryFilter

# The scripted model server lives with popagent's tests (standard library only).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.scripted_model import CallTools, Reply, ScriptedModelServer

RESOURCE = "cook-1"


async def main() -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="popagent-pydantic-ai-") as folder,
        ScriptedModelServer() as server,
    ):
        provider = OpenAIProvider(base_url=server.base_url, api_key="offline")
        model = OpenAIChatModel("scripted", provider=provider)
        async with popagent.connect(data_dir=folder) as app:
            agent = Agent(
                model,
                instructions="Remember lasting preferences; use what you recall.",
                capabilities=memory_capabilities(app, RESOURCE, session_id="kitchen"),
            )

            # Run 1: the model stores a fact (and tries two things it may not).
            server.script(
                CallTools(
                    [
                        ("remember", {"content": "Is vegetarian", "key": "food.diet"}),
                        ("remember", {"content": "Likes tea", "resource_id": "someone-else"}),
                        ("remember", {"content": "My card is 4111 1111 1111 1111"}),
                    ]
                ),
                Reply("Noted: vegetarian."),
            )
            result = await agent.run("I'm vegetarian, by the way.")
            print(f"run 1: {result.output}")
            outputs = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
            for text in outputs:
                print(f"tool: {text}")

            # Run 2, a new conversation: the processor puts the recalled block first.
            server.script(Reply("A mushroom risotto."))
            result = await agent.run("What should I cook tonight as a vegetarian?")
            first = server.requests[2]["messages"][0]
            print(f"first message ({first['role']}):\n{first['content']}")
            print(f"run 2: {result.output}")

            facts = await app.memory.list(RESOURCE, MemoryFilter(kind="fact"))
            return {
                "stored": [f.key for f in facts] == ["food.diet"],
                "first_message_is_the_block": first["role"] == "system"
                and first["content"].startswith(HEADER),
                "block_recalls_the_fact": "Is vegetarian" in first["content"],
                "refused_credential": outputs[2].startswith("Refused, nothing was stored"),
                "refused_resource": outputs[1].startswith("Refused")
                and not await app.memory.list("someone-else", MemoryFilter(kind="fact")),
            }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
