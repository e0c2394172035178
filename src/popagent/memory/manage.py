"""Writes and management of long-term memory: retention, facts, episodes, cleanup,
maintenance and the embedding backfill.

``Management`` is that part of ``LongTermMemory`` (``memory.longterm``). Each
public method validates its input completely, then opens one transaction (or
none, for a single statement) on a pooled connection and calls the store
functions; a call that raises has changed nothing.

No write embeds: the memory is stored (and queued for its vectors by migration
0016's trigger, in the same statement), the vector worker is notified, and
the call returns. The vectors follow within about a second
(``MemoryBase.wait_for_vectors`` waits for them).
"""

from __future__ import annotations

import builtins  # ``Management.list`` hides the builtin in the class body's annotations
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..checks import check_time
from ..errors import NotFoundError, ValidationError
from ..models import (
    EpisodeTurn,
    Kind,
    MaintenanceReport,
    Memory,
    MemoryFilter,
    Provenance,
    PurgeReport,
    RememberResult,
)
from ..offload import off_loop, text_size
from ..store import derived as derived_sql
from ..store import memories as store
from ..store.database import Conn
from .base import MemoryBase, check_memory_id
from .derived import check_based_on, check_sources
from .purge import purge_resource
from .semantic import BackfillReport, backfill
from .temporal import TimeWindow, event_window
from .validation import (
    check_expires_at,
    check_filter,
    check_happened_at,
    check_id,
    check_importance,
    check_kind,
    check_provenance,
    episode_content,
    normalize_fact_content,
    normalize_key,
)

__all__ = [
    "EPISODE_CAP_PER_RESOURCE",
    "EPISODE_IMPORTANCE",
    "EPISODE_MAX_AGE",
    "EpisodeDraft",
    "cleanup",
    "create_fact",
    "delete_memory",
    "draft_episode",
    "embed_missing",
    "get_memory",
    "list_memories",
    "maintain",
    "purge",
    "remember",
    "retain_episode",
    "retain_episodes",
    "sha256_hex",
    "update_fact",
    "write_episode",
]

EPISODE_MAX_AGE = timedelta(days=90)
EPISODE_CAP_PER_RESOURCE = 5_000
#: Episodes carry no importance of their own; facts default to 0.5.
EPISODE_IMPORTANCE = 0.3


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def event_params(window: TimeWindow | None) -> dict[str, Any]:
    """The event clock's columns (``store.EVENT_COLUMNS``) for ``window`` (``None``: unknown)."""
    if window is None:
        return store.NO_EVENT
    return {
        "happened_start": window.start,
        "happened_end": window.end,
        "happened_precision": window.precision,
        "happened_phrase": window.phrase[:200] or None,
    }


def _told(user_text: object, said_at: datetime | None) -> TimeWindow | None:
    """The event clock of a turn's episode: the time its user's words name, read
    against when the turn happened (``said_at``; ``None``: now). The reply is not
    read: it would double the cost of a bulk write (``bench/writes.py``) for the few
    events only a reply dates."""
    if not isinstance(user_text, str):
        return None
    return event_window(user_text, said_at or datetime.now(UTC))


def _episode_rows(turns: list[EpisodeTurn]) -> list[store.EpisodeRow]:
    """Each turn checked, built and redacted as ``retain_episode`` does, with its
    event clock, as the rows of ``store.insert_episodes``; turns with an empty side
    are left out. Pure and linear in the turns' text, so it may run off the event
    loop."""
    rows: list[store.EpisodeRow] = []
    for turn in turns:
        session_id = check_id("session_id", turn.session_id)
        created_at = check_time("created_at", turn.created_at)
        built = episode_content(turn.user_text, turn.assistant_text)
        if built is not None:
            event = event_params(_told(turn.user_text, created_at))
            rows.append((session_id, built[0], sha256_hex(built[0]), created_at, *event.values()))
    return rows


def _optional_id(field: str, value: str | None) -> str | None:
    return None if value is None else check_id(field, value)


def _fact_params(
    resource_id: str,
    content: str,
    key: str | None,
    importance: float,
    session_id: str | None,
    expires_at: datetime | None,
    provenance: Provenance | None,
    based_on: Sequence[str | int] | None,
    happened_at: str | None,
) -> dict[str, Any]:
    """A new fact's statement parameters, each field checked and normalized as
    ``remember`` and ``create_fact`` both require (in this order, so the first bad
    field is the one named). The event clock is the writer's ``happened_at``, else
    the time the content names, read against now."""
    resource_id = check_id("resource_id", resource_id)
    content = normalize_fact_content(content)
    key = normalize_key(key)
    importance = check_importance(importance)
    session_id = _optional_id("session_id", session_id)
    now = datetime.now(UTC)
    event = check_happened_at(happened_at, now) or event_window(content, now)
    return {
        **event_params(event),
        "resource_id": resource_id,
        "session_id": session_id,
        "key": key,
        "content": content,
        "sha": sha256_hex(content),
        "importance": importance,
        "expires_at": check_expires_at(expires_at),
        **store.provenance_params(check_provenance(provenance)),
        "based_on": derived_sql.based_on_param(check_based_on(based_on)),
    }


def _check_purge(kind: Kind | None, purge: bool) -> None:
    if purge and kind == "episode":
        raise ValidationError("purge", "only a fact has earlier versions to purge, not an episode")


@dataclass(frozen=True, slots=True)
class EpisodeDraft:
    """A turn's episode ready to write: checked and built (capped, redacted)."""

    resource_id: str
    session_id: str
    content: str
    created_at: datetime | None
    provenance: Provenance | None = None
    #: When what the user told happened (the event clock); ``None``: it names no time.
    event: TimeWindow | None = None


# Retention, fact and episode management, cleanup, maintenance and backfill: the
# operations of ``LongTermMemory`` (``memory.longterm``), plain functions of the service's
# state (``MemoryBase``) bound as its methods there. Reading and deleting is one call per
# verb for either kind: ``list`` (with a ``MemoryFilter``), ``get`` and ``delete`` (with an
# optional ``kind``).


# --- retention ------------------------------------------------------------------------


async def retain_episode(
    self: MemoryBase,
    resource_id: str,
    session_id: str,
    user_text: str,
    assistant_text: str,
    *,
    created_at: datetime | None = None,
    provenance: Provenance | None = None,
) -> Memory | None:
    """Store the episode of one completed turn; ``None`` when either text is empty.

    User text is capped at 4,000 and assistant text at 8,000 characters with
    an explicit ``[truncated: N more characters]`` marker; credentials are
    redacted first. An identical episode in the same resource is not stored
    twice (the existing one is returned). ``created_at`` keeps an imported
    turn's real time.
    """
    draft = await draft_episode(
        self,
        resource_id,
        session_id,
        user_text,
        assistant_text,
        created_at=created_at,
        provenance=provenance,
    )
    if draft is None:
        return None
    async with self._pool.connection() as conn:
        return await write_episode(self, conn, draft)


async def draft_episode(
    self: MemoryBase,
    resource_id: str,
    session_id: str,
    user_text: str,
    assistant_text: str,
    *,
    created_at: datetime | None = None,
    provenance: Provenance | None = None,
) -> EpisodeDraft | None:
    """``retain_episode`` up to the write: checked, built and redacted; ``None``
    when either text is empty. Write it with ``write_episode``."""
    resource_id = check_id("resource_id", resource_id)
    session_id = check_id("session_id", session_id)
    created_at = check_time("created_at", created_at)
    built = await off_loop(
        text_size(user_text, assistant_text), episode_content, user_text, assistant_text
    )
    if built is None:
        return None
    content = built[0]
    provenance = check_provenance(provenance)
    event = _told(user_text, created_at)
    return EpisodeDraft(resource_id, session_id, content, created_at, provenance, event)


async def write_episode(self: MemoryBase, conn: Conn, draft: EpisodeDraft) -> Memory:
    """Write a drafted episode on ``conn``, inside the caller's transaction when it
    holds one: a chat turn stores its final message, its end and its episode
    together, so a crash leaves all of them or none. Its vectors are pending
    from the commit on; the vector worker, notified here, writes them."""
    memory, inserted = await store.insert_episode(
        conn,
        resource_id=draft.resource_id,
        session_id=draft.session_id,
        content=draft.content,
        sha=sha256_hex(draft.content),
        importance=EPISODE_IMPORTANCE,
        created_at=draft.created_at,
        provenance=draft.provenance,
        event=event_params(draft.event),
    )
    if inserted:
        self._vectors_pending(draft.resource_id)
    return memory


async def retain_episodes(
    self: MemoryBase, resource_id: str, turns: Sequence[EpisodeTurn], *, origin: str = "library"
) -> int:
    """Store many turns in one statement (imports, benchmarks); return how many were new.

    The same rules as ``retain_episode`` apply to each turn; turns with an
    empty side are skipped, and the whole batch is validated before anything
    is written.
    """
    resource_id = check_id("resource_id", resource_id)
    origin = check_provenance(Provenance(origin=origin)).origin
    size = sum(text_size(t.user_text, t.assistant_text) for t in turns)
    rows = await off_loop(size, _episode_rows, list(turns))
    async with self._pool.connection() as conn:
        inserted = await store.insert_episodes(
            conn,
            resource_id=resource_id,
            importance=EPISODE_IMPORTANCE,
            rows=rows,
            origin=origin,
        )
    if inserted:
        self._vectors_pending(resource_id)
    return inserted


async def remember(
    self: MemoryBase,
    resource_id: str,
    content: str,
    *,
    key: str | None = None,
    importance: float = 0.5,
    session_id: str | None = None,
    expires_at: datetime | None = None,
    provenance: Provenance | None = None,
    based_on: Sequence[str | int] | None = None,
    happened_at: str | None = None,
) -> RememberResult:
    """Store a durable fact: upsert by ``key``, or deduplicate a keyless one by content hash.

    Content is normalized (NFC, whitespace collapsed, trimmed) and must be 1
    to 2,000 characters; keys are trimmed and lower-cased; credentials are
    refused with ``SecretRefusedError``. The result says whether the fact was
    created, updated (same key, new value) or unchanged.

    An update keeps the replaced value as a version (``fact_history``);
    ``expires_at`` (in the future) ends the fact then: it is never recalled
    after it, and maintenance removes it. ``provenance`` records where the
    write came from (``origin``, turn, source messages, tool call).
    ``based_on`` names what the fact was derived from (fact keys, memory ids of
    this resource): when one of them changes or goes, the fact is marked stale
    (``Memory.stale_since``); an unknown source or a cycle is a ``ValidationError``.
    ``happened_at`` gives its event clock (``FactOptions``; docs/time.md); left
    out, it is read from the content. A fact that is unchanged keeps the event
    clock it was first told with.
    """
    params = _fact_params(
        resource_id,
        content,
        key,
        importance,
        session_id,
        expires_at,
        provenance,
        based_on,
        happened_at,
    )
    resource_id = params["resource_id"]
    upsert = store.upsert_fact_by_key if params["key"] is not None else store.upsert_fact_by_hash
    async with self._pool.connection() as conn:
        # A concurrent delete can remove the row between the upsert and the
        # read-back; the second attempt then creates it.
        for _attempt in range(3):
            async with conn.transaction():
                outcome = await upsert(conn, **params)
                if outcome is not None:
                    await check_sources(conn, outcome[0])
            if outcome is not None:
                memory, action = outcome
                if action != "unchanged":
                    self._vectors_pending(resource_id)
                return RememberResult(memory=memory, action=action)  # type: ignore[arg-type]
    raise RuntimeError("remember could not settle against concurrent deletes")


async def embed_missing(
    self: MemoryBase,
    resource_id: str | None,
    *,
    batch_size: int = 64,
    max_memories: int | None = None,
    prune: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> BackfillReport:
    """Embed this resource's memories (``None``: every resource's) that have no vector
    of the embedder's model; resumable (see ``popagent.memory.semantic.backfill``).

    ``prune`` also deletes those resources' vectors of other models. Needs an embedder.
    """
    if self._embedder is None:
        raise ValidationError("embedder", "embedding memories needs an embedder")
    resources = [check_id("resource_id", resource_id)] if resource_id is not None else None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValidationError("batch_size", "must be an integer >= 1")
    return await backfill(
        self._pool,
        self._embedder,
        resources,
        batch_size=batch_size,
        max_memories=max_memories,
        prune=prune,
        on_start=on_start,
        on_batch=on_batch,
    )


# --- facts ----------------------------------------------------------------------------


async def create_fact(
    self: MemoryBase,
    resource_id: str,
    content: str,
    *,
    key: str | None = None,
    importance: float = 0.5,
    session_id: str | None = None,
    expires_at: datetime | None = None,
    provenance: Provenance | None = None,
    based_on: Sequence[str | int] | None = None,
    happened_at: str | None = None,
) -> Memory:
    """Strict create (management): ``ConflictError`` if the key is taken or an
    identical keyless fact exists. ``remember`` is the upserting write."""
    params = _fact_params(
        resource_id,
        content,
        key,
        importance,
        session_id,
        expires_at,
        provenance,
        based_on,
        happened_at,
    )
    async with self._pool.connection() as conn, conn.transaction():
        memory = await store.insert_fact(conn, **params)
        await check_sources(conn, memory)
    self._vectors_pending(params["resource_id"])
    return memory


async def update_fact(
    self: MemoryBase,
    resource_id: str,
    id: int,
    *,
    content: str | None = None,
    key: str | None = None,
    clear_key: bool = False,
    importance: float | None = None,
    expires_at: datetime | None = None,
    clear_expiry: bool = False,
    session_id: str | None = None,
    provenance: Provenance | None = None,
    based_on: Sequence[str | int] | None = None,
    happened_at: str | None = None,
) -> Memory:
    """Change a fact's content, key (``clear_key`` removes it), importance and/or
    expiry (``clear_expiry`` removes it). ``happened_at`` sets its event clock; new
    content without it takes the time the content names (none: unknown), and a
    fact whose content stays keeps its event clock.

    The same rules as ``remember``; a key taken by another fact, or content
    identical to another keyless fact, is a ``ConflictError``. A real change
    keeps the replaced value as a version and records ``provenance`` and
    ``session_id`` as the new value's; no change writes nothing. ``based_on``
    replaces the fact's sources (an empty list: none; left out: kept). A change
    clears the fact's own stale mark.
    """
    resource_id = check_id("resource_id", resource_id)
    if clear_key and key is not None:
        raise ValidationError("key", "give a key or clear_key, not both")
    if clear_expiry and expires_at is not None:
        raise ValidationError("expires_at", "give expires_at or clear_expiry, not both")
    new_expiry = check_expires_at(expires_at)
    session_id = _optional_id("session_id", session_id)
    written_by = store.provenance_params(check_provenance(provenance))
    new_content = normalize_fact_content(content) if content is not None else None
    new_key = normalize_key(key)
    new_importance = check_importance(importance) if importance is not None else None
    new_sources = check_based_on(based_on) if based_on is not None else None
    now = datetime.now(UTC)
    new_event = check_happened_at(happened_at, now)
    async with self._pool.connection() as conn, conn.transaction():
        current = await store.get_memory(conn, resource_id, id, "fact")
        if current is None:
            raise NotFoundError(f"no fact {id} in this resource")
        final_content = new_content if new_content is not None else current.content
        if new_event is not None:
            event = event_params(new_event)
        elif final_content != current.content:
            event = event_params(event_window(final_content, now))
        else:
            event = {c: getattr(current, c) for c in store.EVENT_COLUMNS}
        updated = await store.update_fact(
            conn,
            resource_id=resource_id,
            id=id,
            content=final_content,
            sha=sha256_hex(final_content),
            key=None if clear_key else (new_key if new_key is not None else current.key),
            importance=new_importance if new_importance is not None else current.importance,
            expires_at=None if clear_expiry else (new_expiry or current.expires_at),
            session_id=session_id,
            based_on=derived_sql.based_on_param(
                current.based_on if based_on is None else new_sources
            ),
            **event,
            **written_by,
        )
        if updated is None:  # nothing changed: the statement wrote nothing
            return current
        await check_sources(conn, updated)
    # The content triggers dropped the old vectors and queued the new text.
    if updated.content_sha256 != current.content_sha256:
        self._vectors_pending(resource_id)
    return updated


# --- any kind -------------------------------------------------------------------------


async def list_memories(
    self: MemoryBase, resource_id: str, where: MemoryFilter | None = None
) -> builtins.list[Memory]:
    """This resource's memories that ``where`` selects, newest first (``None``: the
    50 newest of either kind). ``where`` is checked and normalized in one place,
    ``popagent.memory.validation.check_filter``; a bad field is a
    ``ValidationError`` naming it."""
    resource_id = check_id("resource_id", resource_id)
    where = check_filter(MemoryFilter() if where is None else where)
    async with self._pool.connection() as conn:
        return await store.list_memories(conn, resource_id, where)


async def get_memory(
    self: MemoryBase, resource_id: str, id: int, *, kind: Kind | None = None
) -> Memory:
    """Memory ``id`` of this resource, of ``kind`` when given (``None``: a fact or an
    episode); ``NotFoundError`` otherwise ("no fact 3 in this resource", "no memory
    3 in this resource")."""
    resource_id = check_id("resource_id", resource_id)
    id = check_memory_id(id)
    kind = check_kind(kind)
    async with self._pool.connection() as conn:
        memory = await store.get_memory(conn, resource_id, id, kind)
    if memory is None:
        raise NotFoundError(f"no {kind or 'memory'} {id} in this resource")
    return memory


async def delete_memory(
    self: MemoryBase,
    resource_id: str,
    id: int,
    *,
    kind: Kind | None = None,
    purge: bool = False,
    origin: str = "library",
    session_id: str | None = None,
) -> None:
    """Delete memory ``id`` of this resource, of ``kind`` when given (``None``: whichever
    kind it is); ``NotFoundError`` ("no fact 3 in this resource") when there is none.

    A fact's last value stays in its history (readable with ``fact_history``,
    restorable) unless ``purge``, which removes every version too; with
    ``kind="fact"`` that also purges the history of a fact deleted earlier.
    ``origin`` and ``session_id`` record who ended the fact. An episode just
    goes: it has no history, so ``purge`` is refused for one.
    """
    origin = check_provenance(Provenance(origin=origin)).origin
    session_id = _optional_id("session_id", session_id)
    resource_id = check_id("resource_id", resource_id)
    id = check_memory_id(id)
    if not isinstance(purge, bool):
        raise ValidationError("purge", "must be true or false")
    kind = check_kind(kind)
    _check_purge(kind, purge)
    async with self._pool.connection() as conn, conn.transaction():
        if kind is None:
            found = await store.get_memory(conn, resource_id, id)
            if found is None:
                raise NotFoundError(f"no memory {id} in this resource")
            kind = found.kind
            _check_purge(kind, purge)
        deleted = await store.delete_memory(
            conn,
            resource_id,
            id,
            kind,
            purge=purge,
            ended_origin=origin,
            ended_session_id=session_id,
        )
    if not deleted:
        raise NotFoundError(f"no {kind} {id} in this resource")


async def cleanup(
    self: MemoryBase,
    resource_id: str,
    *,
    kind: Kind | None = None,
    older_than: datetime | None = None,
) -> int:
    """Explicitly delete this resource's long-term memory; return the rows deleted.

    With no filter, every fact and episode of the resource goes; ``kind``
    and ``older_than`` (by creation time) narrow it. This is the only way,
    besides maintenance for old episodes, that long-term memory is removed.
    """
    resource_id = check_id("resource_id", resource_id)
    kind = check_kind(kind)
    older_than = check_time("older_than", older_than)
    async with self._pool.connection() as conn:
        return await store.cleanup(conn, resource_id, kind=kind, older_than=older_than)


async def purge(self: MemoryBase, resource_id: str, *, vacuum: bool = True) -> PurgeReport:
    """Remove everything of this resource, not only its long-term memory: facts with
    every version, episodes, vectors, sessions, messages, observations, settings,
    secrets and audit rows, in one transaction; then ``VACUUM`` (skip with
    ``vacuum=False``). See ``popagent.memory.purge``."""
    return await purge_resource(self._pool, resource_id, vacuum=vacuum)


async def maintain(
    self: MemoryBase, *, now: datetime | None = None, resource_id: str | None = None
) -> MaintenanceReport:
    """Daily retention: episodes older than 90 days go, each resource keeps at most
    its 5,000 newest episodes, and facts past their ``expires_at`` go (their last
    value kept as a version). No other fact is ever pruned.

    Runs under an advisory lock in one transaction, so two processes at
    once never interleave; running it again at once deletes nothing.
    ``resource_id`` applies the same rules to that resource alone.
    """
    now = check_time("now", now) or datetime.now(UTC)
    resource_id = _optional_id("resource_id", resource_id)
    async with self._pool.connection() as conn, conn.transaction():
        await store.lock_maintenance(conn)
        expired = await store.delete_expired_episodes(conn, now - EPISODE_MAX_AGE, resource_id)
        capped = await store.delete_over_cap_episodes(conn, EPISODE_CAP_PER_RESOURCE, resource_id)
        expired_facts = await store.expire_facts(conn, now, resource_id)
    return MaintenanceReport(
        expired_episodes=expired, capped_episodes=capped, expired_facts=expired_facts
    )
