"""``RemoteBackend``: ``popagent.adapters.backend.MemoryBackend`` over a ``popagent serve``.

Framework adapters configured with it talk to a remote server through an
:class:`AsyncClient`; its ``resource_id`` is the server's (``/api/info``),
fixed by the server's configuration, never by a tool argument.

Differences from ``LocalBackend``, both from what the HTTP API offers today:

- ``remember`` is composed of the API's strict create and its PATCH (the API
  has no upsert route): the same outcome as the library's ``remember``
  (``created``, ``updated`` or ``unchanged``, the server's validation and
  credential screen), but not one transaction. A write that races another
  on the same key is retried a few times; then ``ConflictError`` surfaces.
  ``expires_at`` is the library's too: it is sent on the create and the
  PATCH, so the fact takes the new expiry and ``None`` clears an old one.
  ``session_id`` cannot be sent (the fact routes take none) and is dropped.
- ``recall`` is the API's preview: the recalled memories' access time and
  count are not updated.
"""

from __future__ import annotations

import builtins  # ``list`` names a method of ``RemoteBackend``
import re
import unicodedata
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Unpack

from ..errors import ConflictError
from ..models import FactOptions, Memory, MemoryFilter, RecallResult, RememberResult
from .async_ import AsyncClient

__all__ = ["RemoteBackend"]

# The library's fact normalization (``memory.validation``), to find an identical
# fact without a write; a miss only costs a PATCH that changes nothing.
_WHITESPACE = re.compile(r"\s+")
_ATTEMPTS = 3
#: Pages (of the API's 200 most) searched for a keyless fact's identical twin.
_TWIN_PAGES = 5


def _normal(content: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", content)).strip()


@dataclass(frozen=True, slots=True)
class RemoteBackend:
    """Facts and recall of the server's resource, over ``client``.

    Build it with :meth:`connect`, which asks the server for its resource. The
    backend does not own the client: close the client when done.
    """

    client: AsyncClient
    resource_id: str

    @classmethod
    async def connect(cls, client: AsyncClient) -> RemoteBackend:
        """A backend for the resource the server behind ``client`` serves."""
        info = await client.info()
        return cls(client=client, resource_id=info.resource_id)

    async def remember(self, content: str, **options: Unpack[FactOptions]) -> RememberResult:
        """Store a durable fact: replace the fact of ``key``, or find an identical
        keyless one (raising its importance if lower); either way the fact takes
        ``expires_at`` (``None``: it never expires). See the module docstring.

        ``session_id`` is not sent: the API's fact routes take none."""
        key = options.get("key")
        importance = options.get("importance", 0.5)
        expires_at = options.get("expires_at")
        happened_at = options.get("happened_at")
        for _attempt in range(_ATTEMPTS):
            if key is not None:
                page = await self.client.list(MemoryFilter(kind="fact", key=key, limit=1))
                if page.items:
                    return await self._replace(
                        page.items[0], content, importance, expires_at, happened_at
                    )
            try:
                created = await self.client.create_fact(
                    content,
                    key=key,
                    importance=importance,
                    expires_at=expires_at,
                    based_on=options.get("based_on"),
                    happened_at=happened_at,
                )
                return RememberResult(memory=created, action="created")
            except ConflictError:
                if key is not None:
                    continue  # taken since we looked: replace it on the next attempt
                twin = await self._twin(content)
                if twin is None:
                    continue  # deleted since the conflict, or not found by its text
                # As the library's upsert: importance only rises, the expiry is the new one.
                if twin.importance < importance or twin.expires_at != expires_at:
                    raised = await self.client.update_fact(
                        twin.id, importance=max(twin.importance, importance), expires_at=expires_at
                    )
                    return RememberResult(memory=raised, action="updated")
                return RememberResult(memory=twin, action="unchanged")
        raise ConflictError(
            f"remember did not settle in {_ATTEMPTS} attempts: another writer kept changing "
            "this fact on the server"
        )

    async def _replace(
        self,
        current: Memory,
        content: str,
        importance: float,
        expires_at: datetime | None,
        happened_at: str | None,
    ) -> RememberResult:
        wanted = (_normal(content), importance, expires_at)
        if wanted == (current.content, current.importance, current.expires_at):
            return RememberResult(memory=current, action="unchanged")
        updated = await self.client.update_fact(
            current.id,
            content=content,
            importance=importance,
            expires_at=expires_at,
            happened_at=happened_at,
        )
        before = (current.content, current.importance, current.expires_at)
        same = (updated.content, updated.importance, updated.expires_at) == before
        return RememberResult(memory=updated, action="unchanged" if same else "updated")

    async def _twin(self, content: str) -> Memory | None:
        """The keyless fact whose content is ``content`` (as the server normalizes it)."""
        wanted = _normal(content)
        if not wanted:
            return None
        offset: int | None = 0
        for _ in range(_TWIN_PAGES):
            if offset is None:
                return None
            where = MemoryFilter(kind="fact", text=wanted[:200], limit=200, offset=offset)
            page = await self.client.list(where)
            for fact in page.items:
                if fact.key is None and fact.content == wanted:
                    return fact
            offset = page.next_offset
        return None

    async def recall(self, query: str, *, limit: int = 8) -> list[RecallResult]:
        preview = await self.client.recall(query, limit=limit)
        return list(preview.results)

    async def list(self, where: MemoryFilter) -> builtins.list[Memory]:
        page = await self.client.list(replace(where, kind="fact"))
        return builtins.list(page.items)

    async def get(self, id: int) -> Memory:
        return await self.client.get(id, kind="fact")

    async def delete(self, id: int) -> None:
        await self.client.delete(id, kind="fact")
