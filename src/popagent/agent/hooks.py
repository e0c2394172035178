"""Hooks around every model call and every tool call, and the events they receive.

Invariants:
- Events are small frozen values holding names, ids, counts, sizes, timing,
  the outcome and an exception's class name, and nothing else: no message
  text, memory content, recalled text, argument values, error messages or
  secrets. A hook cannot leak what it is never given.
- Names that come from the model (a tool name, argument names) pass through
  ``safe_name`` first: anything that is not a short identifier is recorded as
  ``"<invalid>"``, so content smuggled into a name never reaches a hook.
- Hooks observe; they cannot change or stop a call. ``HookSet`` calls every
  hook in order, and one that raises is logged (its class name only) and
  skipped: a broken hook never fails a turn.
- Every ``before_*`` is followed by exactly one ``after_*`` with the same
  ``call_id``, also when the call raised or was cancelled.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from ..models import Outcome

__all__ = [
    "INVALID_NAME",
    "Hook",
    "HookSet",
    "ModelCallEnd",
    "ModelCallStart",
    "ToolCallEnd",
    "ToolCallStart",
    "new_call_id",
    "observe_call",
    "safe_name",
]

log = logging.getLogger(__name__)

INVALID_NAME = "<invalid>"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def safe_name(name: str) -> str:
    """``name`` when it is a plain identifier of at most 64 characters, else ``"<invalid>"``."""
    return name if _NAME.fullmatch(name) else INVALID_NAME


def new_call_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class ModelCallStart:
    """A model call about to be made: ``message_count`` messages of ``input_chars``
    characters in all, with ``tool_count`` tools offered; ``round`` counts the
    turn's model calls from 1."""

    call_id: str
    resource_id: str
    session_id: str | None
    model: str
    round: int
    message_count: int
    input_chars: int
    tool_count: int
    started_at: datetime


@dataclass(frozen=True, slots=True)
class ModelCallEnd:
    """How a model call ended; ``output_chars`` counts the reply's text and tool-call arguments."""

    start: ModelCallStart
    outcome: Outcome
    duration_ms: float
    output_chars: int = 0
    tool_call_count: int = 0
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call about to run; ``input_chars`` is the size of its raw arguments."""

    call_id: str
    resource_id: str
    session_id: str | None
    tool: str
    argument_names: tuple[str, ...]
    input_chars: int
    started_at: datetime


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """How a tool call ended; ``output_chars`` is the size of the result the model reads."""

    start: ToolCallStart
    outcome: Outcome
    duration_ms: float
    output_chars: int = 0
    error_type: str | None = None


class Hook(Protocol):
    """Called before and after every model call and tool call (see module doc).

    A hook may also define ``async def drain(self, call_ids=None) -> None`` when
    it works in the background (``AuditHook`` writes its rows so): it waits for
    the work of the calls ``call_ids`` name, or of every call so far when it is
    ``None``. The turn awaits it before it returns; a ``drain`` that takes no
    argument is always awaited whole.
    """

    async def before_model_call(self, event: ModelCallStart) -> None: ...

    async def after_model_call(self, event: ModelCallEnd) -> None: ...

    async def before_tool_call(self, event: ToolCallStart) -> None: ...

    async def after_tool_call(self, event: ToolCallEnd) -> None: ...


class HookSet:
    """Several hooks called as one, in order, each isolated from the others' failures."""

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        self.hooks: tuple[Hook, ...] = tuple(hooks)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    async def before_model_call(self, event: ModelCallStart) -> None:
        await self._each("before_model_call", event)

    async def after_model_call(self, event: ModelCallEnd) -> None:
        await self._each("after_model_call", event)

    async def before_tool_call(self, event: ToolCallStart) -> None:
        await self._each("before_tool_call", event)

    async def after_tool_call(self, event: ToolCallEnd) -> None:
        await self._each("after_tool_call", event)

    async def _each(self, method: str, event: object) -> None:
        """Call ``method`` of every hook with ``event``, in order; a hook's failure is
        logged, never raised, and the next hook is called all the same."""
        for hook in self.hooks:
            try:
                await getattr(hook, method)(event)
            except Exception as exc:
                _log_failure(hook, method, exc)

    async def drain(self, call_ids: Collection[str] | None = None) -> None:
        """Wait for work hooks do in the background (a hook's optional ``drain()``): that of
        the calls ``call_ids`` names, or of every call so far (``None``)."""
        for hook in self.hooks:
            drain = getattr(hook, "drain", None)
            if drain is None:
                continue
            try:
                if call_ids is not None and _takes_an_argument(drain):
                    await drain(call_ids)
                else:
                    await drain()
            except Exception as exc:
                _log_failure(hook, "drain", exc)


_Start = TypeVar("_Start")
_Result = TypeVar("_Result")


async def observe_call(
    before: Callable[[_Start], Awaitable[None]],
    start: _Start,
    run: Callable[[], Awaitable[_Result]],
    after: Callable[[_Result | None, str | None, float], Awaitable[None]],
) -> _Result:
    """``run()`` between ``before(start)`` and exactly one ``after(result, error_type,
    duration_ms)``, also when ``run`` raises or is cancelled: then ``result`` is
    ``None`` and ``error_type`` the exception's class name, and the exception
    propagates unchanged once ``after`` returns.

    The one home of the module's last invariant, for model calls (the turn) and
    tool calls (``ToolRunner``); ``after`` builds the call's end event.
    """
    await before(start)
    began = time.perf_counter()
    result: _Result | None = None
    error_type: str | None = None
    try:
        result = await run()
        return result
    except BaseException as exc:
        error_type = type(exc).__name__
        raise
    finally:
        await after(result, error_type, (time.perf_counter() - began) * 1000)


def _takes_an_argument(method: object) -> bool:
    try:
        return bool(inspect.signature(method).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _log_failure(hook: Hook, where: str, exc: Exception) -> None:
    # The class name only: an exception message can quote what the hook handled.
    log.warning("hook %s.%s failed: %s", type(hook).__name__, where, type(exc).__name__)
