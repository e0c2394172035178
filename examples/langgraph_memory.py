"""LangGraph with popagent memory: a ReAct agent with popagent's tools and store.

Runs offline: ``python examples/langgraph_memory.py`` starts an embedded PostgreSQL in
a temporary folder (removed at the end), and the "model" is langchain_core's
``GenericFakeChatModel`` answering from a script, so no API key or network is needed.
Swap in a real chat model (``ChatOpenAI(...)``) and a real resource to use it.

What it shows:
- ``PopagentStore``: LangGraph's ``BaseStore`` on popagent facts of one resource;
  ``asearch(query=...)`` is popagent's recall, with its scores;
- ``memory_tools``: ``remember`` and ``recall`` for ``create_react_agent``, acting for
  the store's resource only (a ``resource_id`` argument from the model is refused);
- a credential given to ``remember`` comes back as a refusal the model can read.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
import warnings
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import popagent
from popagent.adapters.langgraph import PopagentStore, memory_tools
from popagent.models import MemoryFilter

RESOURCE = "traveller-1"


class ScriptedModel(GenericFakeChatModel):
    """The fake chat model of langchain_core; ``bind_tools`` is a no-op (the script calls them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self


def call(name: str, **args: Any) -> AIMessage:
    """An assistant message calling one tool."""
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}],
    )


def react_agent(model: ScriptedModel, tools: list[Any], store: PopagentStore) -> Any:
    # LangGraph 1.x marks the prebuilt agent as moved to ``langchain.agents.create_agent``
    # (the ``langchain`` package); the prebuilt one still ships with LangGraph.
    from langgraph.prebuilt import create_react_agent
    from langgraph.warnings import LangGraphDeprecatedSinceV10

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        return create_react_agent(model, tools, store=store)


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="popagent-langgraph-") as folder:
        async with popagent.connect(data_dir=folder) as app:
            # The store, used directly: namespaced items, exact round trips, recall search.
            store = PopagentStore(app, RESOURCE)
            await store.aput(("prefs",), "seat", {"text": "Prefers aisle seats on short flights"})
            item = await store.aget(("prefs",), "seat")
            hits = await store.asearch(("prefs",), query="which seat on a short flight?")
            for hit in hits:
                print(f"search: {hit.namespace} {hit.key} score={hit.score:.3f} {hit.value}")

            # The agent: the model's tool calls are scripted.
            model = ScriptedModel(
                messages=iter(
                    [
                        call("remember", content="Vegetarian", resource_id="someone-else"),
                        call("remember", content="Is vegetarian", key="food.diet"),
                        call("remember", content="My card is 4111 1111 1111 1111"),
                        call("recall", query="is the traveller vegetarian?"),
                        AIMessage(content="Noted: vegetarian meals, aisle seat."),
                    ]
                )
            )
            agent = react_agent(model, memory_tools(store.backend), store)
            result = await agent.ainvoke(
                {"messages": [HumanMessage("I'm vegetarian; book my usual seat.")]},
                {"configurable": {"thread_id": "booking-1"}},
            )
            tool_results = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
            for text in tool_results:
                print(f"tool: {text}")
            print(f"agent: {result['messages'][-1].content}")
            facts = await app.memory.list(RESOURCE, MemoryFilter(kind="fact"))
            return {
                "store_item": item.value if item else None,
                "search_keys": [hit.key for hit in hits],
                "stored": any(f.key == "food.diet" for f in facts),
                "refused_credential": str(tool_results[2]).startswith(
                    "Refused, nothing was stored"
                ),
                "other_resource_facts": len(
                    await app.memory.list("someone-else", MemoryFilter(kind="fact"))
                ),
            }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
