"""A scripted chat model for the LangChain and LangGraph adapter tests.

``ScriptedChatModel`` is langchain_core's own ``GenericFakeChatModel`` (it answers
each call with the next scripted ``AIMessage``, tool calls included) with
``bind_tools`` accepted, which ``create_react_agent`` needs; no network, and an
exhausted script raises ``StopIteration`` inside the model call, so an
unexpected extra model call fails the test.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from langgraph.warnings import LangGraphDeprecatedSinceV10

__all__ = ["ScriptedChatModel", "calls", "react_agent", "reply", "script", "tool_messages"]


class ScriptedChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts ``bind_tools`` (the script decides the calls)."""

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self


def calls(*pairs: tuple[str, dict[str, Any]]) -> AIMessage:
    """An assistant message calling the tools ``[(name, args), ...]``."""
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}
            for name, args in pairs
        ],
    )


def reply(text: str) -> AIMessage:
    return AIMessage(content=text)


def script(*messages: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(messages))


def react_agent(
    model: ScriptedChatModel, tools: Sequence[BaseTool], *, store: BaseStore | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``langgraph.prebuilt.create_react_agent`` (deprecated in LangGraph 1.x in favour of
    ``langchain.agents.create_agent``, which lives in the ``langchain`` package, not
    installed here; the prebuilt one is what LangGraph itself ships)."""
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        return create_react_agent(model, list(tools), store=store)


def tool_messages(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]
