"""A fact's history: its earlier values, restoring one, and reverting a session's writes.

Invariants:
- ``popagent_memories`` holds current values only; every replaced, deleted or
  expired value of a fact is a ``FactVersion`` (migration 0012), so restoring
  is itself a change that keeps the value it replaces.
- Restoring or reverting writes through the same unique indexes as every
  other write: a key or content now taken by another fact is a
  ``ConflictError`` (restore) or a skipped fact (revert), never a duplicate.
- Reads and writes are scoped to one ``resource_id``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..errors import ConflictError, NotFoundError
from ..models import FactVersion, Memory, Provenance, RevertReport, SessionWrites
from ..store import derived as derived_sql
from ..store import memories as store
from ..store import versions as version_store
from ..store.database import Conn
from .base import MemoryBase, check_memory_id
from .manage import event_params
from .temporal import event_window
from .validation import check_id, check_provenance

__all__ = ["fact_history", "restore_fact", "revert_session", "session_writes"]

#: The most writes one session listing (and one revert) covers.
SESSION_WRITES_CAP = 1_000


def _live_expiry(version: FactVersion, now: datetime) -> datetime | None:
    """A restored value keeps its expiry only while that is still ahead."""
    return version.expires_at if version.expires_at and version.expires_at > now else None


def _restored_event(old: FactVersion, current: Memory | None) -> dict[str, Any]:
    """The event clock a restored value takes: the one it kept (migration 0025). A
    version that kept none (written before that migration, or its clock unknown)
    keeps the current value's when the text is the same, else its own text, read
    against when it was written, gives it one (none when it names no time), as a
    write would."""
    if old.happened_start is not None:
        return {c: getattr(old, c) for c in store.EVENT_COLUMNS}
    if current is not None and old.content == current.content:
        return {c: getattr(current, c) for c in store.EVENT_COLUMNS}
    return event_params(event_window(old.content, old.valid_from))


# Versions of facts: read, restore, and revert one session's writes; operations of
# ``LongTermMemory`` (``memory.longterm``), plain functions of the service's state
# (``MemoryBase``) bound as its methods there.


async def fact_history(self: MemoryBase, resource_id: str, id: int) -> list[FactVersion]:
    """The earlier values of fact ``id``, newest first; the current value is
    ``get(resource_id, id, kind="fact")``'s. ``NotFoundError`` when the resource
    never had that fact (or it was purged)."""
    resource_id = check_id("resource_id", resource_id)
    id = check_memory_id(id)
    async with self._pool.connection() as conn:
        versions = await version_store.list_versions(conn, resource_id, id)
        if not versions and await store.get_memory(conn, resource_id, id, "fact") is None:
            raise NotFoundError(f"no fact {id} in this resource")
    return versions


async def restore_fact(
    self: MemoryBase,
    resource_id: str,
    id: int,
    version: int,
    *,
    session_id: str | None = None,
    provenance: Provenance | None = None,
) -> Memory:
    """Make version ``version`` of fact ``id`` current again (a deleted fact comes
    back under its id). The value it replaces becomes a version in turn; an
    expiry already past is dropped."""
    resource_id = check_id("resource_id", resource_id)
    id = check_memory_id(id)
    version = check_memory_id(version, "version")
    if session_id is not None:
        session_id = check_id("session_id", session_id)
    provenance = check_provenance(provenance)
    async with self._pool.connection() as conn:
        old = await version_store.get_version(conn, resource_id, id, version)
    if old is None:
        raise NotFoundError(f"fact {id} has no version {version}")
    async with self._pool.connection() as conn, conn.transaction():
        restored = await _apply(self, conn, old, session_id, provenance)
        if restored is None:
            raise NotFoundError(f"fact {id} has no version {version}")
    self._vectors_pending(resource_id)  # a changed or re-inserted text is queued
    return restored


async def _apply(
    self: MemoryBase,
    conn: Conn,
    old: FactVersion,
    session_id: str | None,
    provenance: Provenance,
) -> Memory | None:
    """Write version ``old``'s value as its fact's current one, on ``conn``."""
    now = datetime.now(UTC)
    current = await store.get_memory(conn, old.resource_id, old.fact_id, "fact")
    written_by = store.provenance_params(provenance)
    if current is None:
        return await version_store.reinsert_fact(
            conn,
            resource_id=old.resource_id,
            fact_id=old.fact_id,
            version=old.version,
            session_id=session_id,
            expires_at=_live_expiry(old, now),
            **_restored_event(old, None),
            **written_by,
        )
    updated = await store.update_fact(
        conn,
        resource_id=old.resource_id,
        id=old.fact_id,
        content=old.content,
        sha=old.content_sha256,
        key=old.key,
        importance=old.importance,
        expires_at=_live_expiry(old, now),
        session_id=session_id,
        # Versions keep no sources: the fact's current ones stay.
        based_on=derived_sql.based_on_param(current.based_on),
        **_restored_event(old, current),
        **written_by,
    )
    return updated or current  # the same value already: nothing to change


async def session_writes(
    self: MemoryBase, resource_id: str, session_id: str, *, limit: int = SESSION_WRITES_CAP
) -> SessionWrites:
    """The memories session ``session_id`` wrote that stand, and the fact values
    it replaced or deleted (at most ``limit`` of each, newest first)."""
    resource_id = check_id("resource_id", resource_id)
    session_id = check_id("session_id", session_id)
    async with self._pool.connection() as conn:
        memories = await version_store.list_session_facts(conn, resource_id, session_id, limit)
        ended = await version_store.versions_ended_by_session(conn, resource_id, session_id, limit)
    return SessionWrites(session_id, tuple(memories), tuple(ended))


async def revert_session(
    self: MemoryBase,
    resource_id: str,
    session_id: str,
    *,
    origin: str = "library",
    by_session_id: str | None = None,
) -> RevertReport:
    """Undo what session ``session_id`` wrote to long-term memory.

    Each fact whose current value the session wrote goes back to its newest
    value written by anyone else, or is deleted when the session created it;
    its episodes are deleted; facts it deleted come back. A fact whose old
    key or content is now taken by another fact is skipped (and reported).
    One transaction: all of it or none. Every undone value stays in history.
    """
    resource_id = check_id("resource_id", resource_id)
    session_id = check_id("session_id", session_id)
    if by_session_id is not None:
        by_session_id = check_id("session_id", by_session_id)
    provenance = check_provenance(Provenance(origin=origin))
    writes = await session_writes(self, resource_id, session_id)
    plan: list[tuple[Memory | None, FactVersion | None]] = []
    async with self._pool.connection() as conn:
        for memory in writes.memories:
            if memory.kind == "episode":
                plan.append((memory, None))
                continue
            history = await version_store.list_versions(conn, resource_id, memory.id)
            before = next((v for v in history if v.session_id != session_id), None)
            plan.append((memory, before))
        current_ids = {m.id for m in writes.memories}
        for ended in writes.ended:
            if ended.ended != "deleted" or ended.fact_id in current_ids:
                continue
            current_ids.add(ended.fact_id)
            # A fact it deleted comes back with its newest value someone else
            # wrote; one the session itself created stays deleted.
            history = await version_store.list_versions(conn, resource_id, ended.fact_id)
            before = next((v for v in history if v.session_id != session_id), None)
            if before is not None:
                plan.append((None, before))
    restored: list[int] = []
    deleted: list[int] = []
    skipped: list[int] = []
    async with self._pool.connection() as conn, conn.transaction():
        for target, version in plan:
            if version is None:
                assert target is not None
                if await store.delete_memory(
                    conn,
                    resource_id,
                    target.id,
                    target.kind,
                    ended_origin=provenance.origin,
                    ended_session_id=by_session_id,
                ):
                    deleted.append(target.id)
                continue
            if target is None and (
                await store.get_memory(conn, resource_id, version.fact_id, "fact") is not None
            ):
                continue  # restored meanwhile: nothing to bring back
            try:
                async with conn.transaction():  # a savepoint: a conflict skips this one
                    result = await _apply(self, conn, version, by_session_id, provenance)
            except ConflictError:
                skipped.append(version.fact_id)
                continue
            if result is not None:
                restored.append(result.id)
    if restored:
        self._vectors_pending(resource_id)
    return RevertReport(tuple(restored), tuple(deleted), tuple(skipped))
