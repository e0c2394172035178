"""``popagent.connect()`` yields the composition root, ``Popagent``: one pool, every
service over it, and the agent built from them."""

from __future__ import annotations

import subprocess
import sys
from contextlib import AsyncExitStack

import pytest

import popagent
from popagent import Popagent
from popagent.agent import Agent
from popagent.llm import OpenAIChatModel
from popagent.secrets import SecretCipher
from tests.scripted_model import Reply, ScriptedModelServer


async def test_every_service_shares_the_roots_one_pool(root: Popagent, resource: str) -> None:
    pool = root.pool
    assert root.memory.pool is pool
    for service in (root.threads, root.items, root.settings):
        assert service._pool is pool
    assert root.keys.pool is pool
    secrets = root.secrets(SecretCipher(b"k" * 32))
    assert secrets._pool is pool
    # One settings store per root, built on first use.
    assert root.settings is root.settings
    await root.settings.update(resource, observation_threshold_tokens=20_000)
    assert (await root.settings.read(resource)).settings.observation_threshold_tokens == 20_000


async def test_the_agent_runs_on_the_roots_services(
    root: Popagent, resource: str, chat_model: OpenAIChatModel, scripted: ScriptedModelServer
) -> None:
    agent = root.agent(chat_model)
    assert isinstance(agent, Agent)
    assert (agent.pool, agent.memory, agent.threads) == (root.pool, root.memory, root.threads)
    scripted.script(Reply("Noted."))
    result = await agent.run_turn(resource, "s1", "I prefer dark mode")
    assert result.reply == "Noted."
    messages = await root.threads.list_messages(resource, "s1")
    assert [m.role for m in messages] == ["user", "assistant"]
    async with AsyncExitStack() as stack:
        configured = root.configured_agent(chat_model, stack)
        # Observational history and the read_history tool, as serve and chat run it.
        assert "read_history" in {spec.name for spec in configured.runner.specs}
        assert configured.pool is root.pool


async def test_over_builds_the_services_on_a_pool_you_opened(root: Popagent) -> None:
    other = Popagent.over(root.pool, embedder=None)
    try:
        assert other.pool is root.pool and other.memory is not root.memory
        assert other.memory.embedder is None
    finally:
        await other.aclose()


async def test_leaving_connect_stops_the_vector_worker(database_url: str, resource: str) -> None:
    async with popagent.connect(database_url, max_size=2) as app:
        await app.memory.remember(resource, "Has a cat named Miso")
        worker = app.memory._worker
        assert worker is not None
    assert worker._task is None or worker._task.done()


def test_importing_connect_loads_neither_the_agent_nor_the_model_sdk() -> None:
    # ``popagent remember`` opens the root; the agent and openai load only for an agent.
    code = (
        "import sys, popagent.root\n"
        "bad = [m for m in sys.modules if m.startswith(('openai', 'popagent.agent', "
        "'popagent.llm', 'popagent.observe'))]\n"
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["memory", "threads", "settings", "items", "keys", "pool"])
def test_the_root_is_read_only(name: str) -> None:
    assert name in {"settings"} | set(Popagent.__dataclass_fields__)
    with pytest.raises(AttributeError):
        setattr(Popagent.__new__(Popagent), name, None)
