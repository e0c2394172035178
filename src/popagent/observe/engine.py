"""``ObservationalMemory``: the synchronous observational-memory engine of one thread.

Per turn, ``prepare`` reads the session's head generation and its unobserved
messages (every message after the cursor), observes when their tokens reach
the snapshot's threshold, reflects when the log reaches the reflection
threshold, and returns what the turn's context is built from.

Invariants:
- Thread-scoped: it reads and writes only the given resource's session rows
  (``popagent_messages``, ``popagent_observation_logs``/``_groups``); it
  never touches ``popagent_memories``. Raw messages are never changed.
- Observation covers the oldest unobserved messages except the retained tail
  (at least ``retained_floor_tokens``, never starting on a tool result); the
  cursor moves to the last observed message id. Each batch is one group with
  its first and last source message id.
- All model calls of one ``prepare`` share one deadline (``timeout_s``). A
  failed, slow, empty or looping Observer leaves the log as it was and the
  turn falls back to raw recent messages (``degraded`` says why); a bad
  reflection never replaces the log. Nothing here empties the context.
- A reflection inserts a new generation (the old one stays stored) holding one
  ``reflection`` group whose pointer spans the groups it covers. After an
  unproductive reflection, the next one waits until the log grew by a tenth
  of the threshold (no reflection on every turn).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from ..llm.protocol import ChatModel
from ..models import Message, ObservationGroup, ObservationLog
from ..store import observations as obs_sql
from ..store import threads as thread_sql
from ..store.database import Pool
from .observer import ObservationFailed, build_observer_messages, run_observer
from .reflector import Reflection, reflect
from .settings_store import MemorySettingsStore
from .snapshot import ExecutionSnapshot
from .tokens import TokenCounter, count_message, count_text

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_UNOBSERVED", "ObservationalMemory", "ObservedContext"]

#: The default bound on all Observer/Reflector calls of one turn, in seconds.
DEFAULT_TIMEOUT_S = 30.0
#: At most this many unobserved messages are read per turn.
MAX_UNOBSERVED = 10_000


@dataclass(frozen=True, slots=True)
class ObservedContext:
    """What a turn's context is built from.

    ``groups`` are the active observation groups (their text joined is
    ``log.observations``); ``recent`` the raw messages after the cursor that
    stay in context, oldest first. ``degraded`` is why the engine fell back
    to raw context this turn (``None`` when it did not).
    """

    snapshot: ExecutionSnapshot
    log: ObservationLog | None
    groups: tuple[ObservationGroup, ...]
    recent: tuple[Message, ...]
    pending_tokens: int
    observed: bool
    reflection: Reflection | None
    degraded: str | None
    last_message_at: datetime | None


def retained_split(messages: Sequence[Message], floor: int, counter: TokenCounter | None) -> int:
    """Index where the retained tail starts: the shortest suffix holding at least
    ``floor`` tokens (none for 0), moved back so it never starts on a tool result."""
    split = len(messages)
    kept = 0
    while split > 0 and kept < floor:
        split -= 1
        kept += count_message(messages[split], counter)
    while 0 < split < len(messages) and messages[split].role == "tool":
        split -= 1
    return split


class ObservationalMemory:
    """The engine over one pool and one Observer/Reflector model."""

    def __init__(
        self,
        pool: Pool,
        model: ChatModel,
        *,
        counter: TokenCounter | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        fallback_limit: int = 40,
    ) -> None:
        self.check_bounds(timeout_s, fallback_limit)
        self.pool = pool
        self.model = model
        self.counter = counter
        self.timeout_s = timeout_s
        self.fallback_limit = fallback_limit
        self.settings = MemorySettingsStore(pool)

    @staticmethod
    def check_bounds(timeout_s: float, fallback_limit: int) -> None:
        """Raise ``ValueError`` unless 0 < ``timeout_s`` ≤ 3600 and 1 ≤ ``fallback_limit`` ≤ 1000."""
        if not 0 < timeout_s <= 3_600:
            raise ValueError("timeout_s must be in (0, 3600]")
        if isinstance(fallback_limit, bool) or not 1 <= fallback_limit <= 1_000:
            raise ValueError("fallback_limit must be between 1 and 1000")

    async def snapshot(self, resource_id: str) -> ExecutionSnapshot:
        """The resource's settings as of now: take it once per turn."""
        return await self.settings.snapshot(resource_id)

    async def generations(self, resource_id: str, session_id: str) -> list[ObservationLog]:
        """Every stored generation of the session's log, oldest first."""
        async with self.pool.connection() as conn:
            return await obs_sql.list_logs(conn, resource_id, session_id)

    async def active_groups(self, resource_id: str, session_id: str) -> list[ObservationGroup]:
        async with self.pool.connection() as conn:
            head = await obs_sql.head_log(conn, resource_id, session_id)
            return [] if head is None else await obs_sql.groups_of_log(conn, head)

    async def prepare(
        self, resource_id: str, session_id: str, snapshot: ExecutionSnapshot
    ) -> ObservedContext:
        """Observe and reflect when due (see the module doc); the turn's context parts."""
        deadline = time.monotonic() + self.timeout_s
        async with self.pool.connection() as conn:
            head = await obs_sql.head_log(conn, resource_id, session_id)
            unobserved = await thread_sql.list_messages(
                conn,
                resource_id,
                session_id,
                after_id=head.last_observed_message_id if head else None,
                limit=MAX_UNOBSERVED,
            )
        last_at = unobserved[-1].created_at if unobserved else None
        pending = sum(count_message(m, self.counter) for m in unobserved)
        observed = False
        degraded: str | None = None
        threshold = snapshot.message_threshold(head.observation_tokens if head else 0)
        if pending >= threshold:
            split = retained_split(unobserved, snapshot.retained_floor_tokens, self.counter)
            batch = unobserved[:split]
            if batch:
                try:
                    head = await self._observe(head, batch, snapshot, deadline, session_id)
                    unobserved = unobserved[split:]
                    observed = True
                except ObservationFailed as exc:
                    degraded = str(exc)
        reflection: Reflection | None = None
        if head is not None and head.observation_tokens >= max(
            snapshot.reflection_observation_tokens, head.next_reflection_tokens
        ):
            head, reflection = await self._reflect(head, snapshot, deadline)
        groups: list[ObservationGroup] = []
        if head is not None:
            async with self.pool.connection() as conn:
                groups = await obs_sql.groups_of_log(conn, head)
        recent = unobserved[-self.fallback_limit :] if degraded else unobserved
        return ObservedContext(
            snapshot=snapshot,
            log=head,
            groups=tuple(groups),
            recent=tuple(recent),
            pending_tokens=pending,
            observed=observed,
            reflection=reflection,
            degraded=degraded,
            last_message_at=last_at,
        )

    async def _observe(
        self,
        head: ObservationLog | None,
        batch: Sequence[Message],
        snapshot: ExecutionSnapshot,
        deadline: float,
        session_id: str,
    ) -> ObservationLog:
        previous = head.observations if head else ""
        request = build_observer_messages(batch, previous, snapshot, self.counter)
        new = await run_observer(self.model, request, timeout_s=deadline - time.monotonic())
        text = f"{previous}\n\n{new}" if previous else new
        tokens = count_text(text, self.counter)
        resource_id = batch[0].resource_id
        try:
            async with self.pool.connection() as conn, conn.transaction():
                if head is None:
                    log = await obs_sql.insert_log(
                        conn,
                        resource_id,
                        session_id,
                        generation=0,
                        origin="observation",
                        observations=text,
                        observation_tokens=tokens,
                        last_observed_message_id=batch[-1].id,
                    )
                else:
                    advanced = await obs_sql.advance_log(
                        conn,
                        head,
                        observations=text,
                        observation_tokens=tokens,
                        last_observed_message_id=batch[-1].id,
                    )
                    if advanced is None:
                        raise ObservationFailed("another turn observed this thread meanwhile")
                    log = advanced
                await obs_sql.insert_group(
                    conn,
                    log,
                    kind="observation",
                    first_message_id=batch[0].id,
                    last_message_id=batch[-1].id,
                    observations=new,
                    observation_tokens=count_text(new, self.counter),
                    message_tokens=sum(count_message(m, self.counter) for m in batch),
                )
        except psycopg.errors.UniqueViolation as exc:
            raise ObservationFailed("another turn observed this thread meanwhile") from exc
        return log

    async def _reflect(
        self, head: ObservationLog, snapshot: ExecutionSnapshot, deadline: float
    ) -> tuple[ObservationLog, Reflection]:
        result = await reflect(
            self.model,
            head.observations,
            snapshot,
            current_tokens=head.observation_tokens,
            deadline=deadline,
            counter=self.counter,
        )
        backoff = max(1, snapshot.reflection_observation_tokens // 10)
        async with self.pool.connection() as conn, conn.transaction():
            if result.observations is None:
                await obs_sql.set_next_reflection(conn, head, head.observation_tokens + backoff)
                return head, result
            covered = await obs_sql.groups_of_log(conn, head)
            try:
                async with conn.transaction():
                    log = await obs_sql.insert_log(
                        conn,
                        head.resource_id,
                        head.session_id,
                        generation=head.generation + 1,
                        origin="reflection",
                        observations=result.observations,
                        observation_tokens=result.observation_tokens,
                        last_observed_message_id=head.last_observed_message_id,
                        covered_group_ids=[g.id for g in covered],
                        next_reflection_tokens=(
                            0 if result.reached_target else result.observation_tokens + backoff
                        ),
                    )
            except psycopg.errors.UniqueViolation:
                return head, result  # another turn reflected first; its generation stands
            if covered:
                await obs_sql.insert_group(
                    conn,
                    log,
                    kind="reflection",
                    first_message_id=min(g.first_message_id for g in covered),
                    last_message_id=max(g.last_message_id for g in covered),
                    observations=result.observations,
                    observation_tokens=result.observation_tokens,
                    message_tokens=sum(g.message_tokens for g in covered),
                )
        return log, result
