"""``ObservationalMemory``: the observational-memory engine of one thread.

Per turn, ``prepare`` reads the session's head generation and its unobserved
messages (every message after the cursor), then:

- without async buffering (``snapshot.buffer_interval_tokens`` is ``None``),
  observes synchronously when their tokens reach the threshold;
- with async buffering, activates buffered chunks (no model call) when the
  tokens reach the threshold, or early on an idle or provider-change trigger;
  observes synchronously only when the tokens left after activation reach the
  safety bound (``observation_block_after_tokens``); and says, as
  ``ObservedContext.buffer_job``, when a new buffering interval is complete, for
  the caller to run ``buffer`` in the background;

then reflects when the log reaches the reflection threshold (with buffering:
activates a buffered reflection without a model call, reflects synchronously
only at the reflection safety bound, and asks for a background reflection,
``ObservedContext.reflect_job``, from the reflection buffer start), and
returns what the turn's context is built from.

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
- Buffered chunks are groups with status ``buffered``; the chunks that count
  continue right after the cursor, each starting on the message after the
  previous one's last (a chunk a synchronous observation overtook is deleted;
  a background run whose start no longer continues them stores nothing).
  Activation takes the longest prefix of chunks that leaves at least the
  retained floor raw (above the safety bound at least one chunk), appends
  their text to the head, turns them active in it and moves the cursor to
  their last message, in one transaction: every message is then either inside
  an active group's range or in ``recent``, never both, never neither.
- Idle and provider-change triggers activate buffered *observations* only;
  a buffered reflection is activated early only by the reflection settings
  (and Mastra's guard), never by the observation ones.
- A reflection is committed only if the head did not change while the
  Reflector ran (checked under the head row's lock); otherwise it is dropped,
  so an activation or observation made meanwhile is never lost.
- Every observations text is screened for credentials where it is stored
  (``_insert_log``, ``_advance_log``, ``_insert_group`` wrap the store's
  writes): each value becomes ``[REDACTED:<kind>]``, also in text carried
  over from rows written before the screen existed. The Observer's and
  Reflector's input and output are screened too (``observer``, ``reflector``).
- A reflection inserts a new generation (the old one stays stored) holding one
  ``reflection`` group whose pointer spans the groups it covers. After an
  unproductive reflection, the next one waits until the log grew by a tenth
  of the threshold (no reflection on every turn).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, ParamSpec, TypeVar

import psycopg

from ..credentials import redact_credentials
from ..llm.protocol import ChatModel
from ..models import Message, ObservationGroup, ObservationLog
from ..store import observations as obs_sql
from ..store import threads as thread_sql
from ..store.database import Conn, Pool
from .observer import ObservationFailed, build_observer_messages, run_observer
from .reflector import Reflection, reflect
from .settings_store import MemorySettingsStore
from .snapshot import ExecutionSnapshot, auto_idle_seconds
from .tokens import TokenCounter, count_message, count_text

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_UNOBSERVED",
    "Activation",
    "BufferJob",
    "ObservationalMemory",
    "ObservedContext",
    "ReflectJob",
    "actor_key",
]

#: The default bound on all Observer/Reflector calls of one turn, in seconds.
DEFAULT_TIMEOUT_S = 30.0
#: At most this many unobserved messages are read per turn.
MAX_UNOBSERVED = 10_000


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _screened(write: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """``write`` with its ``observations`` text passed through the credential screen."""

    async def screened(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        text = kwargs.get("observations")
        if isinstance(text, str):
            kwargs["observations"] = redact_credentials(text)[0]
        return await write(*args, **kwargs)

    return screened


# The store's writes of observations text; every call here goes through these.
_insert_log = _screened(obs_sql.insert_log)
_advance_log = _screened(obs_sql.advance_log)
_insert_group = _screened(obs_sql.insert_group)


#: Why buffered chunks were activated on a turn.
Activation = Literal["threshold", "block_after", "idle", "provider_change"]


def actor_key(model: ChatModel) -> str:
    """``provider/model``: what a provider change is detected on."""
    return f"{model.provider}/{model.model}"


@dataclass(frozen=True, slots=True)
class BufferJob:
    """A background Observer run ``prepare`` found due: observe ``batch`` into a buffered chunk.

    ``after_id`` is the message the batch continues from (the last buffered
    chunk's last message, else the cursor; ``None`` for the thread's start);
    ``previous`` is the observations text shown to the Observer (the active
    log plus the chunks buffered before this one).
    """

    resource_id: str
    session_id: str
    batch: tuple[Message, ...]
    after_id: int | None
    previous: str
    snapshot: ExecutionSnapshot


@dataclass(frozen=True, slots=True)
class ReflectJob:
    """A background Reflector run ``prepare`` found due: reflect ``log`` (the head as it
    was) into a buffered reflection, activated later at the reflection threshold."""

    log: ObservationLog
    snapshot: ExecutionSnapshot


@dataclass(frozen=True, slots=True)
class ObservedContext:
    """What a turn's context is built from.

    ``groups`` are the active observation groups (their text joined is
    ``log.observations``); ``recent`` the raw messages after the cursor that
    stay in context, oldest first. ``degraded`` is why the engine fell back
    to raw context this turn (``None`` when it did not). ``activated`` are
    the buffered chunks this turn activated and ``activation`` why;
    ``buffered`` the chunks still waiting; ``buffer_job`` the background run
    due now (``None``: none due or buffering off); ``reflect_job`` the
    background reflection due now and ``reflection_activated`` the buffered
    reflection this turn activated.
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
    activated: tuple[ObservationGroup, ...] = ()
    activation: Activation | None = None
    buffered: tuple[ObservationGroup, ...] = ()
    buffer_job: BufferJob | None = None
    reflect_job: ReflectJob | None = None
    reflection_activated: ObservationGroup | None = None


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


def _early_trigger(
    on_provider_change: bool,
    after_idle: int | Literal["auto"] | None,
    last_reply_at: datetime | None,
    now: datetime | None,
    actor: ChatModel | None,
    previous_actor: str | None,
) -> Literal["idle", "provider_change"] | None:
    """An idle or provider-change trigger, per one phase's settings."""
    if (
        on_provider_change
        and actor is not None
        and previous_actor is not None
        and previous_actor != actor_key(actor)
    ):
        return "provider_change"
    if after_idle is None or last_reply_at is None:
        return None
    if after_idle == "auto":
        if actor is None:
            return None
        after_idle = auto_idle_seconds(actor.provider, actor.model)
    moment = now or datetime.now(UTC)
    return "idle" if (moment - last_reply_at).total_seconds() >= after_idle else None


class _Conflict(Exception):
    """Another turn activated or observed this thread meanwhile."""


def continuing_chunks(
    chunks: Sequence[ObservationGroup], unobserved: Sequence[Message]
) -> list[tuple[ObservationGroup, int]]:
    """The chunks that continue from the first unobserved message without a gap, each
    with the index in ``unobserved`` just past its last message."""
    index = {m.id: i for i, m in enumerate(unobserved)}
    out: list[tuple[ObservationGroup, int]] = []
    start = 0
    for chunk in chunks:
        end = index.get(chunk.last_message_id)
        if start >= len(unobserved) or unobserved[start].id != chunk.first_message_id:
            break
        if end is None or end < start:
            break
        out.append((chunk, end + 1))
        start = end + 1
    return out


def activation_prefix(
    ends: Sequence[int], cumulative: Sequence[int], floor: int, *, force: bool
) -> int:
    """How many chunks to activate: the most that leave at least ``floor`` tokens raw
    (``cumulative[i]`` is the tokens of the first ``i`` messages, the last entry the
    total; ``ends[k]`` the message count chunk ``k`` reaches); with ``force`` (above
    the safety bound) at least one."""
    pending = cumulative[-1]
    count = 0
    for n, end in enumerate(ends, 1):
        if pending - cumulative[end] < floor:
            break
        count = n
    return max(count, 1) if force and ends else count


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
        self,
        resource_id: str,
        session_id: str,
        snapshot: ExecutionSnapshot,
        *,
        now: datetime | None = None,
        actor: ChatModel | None = None,
    ) -> ObservedContext:
        """Activate, observe and reflect when due (see the module doc); the turn's context parts.

        ``now`` is the time idle activation measures against (default: the
        clock); ``actor`` the model that answers this turn: its
        ``provider/model`` is compared with the one recorded for the session's
        previous turn (a difference is a provider change), then recorded.
        """
        deadline = time.monotonic() + self.timeout_s
        buffering = snapshot.buffer_interval_tokens is not None
        previous_actor: str | None = None
        async with self.pool.connection() as conn:
            head = await obs_sql.head_log(conn, resource_id, session_id)
            cursor = head.last_observed_message_id if head else None
            unobserved = await thread_sql.list_messages(
                conn, resource_id, session_id, after_id=cursor, limit=MAX_UNOBSERVED
            )
            stored_chunks = (
                await obs_sql.buffered_groups(conn, resource_id, session_id, after_id=cursor)
                if buffering
                else []
            )
            if actor is not None:
                previous_actor = await obs_sql.get_actor(conn, resource_id, session_id)
                await obs_sql.record_actor(conn, resource_id, session_id, actor_key(actor))
        last_at = unobserved[-1].created_at if unobserved else None
        last_reply_at = max(
            (m.created_at for m in unobserved if m.role == "assistant"), default=None
        )
        sizes = [count_message(m, self.counter) for m in unobserved]
        cumulative = [0]
        for size in sizes:
            cumulative.append(cumulative[-1] + size)
        pending = cumulative[-1]
        observed = False
        degraded: str | None = None
        threshold = snapshot.message_threshold(head.observation_tokens if head else 0)
        chunks = continuing_chunks(stored_chunks, unobserved)
        activated: list[ObservationGroup] = []
        activation: Activation | None = None
        consumed = 0  # unobserved messages that left the raw context this turn
        if chunks and head is not None:
            block = snapshot.observation_block_after_tokens
            force = block is not None and pending >= block
            activation = (
                "block_after"
                if force
                else "threshold"
                if pending >= threshold
                else _early_trigger(
                    snapshot.observation_activate_on_provider_change,
                    snapshot.observation_activate_after_idle,
                    last_reply_at,
                    now,
                    actor,
                    previous_actor,
                )
            )
            if activation is not None:
                count = activation_prefix(
                    [end for _, end in chunks],
                    cumulative,
                    snapshot.retained_floor_tokens,
                    force=force,
                )
                chosen = [chunk for chunk, _ in chunks[:count]]
                activated_head = await self._activate(head, chosen) if chosen else None
                if activated_head is None:
                    activation = None
                else:
                    head, activated, consumed = activated_head, chosen, chunks[count - 1][1]
                    chunks = chunks[count:]
        remaining = pending - cumulative[consumed]
        unobserved, sizes = unobserved[consumed:], sizes[consumed:]
        if buffering:
            bound = snapshot.observation_block_after_tokens
            sync_due = remaining >= (bound if bound is not None else threshold)
        else:
            sync_due = remaining >= threshold
        if sync_due:
            split = retained_split(unobserved, snapshot.retained_floor_tokens, self.counter)
            batch = unobserved[:split]
            if batch:
                try:
                    head = await self._observe(head, batch, snapshot, deadline, session_id)
                    unobserved, sizes = unobserved[split:], sizes[split:]
                    remaining = sum(sizes)
                    chunks = []  # overtaken: deleted with the observation
                    observed = True
                except ObservationFailed as exc:
                    degraded = str(exc)
        job: BufferJob | None = None
        if buffering and degraded is None:
            job = self._buffer_job(
                resource_id, session_id, head, chunks, unobserved, sizes, consumed,
                remaining, threshold, snapshot,
            )  # fmt: skip
        reflection: Reflection | None = None
        reflect_job: ReflectJob | None = None
        reflection_activated: ObservationGroup | None = None
        start = snapshot.reflection_buffer_start_tokens
        if head is not None and head.observation_tokens > 0:
            due = max(snapshot.reflection_observation_tokens, head.next_reflection_tokens)
            block = snapshot.reflection_block_after_tokens
            ready: ObservationGroup | None = None
            if buffering and start is not None:
                async with self.pool.connection() as conn:
                    ready = await obs_sql.buffered_reflection(conn, head)
            early = (
                None
                if ready is None
                else _early_trigger(
                    snapshot.reflection_activate_on_provider_change,
                    snapshot.reflection_activate_after_idle,
                    last_reply_at,
                    now,
                    actor,
                    previous_actor,
                )
            )
            if ready is not None and (head.observation_tokens >= due or early is not None):
                guard = None if head.observation_tokens >= due else snapshot
                reflected = await self._activate_reflection(head, ready, guard)
                if reflected is not None:
                    head, reflection_activated = reflected, ready
            elif head.observation_tokens >= due and (
                not buffering or start is None or head.observation_tokens >= (block or due)
            ):
                head, reflection = await self._reflect(head, snapshot, deadline)
            elif (
                ready is None
                and start is not None
                and buffering
                and head.observation_tokens >= max(start, head.next_reflection_tokens)
            ):
                reflect_job = ReflectJob(head, snapshot)
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
            activated=tuple(activated),
            activation=activation,
            buffered=tuple(chunk for chunk, _ in chunks),
            buffer_job=job,
            reflect_job=reflect_job,
            reflection_activated=reflection_activated,
        )

    def _buffer_job(
        self,
        resource_id: str,
        session_id: str,
        head: ObservationLog | None,
        chunks: Sequence[tuple[ObservationGroup, int]],
        unobserved: Sequence[Message],
        sizes: Sequence[int],
        consumed: int,
        remaining: int,
        threshold: int,
        snapshot: ExecutionSnapshot,
    ) -> BufferJob | None:
        """The background run due now: the messages past the last chunk once they hold
        an interval's tokens (half an interval close to the threshold)."""
        interval = snapshot.buffer_interval_tokens
        assert interval is not None
        if remaining * 10 >= threshold * 10 - 11 * interval:
            interval = max(1, interval // 2)
        start = chunks[-1][1] - consumed if chunks else 0
        new = unobserved[start:]
        if not new or sum(sizes[start:]) < interval:
            return None
        after_id = (
            chunks[-1][0].last_message_id
            if chunks
            else (head.last_observed_message_id if head else None)
        )
        previous = "\n\n".join(
            part
            for part in [head.observations if head else "", *(c.observations for c, _ in chunks)]
            if part
        )
        return BufferJob(resource_id, session_id, tuple(new), after_id, previous, snapshot)

    async def buffer(self, job: BufferJob) -> ObservationGroup:
        """Run the Observer over ``job.batch`` (within ``timeout_s``) and store a buffered chunk.

        Raises ``ObservationFailed`` when the Observer fails or the thread moved
        on meanwhile (the batch no longer continues the chunks); nothing is
        stored then.
        """
        request = build_observer_messages(job.batch, job.previous, job.snapshot, self.counter)
        new = await run_observer(self.model, request, timeout_s=self.timeout_s)
        batch = job.batch
        async with self.pool.connection() as conn, conn.transaction():
            head = await obs_sql.head_log(conn, job.resource_id, job.session_id)
            if head is None:
                try:
                    async with conn.transaction():
                        head = await _insert_log(
                            conn,
                            job.resource_id,
                            job.session_id,
                            generation=0,
                            origin="observation",
                            observations="",
                            observation_tokens=0,
                            last_observed_message_id=None,
                        )
                except psycopg.errors.UniqueViolation:
                    head = await obs_sql.head_log(conn, job.resource_id, job.session_id)
                    assert head is not None
            locked = await obs_sql.lock_log(conn, head)
            assert locked is not None
            cursor = locked.last_observed_message_id
            waiting = await obs_sql.buffered_groups(
                conn, job.resource_id, job.session_id, after_id=cursor
            )
            expected = waiting[-1].last_message_id if waiting else cursor
            if expected != job.after_id:
                raise ObservationFailed("the thread moved on while the Observer ran")
            return await _insert_group(
                conn,
                locked,
                kind="observation",
                status="buffered",
                first_message_id=batch[0].id,
                last_message_id=batch[-1].id,
                observations=new,
                observation_tokens=count_text(new, self.counter),
                message_tokens=sum(count_message(m, self.counter) for m in batch),
            )

    async def reflect_buffered(self, job: ReflectJob) -> ObservationGroup | None:
        """Run the Reflector over ``job.log`` (within ``timeout_s``) and store the result as
        a buffered reflection of that generation; ``None`` when no valid result came (the
        next try then waits until the log grew by a tenth of the threshold).

        Raises ``ObservationFailed`` when the log changed generation meanwhile.
        """
        head = job.log
        result = await reflect(
            self.model,
            head.observations,
            job.snapshot,
            current_tokens=head.observation_tokens,
            deadline=time.monotonic() + self.timeout_s,
            counter=self.counter,
        )
        backoff = max(1, job.snapshot.reflection_observation_tokens // 10)
        async with self.pool.connection() as conn, conn.transaction():
            current = await obs_sql.head_log(conn, head.resource_id, head.session_id)
            if current is None or current.id != head.id:
                raise ObservationFailed("the log was reflected while the Reflector ran")
            locked = await obs_sql.lock_log(conn, current)
            assert locked is not None
            if result.observations is None:
                await obs_sql.set_next_reflection(conn, locked, head.observation_tokens + backoff)
                return None
            # What the Reflector read: the groups up to the cursor it saw (later ones
            # were appended after it and stay outside the reflection).
            cursor = head.last_observed_message_id or 0
            covered = [
                g for g in await obs_sql.groups_of_log(conn, locked) if g.last_message_id <= cursor
            ]
            if not covered:
                raise ObservationFailed("the reflected groups are gone")
            return await _insert_group(
                conn,
                locked,
                kind="reflection",
                status="buffered",
                first_message_id=min(g.first_message_id for g in covered),
                last_message_id=max(g.last_message_id for g in covered),
                observations=result.observations,
                observation_tokens=result.observation_tokens,
                message_tokens=sum(g.message_tokens for g in covered),
            )

    async def _activate_reflection(
        self, head: ObservationLog, ready: ObservationGroup, guard: ExecutionSnapshot | None
    ) -> ObservationLog | None:
        """A new generation: the buffered reflection plus the groups the head gained after
        it was written (copied in, in order); ``None`` if another turn got there first.

        ``guard`` (early, idle/provider activation below the threshold) applies Mastra's
        refusal rule (PR #15462): the groups added after the reflected range must hold at
        least as many tokens as the reflection, and both together at least 75% of
        threshold * (1 - reflection buffer start); otherwise nothing changes.
        """
        try:
            return await self._commit_reflection(head, ready, guard)
        except _Conflict:
            return None

    async def _commit_reflection(
        self, head: ObservationLog, ready: ObservationGroup, guard: ExecutionSnapshot | None
    ) -> ObservationLog | None:
        async with self.pool.connection() as conn, conn.transaction():
            locked = await obs_sql.lock_log(conn, head)
            if locked is None or locked.observations != head.observations:
                return None
            groups = await obs_sql.groups_of_log(conn, locked)
            covered = [g for g in groups if g.last_message_id <= ready.last_message_id]
            tail = [g for g in groups if g.last_message_id > ready.last_message_id]
            if guard is not None:
                added = sum(g.observation_tokens for g in tail)
                both = added + ready.observation_tokens
                start = guard.reflection_buffer_activation or 0.0
                if added < ready.observation_tokens or both < (
                    0.75 * guard.reflection_observation_tokens * (1 - start)
                ):
                    return None
            text = "\n\n".join([ready.observations, *(g.observations for g in tail)])
            tokens = count_text(text, self.counter)
            log = await _insert_reflection(conn, head, text, tokens, covered)
            if log is None:
                return None
            if await obs_sql.activate_groups(conn, log, [ready.id]) != 1:
                raise _Conflict
            for g in tail:
                await _insert_group(
                    conn,
                    log,
                    kind=g.kind,
                    first_message_id=g.first_message_id,
                    last_message_id=g.last_message_id,
                    observations=g.observations,
                    observation_tokens=g.observation_tokens,
                    message_tokens=g.message_tokens,
                )
            return log

    async def _activate(
        self, head: ObservationLog, chosen: Sequence[ObservationGroup]
    ) -> ObservationLog | None:
        """Append ``chosen`` to the head and make them active, moving the cursor to the
        last one's last message; ``None`` (nothing changed) if another turn got there first."""
        new = "\n\n".join(c.observations for c in chosen)
        text = f"{head.observations}\n\n{new}" if head.observations else new
        try:
            async with self.pool.connection() as conn, conn.transaction():
                log = await _advance_log(
                    conn,
                    head,
                    observations=text,
                    observation_tokens=count_text(text, self.counter),
                    last_observed_message_id=chosen[-1].last_message_id,
                )
                if log is None:
                    return None
                moved = await obs_sql.activate_groups(conn, log, [c.id for c in chosen])
                if moved != len(chosen):
                    raise _Conflict  # rolls the cursor move back
                return log
        except _Conflict:
            return None

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
                    log = await _insert_log(
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
                    advanced = await _advance_log(
                        conn,
                        head,
                        observations=text,
                        observation_tokens=tokens,
                        last_observed_message_id=batch[-1].id,
                    )
                    if advanced is None:
                        raise ObservationFailed("another turn observed this thread meanwhile")
                    log = advanced
                await obs_sql.delete_overtaken_buffered(conn, resource_id, session_id, batch[-1].id)
                await _insert_group(
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
            # The head row stays locked until the new generation is in: an activation
            # or observation that changed the log while the Reflector ran wins, and
            # this reflection (of the text before it) is dropped instead of losing it.
            current = await obs_sql.lock_log(conn, head)
            if current is None or (current.observations, current.last_observed_message_id) != (
                head.observations,
                head.last_observed_message_id,
            ):
                return (current or head), result
            if result.observations is None:
                await obs_sql.set_next_reflection(conn, head, head.observation_tokens + backoff)
                return head, result
            covered = await obs_sql.groups_of_log(conn, head)
            log = await _insert_reflection(
                conn,
                head,
                result.observations,
                result.observation_tokens,
                covered,
                next_reflection_tokens=(
                    0 if result.reached_target else result.observation_tokens + backoff
                ),
            )
            if log is None:
                return head, result  # another turn reflected first; its generation stands
            if covered:
                await _insert_group(
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


async def _insert_reflection(
    conn: Conn,
    head: ObservationLog,
    observations: str,
    observation_tokens: int,
    covered: Sequence[ObservationGroup],
    *,
    next_reflection_tokens: int = 0,
) -> ObservationLog | None:
    """The next generation of ``head``, a reflection covering ``covered``; ``None`` when
    another turn inserted that generation first (a savepoint keeps the caller's transaction)."""
    try:
        async with conn.transaction():
            return await _insert_log(
                conn,
                head.resource_id,
                head.session_id,
                generation=head.generation + 1,
                origin="reflection",
                observations=observations,
                observation_tokens=observation_tokens,
                last_observed_message_id=head.last_observed_message_id,
                covered_group_ids=[g.id for g in covered],
                next_reflection_tokens=next_reflection_tokens,
            )
    except psycopg.errors.UniqueViolation:
        return None
