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
  (``writes.insert_log``, ``writes.advance_log``, ``writes.insert_group`` wrap
  the store's writes): each value becomes ``[REDACTED:<kind>]``, also in text
  carried over from rows written before the screen existed. The Observer's and
  Reflector's input and output are screened too (``observer``, ``reflector``).
- A reflection inserts a new generation (the old one stays stored) holding one
  ``reflection`` group whose pointer spans the groups it covers. After an
  unproductive reflection, the next one waits until the log grew by a tenth
  of the threshold (no reflection on every turn).

Layout: this module is the facade and the per-turn pipeline (``prepare``, one
step per method); buffering and activation live in ``buffering``, reflection in
``reflection``, the screened writes in ``writes`` and the read-only view of a
session's state in ``state``. Imports point downward: this module imports
them, none of them imports this one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from ..llm.protocol import ChatModel
from ..models import Message, ObservationGroup, ObservationLog
from ..store import observations as obs_sql
from ..store import threads as thread_sql
from ..store.database import Pool
from . import buffering, reflection, writes
from .buffering import (
    Activation,
    BufferJob,
    activation_prefix,
    activation_trigger,
    actor_key,
    continuing_chunks,
    early_trigger,
    plan_buffer_job,
)
from .observer import ObservationFailed, observer_request, run_observer
from .reflection import (
    ReflectJob,
    activate_reflection,
    ready_reflection,
    reflect_now,
    reflection_action,
)
from .reflector import Reflection
from .settings_store import MemorySettingsStore
from .snapshot import ExecutionSnapshot
from .state import read_generations, read_groups
from .tokens import TokenCounter, count_message, count_text

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_UNOBSERVED",
    "Activation",
    "BufferJob",
    "ObservationalMemory",
    "ObservedContext",
    "ReflectJob",
    "activation_prefix",
    "actor_key",
    "continuing_chunks",
    "retained_split",
]

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


@dataclass(slots=True)
class _Turn:
    """One ``prepare``'s working state, advanced by its steps in order.

    Invariants: ``unobserved`` and ``sizes`` are the raw messages still after
    the cursor and their token counts (same length), ``remaining`` is the
    tokens left after activation (and after a synchronous observation, their
    sum); ``chunks`` carry end indices into the messages as first read, of
    which the first ``consumed`` were activated. ``cumulative``, ``threshold``,
    ``last_at`` and ``last_reply_at`` describe the messages as first read and
    never change.
    """

    resource_id: str
    session_id: str
    snapshot: ExecutionSnapshot
    deadline: float
    now: datetime | None
    actor: ChatModel | None
    previous_actor: str | None
    head: ObservationLog | None
    unobserved: list[Message]
    sizes: list[int]
    cumulative: list[int]
    chunks: list[tuple[ObservationGroup, int]]
    threshold: int
    remaining: int
    last_at: datetime | None
    last_reply_at: datetime | None
    consumed: int = 0
    activated: list[ObservationGroup] = field(default_factory=list)
    activation: Activation | None = None
    observed: bool = False
    degraded: str | None = None
    buffer_job: BufferJob | None = None
    reflection: Reflection | None = None
    reflect_job: ReflectJob | None = None
    reflection_activated: ObservationGroup | None = None

    @property
    def buffering(self) -> bool:
        """Whether async buffering is on for this turn."""
        return self.snapshot.buffer_interval_tokens is not None

    @property
    def pending(self) -> int:
        """The tokens of every unobserved message as first read."""
        return self.cumulative[-1]


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
        return await read_generations(self.pool, resource_id, session_id)

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
        deadline = time.monotonic() + self.timeout_s  # shared by every model call below
        turn = await self._read_turn(resource_id, session_id, snapshot, deadline, now, actor)
        await self._activate_chunks(turn)
        await self._observe_if_due(turn)
        self._plan_buffering(turn)
        await self._reflect_if_due(turn)
        return await self._context(turn)

    async def _read_turn(
        self,
        resource_id: str,
        session_id: str,
        snapshot: ExecutionSnapshot,
        deadline: float,
        now: datetime | None,
        actor: ChatModel | None,
    ) -> _Turn:
        """Step 1: read the head, the unobserved messages (at most ``MAX_UNOBSERVED``)
        and, with buffering, the buffered chunks after the cursor; record ``actor`` as
        the session's model (after reading the previous one). Writes nothing else."""
        previous_actor: str | None = None
        async with self.pool.connection() as conn:
            head = await obs_sql.head_log(conn, resource_id, session_id)
            cursor = head.last_observed_message_id if head else None
            unobserved = await thread_sql.list_messages(
                conn, resource_id, session_id, after_id=cursor, limit=MAX_UNOBSERVED
            )
            stored_chunks = (
                await obs_sql.buffered_groups(conn, resource_id, session_id, after_id=cursor)
                if snapshot.buffer_interval_tokens is not None
                else []
            )
            if actor is not None:
                previous_actor = await obs_sql.get_actor(conn, resource_id, session_id)
                await obs_sql.record_actor(conn, resource_id, session_id, actor_key(actor))
        sizes = [count_message(m, self.counter) for m in unobserved]
        cumulative = [0]
        for size in sizes:
            cumulative.append(cumulative[-1] + size)
        return _Turn(
            resource_id=resource_id,
            session_id=session_id,
            snapshot=snapshot,
            deadline=deadline,
            now=now,
            actor=actor,
            previous_actor=previous_actor,
            head=head,
            unobserved=unobserved,
            sizes=sizes,
            cumulative=cumulative,
            chunks=continuing_chunks(stored_chunks, unobserved),
            threshold=snapshot.message_threshold(head.observation_tokens if head else 0),
            remaining=cumulative[-1],
            last_at=unobserved[-1].created_at if unobserved else None,
            last_reply_at=max(
                (m.created_at for m in unobserved if m.role == "assistant"), default=None
            ),
        )

    async def _activate_chunks(self, turn: _Turn) -> None:
        """Step 2: activate the longest fitting prefix of buffered chunks when a trigger
        fires (no model call); the activated messages leave the raw context. Nothing
        changes when another turn activated or observed meanwhile."""
        if turn.chunks and turn.head is not None:
            activation, force = activation_trigger(
                turn.snapshot,
                turn.pending,
                turn.threshold,
                turn.last_reply_at,
                turn.now,
                turn.actor,
                turn.previous_actor,
            )
            if activation is not None:
                count = activation_prefix(
                    [end for _, end in turn.chunks],
                    turn.cumulative,
                    turn.snapshot.retained_floor_tokens,
                    force=force,
                )
                chosen = [chunk for chunk, _ in turn.chunks[:count]]
                head = (
                    await buffering.activate(self.pool, turn.head, chosen, self.counter)
                    if chosen
                    else None
                )
                if head is not None:
                    turn.head, turn.activated, turn.activation = head, chosen, activation
                    turn.consumed = turn.chunks[count - 1][1]
                    turn.chunks = turn.chunks[count:]
        turn.remaining = turn.pending - turn.cumulative[turn.consumed]
        turn.unobserved = turn.unobserved[turn.consumed :]
        turn.sizes = turn.sizes[turn.consumed :]

    async def _observe_if_due(self, turn: _Turn) -> None:
        """Step 3: observe synchronously when the tokens left reach the threshold (with
        buffering: the safety bound, else the threshold), all but the retained tail.
        A failed Observer leaves the log as it was and sets ``turn.degraded``."""
        bound = turn.snapshot.observation_block_after_tokens
        limit = bound if turn.buffering and bound is not None else turn.threshold
        if turn.remaining < limit:
            return
        split = retained_split(turn.unobserved, turn.snapshot.retained_floor_tokens, self.counter)
        batch = turn.unobserved[:split]
        if not batch:
            return
        try:
            turn.head = await self._observe(
                turn.head, batch, turn.snapshot, turn.deadline, turn.session_id
            )
        except ObservationFailed as exc:
            turn.degraded = str(exc)
            return
        turn.unobserved, turn.sizes = turn.unobserved[split:], turn.sizes[split:]
        turn.remaining = sum(turn.sizes)
        turn.chunks = []  # overtaken: deleted with the observation
        turn.observed = True

    def _plan_buffering(self, turn: _Turn) -> None:
        """Step 4: with buffering and no degraded fallback, the background Observer run
        due now, if any (``turn.buffer_job``). Pure: reads and writes nothing."""
        if turn.buffering and turn.degraded is None:
            turn.buffer_job = plan_buffer_job(
                turn.resource_id, turn.session_id, turn.head, turn.chunks, turn.unobserved,
                turn.sizes, turn.consumed, turn.remaining, turn.threshold, turn.snapshot,
            )  # fmt: skip

    async def _reflect_if_due(self, turn: _Turn) -> None:
        """Step 5: when the log reaches the reflection threshold, activate a buffered
        reflection (also early, under Mastra's guard) or reflect synchronously; from the
        reflection buffer start ask for a background one (``turn.reflect_job``)."""
        head = turn.head
        if head is None or head.observation_tokens <= 0:
            return
        snapshot = turn.snapshot
        ready = await ready_reflection(self.pool, head, snapshot, buffering=turn.buffering)
        early = (
            None
            if ready is None
            else early_trigger(
                snapshot.reflection_activate_on_provider_change,
                snapshot.reflection_activate_after_idle,
                turn.last_reply_at,
                turn.now,
                turn.actor,
                turn.previous_actor,
            )
        )
        action = reflection_action(head, snapshot, ready, early, buffering=turn.buffering)
        if action in ("activate", "activate_early"):
            assert ready is not None
            guard = snapshot if action == "activate_early" else None
            reflected = await activate_reflection(self.pool, head, ready, guard, self.counter)
            if reflected is not None:
                turn.head, turn.reflection_activated = reflected, ready
        elif action == "reflect":
            turn.head, turn.reflection = await reflect_now(
                self.pool, self.model, head, snapshot, turn.deadline, self.counter
            )
        elif action == "buffer":
            turn.reflect_job = ReflectJob(head, snapshot)

    async def _context(self, turn: _Turn) -> ObservedContext:
        """Step 6: the turn's context: the head's active groups and the raw messages left
        (on a degraded turn only the last ``fallback_limit`` of them)."""
        groups = await read_groups(self.pool, turn.head)
        recent = turn.unobserved[-self.fallback_limit :] if turn.degraded else turn.unobserved
        return ObservedContext(
            snapshot=turn.snapshot,
            log=turn.head,
            groups=tuple(groups),
            recent=tuple(recent),
            pending_tokens=turn.pending,
            observed=turn.observed,
            reflection=turn.reflection,
            degraded=turn.degraded,
            last_message_at=turn.last_at,
            activated=tuple(turn.activated),
            activation=turn.activation,
            buffered=tuple(chunk for chunk, _ in turn.chunks),
            buffer_job=turn.buffer_job,
            reflect_job=turn.reflect_job,
            reflection_activated=turn.reflection_activated,
        )

    async def buffer(self, job: BufferJob) -> ObservationGroup:
        """Run the Observer over ``job.batch`` (within ``timeout_s``) and store a buffered chunk.

        Raises ``ObservationFailed`` when the Observer fails or the thread moved
        on meanwhile (the batch no longer continues the chunks); nothing is
        stored then. See ``buffering.buffer``.
        """
        return await buffering.buffer(
            self.pool, self.model, job, counter=self.counter, timeout_s=self.timeout_s
        )

    async def reflect_buffered(self, job: ReflectJob) -> ObservationGroup | None:
        """Run the Reflector over ``job.log`` (within ``timeout_s``) and store the result as
        a buffered reflection of that generation; ``None`` when no valid result came.

        Raises ``ObservationFailed`` when the log changed generation meanwhile.
        See ``reflection.reflect_buffered``.
        """
        return await reflection.reflect_buffered(
            self.pool, self.model, job, counter=self.counter, timeout_s=self.timeout_s
        )

    async def _observe(
        self,
        head: ObservationLog | None,
        batch: Sequence[Message],
        snapshot: ExecutionSnapshot,
        deadline: float,
        session_id: str,
    ) -> ObservationLog:
        """Observe ``batch`` (by ``deadline``) onto ``head`` (a new generation 0 without
        one), in one transaction with its group, deleting the buffered chunks it
        overtook. Raises ``ObservationFailed`` (nothing stored) when the Observer fails
        or another turn observed meanwhile."""
        previous = head.observations if head else ""
        request = await observer_request(batch, previous, snapshot, self.counter)
        new = await run_observer(self.model, request, timeout_s=deadline - time.monotonic())
        text = f"{previous}\n\n{new}" if previous else new
        tokens = count_text(text, self.counter)
        resource_id = batch[0].resource_id
        try:
            async with self.pool.connection() as conn, conn.transaction():
                if head is None:
                    log = await writes.insert_log(
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
                    advanced = await writes.advance_log(
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
                await writes.insert_group(
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
