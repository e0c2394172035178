"""``Agent.run_turn``: one turn of a chat, from the user's text to a stored episode.

The steps, each its own small piece so a later issue can swap one out::

    validate → load known secret values
    → history step (``HistorySource``) → store the user message (creating the session
      and starting the turn) and, beside them on another connection, recall (this
      resource only)
    → render → assemble the prompt → model ⇄ tools (bounded), storing every assistant
      and tool message → in one transaction, the final answer, the episode and the
      turn's end as completed

Invariants:
- Recall, tools and writes act on the ``resource_id`` and ``session_id`` the
  caller passed, never on ones the model names.
- Every model call and tool call is wrapped in the agent's hooks (by default
  ``AuditHook``, which writes content-free audit rows).
- Everything the turn stores (messages, tool results, the episode) and every
  tool result it shows the model is scrubbed of the secret values it knows:
  the resource's live secrets (loaded once, only with a secret store) plus
  any revealed or set during the turn. Learning a value rewrites the turn's
  already-stored messages.
- At most ``max_tool_rounds`` model calls; tool calls in the last one are
  stored but not run (no model call would read their results). A turn whose model call fails
  (``ModelError``, after the client's own retries) or that is still calling
  tools at the limit raises ``TurnFailedError`` and stores no episode. What
  it already wrote to the session stays: the user did say it, and the next
  turn's history should show it. A successful turn with non-empty user and
  assistant text stores exactly one episode.
- What the turn writes to long-term memory records where it came from: a fact
  the model's ``remember`` stores has origin ``agent``, the turn's id, its user
  message and the assistant message that made the call, and the call's id; the
  episode has origin ``turn``, the turn's id, its user message and its final
  answer (written in the same transaction).
- Turns of one session run one at a time, across processes too: each turn
  holds the session's advisory lock (``store.locks``) from its first read to
  its end, so a second turn waits instead of interleaving its messages.
- Every turn that stored its user message has a row in ``popagent_turns`` and
  each of its messages carries its ``turn_id``. It ends ``completed`` only in
  the transaction that stores the final answer and the episode, so a process
  killed at any point leaves the three together or none of them; ``failed``
  when the turn raises (``TurnFailedError`` and any other error);
  ``interrupted`` when it is cancelled. A turn whose process died stays
  ``running`` until the session's next turn marks it ``interrupted``; readers
  show a turn still ``running`` after ``STALE_TURN_AFTER`` as interrupted, and
  the turn itself stops at ``MAX_TURN_DURATION``. The messages of an
  unfinished turn stay in the history the model sees: the user did say them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from ..checks import check_id, check_limit, check_text, check_time, is_blank
from ..errors import TurnFailedError, ValidationError
from ..llm.protocol import ChatMessage, ChatModel, Completion, ModelError, TextCallback, ToolSpec
from ..memory.longterm import LongTermMemory
from ..memory.render import render
from ..memory.validation import QUERY_CAP, TOOL_CALL_ID_CAP, check_provenance
from ..models import Memory, Outcome, Provenance, RecallResult, TurnStatus
from ..secrets import SecretStore
from ..store.database import Pool
from ..threads import ThreadStore, turns
from ..threads.service import MESSAGE_CAP
from .audit import AuditHook
from .history import HistoryRequest, HistorySource, RecentMessages
from .hooks import Hook, HookSet, ModelCallEnd, ModelCallStart, new_call_id, observe_call
from .prompt import assemble_prompt
from .remember import RememberTool
from .runner import ToolRunner
from .scrubber import SecretScrubber
from .secret_tools import secret_tools
from .tools import ConditionalTool, Tool, ToolContext
from .transcript import Transcript

__all__ = ["MAX_TOOL_ROUNDS_CAP", "Agent", "ToolCallRecord", "TurnResult", "TurnTimings"]

MAX_TOOL_ROUNDS_CAP = 64
#: How long marking an unfinished turn may take: it runs while the turn is
#: failing or being cancelled, and must not hold that up when the database is away.
END_TURN_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call of a turn: the name the model called, how it ended, and the
    tool's answer as the model read it (``text``; for ``remember``, what was stored)."""

    name: str
    outcome: Outcome
    #: Not part of equality: a record is identified by what was called and how it ended.
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class TurnTimings:
    """Where a turn's time went, in milliseconds.

    ``model_ms`` is the time spent inside model calls (with streaming, the
    ``on_text`` callbacks too); ``overhead_ms`` is everything else, what
    popagent adds to the turn; ``recall_ms`` is recall alone, which runs beside
    the thread writes, so it overlaps the rest of the overhead.
    """

    recall_ms: float
    model_ms: float
    overhead_ms: float
    total_ms: float


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a completed turn produced.

    ``reply`` is the final assistant text; ``memory_block`` the rendered
    recalled memories the model saw ('' when nothing was recalled);
    ``episode`` the stored episode (``None`` when a side was empty).
    """

    session_id: str
    reply: str
    recalled: tuple[RecallResult, ...]
    memory_block: str
    episode: Memory | None
    tool_calls: tuple[ToolCallRecord, ...]
    model_calls: int
    timings: TurnTimings


@dataclass(slots=True)
class _Tally:
    """What a turn counts as it goes."""

    model_calls: int = 0
    model_ms: float = 0.0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)


def _check_user_text(value: object) -> str:
    text = check_text("user_text", value)
    if is_blank(text):
        raise ValidationError("user_text", "must not be empty")
    if len(text) > MESSAGE_CAP:
        raise ValidationError("user_text", f"must be at most {MESSAGE_CAP} characters")
    return text


def _message_ids(*ids: int | None) -> tuple[int, ...]:
    return tuple(i for i in ids if i is not None)


def recorded_call_id(value: str) -> str | None:
    """The model's tool-call id as provenance records it; ``None`` for one no write
    could record (empty, too long, not text), which must not refuse the fact."""
    if not value or len(value) > TOOL_CALL_ID_CAP or "\x00" in value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _chars(messages: Sequence[ChatMessage]) -> int:
    return sum(
        len(m.content or "") + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
        for m in messages
    )


class Agent:
    """Runs chat turns with long-term memory, thread history, tools and hooks.

    Built-in tools: ``remember`` always; ``set_secret``, ``list_secrets`` and
    ``delete_secret`` when ``secrets`` is given; then ``tools``, the
    application's own (names must be unique). ``hooks`` defaults to one
    ``AuditHook``; pass ``[]`` for none. ``history`` defaults to
    ``RecentMessages()``.

    ``pool``, ``memory`` and ``threads`` are the composition root's
    (``popagent.root.Popagent``: ``app.agent(model)`` builds one): the turn's
    lock, transcript, history and episode all use that one pool.
    """

    def __init__(
        self,
        pool: Pool,
        memory: LongTermMemory,
        threads: ThreadStore,
        model: ChatModel,
        *,
        secrets: SecretStore | None = None,
        tools: Sequence[Tool] = (),
        hooks: Sequence[Hook] | None = None,
        recall_limit: int = 8,
        history: HistorySource | None = None,
        max_tool_rounds: int = 8,
    ) -> None:
        self.pool = pool
        self.memory = memory
        self.threads = threads
        self.model = model
        self.secrets = secrets
        self.recall_limit = check_limit(recall_limit, "recall_limit")
        self.max_tool_rounds = check_limit(max_tool_rounds, "max_tool_rounds", MAX_TOOL_ROUNDS_CAP)
        self.history: HistorySource = history if history is not None else RecentMessages()
        self.hooks = HookSet([AuditHook(pool)] if hooks is None else hooks)
        builtin: list[Tool] = [RememberTool()]
        if secrets is not None:
            builtin.extend(secret_tools())
        self.runner = ToolRunner([*builtin, *tools], self.hooks)

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return self.runner.specs

    async def run_turn(
        self,
        resource_id: str,
        session_id: str,
        user_text: str,
        *,
        on_text: TextCallback | None = None,
        now: datetime | None = None,
    ) -> TurnResult:
        """Run one turn (see the module doc for the steps and guarantees).

        ``on_text`` streams the assistant's text as it comes (of every model
        call, text before tool calls included); the result is the same as
        without it, and what ``on_text`` raises propagates unchanged.
        ``TurnResult.reply`` is the model's text as written: it is shown, not
        stored, so it is not scrubbed (the stored message and episode are).
        ``now`` (timezone-aware) is the turn's time for recency and the
        episode's creation time, for imports and benchmarks.
        Raises ``ValidationError`` for bad input (before anything is written)
        and ``TurnFailedError`` when the model fails or will not stop calling tools.
        """
        began = time.perf_counter()
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        user_text = _check_user_text(user_text)
        now = check_time("now", now)
        # One turn at a time per session, across processes too (``serve
        # --workers``, ``popagent chat`` and library callers on one database).
        async with turns.session_turn_lock(self.pool, resource_id, session_id):
            return await self._locked_turn(resource_id, session_id, user_text, on_text, now, began)

    async def _locked_turn(
        self,
        resource_id: str,
        session_id: str,
        user_text: str,
        on_text: TextCallback | None,
        now: datetime | None,
        began: float,
    ) -> TurnResult:
        scrubber = await self._known_secrets(resource_id)
        transcript = Transcript(self.threads, self.pool, resource_id, session_id, scrubber)
        # Recall reads long-term memory only, so it runs beside the thread
        # writes and the history read (each on its own pooled connection).
        recall = asyncio.ensure_future(self._recall(resource_id, scrubber.scrub(user_text), now))
        try:
            # History first: everything stored so far precedes the new message.
            history = await self.history.load(
                HistoryRequest(resource_id, session_id, None, self.pool)
            )
            await transcript.add_user(user_text)  # starts the turn
            recalled, recall_ms = await recall
            memory_block = render(recalled, now=now)
            reply, episode, tally = await self._finish_turn(
                transcript,
                scrubber,
                user_text,
                history,
                memory_block,
                on_text,
                now,
                deadline=began + turns.MAX_TURN_DURATION.total_seconds(),
            )
        except BaseException as exc:
            recall.cancel()
            with contextlib.suppress(BaseException):
                await recall
            cancelled = isinstance(exc, asyncio.CancelledError | KeyboardInterrupt)
            await self._end_turn(transcript, "interrupted" if cancelled else "failed")
            raise
        total_ms = (time.perf_counter() - began) * 1000
        return TurnResult(
            session_id=session_id,
            reply=reply,
            recalled=tuple(recalled),
            memory_block=memory_block,
            episode=episode,
            tool_calls=tuple(tally.tool_calls),
            model_calls=tally.model_calls,
            timings=TurnTimings(
                recall_ms=recall_ms,
                model_ms=tally.model_ms,
                overhead_ms=total_ms - tally.model_ms,
                total_ms=total_ms,
            ),
        )

    def offered_specs(self, ctx: ToolContext) -> tuple[ToolSpec, ...]:
        """The tools offered in this turn: all, less ``ConditionalTool``s that decline."""
        return tuple(
            tool.spec
            for tool in self.runner.tools
            if not isinstance(tool, ConditionalTool) or tool.offered(ctx)
        )

    # --- steps ----------------------------------------------------------------------------

    async def _finish_turn(
        self,
        transcript: Transcript,
        scrubber: SecretScrubber,
        user_text: str,
        history: list[ChatMessage],
        memory_block: str,
        on_text: TextCallback | None,
        now: datetime | None,
        *,
        deadline: float,
    ) -> tuple[str, Memory | None, _Tally]:
        """Everything after the user message: model ⇄ tools (until ``deadline``, a
        ``time.perf_counter()`` value), then the final answer, the episode and the
        turn's completion in one transaction."""
        messages = assemble_prompt(memory_block, history, user_text)
        resource_id, session_id = transcript.resource_id, transcript.session_id
        ctx = ToolContext(resource_id, session_id, self.memory, self.secrets, scrubber)
        tally = _Tally()
        limit = asyncio.timeout(deadline - time.perf_counter())
        try:
            async with limit:
                final = await self._converse(ctx, transcript, messages, on_text, tally)
        except BaseException as exc:
            await self.hooks.drain()
            if isinstance(exc, TimeoutError) and limit.expired():
                raise TurnFailedError(
                    f"the turn took longer than {turns.MAX_TURN_DURATION} and was stopped"
                ) from exc
            raise
        finally:
            await transcript.rescrub()
        reply = final.content or ""
        draft = await self.memory.draft_episode(
            resource_id,
            session_id,
            scrubber.scrub(user_text),
            scrubber.scrub(reply),
            created_at=now,
        )

        async def store() -> Memory | None:
            async with self.pool.connection() as conn, conn.transaction():
                answer = await transcript.add_final(final, conn)
                if draft is None:
                    return None
                provenance = Provenance(
                    origin="turn",
                    turn_id=transcript.turn_id,
                    message_ids=_message_ids(transcript.user_message_id, answer.id),
                )
                episode = replace(draft, provenance=check_provenance(provenance))
                return await self.memory.write_episode(conn, episode)

        # The hooks' background writes (audit rows) are independent of the turn's
        # own: made beside them, all done before the turn returns.
        episode, _drained = await asyncio.gather(store(), self.hooks.drain())
        return reply, episode, tally

    async def _end_turn(self, transcript: Transcript, status: TurnStatus) -> None:
        """Mark the turn failed or interrupted, if it started; never raises.

        Best effort, bounded in time: when the database is away the turn stays
        ``running`` and reads as interrupted after the next turn or by its age.
        """
        if transcript.turn_id is None:
            return
        try:
            async with asyncio.timeout(END_TURN_TIMEOUT_S):
                await turns.end_turn(
                    self.pool,
                    transcript.resource_id,
                    transcript.session_id,
                    transcript.turn_id,
                    status,
                )
        except Exception as exc:
            log.warning(
                "could not mark turn %s %s: %s", transcript.turn_id, status, type(exc).__name__
            )

    async def _known_secrets(self, resource_id: str) -> SecretScrubber:
        """The resource's live secret values, to scrub with (one query, only with a store)."""
        if self.secrets is None:
            return SecretScrubber()
        return SecretScrubber(await self.secrets.values_for_scrubbing(resource_id))

    async def _recall(
        self, resource_id: str, user_text: str, now: datetime | None
    ) -> tuple[list[RecallResult], float]:
        """This resource's memories for the user text, and the milliseconds recall took."""
        began = time.perf_counter()
        # Recall takes a bounded query; the start of a very long message stands for it.
        query = user_text.strip()[:QUERY_CAP]
        found = await self.memory.recall(resource_id, query, limit=self.recall_limit, now=now)
        return found, (time.perf_counter() - began) * 1000

    async def _converse(
        self,
        ctx: ToolContext,
        transcript: Transcript,
        messages: list[ChatMessage],
        on_text: TextCallback | None,
        tally: _Tally,
    ) -> ChatMessage:
        """Model calls and tool calls until the model answers without tools; that answer.

        Every message before the answer is stored here; the answer itself is
        stored by the caller, beside the episode.
        """
        specs = self.offered_specs(ctx)
        for round_number in range(1, self.max_tool_rounds + 1):
            try:
                completion = await self._call_model(
                    ctx, messages, specs, on_text, round_number, tally
                )
            except ModelError as exc:
                raise TurnFailedError(f"the model call failed: {exc.message}", cause=exc) from exc
            reply = completion.message
            if not reply.tool_calls:
                return reply
            asked = await transcript.add_assistant(reply)
            if round_number == self.max_tool_rounds:
                # No model call would read these results: running the tools
                # would only be side effects nobody asked to see.
                break
            messages.append(reply)
            for call in reply.tool_calls:
                # Each call's writes name the turn, its messages and the call.
                call_ctx = replace(
                    ctx,
                    provenance=Provenance(
                        origin="agent",
                        turn_id=transcript.turn_id,
                        message_ids=_message_ids(transcript.user_message_id, asked.id),
                        tool_call_id=recorded_call_id(call.id),
                    ),
                )
                outcome = await self.runner.call(call_ctx, call.name, call.arguments)
                tally.tool_calls.append(ToolCallRecord(call.name, outcome.outcome, outcome.text))
                await transcript.add_tool_result(call, outcome.text, outcome.outcome)
                messages.append(
                    ChatMessage("tool", outcome.text, tool_call_id=call.id, name=call.name)
                )
            await transcript.rescrub()
        raise TurnFailedError(
            f"the model was still calling tools after {self.max_tool_rounds} model calls "
            "(max_tool_rounds); the last calls were not run and the turn stopped without a reply"
        )

    async def _call_model(
        self,
        ctx: ToolContext,
        messages: Sequence[ChatMessage],
        specs: Sequence[ToolSpec],
        on_text: TextCallback | None,
        round_number: int,
        tally: _Tally,
    ) -> Completion:
        """One model call between ``before_model_call`` and ``after_model_call``."""
        start = ModelCallStart(
            call_id=new_call_id(),
            resource_id=ctx.resource_id,
            session_id=ctx.session_id,
            model=self.model.model,
            round=round_number,
            message_count=len(messages),
            input_chars=_chars(messages),
            tool_count=len(specs),
            started_at=datetime.now(UTC),
        )

        async def ended(
            completion: Completion | None, error_type: str | None, elapsed_ms: float
        ) -> None:
            tally.model_calls += 1
            tally.model_ms += elapsed_ms
            await self.hooks.after_model_call(
                ModelCallEnd(
                    start=start,
                    outcome="ok" if completion is not None else "error",
                    duration_ms=elapsed_ms,
                    output_chars=_chars([completion.message]) if completion is not None else 0,
                    tool_call_count=len(completion.message.tool_calls) if completion else 0,
                    error_type=error_type,
                )
            )

        return await observe_call(
            self.hooks.before_model_call,
            start,
            lambda: self.model.complete(messages, tools=specs, on_text=on_text),
            ended,
        )
