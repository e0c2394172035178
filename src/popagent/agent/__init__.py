"""The agent layer: the turn pipeline, its tools, hooks and audit trail.

::

    agent = app.agent(OpenAIChatModel(settings), secrets=secrets)  # app: popagent.connect()'s
    result = await agent.run_turn("popagent-user", "session-1", "I prefer dark mode")

Imports point downward: this package uses ``memory``, ``observe``, ``threads``,
``secrets`` and ``llm``, never ``store`` (the database is reached through
``threads``); nothing below it imports it.
"""

from .audit import AuditHook, AuditLog
from .builder import build_agent
from .guidance import SUPERVISOR_GUIDANCE
from .history import HistoryRequest, HistorySource, RecentMessages, to_chat_messages
from .hooks import (
    Hook,
    HookSet,
    ModelCallEnd,
    ModelCallStart,
    ToolCallEnd,
    ToolCallStart,
)
from .observational import OBSERVATIONS_LABEL, ObservationalHistory, ReadHistoryTool
from .remember import RememberTool
from .runner import ToolRunner
from .scrubber import SecretScrubber
from .tools import ConditionalTool, Tool, ToolContext, ToolOutcome, check_arguments
from .turn import Agent, ToolCallRecord, TurnResult, TurnTimings

__all__ = [
    "OBSERVATIONS_LABEL",
    "SUPERVISOR_GUIDANCE",
    "Agent",
    "AuditHook",
    "AuditLog",
    "ConditionalTool",
    "HistoryRequest",
    "HistorySource",
    "Hook",
    "HookSet",
    "ModelCallEnd",
    "ModelCallStart",
    "ObservationalHistory",
    "ReadHistoryTool",
    "RecentMessages",
    "RememberTool",
    "SecretScrubber",
    "Tool",
    "ToolCallEnd",
    "ToolCallRecord",
    "ToolCallStart",
    "ToolContext",
    "ToolOutcome",
    "ToolRunner",
    "TurnResult",
    "TurnTimings",
    "build_agent",
    "check_arguments",
    "to_chat_messages",
]
