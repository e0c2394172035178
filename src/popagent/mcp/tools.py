"""The memory tools an MCP client's model may call: remember, recall, list_facts,
forget_fact, fact_history, restore_fact (episodes are in ``episodes``).

Each is a popagent ``Tool``, so the server runs it through ``ToolRunner``: the
same argument checks (unknown names refused, bounds), hooks and audit rows as a
tool call inside a turn. ``MemoryTool`` adds what MCP lists beside the schema: a
title, behaviour hints and the output schema of the structured result.

Invariants:
- The resource and session come from the ``ToolContext`` the server builds from
  its configuration; no schema offers them and every schema is closed
  (``additionalProperties: false``), so a call naming ``resource_id`` is refused
  before any tool code runs.
- ``remember`` is the turn pipeline's ``RememberTool`` with an MCP description:
  same schema, same validation, same secret refusal, same result wording.
- Tools that return structured results write them into the ``StructuredSlot``
  they were built with, and only when they succeed.
- Every write and delete records the context's provenance (origin ``mcp``, the
  server's session); forgetting a fact keeps its last value in its history,
  which ``fact_history`` reads and ``restore_fact`` brings back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..agent.remember import REMEMBER_SPEC, RememberTool
from ..agent.tools import Tool, ToolContext, ToolOutcome
from ..errors import NotFoundError
from ..llm._tool_spec import SpecTool, integer_arg, object_schema, string_arg
from ..llm.protocol import ToolSpec
from ..memory.render import render
from ..memory.validation import KEY_CAP, QUERY_CAP, filter_from, normalize_key
from ..models import RECALL_MOMENTS, FactVersion, Kind, Memory, MemoryFilter
from .guidance import FALLIBLE, WORTH_REMEMBERING
from .shapes import (
    FACT_VERSION_SCHEMA,
    ID_MAX,
    MEMORY_SCHEMA,
    OFFSET_MAX,
    RECALL_RESULT_SCHEMA,
    StructuredSlot,
    array_of,
    fact_version_json,
    memory_json,
    recall_result_json,
)

__all__ = [
    "EMPTY_MEMORY",
    "FACT_HISTORY_SPEC",
    "FORGET_FACT_SPEC",
    "LIST_FACTS_SPEC",
    "NO_MEMORIES",
    "RECALL_SPEC",
    "REMEMBER_MCP_SPEC",
    "RESTORE_FACT_SPEC",
    "FactHistoryTool",
    "ForgetFactTool",
    "ListFactsTool",
    "McpRememberTool",
    "MemoryTool",
    "RecallTool",
    "RestoreFactTool",
    "ToolHints",
    "fact_line",
    "limit_arg",
    "list_kind",
    "listing_args",
    "none_listed",
]

NO_MEMORIES = "No relevant long-term memories."
EMPTY_MEMORY = "This memory is empty: nothing has been remembered in it yet."


@dataclass(frozen=True, slots=True)
class ToolHints:
    """What MCP lists about a tool beyond its name, description and input schema."""

    title: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    output_schema: dict[str, Any] | None = None


class MemoryTool(Tool, Protocol):
    """A ``Tool`` the MCP server offers, with its ``ToolHints``."""

    @property
    def hints(self) -> ToolHints: ...


class McpTool(SpecTool):
    """A ``MemoryTool`` whose spec and hints are its class's ``SPEC`` and ``HINTS``; one
    with a structured result writes it into the slot it was built with (``_slot``)."""

    HINTS: ClassVar[ToolHints]

    def __init__(self, slot: StructuredSlot | None = None) -> None:
        self._slot = slot if slot is not None else StructuredSlot()

    @property
    def hints(self) -> ToolHints:
        return self.HINTS


# --- listing ------------------------------------------------------------------------------


def limit_arg(noun: str, default: int, maximum: int) -> dict[str, Any]:
    """The ``limit`` argument of a tool that answers with at most that many ``noun``."""
    return integer_arg(f"How many {noun} at most (default {default}).", maximum=maximum)


def listing_args(noun: str, default: int, maximum: int) -> dict[str, Any]:
    """The ``text``, ``limit`` and ``offset`` arguments of a tool that lists ``noun``,
    newest first (what ``list_kind`` reads)."""
    return {
        "text": string_arg(
            f"Only {noun} containing this text (case-insensitive).", max_length=QUERY_CAP
        ),
        "limit": limit_arg(noun, default, maximum),
        "offset": integer_arg(
            f"How many of the newest {noun} to skip (default 0).", maximum=OFFSET_MAX, minimum=0
        ),
    }


async def list_kind(
    ctx: ToolContext, arguments: dict[str, Any], kind: Kind, limit: int
) -> list[Memory]:
    """The memories of ``kind`` a listing tool's ``arguments`` select (at most ``limit``
    when they give none), newest first."""
    where = filter_from({**arguments, "kind": kind}, limit=limit)
    return await ctx.memory.list(ctx.resource_id, where)


def none_listed(arguments: dict[str, Any], noun: str) -> ToolOutcome:
    """A listing tool's answer when it found nothing: none matched, or none is stored."""
    return ToolOutcome.ok(f"No {noun} match." if arguments else f"No {noun} are stored.")


# --- remember -----------------------------------------------------------------------------

REMEMBER_MCP_SPEC = ToolSpec(
    name=REMEMBER_SPEC.name,
    description=(
        "Save a durable fact about the user to their long-term memory, so it is available "
        "in future conversations (in any application connected to this memory). The "
        "result says whether the fact was created, updated (same key, new value), already "
        "stored unchanged, or refused and why.\n\n" + WORTH_REMEMBERING
    ),
    parameters=REMEMBER_SPEC.parameters,
)


class McpRememberTool(McpTool):
    """The turn's ``RememberTool``, described for an MCP client (see module doc)."""

    SPEC = REMEMBER_MCP_SPEC
    HINTS = ToolHints(title="Remember a fact", read_only=False, idempotent=True)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        outcome = await _REMEMBER.run(ctx, arguments)
        if outcome.outcome == "ok":
            # One short text: its vectors are written before the call returns (the model
            # runs off the event loop), so a recall right after finds it by meaning too,
            # not only by its words. A long backlog is left to the background worker.
            await ctx.memory.catch_up_vectors(ctx.resource_id, timeout=REMEMBER_VECTOR_WAIT_S)
        return outcome


_REMEMBER = RememberTool()
#: How long ``remember`` waits for its memory's vectors (the first call loads the model).
REMEMBER_VECTOR_WAIT_S = 15.0

# --- recall -------------------------------------------------------------------------------

RECALL_LIMIT_DEFAULT = 8
RECALL_LIMIT_MAX = 50

RECALL_SPEC = ToolSpec(
    name="recall",
    description=(
        "Search the user's long-term memory (durable facts and past conversations) for "
        "what is relevant to a request. Call it with the user's request, or a short "
        "description of what you need to know, before answering when earlier "
        "conversations may matter. Returns a labelled block of memories, facts first, "
        "best first; the structured result also gives each memory's id and its score "
        "with the ranking components.\n\n" + FALLIBLE
    ),
    parameters=object_schema(
        {
            "query": string_arg(
                "What to look for, in natural language, e.g. 'which UI theme does the user prefer'.",
                max_length=QUERY_CAP,
            ),
            "limit": limit_arg("memories", RECALL_LIMIT_DEFAULT, RECALL_LIMIT_MAX),
            **{name: string_arg(help, max_length=64) for name, help in RECALL_MOMENTS.items()},
        },
        ["query"],
    ),
)


class RecallTool(McpTool):
    """``recall(query, limit?)``: the rendered block as text, the scored results as structure."""

    SPEC = RECALL_SPEC
    HINTS = ToolHints(
        title="Recall memories",
        read_only=True,
        output_schema=object_schema(
            {
                "rendered": {"type": "string"},
                "results": array_of(RECALL_RESULT_SCHEMA),
                "mode": {
                    "type": "string",
                    "enum": ["lexical", "vector", "fused"],
                    "description": "fused: by words and meaning; lexical: by words "
                    "only (semantic recall off, or its model unavailable)",
                },
                "reason": {"type": "string", "description": "Why this mode ran."},
                "pending_vectors": {
                    "type": "integer",
                    "description": "Memories still waiting for their vectors, found "
                    "by their words only until then.",
                },
            }
        ),
    )

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        report = await ctx.memory.recall_report(
            ctx.resource_id,
            arguments["query"],
            limit=arguments.get("limit", RECALL_LIMIT_DEFAULT),
            **{name: arguments[name] for name in RECALL_MOMENTS if name in arguments},
        )
        results = report.results
        # Each memory's id too: the tools that act on one (forget_fact, ...) take it.
        block = render(results, ids=True)
        self._slot.value = {
            "rendered": block,
            "results": [recall_result_json(r) for r in results],
            "mode": report.mode,
            "reason": report.reason,
            "pending_vectors": report.pending,
        }
        text = block or await _nothing_recalled(ctx)
        if report.pending:
            # Many clients drop structuredContent: the text says it too.
            wait = "memory waits for its" if report.pending == 1 else "memories wait for their"
            text += (
                f"\n\n({report.pending:,} {wait} vectors: found by words only until "
                "then, not by meaning.)"
            )
        return ToolOutcome.ok(text)


async def _nothing_recalled(ctx: ToolContext) -> str:
    """What an empty recall says: a miss, or a memory nothing was ever written to."""
    if await ctx.memory.list(ctx.resource_id, MemoryFilter(limit=1)):
        return NO_MEMORIES
    return EMPTY_MEMORY


# --- facts --------------------------------------------------------------------------------

LIST_LIMIT_DEFAULT = 50
LIST_LIMIT_MAX = 200

LIST_FACTS_SPEC = ToolSpec(
    name="list_facts",
    description=(
        "List the durable facts stored about the user, newest first, with their ids and "
        "keys (use an id or key with forget_fact). Filter by exact key or by a piece of "
        "text; page with limit and offset. To find facts relevant to a request, prefer "
        "recall."
    ),
    parameters=object_schema(
        {
            "key": string_arg("Only the fact with this key, e.g. 'ui.theme'.", max_length=KEY_CAP),
            **listing_args("facts", LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX),
        },
        [],
    ),
)


def fact_line(m: Memory) -> str:
    """One fact as ``list_facts`` shows it."""
    key = f" key={m.key}" if m.key else ""
    return f"- fact #{m.id}{key} (importance {m.importance:.2f}): {m.content}"


class ListFactsTool(McpTool):
    """``list_facts(key?, text?, limit?, offset?)``."""

    SPEC = LIST_FACTS_SPEC
    HINTS = ToolHints(
        title="List facts",
        read_only=True,
        output_schema=object_schema({"facts": array_of(MEMORY_SCHEMA)}),
    )

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        facts = await list_kind(ctx, arguments, "fact", LIST_LIMIT_DEFAULT)
        self._slot.value = {"facts": [memory_json(m) for m in facts]}
        if not facts:
            return none_listed(arguments, "facts")
        noun = "fact" if len(facts) == 1 else "facts"
        return ToolOutcome.ok("\n".join([f"{len(facts)} {noun}:", *map(fact_line, facts)]))


FORGET_FACT_SPEC = ToolSpec(
    name="forget_fact",
    description=(
        "Delete one durable fact from the user's long-term memory, by its id or by its "
        "key (give exactly one). Use it when the user asks you to forget something or a "
        "fact is wrong and has no key to overwrite; to change a keyed fact, call remember "
        "with the same key instead. The deleted value stays in the fact's history "
        "(fact_history) and can be brought back with restore_fact. Past conversations "
        "(episodes) cannot be deleted here."
    ),
    parameters=object_schema(
        {
            "id": integer_arg("The fact's id, as list_facts or recall shows it.", maximum=ID_MAX),
            "key": string_arg("The fact's key, e.g. 'ui.theme'.", max_length=KEY_CAP),
        },
        [],
    ),
)


class ForgetFactTool(McpTool):
    """``forget_fact(id | key)``: delete one fact of this resource."""

    SPEC = FORGET_FACT_SPEC
    HINTS = ToolHints(title="Forget a fact", read_only=False, destructive=True)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        fact_id = arguments.get("id")
        key = normalize_key(arguments.get("key"))
        if (fact_id is None) == (key is None):
            return ToolOutcome.refused(
                "Refused, nothing was deleted: give either id or key (exactly one).",
                "InvalidArguments",
            )
        fact = await _find_fact(ctx, fact_id, key)
        await ctx.memory.delete(
            ctx.resource_id,
            fact.id,
            kind="fact",
            origin=ctx.provenance.origin,
            session_id=ctx.session_id,
        )
        return ToolOutcome.ok(f"Deleted {_where(fact)}: {fact.content}")


def _where(fact: Memory) -> str:
    return f"fact #{fact.id}" + (f" with key {fact.key!r}" if fact.key else " (no key)")


async def _find_fact(ctx: ToolContext, fact_id: int | None, key: str | None) -> Memory:
    """The current fact of this resource with ``fact_id`` or ``key``."""
    if fact_id is not None:
        return await ctx.memory.get(ctx.resource_id, fact_id, kind="fact")
    found = await ctx.memory.list(ctx.resource_id, MemoryFilter(kind="fact", key=key, limit=1))
    if not found:
        raise NotFoundError(f"no fact with key {key!r} in this resource")
    return found[0]


# --- history ------------------------------------------------------------------------------

FACT_HISTORY_SPEC = ToolSpec(
    name="fact_history",
    description=(
        "Show the earlier values of one durable fact, newest first: each version's text, "
        "when it held, who wrote it and how it ended (updated, deleted or expired). Give "
        "its id or its key (exactly one); a deleted fact is found by id only. Use a "
        "version number with restore_fact to bring that value back."
    ),
    parameters=object_schema(
        {
            "id": integer_arg(
                "The fact's id, as list_facts, recall or forget_fact shows it.", maximum=ID_MAX
            ),
            "key": string_arg("The key of a current fact, e.g. 'ui.theme'.", max_length=KEY_CAP),
        },
        [],
    ),
)


def version_line(v: FactVersion) -> str:
    """One earlier value as ``fact_history`` shows it."""
    key = f" key={v.key}" if v.key else ""
    return (
        f"- version {v.version}{key} ({v.valid_from.isoformat()} to {v.valid_to.isoformat()}, "
        f"written by {v.origin}, {v.ended} by {v.ended_origin}): {v.content}"
    )


class FactHistoryTool(McpTool):
    """``fact_history(id | key)``: the current value (if any) and the earlier ones."""

    SPEC = FACT_HISTORY_SPEC
    HINTS = ToolHints(
        title="Show a fact's history",
        read_only=True,
        idempotent=True,
        output_schema=object_schema(
            {
                "fact": {"anyOf": [MEMORY_SCHEMA, {"type": "null"}]},
                "versions": array_of(FACT_VERSION_SCHEMA),
            }
        ),
    )

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        fact_id = arguments.get("id")
        key = normalize_key(arguments.get("key"))
        if (fact_id is None) == (key is None):
            return ToolOutcome.refused(
                "Refused: give either id or key (exactly one).", "InvalidArguments"
            )
        current: Memory | None
        if fact_id is None:
            current = await _find_fact(ctx, None, key)
            fact_id = current.id
        else:
            try:
                current = await ctx.memory.get(ctx.resource_id, fact_id, kind="fact")
            except NotFoundError:
                current = None  # deleted or expired: its history may still hold it
        versions = await ctx.memory.fact_history(ctx.resource_id, fact_id)
        self._slot.value = {
            "fact": memory_json(current) if current is not None else None,
            "versions": [fact_version_json(v) for v in versions],
        }
        head = (
            f"Current value of {_where(current)} (version {current.version}): {current.content}"
            if current is not None
            else f"Fact #{fact_id} is deleted or expired; restore_fact can bring a version back."
        )
        if not versions:
            return ToolOutcome.ok(f"{head}\nNo earlier values.")
        noun = "earlier value" if len(versions) == 1 else "earlier values"
        return ToolOutcome.ok(
            "\n".join([head, f"{len(versions)} {noun}:", *map(version_line, versions)])
        )


RESTORE_FACT_SPEC = ToolSpec(
    name="restore_fact",
    description=(
        "Make an earlier value of a durable fact current again, by the fact's id and a "
        "version number from fact_history; a deleted or expired fact comes back under its "
        "id. The value it replaces stays in the history. Use it when the user asks to undo "
        "a change or bring back something forgotten. Refused when another fact now has "
        "that key or text."
    ),
    parameters=object_schema(
        {
            "id": integer_arg("The fact's id.", maximum=ID_MAX),
            "version": integer_arg(
                "The version to bring back, as fact_history shows it.", maximum=2**31 - 1
            ),
        },
        ["id", "version"],
    ),
)


class RestoreFactTool(McpTool):
    """``restore_fact(id, version)``: one earlier value made current again."""

    SPEC = RESTORE_FACT_SPEC
    HINTS = ToolHints(
        title="Restore a fact's earlier value",
        read_only=False,
        idempotent=True,
        output_schema=object_schema({"fact": MEMORY_SCHEMA}),
    )

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        fact = await ctx.memory.restore_fact(
            ctx.resource_id,
            arguments["id"],
            arguments["version"],
            session_id=ctx.session_id,
            provenance=ctx.provenance,
        )
        self._slot.value = {"fact": memory_json(fact)}
        return ToolOutcome.ok(
            f"Restored {_where(fact)} to version {arguments['version']}'s value "
            f"(now version {fact.version}): {fact.content}"
        )
