"""Async buffering: buffered observation chunks, their activation and the background run.

With ``snapshot.buffer_interval_tokens`` set, the Observer runs in the
background (``buffer``) each time the messages past the last chunk hold an
interval's tokens (``plan_buffer_job``), and stores a chunk: a group with status
``buffered``. A turn then activates chunks (``activation_trigger``,
``activation_prefix``, ``activate``) instead of calling the Observer.

Invariants:
- The chunks that count continue right after the cursor, each starting on the
  message after the previous one's last (``continuing_chunks``); a background
  run whose start no longer continues them stores nothing.
- Activation takes the longest prefix of chunks that leaves at least the
  retained floor raw (above the safety bound at least one chunk), appends
  their text to the head, turns them active in it and moves the cursor to
  their last message, in one transaction: every message is then either inside
  an active group's range or raw, never both, never neither.
- Idle and provider-change triggers (``early_trigger``) are pure: they read the
  settings of one phase and the times given, and change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import psycopg

from ..llm.protocol import ChatModel
from ..models import Message, ObservationGroup, ObservationLog
from ..store import observations as obs_sql
from ..store.database import Pool
from . import writes
from .observer import ObservationFailed, observer_request, run_observer
from .snapshot import ExecutionSnapshot, auto_idle_seconds
from .tokens import TokenCounter, count_message, count_text

__all__ = [
    "Activation",
    "BufferJob",
    "activate",
    "activation_prefix",
    "activation_trigger",
    "actor_key",
    "buffer",
    "continuing_chunks",
    "early_trigger",
    "plan_buffer_job",
]

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


def early_trigger(
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


def activation_trigger(
    snapshot: ExecutionSnapshot,
    pending: int,
    threshold: int,
    last_reply_at: datetime | None,
    now: datetime | None,
    actor: ChatModel | None,
    previous_actor: str | None,
) -> tuple[Activation | None, bool]:
    """Why buffered chunks activate this turn (``None``: they wait), and whether the
    safety bound forces at least one: the bound first, then the threshold, then the
    observation phase's idle or provider-change trigger."""
    block = snapshot.observation_block_after_tokens
    if block is not None and pending >= block:
        return "block_after", True
    if pending >= threshold:
        return "threshold", False
    trigger = early_trigger(
        snapshot.observation_activate_on_provider_change,
        snapshot.observation_activate_after_idle,
        last_reply_at,
        now,
        actor,
        previous_actor,
    )
    return trigger, False


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


async def activate(
    pool: Pool,
    head: ObservationLog,
    chosen: Sequence[ObservationGroup],
    counter: TokenCounter | None,
) -> ObservationLog | None:
    """Append ``chosen`` to the head and make them active, moving the cursor to the
    last one's last message; ``None`` (nothing changed) if another turn got there first."""
    new = "\n\n".join(c.observations for c in chosen)
    text = f"{head.observations}\n\n{new}" if head.observations else new
    try:
        async with pool.connection() as conn, conn.transaction():
            log = await writes.advance_log(
                conn,
                head,
                observations=text,
                observation_tokens=count_text(text, counter),
                last_observed_message_id=chosen[-1].last_message_id,
            )
            if log is None:
                return None
            moved = await obs_sql.activate_groups(conn, log, [c.id for c in chosen])
            if moved != len(chosen):
                raise writes.Conflict  # rolls the cursor move back
            return log
    except writes.Conflict:
        return None


def plan_buffer_job(
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
    an interval's tokens (half an interval close to the threshold).

    ``chunks`` carry end indices into the turn's unobserved messages as first
    read; ``unobserved``/``sizes`` are what is left after ``consumed`` of them
    were activated. Pure: nothing is read or written.
    """
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


async def buffer(
    pool: Pool,
    model: ChatModel,
    job: BufferJob,
    *,
    counter: TokenCounter | None,
    timeout_s: float,
) -> ObservationGroup:
    """Run the Observer over ``job.batch`` (within ``timeout_s``) and store a buffered chunk.

    Raises ``ObservationFailed`` when the Observer fails or the thread moved
    on meanwhile (the batch no longer continues the chunks); nothing is
    stored then.
    """
    request = await observer_request(job.batch, job.previous, job.snapshot, counter)
    new = await run_observer(model, request, timeout_s=timeout_s)
    batch = job.batch
    async with pool.connection() as conn, conn.transaction():
        head = await obs_sql.head_log(conn, job.resource_id, job.session_id)
        if head is None:
            try:
                async with conn.transaction():
                    head = await writes.insert_log(
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
        return await writes.insert_group(
            conn,
            locked,
            kind="observation",
            status="buffered",
            first_message_id=batch[0].id,
            last_message_id=batch[-1].id,
            observations=new,
            observation_tokens=count_text(new, counter),
            message_tokens=sum(count_message(m, counter) for m in batch),
        )
