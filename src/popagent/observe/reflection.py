"""Reflection of a session's observation log: when, synchronously or buffered, and its commit.

A reflection condenses the head generation's observations (the Reflector,
``reflector.reflect``) into a new generation. ``reflection_action`` decides,
per turn, between activating a buffered reflection, reflecting now, asking
for a background reflection (``ReflectJob``, run by ``reflect_buffered``) or
nothing.

Invariants:
- A reflection inserts a new generation (the old one stays stored) holding one
  ``reflection`` group whose pointer spans the groups it covers; a savepoint
  turns losing the race for that generation into ``None``, not an error.
- A synchronous reflection is committed only if the head did not change while
  the Reflector ran (checked under the head row's lock); otherwise it is
  dropped, so an activation or observation made meanwhile is never lost.
- A buffered reflection is activated early (below the threshold) only by the
  reflection phase's idle/provider settings and Mastra's guard, never by the
  observation ones.
- After an unproductive reflection, the next one waits until the log grew by
  a tenth of the threshold (no reflection on every turn).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import psycopg

from ..llm.protocol import ChatModel
from ..models import ObservationGroup, ObservationLog
from ..store import observations as obs_sql
from ..store.database import Conn, Pool
from . import writes
from .observer import ObservationFailed
from .reflector import Reflection, reflect
from .snapshot import ExecutionSnapshot
from .tokens import TokenCounter, count_text

__all__ = [
    "ReflectJob",
    "ReflectionAction",
    "activate_reflection",
    "insert_reflection",
    "ready_reflection",
    "reflect_buffered",
    "reflect_now",
    "reflection_action",
]

#: What a turn does about reflection: activate the buffered one (at the threshold, or
#: early under Mastra's guard), reflect synchronously, or ask for a background run.
ReflectionAction = Literal["activate", "activate_early", "reflect", "buffer"]


@dataclass(frozen=True, slots=True)
class ReflectJob:
    """A background Reflector run ``prepare`` found due: reflect ``log`` (the head as it
    was) into a buffered reflection, activated later at the reflection threshold."""

    log: ObservationLog
    snapshot: ExecutionSnapshot


async def ready_reflection(
    pool: Pool, head: ObservationLog, snapshot: ExecutionSnapshot, *, buffering: bool
) -> ObservationGroup | None:
    """The head's buffered reflection, read only while reflection buffering is on."""
    if not buffering or snapshot.reflection_buffer_start_tokens is None:
        return None
    async with pool.connection() as conn:
        return await obs_sql.buffered_reflection(conn, head)


def reflection_action(
    head: ObservationLog,
    snapshot: ExecutionSnapshot,
    ready: ObservationGroup | None,
    early: str | None,
    *,
    buffering: bool,
) -> ReflectionAction | None:
    """What to do about reflection this turn (``None``: nothing). Pure.

    ``ready`` is the buffered reflection, ``early`` the reflection phase's idle
    or provider-change trigger. At the threshold (or its backoff) a ready
    reflection is activated; early, it is activated under the guard; without
    one, the log is reflected synchronously unless buffering covers it below
    the safety bound; from the buffer start a background run is asked for.
    """
    start = snapshot.reflection_buffer_start_tokens
    tokens = head.observation_tokens
    due = max(snapshot.reflection_observation_tokens, head.next_reflection_tokens)
    block = snapshot.reflection_block_after_tokens
    if ready is not None and (tokens >= due or early is not None):
        return "activate" if tokens >= due else "activate_early"
    if tokens >= due and (not buffering or start is None or tokens >= (block or due)):
        return "reflect"
    if (
        ready is None
        and start is not None
        and buffering
        and tokens >= max(start, head.next_reflection_tokens)
    ):
        return "buffer"
    return None


async def reflect_buffered(
    pool: Pool,
    model: ChatModel,
    job: ReflectJob,
    *,
    counter: TokenCounter | None,
    timeout_s: float,
) -> ObservationGroup | None:
    """Run the Reflector over ``job.log`` (within ``timeout_s``) and store the result as
    a buffered reflection of that generation; ``None`` when no valid result came (the
    next try then waits until the log grew by a tenth of the threshold).

    Raises ``ObservationFailed`` when the log changed generation meanwhile.
    """
    head = job.log
    result = await reflect(
        model,
        head.observations,
        job.snapshot,
        current_tokens=head.observation_tokens,
        deadline=time.monotonic() + timeout_s,
        counter=counter,
    )
    backoff = max(1, job.snapshot.reflection_observation_tokens // 10)
    async with pool.connection() as conn, conn.transaction():
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
        return await _reflection_group(conn, locked, result, covered, status="buffered")


async def activate_reflection(
    pool: Pool,
    head: ObservationLog,
    ready: ObservationGroup,
    guard: ExecutionSnapshot | None,
    counter: TokenCounter | None,
) -> ObservationLog | None:
    """A new generation: the buffered reflection plus the groups the head gained after
    it was written (copied in, in order); ``None`` if another turn got there first.

    ``guard`` (early, idle/provider activation below the threshold) applies Mastra's
    refusal rule (PR #15462): the groups added after the reflected range must hold at
    least as many tokens as the reflection, and both together at least 75% of
    threshold * (1 - reflection buffer start); otherwise nothing changes.
    """
    # A conflict raised inside the transaction rolls it back, then means "no change".
    try:
        async with pool.connection() as conn, conn.transaction():
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
            tokens = count_text(text, counter)
            log = await insert_reflection(conn, head, text, tokens, covered)
            if log is None:
                return None
            if await obs_sql.activate_groups(conn, log, [ready.id]) != 1:
                raise writes.Conflict
            for g in tail:
                await writes.insert_group(
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
    except writes.Conflict:
        return None


async def reflect_now(
    pool: Pool,
    model: ChatModel,
    head: ObservationLog,
    snapshot: ExecutionSnapshot,
    deadline: float,
    counter: TokenCounter | None,
) -> tuple[ObservationLog, Reflection]:
    """Reflect the head synchronously (by ``deadline``) and commit the new generation;
    the head to use next (the new one, or the old or changed one when the result was
    dropped) and the Reflector's result."""
    result = await reflect(
        model,
        head.observations,
        snapshot,
        current_tokens=head.observation_tokens,
        deadline=deadline,
        counter=counter,
    )
    backoff = max(1, snapshot.reflection_observation_tokens // 10)
    async with pool.connection() as conn, conn.transaction():
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
        log = await insert_reflection(
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
            await _reflection_group(conn, log, result, covered)
    return log, result


async def _reflection_group(
    conn: Conn,
    log: ObservationLog,
    result: Reflection,
    covered: Sequence[ObservationGroup],
    *,
    status: str = "active",
) -> ObservationGroup:
    """The group that records ``result``, a reflection of the groups ``covered``: their
    message range and tokens, the reflected text (``result.observations``, not None)."""
    assert result.observations is not None
    return await writes.insert_group(
        conn,
        log,
        kind="reflection",
        status=status,
        first_message_id=min(g.first_message_id for g in covered),
        last_message_id=max(g.last_message_id for g in covered),
        observations=result.observations,
        observation_tokens=result.observation_tokens,
        message_tokens=sum(g.message_tokens for g in covered),
    )


async def insert_reflection(
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
            return await writes.insert_log(
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
