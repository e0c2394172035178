"""Derived memories: what a fact was based on, and the mark it gets when that changes.

A fact may name its sources (``based_on``: fact keys and memory ids of the same
resource). When a source changes, expires, is deleted or purged, migration
0022's triggers mark every memory based on it, and on those in turn, stale;
nothing is deleted. This module checks ``based_on`` on the way in (each source
exists, no chain leads back to the memory itself) and holds the two operations
on marks: ``stale`` lists them, ``confirm`` clears one.

Invariants: the check runs inside the write's transaction, after the write, so a
refused ``based_on`` leaves nothing written; a chain is followed at most
``MAX_DEPTH`` levels up.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..checks import check_limit
from ..errors import NotFoundError, ValidationError
from ..models import Memory
from ..store import derived as derived_sql
from ..store.database import Conn
from .base import MemoryBase, check_memory_id
from .validation import check_id, normalize_key

__all__ = [
    "BASED_ON_CAP",
    "MAX_DEPTH",
    "check_based_on",
    "check_sources",
    "confirm",
    "stale",
]

#: The most sources one memory may name.
BASED_ON_CAP = 16
#: How far up a chain of sources the cycle check looks.
MAX_DEPTH = 32


def check_based_on(value: object) -> tuple[str | int, ...] | None:
    """``None`` or a list of 1 to 16 sources: fact keys (text, normalized as keys
    are) and memory ids (positive integers); duplicates dropped, order kept."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError("based_on", "must be a list of fact keys and memory ids")
    if not value:
        return None
    if len(value) > BASED_ON_CAP:
        raise ValidationError("based_on", f"must name at most {BASED_ON_CAP} sources")
    out: list[str | int] = []
    for item in value:
        ref: str | int
        if isinstance(item, int) and not isinstance(item, bool):
            ref = check_memory_id(item, "based_on")
        elif isinstance(item, str):
            key = normalize_key(item, "based_on")
            assert key is not None
            ref = key
        else:
            raise ValidationError(
                "based_on",
                f"each source must be a fact key or a memory id, not {type(item).__name__}",
            )
        if ref not in out:
            out.append(ref)
    return tuple(out)


def _label(ref: str | int) -> str:
    return f"memory {ref}" if isinstance(ref, int) else f"fact {ref!r}"


async def check_sources(conn: Conn, memory: Memory) -> None:
    """Refuse ``memory``'s ``based_on`` (a ``ValidationError`` naming it) when a source
    is not in the resource or a chain of sources leads back to ``memory``.

    Run inside the write's transaction, after the write: raising rolls it back."""
    refs = memory.based_on
    if not refs:
        return
    ids = [r for r in refs if isinstance(r, int)]
    keys = [r for r in refs if isinstance(r, str)]
    found = await derived_sql.sources(conn, memory.resource_id, ids, keys)
    missing = [
        r
        for r in refs
        if not any((r == row[0]) if isinstance(r, int) else (r == row[1]) for row in found)
    ]
    if missing:
        raise ValidationError("based_on", f"no {_label(missing[0])} in this resource")
    seen: set[int] = set()
    level = found
    for _depth in range(MAX_DEPTH):
        next_ids: list[int] = []
        next_keys: list[str] = []
        for id_, key, based_on in level:
            if id_ == memory.id or (key is not None and key == memory.key):
                raise ValidationError(
                    "based_on", f"would make a cycle: {_label(key or id_)} is based on this memory"
                )
            if id_ in seen:
                continue
            seen.add(id_)
            next_ids += [r for r in based_on if isinstance(r, int)]
            next_keys += [r for r in based_on if isinstance(r, str)]
        if not next_ids and not next_keys:
            return
        level = await derived_sql.sources(conn, memory.resource_id, next_ids, next_keys)
    raise ValidationError("based_on", f"a chain of sources is longer than {MAX_DEPTH}")


# The operations on marks of ``LongTermMemory`` (``memory.longterm``).


async def stale(self: MemoryBase, resource_id: str, *, limit: int = 100) -> list[Memory]:
    """The memories of this resource marked stale (a source changed, expired or went),
    most recently marked first, at most ``limit`` (1 to 1,000)."""
    resource_id = check_id("resource_id", resource_id)
    limit = check_limit(limit)
    async with self._pool.connection() as conn:
        return await derived_sql.list_stale(conn, resource_id, limit)


async def confirm(self: MemoryBase, resource_id: str, id: int) -> Memory:
    """Confirm memory ``id`` still holds: clear its stale mark (a no-op when it has
    none). ``NotFoundError`` if the resource has no such memory."""
    resource_id = check_id("resource_id", resource_id)
    id = check_memory_id(id)
    async with self._pool.connection() as conn:
        memory = await derived_sql.clear_stale(conn, resource_id, id)
    if memory is None:
        raise NotFoundError(f"no memory {id} in this resource")
    return memory
