"""``LongTermMemory``: the service over ``popagent_memories``.

This is the layer that owns transactions: each public method validates its
input completely, then opens one transaction (or none, for a single
statement) on a pooled connection and calls the store functions. A call that
raises has changed nothing.

Every method takes ``resource_id`` first; nothing here reads or writes across
resources except ``maintain``, which applies the retention policy to all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from ..checks import check_time
from ..errors import NotFoundError, ValidationError
from ..models import (
    CorpusStats,
    EpisodeTurn,
    Kind,
    MaintenanceReport,
    Memory,
    RecallResult,
    RememberResult,
)
from ..store import memories as store
from ..store import recall as recall_sql
from ..store.database import Pool
from .ranking import DEFAULT_WEIGHTS, RankingWeights, idf, rank
from .render import DEFAULT_BUDGET, render
from .validation import (
    check_id,
    check_importance,
    check_limit,
    check_query,
    episode_content,
    normalize_fact_content,
    normalize_key,
)

__all__ = [
    "EPISODE_CAP_PER_RESOURCE",
    "EPISODE_IMPORTANCE",
    "EPISODE_MAX_AGE",
    "LongTermMemory",
    "candidate_idfs",
    "recall_pool",
]

EPISODE_MAX_AGE = timedelta(days=90)
EPISODE_CAP_PER_RESOURCE = 5_000
#: Episodes carry no importance of their own; facts default to 0.5.
EPISODE_IMPORTANCE = 0.3
LIST_LIMIT_CAP = 1_000


def recall_pool(limit: int) -> int:
    """How many candidates recall scores for ``limit`` results.

    The candidates come pre-ordered by the IDF of the query words they hold,
    which is close to the final order; LoCoMo's evidence recall was the same
    with 32 as with 48 at ``limit`` 10.
    """
    return max(limit * 3, 32)


def candidate_idfs(stats: CorpusStats) -> dict[str, float]:
    """The IDF of each lexeme that may propose candidates (their pre-order weights)."""
    return {
        lex: idf(stats.documents, df) for lex, df in recall_sql.candidate_lexemes(stats).items()
    }


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_kind(value: object) -> Kind | None:
    if value is None or value in ("fact", "episode"):
        return value
    raise ValidationError("kind", "must be 'fact' or 'episode'")


def _check_offset(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError("offset", "must be an integer >= 0")
    return value


class LongTermMemory:
    """Facts and episodes of many resources, with recall, management and maintenance.

    Obtain one with ``popagent.connect()``; it borrows connections from the pool
    for each call and holds none between calls.
    """

    def __init__(self, pool: Pool, *, weights: RankingWeights = DEFAULT_WEIGHTS) -> None:
        self._pool = pool
        self.weights = weights

    @property
    def pool(self) -> Pool:
        return self._pool

    # --- retention ------------------------------------------------------------------------

    async def retain_episode(
        self,
        resource_id: str,
        session_id: str,
        user_text: str,
        assistant_text: str,
        *,
        created_at: datetime | None = None,
    ) -> Memory | None:
        """Store the episode of one completed turn; ``None`` when either text is empty.

        User text is capped at 4,000 and assistant text at 8,000 characters with
        an explicit ``[truncated: N more characters]`` marker; credentials are
        redacted first. An identical episode in the same resource is not stored
        twice (the existing one is returned). ``created_at`` keeps an imported
        turn's real time.
        """
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        created_at = check_time("created_at", created_at)
        built = episode_content(user_text, assistant_text)
        if built is None:
            return None
        content, _redacted = built
        async with self._pool.connection() as conn:
            memory, _inserted = await store.insert_episode(
                conn,
                resource_id=resource_id,
                session_id=session_id,
                content=content,
                sha=sha256_hex(content),
                importance=EPISODE_IMPORTANCE,
                created_at=created_at,
            )
        return memory

    async def retain_episodes(self, resource_id: str, turns: Sequence[EpisodeTurn]) -> int:
        """Store many turns in one statement (imports, benchmarks); return how many were new.

        The same rules as ``retain_episode`` apply to each turn; turns with an
        empty side are skipped, and the whole batch is validated before anything
        is written.
        """
        resource_id = check_id("resource_id", resource_id)
        rows: list[tuple[str, str, str, datetime | None]] = []
        for turn in turns:
            session_id = check_id("session_id", turn.session_id)
            created_at = check_time("created_at", turn.created_at)
            built = episode_content(turn.user_text, turn.assistant_text)
            if built is not None:
                rows.append((session_id, built[0], sha256_hex(built[0]), created_at))
        async with self._pool.connection() as conn, conn.transaction():
            return await store.insert_episodes(
                conn, resource_id=resource_id, importance=EPISODE_IMPORTANCE, rows=rows
            )

    async def remember(
        self,
        resource_id: str,
        content: str,
        *,
        key: str | None = None,
        importance: float = 0.5,
        session_id: str | None = None,
    ) -> RememberResult:
        """Store a durable fact: upsert by ``key``, or deduplicate a keyless one by content hash.

        Content is normalized (NFC, whitespace collapsed, trimmed) and must be 1
        to 2,000 characters; keys are trimmed and lower-cased; credentials are
        refused with ``SecretRefusedError``. The result says whether the fact was
        created, updated (same key, new value) or unchanged.
        """
        resource_id = check_id("resource_id", resource_id)
        content = normalize_fact_content(content)
        key = normalize_key(key)
        importance = check_importance(importance)
        if session_id is not None:
            session_id = check_id("session_id", session_id)
        params = {
            "resource_id": resource_id,
            "session_id": session_id,
            "key": key,
            "content": content,
            "sha": sha256_hex(content),
            "importance": importance,
        }
        upsert = store.upsert_fact_by_key if key is not None else store.upsert_fact_by_hash
        async with self._pool.connection() as conn:
            # A concurrent delete can remove the row between the upsert and the
            # read-back; the second attempt then creates it.
            for _attempt in range(3):
                async with conn.transaction():
                    outcome = await upsert(conn, **params)
                if outcome is not None:
                    memory, action = outcome
                    return RememberResult(memory=memory, action=action)  # type: ignore[arg-type]
        raise RuntimeError("remember could not settle against concurrent deletes")

    # --- recall ---------------------------------------------------------------------------

    async def recall(
        self,
        resource_id: str,
        query: str,
        *,
        limit: int = 8,
        now: datetime | None = None,
    ) -> list[RecallResult]:
        """The ``limit`` (1 to 1,000) most relevant memories of this resource, best first.

        Each result explains its score (see ``popagent.memory.ranking``). The
        returned memories' access time and count are updated; that bookkeeping
        never blocks on rows another transaction holds. ``now`` (timezone-aware)
        makes recency relative to another moment, as imports and benchmarks need.
        """
        resource_id = check_id("resource_id", resource_id)
        query = check_query(query)
        limit = check_limit(limit)
        now = check_time("now", now) or datetime.now(UTC)
        async with self._pool.connection() as conn:
            # No transaction: each statement reads a consistent snapshot, and a
            # write landing between them can only shift a score, never leak or
            # lose a row of another resource.
            stats = await recall_sql.corpus_stats(conn, resource_id, query)
            candidates = await recall_sql.candidates(
                conn, resource_id, stats, idfs=candidate_idfs(stats), pool=recall_pool(limit)
            )
            results = rank(candidates, stats, now=now, limit=limit, weights=self.weights)
            if not results:
                return []
            touched = await store.touch_accessed(conn, resource_id, [r.memory.id for r in results])
        return [
            replace(
                r,
                memory=replace(
                    r.memory,
                    accessed_at=touched[r.memory.id][0],
                    access_count=touched[r.memory.id][1],
                ),
            )
            if r.memory.id in touched
            else r
            for r in results
        ]

    @staticmethod
    def render(results: Sequence[RecallResult], *, budget: int = DEFAULT_BUDGET) -> str:
        """The labelled context block for ``results`` (``popagent.render``)."""
        return render(results, budget=budget)

    # --- facts ----------------------------------------------------------------------------

    async def list_facts(
        self,
        resource_id: str,
        *,
        key: str | None = None,
        text: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        """Facts of this resource, newest first; filter by exact ``key`` or substring ``text``."""
        return await self._list(resource_id, "fact", key=key, text=text, limit=limit, offset=offset)

    async def get_fact(self, resource_id: str, id: int) -> Memory:
        return await self._get(resource_id, id, "fact")

    async def create_fact(
        self,
        resource_id: str,
        content: str,
        *,
        key: str | None = None,
        importance: float = 0.5,
        session_id: str | None = None,
    ) -> Memory:
        """Strict create (management): ``ConflictError`` if the key is taken or an
        identical keyless fact exists. ``remember`` is the upserting write."""
        resource_id = check_id("resource_id", resource_id)
        content = normalize_fact_content(content)
        key = normalize_key(key)
        importance = check_importance(importance)
        if session_id is not None:
            session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            return await store.insert_fact(
                conn,
                resource_id=resource_id,
                session_id=session_id,
                key=key,
                content=content,
                sha=sha256_hex(content),
                importance=importance,
            )

    async def update_fact(
        self,
        resource_id: str,
        id: int,
        *,
        content: str | None = None,
        key: str | None = None,
        clear_key: bool = False,
        importance: float | None = None,
    ) -> Memory:
        """Change a fact's content, key (``clear_key`` removes it) and/or importance.

        The same rules as ``remember``; a key taken by another fact, or content
        identical to another keyless fact, is a ``ConflictError``.
        """
        resource_id = check_id("resource_id", resource_id)
        if clear_key and key is not None:
            raise ValidationError("key", "give a key or clear_key, not both")
        new_content = normalize_fact_content(content) if content is not None else None
        new_key = normalize_key(key)
        new_importance = check_importance(importance) if importance is not None else None
        async with self._pool.connection() as conn, conn.transaction():
            current = await store.get_memory(conn, resource_id, id, "fact")
            if current is None:
                raise NotFoundError(f"no fact {id} in this resource")
            final_content = new_content if new_content is not None else current.content
            updated = await store.update_fact(
                conn,
                resource_id=resource_id,
                id=id,
                content=final_content,
                sha=sha256_hex(final_content),
                key=None if clear_key else (new_key if new_key is not None else current.key),
                importance=new_importance if new_importance is not None else current.importance,
            )
        if updated is None:
            raise NotFoundError(f"no fact {id} in this resource")
        return updated

    async def delete_fact(self, resource_id: str, id: int) -> None:
        await self._delete(resource_id, id, "fact")

    # --- episodes -------------------------------------------------------------------------

    async def list_episodes(
        self,
        resource_id: str,
        *,
        session_id: str | None = None,
        text: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        """Episodes of this resource, newest first. Episodes are immutable: there is no update."""
        return await self._list(
            resource_id,
            "episode",
            session_id=session_id,
            text=text,
            created_after=created_after,
            created_before=created_before,
            limit=limit,
            offset=offset,
        )

    async def get_episode(self, resource_id: str, id: int) -> Memory:
        return await self._get(resource_id, id, "episode")

    async def delete_episode(self, resource_id: str, id: int) -> None:
        await self._delete(resource_id, id, "episode")

    # --- any kind -------------------------------------------------------------------------

    async def list_memories(
        self,
        resource_id: str,
        *,
        kind: Kind | None = None,
        key: str | None = None,
        session_id: str | None = None,
        text: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        """Facts and episodes together, newest first, with every filter."""
        return await self._list(
            resource_id,
            _check_kind(kind),
            key=key,
            session_id=session_id,
            text=text,
            created_after=created_after,
            created_before=created_before,
            limit=limit,
            offset=offset,
        )

    async def get(self, resource_id: str, id: int) -> Memory:
        """A fact or episode of this resource by id; ``NotFoundError`` otherwise."""
        return await self._get(resource_id, id, None)

    async def cleanup(
        self,
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
        kind = _check_kind(kind)
        older_than = check_time("older_than", older_than)
        async with self._pool.connection() as conn:
            return await store.cleanup(conn, resource_id, kind=kind, older_than=older_than)

    async def maintain(self, *, now: datetime | None = None) -> MaintenanceReport:
        """Daily retention: episodes older than 90 days go, and each resource keeps at most
        its 5,000 newest episodes. Facts are never pruned.

        Runs under an advisory lock in one transaction, so two processes at
        once never interleave; running it again at once deletes nothing.
        """
        now = check_time("now", now) or datetime.now(UTC)
        async with self._pool.connection() as conn, conn.transaction():
            await store.lock_maintenance(conn)
            expired = await store.delete_expired_episodes(conn, now - EPISODE_MAX_AGE)
            capped = await store.delete_over_cap_episodes(conn, EPISODE_CAP_PER_RESOURCE)
        return MaintenanceReport(expired_episodes=expired, capped_episodes=capped)

    # --- shared helpers -------------------------------------------------------------------

    async def _get(self, resource_id: str, id: int, kind: Kind | None) -> Memory:
        resource_id = check_id("resource_id", resource_id)
        id = _check_memory_id(id)
        async with self._pool.connection() as conn:
            memory = await store.get_memory(conn, resource_id, id, kind)
        if memory is None:
            raise NotFoundError(f"no {kind or 'memory'} {id} in this resource")
        return memory

    async def _delete(self, resource_id: str, id: int, kind: Kind) -> None:
        resource_id = check_id("resource_id", resource_id)
        id = _check_memory_id(id)
        async with self._pool.connection() as conn:
            deleted = await store.delete_memory(conn, resource_id, id, kind)
        if not deleted:
            raise NotFoundError(f"no {kind} {id} in this resource")

    async def _list(
        self,
        resource_id: str,
        kind: Kind | None,
        *,
        key: str | None = None,
        session_id: str | None = None,
        text: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        resource_id = check_id("resource_id", resource_id)
        async with self._pool.connection() as conn:
            return await store.list_memories(
                conn,
                resource_id,
                kind=kind,
                key=normalize_key(key),
                session_id=check_id("session_id", session_id) if session_id is not None else None,
                text=check_query(text, "text") if text is not None else None,
                created_after=check_time("created_after", created_after),
                created_before=check_time("created_before", created_before),
                limit=check_limit(limit, cap=LIST_LIMIT_CAP),
                offset=_check_offset(offset),
            )


def _check_memory_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError("id", "must be a positive integer")
    return value
