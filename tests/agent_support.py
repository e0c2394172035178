"""Helpers for the agent tests: searching the whole database, reading scripted requests."""

from __future__ import annotations

from typing import Any, NamedTuple

from psycopg import sql

import popagent
from popagent.agent import Agent, ToolContext, ToolOutcome
from popagent.llm import OpenAIChatModel, ToolSpec
from popagent.threads import ThreadStore
from tests.scripted_model import ScriptedModelServer


class AgentRig(NamedTuple):
    """What a scripted agent turn runs on (the ``rig`` fixture): the suite's database, its
    threads, the real client and the scripted server that client talks to. Unpacks as
    ``memory, threads, chat_model, scripted = rig``."""

    memory: popagent.LongTermMemory
    threads: ThreadStore
    chat_model: OpenAIChatModel
    scripted: ScriptedModelServer

    def agent(self, **options: Any) -> Agent:
        """``Agent(pool, memory, threads, chat_model, **options)``."""
        return Agent(self.memory.pool, self.memory, self.threads, self.chat_model, **options)


async def tables_containing(memory: popagent.LongTermMemory, needle: str) -> dict[str, int]:
    """Rows per table whose whole text form (every text, jsonb and array column) holds ``needle``.

    Every table of the schema is searched, so a new table cannot escape the check.
    """
    found: dict[str, int] = {}
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
        tables = [row["table_name"] for row in await cur.fetchall()]
        assert {"popagent_messages", "popagent_memories", "popagent_audit"} <= set(tables)
        for table in tables:
            query = sql.SQL("SELECT count(*) AS n FROM {} AS t WHERE strpos(t::text, %s) > 0")
            cur = await conn.execute(query.format(sql.Identifier(table)), (needle,))
            row = await cur.fetchone()
            assert row is not None
            if row["n"]:
                found[table] = row["n"]
    return found


async def audit_text(memory: popagent.LongTermMemory, resource_id: str) -> str:
    """Every audit row of the resource as text, one per line."""
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT t::text AS row FROM popagent_audit AS t WHERE resource_id = %s ORDER BY id",
            (resource_id,),
        )
        return "\n".join(row["row"] for row in await cur.fetchall())


def system_texts(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "system"]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def offered_tools(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


class EchoSecretTool:
    """An application tool that uses a secret and (carelessly) echoes it in its output."""

    def __init__(self, secret_name: str) -> None:
        self.secret_name = secret_name
        self.seen: list[str] = []

    @property
    def name(self) -> str:
        return "deploy"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            "deploy",
            "Deploy the site.",
            {"type": "object", "properties": {}, "additionalProperties": False},
        )

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        value = await ctx.reveal_secret(self.secret_name)
        self.seen.append(value)
        return ToolOutcome.ok(f"deployed using key {value} to production")


class CountingTool:
    """An application tool that only counts its calls."""

    def __init__(self, name: str = "ping") -> None:
        self._name = name
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self._name, "Ping.", {"type": "object", "properties": {}})

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome:
        self.calls += 1
        return ToolOutcome.ok(f"pong {self.calls}")
