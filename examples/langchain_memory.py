"""LangChain core with popagent memory: remember/recall tools and a retriever over recall.

Runs offline: ``python examples/langchain_memory.py`` starts an embedded PostgreSQL in a
temporary folder (removed at the end), and the "model" is langchain_core's
``GenericFakeChatModel`` answering from a script, so no API key or network is needed.
Swap in a real chat model (``ChatOpenAI(...).bind_tools(tools)``) to use it.

What it shows:
- ``memory_tools``: ``remember`` and ``recall`` as LangChain tools, acting for one
  resource fixed here (a ``resource_id`` argument from the model is refused);
- a credential given to ``remember`` comes back as a refusal the model can read;
- ``PopagentRetriever``: a ``BaseRetriever`` whose documents are popagent's recall
  results, with the score and its components in the metadata, used in a small chain.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda

import popagent
from popagent.adapters.langchain import PopagentRetriever, memory_tools
from popagent.models import MemoryFilter

RESOURCE = "reader-7"


def call(name: str, **args: Any) -> AIMessage:
    """An assistant message calling one tool."""
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}],
    )


async def tool_loop(
    model: GenericFakeChatModel, tools: list[Any], prompt: str
) -> list[BaseMessage]:
    """The plain LangChain tool-calling loop: call the model, run its tool calls, repeat."""
    by_name = {t.name: t for t in tools}
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    for _round in range(8):  # bounded, as every agent loop should be
        answer = await model.ainvoke(messages)
        messages.append(answer)
        if not isinstance(answer, AIMessage) or not answer.tool_calls:
            break
        for tool_call in answer.tool_calls:
            messages.append(await by_name[tool_call["name"]].ainvoke(tool_call))
    return messages


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="popagent-langchain-") as folder:
        async with popagent.connect(data_dir=folder) as app:
            tools = memory_tools(app, RESOURCE)
            model = GenericFakeChatModel(
                messages=iter(
                    [
                        call("remember", content="Reads sci-fi", resource_id="someone-else"),
                        call(
                            "remember",
                            content="Loves Ursula K. Le Guin's novels",
                            key="books.author",
                        ),
                        call("remember", content="My library password is Tr0ub4dor&3"),
                        call("recall", query="which author does the reader love?"),
                        AIMessage(content="You love Le Guin."),
                    ]
                )
            )
            messages = await tool_loop(model, tools, "I love Le Guin; what should I read next?")
            tool_results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
            for text in tool_results:
                print(f"tool: {text}")

            # The retriever in a small chain: recalled memories become the prompt's context.
            retriever = PopagentRetriever.of(app, RESOURCE, k=3)
            docs = await retriever.ainvoke("Le Guin novels")
            for doc in docs:
                print(f"doc: {doc.page_content!r} score={doc.metadata['score']:.3f}")
            prompt = ChatPromptTemplate.from_messages(
                [("system", "Known about the reader:\n{context}"), ("human", "{question}")]
            )
            chain = {
                "context": retriever
                | RunnableLambda(lambda ds: "\n".join(d.page_content for d in ds)),
                "question": RunnableLambda(lambda q: q),
            } | prompt
            rendered = await chain.ainvoke("Le Guin novels")
            return {
                "stored": any(
                    f.key == "books.author"
                    for f in await app.memory.list(RESOURCE, MemoryFilter(kind="fact"))
                ),
                "refused_resource": tool_results[0].startswith("Refused"),
                "refused_credential": tool_results[2].startswith("Refused, nothing was stored"),
                "recalled": "Le Guin" in tool_results[3],
                "documents": [d.page_content for d in docs],
                "prompt_has_context": "Le Guin" in rendered.to_messages()[0].content,
                "other_resource_facts": len(
                    await app.memory.list("someone-else", MemoryFilter(kind="fact"))
                ),
            }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
