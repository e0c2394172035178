"""The model layer: a small ``ChatModel`` seam and its OpenAI-compatible client.

The turn pipeline depends only on :mod:`popagent.llm.protocol`;
:class:`OpenAIChatModel` is one implementation, for any server that speaks
the Chat Completions API (OpenAI, vLLM, Ollama, llama.cpp).
"""

from __future__ import annotations

from popagent.llm.openai_client import OpenAIChatModel
from popagent.llm.protocol import (
    ChatMessage,
    ChatModel,
    ChatRole,
    Completion,
    ContentPart,
    FilePart,
    ImagePart,
    ModelError,
    TextCallback,
    ToolCall,
    ToolSpec,
)
from popagent.llm.settings import DEFAULT_BASE_URL, ModelSettings

__all__ = [
    "DEFAULT_BASE_URL",
    "ChatMessage",
    "ChatModel",
    "ChatRole",
    "Completion",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "ModelError",
    "ModelSettings",
    "OpenAIChatModel",
    "TextCallback",
    "ToolCall",
    "ToolSpec",
]
