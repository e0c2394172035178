"""``Popagent``: the composition root, what ``popagent.connect()`` yields.

One object holds the pool and every service built over it: the long-term
memory, the thread store, the runtime settings, session items and API keys,
and builds the agent and the secret store. The server, the CLI, the MCP server
and the adapters take their services from it, so no service reaches into
another for its pool::

    async with popagent.connect() as app:
        await app.memory.remember("popagent-user", "Prefers dark mode", key="ui.theme")
        agent = app.agent(model)

Invariants:
- every service shares the one pool, and holds no connection between calls;
- the object holds nothing else: building it opens nothing and starts no task
  (the memory's vector worker starts on the first write), so it is cheap to
  build over any pool (``Popagent.over``), tests included;
- ``aclose`` (``connect``'s exit) stops the vector worker and the keys' audit
  flusher; closing the pool is its opener's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .keys import KeyStore
from .memory.longterm import LongTermMemory
from .memory.ranking import DEFAULT_WEIGHTS, RankingWeights
from .store.database import Pool
from .threads import ThreadStore
from .threads.items import SessionItems

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from .agent import Agent
    from .embed.protocol import Embedder
    from .llm.protocol import ChatModel
    from .observe.settings_store import MemorySettingsStore
    from .secrets import SecretCipher, SecretStore

__all__ = ["Popagent"]


# Not slotted: ``settings`` is a ``cached_property``, which keeps its value in the
# instance's ``__dict__``.
@dataclass(frozen=True, eq=False)
class Popagent:
    """The pool and the services over it (see the module docstring)."""

    pool: Pool
    memory: LongTermMemory
    threads: ThreadStore
    items: SessionItems
    keys: KeyStore

    @classmethod
    def over(
        cls,
        pool: Pool,
        *,
        weights: RankingWeights = DEFAULT_WEIGHTS,
        embedder: Embedder | None = None,
    ) -> Popagent:
        """Every service over ``pool``; ``weights`` and ``embedder`` are the memory's."""
        return cls(
            pool=pool,
            memory=LongTermMemory(pool, weights=weights, embedder=embedder),
            threads=ThreadStore(pool),
            items=SessionItems(pool),
            keys=KeyStore(pool),
        )

    @cached_property
    def settings(self) -> MemorySettingsStore:
        """The runtime settings of observational memory (built on first use:
        ``popagent.observe`` loads the model client, which ``popagent remember`` and
        the other memory commands never need)."""
        from .observe.settings_store import MemorySettingsStore

        return MemorySettingsStore(self.pool)

    def secrets(self, cipher: SecretCipher) -> SecretStore:
        """The secret store, encrypting with ``cipher`` (``SecretCipher.from_env()``)."""
        from .secrets import SecretStore

        return SecretStore(self.pool, cipher)

    def agent(self, model: ChatModel, **options: Any) -> Agent:
        """An ``Agent`` over these services; ``options`` are ``Agent``'s keywords
        (``secrets``, ``tools``, ``hooks``, ``history``, ``recall_limit``, ...)."""
        # Imported here: a command that only reads and writes memories (``popagent
        # remember``) never loads the agent, the model SDK or the secret store.
        from .agent import Agent

        return Agent(self.pool, self.memory, self.threads, model, **options)

    def configured_agent(
        self, model: ChatModel, stack: AsyncExitStack, *, secrets: SecretStore | None = None
    ) -> Agent:
        """The agent ``popagent serve`` and ``popagent chat`` run: observational
        history (closed with ``stack``), ``read_history``, and the secret tools
        with ``secrets`` (``popagent.agent.build_agent``)."""
        from .agent.builder import build_agent

        return build_agent(self.pool, self.memory, self.threads, model, stack, secrets=secrets)

    async def aclose(self) -> None:
        """Stop the background work of the services (not the pool): the vector
        worker, and the keys' pending audit of refusals (written now)."""
        try:
            await self.keys.aclose()
        finally:
            await self.memory.aclose()
