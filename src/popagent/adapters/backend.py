"""The one memory surface every framework adapter talks to.

An adapter is configured with a :class:`MemoryBackend`: either
:class:`LocalBackend` (a :class:`~popagent.root.Popagent` and a
fixed ``resource_id``, in process) or ``popagent.client``'s remote backend (a
``popagent serve`` over HTTP, whose resource is the server's). Either way the
resource is fixed by configuration, never by a model's tool arguments: no
method here takes a ``resource_id``.

Invariants:
- every write goes through popagent's own validation and credential screen
  (the library's or the server's), so an adapter cannot store what popagent
  would refuse;
- audit rows are written by the layer below (the agent's tools or the API),
  never with memory content.
"""

from __future__ import annotations

import builtins  # ``list`` names a method in the class bodies below
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, Unpack, runtime_checkable

from ..memory.render import DEFAULT_BUDGET, render
from ..models import (
    FactOptions,
    MaintenanceReport,
    Memory,
    MemoryFilter,
    Provenance,
    RecallResult,
    RememberResult,
)
from ..root import Popagent
from ..store.caller_vectors import Distance

__all__ = ["LocalBackend", "MemoryBackend", "StoreBackend"]


@runtime_checkable
class MemoryBackend(Protocol):
    """Facts and recall of one resource, local or remote."""

    @property
    def resource_id(self) -> str: ...

    async def remember(self, content: str, **options: Unpack[FactOptions]) -> RememberResult:
        """Store a durable fact, as ``LongTermMemory.remember`` does (``FactOptions``:
        key, importance, session, expiry)."""
        ...

    async def recall(self, query: str, *, limit: int = 8) -> list[RecallResult]: ...

    async def list(self, where: MemoryFilter) -> builtins.list[Memory]:
        """The facts ``where`` selects, newest first (a backend holds facts: ``where.kind``
        is taken as ``"fact"``)."""
        ...

    async def get(self, id: int) -> Memory:
        """Fact ``id``; ``NotFoundError`` when there is none."""
        ...

    async def delete(self, id: int) -> None:
        """Delete fact ``id`` (its last value stays in its history); ``NotFoundError``
        when there is none."""
        ...


@runtime_checkable
class StoreBackend(MemoryBackend, Protocol):
    """A backend that also keeps a framework store's own vectors and extends expiry on
    read (LangGraph's ``index=`` and TTL refresh); ``LocalBackend`` is one."""

    async def write_vectors(
        self, memory: Memory, model: str, vectors: Sequence[Sequence[float]]
    ) -> int:
        """Make ``vectors`` the fact's ``model`` vectors (a ``caller:`` model name),
        while it holds ``memory.content``; none deletes them."""
        ...

    async def vector_scores(
        self, model: str, query: Sequence[float], distance: Distance, ids: Sequence[int]
    ) -> dict[int, float]:
        """Similarity to ``query`` of each fact of ``ids`` with ``model`` vectors."""
        ...

    async def extend_expiry(self, minutes: Mapping[int, float]) -> int:
        """Each live, expiring fact's expiry moved to that many minutes from now."""
        ...

    async def maintain(self) -> MaintenanceReport:
        """popagent's maintenance of this resource (expired facts go)."""
        ...


@dataclass(frozen=True, slots=True)
class LocalBackend:
    """The long-term memory of a :class:`Popagent` (``popagent.connect()``'s), bound to
    one resource, in this process."""

    app: Popagent
    resource_id: str
    #: The provenance origin of this backend's writes (the adapter's name).
    origin: str = "library"

    async def remember(self, content: str, **options: Unpack[FactOptions]) -> RememberResult:
        provenance = Provenance(origin=self.origin)
        return await self.app.memory.remember(
            self.resource_id, content, **options, provenance=provenance
        )

    async def recall(self, query: str, *, limit: int = 8) -> list[RecallResult]:
        return await self.app.memory.recall(self.resource_id, query, limit=limit)

    async def list(self, where: MemoryFilter) -> builtins.list[Memory]:
        return await self.app.memory.list(self.resource_id, replace(where, kind="fact"))

    async def get(self, id: int) -> Memory:
        return await self.app.memory.get(self.resource_id, id, kind="fact")

    async def delete(self, id: int) -> None:
        await self.app.memory.delete(self.resource_id, id, kind="fact")

    async def write_vectors(
        self, memory: Memory, model: str, vectors: Sequence[Sequence[float]]
    ) -> int:
        return await self.app.memory.write_caller_vectors(
            self.resource_id, memory.id, memory.content_sha256, model, vectors
        )

    async def vector_scores(
        self, model: str, query: Sequence[float], distance: Distance, ids: Sequence[int]
    ) -> dict[int, float]:
        return await self.app.memory.caller_vector_scores(
            self.resource_id, model, query, distance=distance, ids=ids
        )

    async def extend_expiry(self, minutes: Mapping[int, float]) -> int:
        return await self.app.memory.extend_expiry(self.resource_id, minutes)

    async def maintain(self) -> MaintenanceReport:
        return await self.app.memory.maintain(resource_id=self.resource_id)


def render_block(results: Sequence[RecallResult], *, budget: int = DEFAULT_BUDGET) -> str:
    """The labelled, fallible-context block a model sees (``popagent.render``)."""
    return render(results, budget=budget)
