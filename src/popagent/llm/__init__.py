"""The model layer: a small ``ChatModel`` seam and its OpenAI-compatible client.

The turn pipeline depends only on :mod:`popagent.llm.protocol`;
:class:`OpenAIChatModel` is one implementation, for any server that speaks
the Chat Completions API (OpenAI, vLLM, Ollama, llama.cpp).
"""

from __future__ import annotations

from popagent.llm import protocol as _protocol
from popagent.llm.openai_client import OpenAIChatModel

# The whole seam, exactly ``protocol.__all__``: a name added there is exported here.
from popagent.llm.protocol import *  # noqa: F403
from popagent.llm.settings import DEFAULT_BASE_URL, ModelSettings

__all__ = [
    *_protocol.__all__,
    "DEFAULT_BASE_URL",
    "ModelSettings",
    "OpenAIChatModel",
]
