"""The Reflector: model calls that rewrite a thread's observation log smaller.

``reflect`` tries at most ``MAX_REFLECTION_ATTEMPTS`` calls, escalating the
requested compression each time, and returns the smallest valid candidate.

Invariants (each a complaint of Mastra's users we must not repeat):
- An empty answer, a repetition loop, or an answer that is not smaller than
  the log is never a valid candidate: such a reflection never replaces the log.
- The number of calls is bounded, and so is each call's time (``deadline``).
- Escalation stops at the first candidate below the target.
- Credentials pass the one screen (``popagent.credentials``) both ways: the
  log sent to the Reflector and each candidate it returns are redacted, so a
  reflection never stores a value.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ..credentials import redact_credentials, redacted
from ..llm.protocol import ChatMessage, ChatModel, ModelError
from ..offload import off_loop
from .observer import OBSERVER_PROMPT, screened_observations
from .snapshot import ExecutionSnapshot
from .text import is_degenerate
from .tokens import TokenCounter, count_text

__all__ = [
    "COMPRESSION_LEVELS",
    "MAX_REFLECTION_ATTEMPTS",
    "REFLECTOR_PROMPT",
    "Reflection",
    "build_reflector_messages",
    "reflect",
]

MAX_REFLECTION_ATTEMPTS = 3

REFLECTOR_PROMPT = f"""\
You maintain the memory of a long conversation between a user and an AI assistant. \
The observations below were written by a note-taker following these rules:

<observation-rules>
{OBSERVER_PROMPT}
</observation-rules>

Your job now is to rewrite the whole observation log smaller. Your rewrite replaces \
the log entirely: anything you leave out is forgotten. Reorganise and merge related \
lines, keep dates and times, keep the ✅ completion marks, keep user facts, \
preferences, decisions, names, numbers and errors; condense older material more than \
recent material. A user's statement wins over their question. Do not invent anything. \
Put your whole answer inside <observations> and </observations>, each tag on its own \
line."""

#: The compression asked for at each attempt (level 1, 2, 3).
COMPRESSION_LEVELS = (
    "Compress slightly: keep about 8 of every 10 details.",
    "Compress aggressively: keep about 6 of every 10 details and remove every redundancy.",
    "Compress critically: summarise the oldest 50-70% into short paragraphs, drop procedural "
    "detail, keep names, dates, decisions, errors and preferences.",
)

_GUIDANCE_HEADING = "=== CUSTOM INSTRUCTIONS ==="


@dataclass(frozen=True, slots=True)
class Reflection:
    """What ``reflect`` produced: the best candidate (``None`` when no attempt was
    valid), its tokens, and how many calls were made."""

    observations: str | None
    observation_tokens: int
    attempts: int
    reached_target: bool


def build_reflector_messages(
    observations: str, snapshot: ExecutionSnapshot, level: int
) -> list[ChatMessage]:
    """The Reflector request at compression ``level`` (1 to 3)."""
    return _reflector_messages(redact_credentials(observations)[0], snapshot, level)


def _reflector_messages(
    screened: str, snapshot: ExecutionSnapshot, level: int
) -> list[ChatMessage]:
    system = REFLECTOR_PROMPT
    if snapshot.reflection_instruction:
        system += f"\n\n{_GUIDANCE_HEADING}\n{snapshot.reflection_instruction}"
    user = (
        "## Observations to reflect on\n\n"
        f"{screened}\n\n"
        "---\n"
        "Rewrite these observations as a smaller, complete log.\n\n"
        f"## Compression (level {level} of {len(COMPRESSION_LEVELS)})\n\n"
        f"{COMPRESSION_LEVELS[level - 1]}"
    )
    return [ChatMessage("system", system), ChatMessage("user", user)]


async def reflect(
    model: ChatModel,
    observations: str,
    snapshot: ExecutionSnapshot,
    *,
    current_tokens: int,
    deadline: float,
    counter: TokenCounter | None = None,
) -> Reflection:
    """Up to ``MAX_REFLECTION_ATTEMPTS`` Reflector calls before ``deadline`` (a
    ``time.monotonic()`` value); the smallest valid candidate.

    A candidate is valid when it is non-empty, does not loop and has fewer
    tokens than ``current_tokens``. Escalation stops once a candidate is below
    the reflection threshold. Model errors and timeouts end the attempts; they
    never raise.
    """
    target = snapshot.reflection_observation_tokens
    best: str | None = None
    best_tokens = current_tokens
    attempts = 0
    # Screened once, off the event loop (the log can be long), for every attempt.
    screened = await off_loop(len(observations), redacted, observations)
    for level in range(1, MAX_REFLECTION_ATTEMPTS + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        attempts += 1
        request = _reflector_messages(screened, snapshot, level)
        try:
            completion = await asyncio.wait_for(model.complete(request), remaining)
        except (ModelError, TimeoutError):
            break
        raw = completion.message.content or ""
        if is_degenerate(raw):
            continue
        candidate = await off_loop(len(raw), screened_observations, raw)
        if not candidate.strip():
            continue
        tokens = count_text(candidate, counter)
        if tokens < best_tokens:
            best, best_tokens = candidate, tokens
        if best is not None and best_tokens < target:
            break
    return Reflection(
        observations=best,
        observation_tokens=best_tokens if best is not None else current_tokens,
        attempts=attempts,
        reached_target=best is not None and best_tokens < target,
    )
