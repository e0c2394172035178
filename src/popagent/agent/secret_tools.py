"""The secret tools: ``set_secret``, ``list_secrets`` and ``delete_secret``.

They are offered only when the agent has a ``SecretStore``. Using a secret is
not a model tool: application tools call ``ToolContext.reveal_secret`` and get
the value in code, while the model only ever handles names.

Invariants:
- No result text holds a secret value: results name secrets and say what
  happened; the runner also scrubs every result with the turn's known values.
- ``set_secret`` teaches the turn's scrubber the value before storing it, so
  the turn rewrites its already-stored messages (the user message that carried
  the value, the assistant's tool call) without it.
- Every tool acts on the context's resource only.
"""

from __future__ import annotations

from typing import Any

from ..errors import PopagentError
from ..llm._tool_spec import SpecTool, object_schema, string_arg
from ..llm.protocol import ToolSpec
from ..secrets.store import SCRUB_MIN_LENGTH, VALUE_CAP_BYTES
from .tools import Tool, ToolContext, ToolOutcome

__all__ = [
    "DELETE_SECRET_SPEC",
    "LIST_SECRETS_SPEC",
    "SET_SECRET_SPEC",
    "DeleteSecretTool",
    "ListSecretsTool",
    "SetSecretTool",
    "secret_tools",
]

# The name rule is stated, not enforced by the schema: the secret store checks it
# when the tool runs, after ``set_secret`` has taught the scrubber the value, so a
# call refused for its name still leaves the value nowhere.
_NAME_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": (
        "The secret's name, e.g. GITHUB_TOKEN: 1 to 64 characters, a letter first, then "
        "letters, digits, '_', '.' or '-'."
    ),
}

SET_SECRET_SPEC = ToolSpec(
    name="set_secret",
    description=(
        "Store a credential (password, API key, access token) the user gave you in the "
        "encrypted secret store under a name, replacing any secret of that name. Use this, "
        "never `remember`, for credentials. Afterwards refer to it only by name."
    ),
    parameters=object_schema(
        {
            "name": _NAME_SCHEMA,
            "value": string_arg(
                "The exact secret value, as the user gave it.",
                max_length=VALUE_CAP_BYTES,
                min_length=SCRUB_MIN_LENGTH,
            ),
        }
    ),
)

LIST_SECRETS_SPEC = ToolSpec(
    name="list_secrets",
    description="List the names of the stored secrets. Values are never shown.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
)

DELETE_SECRET_SPEC = ToolSpec(
    name="delete_secret",
    description="Delete the stored secret with this name.",
    parameters=object_schema({"name": _NAME_SCHEMA}),
)


def _refused(exc: PopagentError) -> ToolOutcome:
    # Secret store messages never quote a value (see popagent.secrets.store).
    return ToolOutcome.refused(f"Refused: {exc}", error_type=type(exc).__name__)


class SetSecretTool(SpecTool):
    SPEC = SET_SECRET_SPEC

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        name = arguments["name"]
        try:
            await ctx.set_secret(name, arguments["value"])
        except PopagentError as exc:
            return _refused(exc)
        return ToolOutcome.ok(
            f"Stored secret {name!r} (encrypted). Refer to it by this name; its value will "
            "not be shown again and has been removed from the conversation record."
        )


class ListSecretsTool(SpecTool):
    SPEC = LIST_SECRETS_SPEC

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        if ctx.secrets is None:
            return ToolOutcome.error("No secret store is configured.", "NotFoundError")
        infos = await ctx.secrets.list(ctx.resource_id)
        if not infos:
            return ToolOutcome.ok("No secrets are stored.")
        return ToolOutcome.ok("Stored secrets: " + ", ".join(info.name for info in infos))


class DeleteSecretTool(SpecTool):
    SPEC = DELETE_SECRET_SPEC

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        if ctx.secrets is None:
            return ToolOutcome.error("No secret store is configured.", "NotFoundError")
        name = arguments["name"]
        try:
            await ctx.secrets.delete(ctx.resource_id, name)
        except PopagentError as exc:
            return _refused(exc)
        return ToolOutcome.ok(f"Deleted secret {name!r}.")


def secret_tools() -> tuple[Tool, ...]:
    """The three secret tools, in the order they are offered."""
    return (SetSecretTool(), ListSecretsTool(), DeleteSecretTool())
