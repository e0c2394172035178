"""``MemoryServer``: popagent's memory as an MCP server bound to one resource.

It wraps the SDK's low-level ``mcp.server.Server`` (rather than ``MCPServer``,
whose tools are Python signatures) so that the tools keep popagent's exact
JSON Schemas and every call goes through popagent's ``ToolRunner``.

Invariants:
- The resource is the server's configuration (``resource_id``, fixed at
  construction); no tool takes one. A call that passes ``resource_id`` or any
  other unknown argument is refused as a tool error naming the argument, and
  nothing runs. The SDK itself passes unknown arguments through unchecked, so
  this check is ours (``check_arguments`` against the closed schemas).
- Every ``tools/call`` runs through ``ToolRunner`` with this server's hooks
  (by default one ``AuditHook``): the same ``popagent_audit`` rows as a tool
  call inside a turn, without content. The rows are written before the result
  is sent, so a client that reads the audit log after a call finds them.
- In multi-resource mode a call that would add content to a resource at its
  storage quota (``popagent.keys.Limits``) is refused, audited, before it runs.
- Refused and failed calls are MCP tool results with ``isError: true`` and the
  runner's message, never protocol errors: the model reads why.

Audit session IDs: ``mcp-<Mcp-Session-Id>`` for a streamable-HTTP client that
uses MCP sessions; otherwise ``mcp-<uuid>`` drawn once per server, which over
stdio is the one client connection the process serves (and, over HTTP, groups
the sessionless requests of 2026-era clients by server run). The same ID is
the originating ``session_id`` of the facts ``remember`` stores, and every write
records origin ``mcp``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import __version__
from ..agent.audit import AuditHook
from ..agent.hooks import Hook, HookSet
from ..agent.runner import ToolRunner
from ..agent.tools import ToolContext, ToolOutcome
from ..checks import check_id
from ..keys import Limits, Principal
from ..models import Provenance
from ..root import Popagent
from ..store.tenant import bypass, serving
from .episodes import GetEpisodeTool, ListEpisodesTool
from .guidance import SERVER_INSTRUCTIONS
from .shapes import StructuredSlot
from .tools import (
    FactHistoryTool,
    ForgetFactTool,
    ListFactsTool,
    McpRememberTool,
    MemoryTool,
    RecallTool,
    RestoreFactTool,
)

__all__ = ["RESOURCE_HINT", "SERVER_NAME", "SESSION_PREFIX", "MemoryServer", "memory_tools"]

SERVER_NAME = "popagent"
#: Appended to the refusal of a call that tried to choose a resource.
RESOURCE_HINT = (
    " The memory's resource is fixed by the server's configuration "
    "(popagent mcp --resource-id); a tool call cannot choose it."
)
#: The prefix of every audit session ID an MCP server writes.
SESSION_PREFIX = "mcp-"
_MCP_SESSION = re.compile(r"[A-Za-z0-9._~-]{1,200}")
_SESSION_HEADER = "mcp-session-id"
#: What the memories an MCP tool call writes (or deletes) record as their origin.
MCP_PROVENANCE = Provenance(origin="mcp")


def memory_tools(slot: StructuredSlot) -> list[MemoryTool]:
    """The tools of one call, in the order they are listed; those with structured
    output leave it in ``slot``."""
    return [
        McpRememberTool(),
        RecallTool(slot),
        ListFactsTool(slot),
        ForgetFactTool(),
        FactHistoryTool(slot),
        RestoreFactTool(slot),
        ListEpisodesTool(slot),
        GetEpisodeTool(slot),
    ]


def _describe(tool: MemoryTool) -> types.Tool:
    hints = tool.hints
    return types.Tool(
        name=tool.name,
        title=hints.title,
        description=tool.spec.description,
        input_schema=dict(tool.spec.parameters),
        output_schema=hints.output_schema,
        annotations=types.ToolAnnotations(
            title=hints.title,
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=False,
        ),
    )


class MemoryServer:
    """An MCP server over ``app`` (``popagent.connect()``'s) for the one resource
    ``resource_id``.

    ``hooks`` defaults to one ``AuditHook`` on the app's pool; pass ``[]``
    for none. ``lowlevel`` is the SDK server to run on a transport (see
    ``popagent.mcp.transport``).
    """

    def __init__(
        self,
        app: Popagent,
        resource_id: str,
        *,
        hooks: Sequence[Hook] | None = None,
        multi_resource: bool = False,
        limits: Limits | None = None,
    ) -> None:
        self.memory = app.memory
        self.keys = app.keys
        self.resource_id = check_id("resource_id", resource_id)
        #: Over HTTP, each call's resource is the one of the request's API key
        #: (``transport.KeyGate``); ``resource_id`` is then unused.
        self.multi_resource = multi_resource
        #: Multi-resource mode: each key's request rate (``transport.KeyGate``) and
        #: each resource's storage quotas (checked here, before a tool that adds content).
        self.limits = limits or Limits()
        self.hooks = HookSet([AuditHook(app.pool)] if hooks is None else hooks)
        self.session_id = f"{SESSION_PREFIX}{uuid.uuid4()}"
        listed = memory_tools(StructuredSlot())
        self._listing = [_describe(tool) for tool in listed]
        self._schemas = {tool.name: tool.spec.parameters for tool in listed}
        self._read_only = frozenset(tool.name for tool in listed if tool.hints.read_only)
        # Neither read-only nor a deletion: remember, restore_fact.
        self._adds_content = frozenset(
            tool.name for tool in listed if not (tool.hints.read_only or tool.hints.destructive)
        )
        self.lowlevel: Server[Any] = Server(
            SERVER_NAME,
            version=__version__,
            title="popagent memory",
            description="Long-term memory for LLM agents on PostgreSQL.",
            instructions=SERVER_INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=self._schemas.get,
        )

    @property
    def tools(self) -> list[types.Tool]:
        """The tools as ``tools/list`` gives them."""
        return [tool.model_copy(deep=True) for tool in self._listing]

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        session_id: str | None = None,
        principal: Principal | None = None,
    ) -> types.CallToolResult:
        """Run one tool call as ``tools/call`` does (hooks, audit, errors as results).
        With ``principal`` (multi-resource mode), on its resource and within its scope."""
        resource_id = self.resource_id
        if self.multi_resource:
            if principal is None or principal.resource_id is None:
                return _refused("this server needs an API key of a resource")
            if not principal.allows("write") and name not in self._read_only:
                return _refused(f"this key's scope ({principal.scope}) runs read-only tools only")
            resource_id = principal.resource_id
            if name in self._adds_content and self.limits.has_quota:
                keys = self.keys
                # The access audit is a credential table, never the tenant's (store.tenant).
                with bypass("keys"):
                    full = await keys.over_quota(resource_id, self.limits)
                    if full is not None:
                        await keys.audit_refusal(principal, "quota", method="POST", path=name)
                if full is not None:
                    return _refused(full + "; forget facts to make room")
        slot = StructuredSlot()
        runner = ToolRunner(memory_tools(slot), self.hooks)
        ctx = ToolContext(
            resource_id, session_id or self.session_id, self.memory, provenance=MCP_PROVENANCE
        )
        args = dict(arguments or {})
        with serving(resource_id) if self.multi_resource else nullcontext():
            outcome = await runner.call(ctx, name, args)
            # The audit rows are committed before the client hears back.
            await runner.drain()
        return _result(outcome, slot, tried_resource=any("resource" in n.lower() for n in args))

    def tools_for(self, principal: Principal | None) -> list[types.Tool]:
        """The tools ``principal`` may call (multi-resource mode: a read key's are the
        read-only ones, as ``call`` enforces); every tool otherwise."""
        if self.multi_resource and principal is not None and not principal.allows("write"):
            return [tool for tool in self.tools if tool.name in self._read_only]
        return self.tools

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools_for(_principal_of(ctx)))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await self.call(
            params.name,
            params.arguments,
            session_id=self._session_of(ctx),
            principal=_principal_of(ctx),
        )

    def _session_of(self, ctx: ServerRequestContext[Any]) -> str:
        """``mcp-<Mcp-Session-Id>`` for a handshake-era HTTP session, else this server's ID.

        Only the handshake era has MCP sessions (the SDK's session manager admits
        no unknown ID); a 2026-era request's header, if any, is not trusted.
        """
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self.session_id
        headers = getattr(ctx.request, "headers", None)
        value = headers.get(_SESSION_HEADER) if isinstance(headers, Mapping) else None
        if isinstance(value, str) and _MCP_SESSION.fullmatch(value):
            return f"{SESSION_PREFIX}{value}"
        return self.session_id


def _principal_of(ctx: ServerRequestContext[Any]) -> Principal | None:
    """The API key's principal of the HTTP request that carried this call, if any."""
    scope = getattr(ctx.request, "scope", None)
    found = scope.get("state", {}).get("principal") if isinstance(scope, Mapping) else None
    return found if isinstance(found, Principal) else None


def _refused(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"Refused, the tool did not run: {message}.")],
        is_error=True,
    )


def _result(
    outcome: ToolOutcome, slot: StructuredSlot, *, tried_resource: bool
) -> types.CallToolResult:
    text = outcome.text
    failed = outcome.outcome != "ok"
    if failed and tried_resource and outcome.error_type == "InvalidArguments":
        text += RESOURCE_HINT
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=None if failed else slot.value,
        is_error=failed,
    )
