"""``build_agent``: the one place an ``Agent`` is built from configuration.

``popagent serve`` (``web.app``) and ``popagent chat`` (``cli.chat``) both call
it, so both offer the same history, tools and secret tools::

    async with AsyncExitStack() as stack:
        agent = app.configured_agent(model, stack, secrets=secrets)

(``popagent.root.Popagent.configured_agent`` passes its pool and services.)

Invariants:
- History is observational memory (``ObservationalHistory``); its background
  buffering runs while turns run and is closed with ``stack``: whatever is still
  running then is cancelled, and the next turn of the session observes or
  buffers again.
- ``read_history`` is offered (while the resource's retrieval scope is on);
  the secret tools are offered exactly when ``secrets`` is given.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

from ..llm.protocol import ChatModel
from ..memory.longterm import LongTermMemory
from ..secrets import SecretStore
from ..store.database import Pool
from ..threads import ThreadStore
from .observational import ObservationalHistory
from .turn import Agent

__all__ = ["build_agent"]


def build_agent(
    pool: Pool,
    memory: LongTermMemory,
    threads: ThreadStore,
    model: ChatModel,
    stack: AsyncExitStack,
    *,
    secrets: SecretStore | None = None,
) -> Agent:
    """The configured agent: observational history (closed with ``stack``), the
    ``read_history`` tool while retrieval is on, the secret tools when a key is set."""
    history = ObservationalHistory(model)
    stack.push_async_callback(history.aclose)
    return Agent(
        pool,
        memory,
        threads,
        model,
        secrets=secrets,
        history=history,
        tools=[history.retrieval_tool(pool)],
    )
