"""The Observer: one model call that turns a thread's oldest raw messages into observations.

``build_observer_messages`` is pure (the request, from stored messages, the
previous observations and the turn's ``ExecutionSnapshot``); ``run_observer``
makes the one call through the ``ChatModel`` protocol, bounded by a timeout.

Invariants:
- The Observer's instructions are fixed; the resource's custom guidance is
  appended under its own heading and never replaces them.
- Previous observations are trimmed to the snapshot's
  ``observation_previous_observer_tokens`` (``trim_previous``).
- Attachments appear as placeholders; only those the allowlist matches are
  forwarded: as real content parts of the request (an image by its URL or
  bytes, another file by its bytes), listed by placeholder name after the
  messages, with their URL or extracted text in the placeholder. One without
  usable URL or bytes stays a placeholder.
- An answer that is empty, holds no observations, or loops is a failure
  (``ObservationFailed``); the caller keeps the log as it was.
- Credentials never reach the Observer nor the log: the request's text
  (previous observations and messages, stored before the screen existed or
  not) and the parsed observations pass the package's one credential screen
  (``popagent.credentials``), each value replaced by ``[REDACTED:<kind>]``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..credentials import redact_credentials, redact_json_text, redacted
from ..errors import ObservationFailed, ValidationError
from ..llm.protocol import (
    ChatMessage,
    ChatModel,
    ContentPart,
    FilePart,
    ImagePart,
    ModelError,
)
from ..models import Message
from ..offload import off_loop
from .snapshot import ExecutionSnapshot
from .text import GAP_SECONDS, gap_text, is_degenerate, parse_observations, trim_previous
from .tokens import TokenCounter

__all__ = [
    "OBSERVER_PROMPT",
    "ObservationFailed",
    "attachment_allowed",
    "build_observer_messages",
    "format_messages",
    "observer_request",
    "run_observer",
    "screened_observations",
]

OBSERVER_PROMPT = """\
You are the note-taker of a long conversation between a user and an AI assistant. \
Older parts of the conversation are removed from the assistant's context and replaced \
by your notes, so your notes are all the assistant will remember of them.

Write observations about the NEW messages only:
- Record what the user states about themselves, their work and their preferences as \
facts; a user's question or plan is not a fact, say which it is. When something \
changes, write it as a change that replaces the earlier state.
- Keep names, numbers, quantities, dates, identifiers, file names and exact wording \
that may matter later. Quote unusual terms. Short user messages may be kept nearly \
word for word.
- Note what the assistant did or promised, which tools it used and what they returned, \
briefly, and what is still open.
- If a message mentions a concrete date ("next Friday", "in 2 days"), add the date it \
means at the end of the line, as "(meaning YYYY-MM-DD)".
- Lines in brackets such as "[2 hours later]" mark a pause in the conversation; use \
them for the timeline, do not copy them.

Format: group by date with a line "Date: Mon D, YYYY", then one line per observation \
in time order, each starting with a priority and the 24-hour time:
* 🔴 (14:30) high: facts and preferences of the user, unresolved goals
* 🟡 (14:31) medium: project details, tool results
* 🟢 (14:32) low: minor details
* ✅ (14:35) something that was completed
Be terse: one to five observations per exchange. Do not repeat earlier observations. \
Do not add ids or tags. Put your whole answer inside <observations> and </observations>, \
each tag on its own line."""

_GUIDANCE_HEADING = "=== CUSTOM INSTRUCTIONS ==="
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def attachment_allowed(media_type: str, patterns: Sequence[str]) -> bool:
    """Whether ``media_type`` matches the allowlist: exact, ``type/*`` or ``*``, ignoring case."""
    kind = media_type.strip().lower()
    return any(fnmatch.fnmatchcase(kind, p.strip().lower()) for p in patterns if p.strip())


def _when(at: datetime) -> str:
    return at.strftime("%H:%M")


def _content_part(part: Mapping[str, Any], media_type: str, name: str) -> ContentPart | None:
    """The content part that forwards an attachment, or ``None`` when it has no
    usable URL or bytes (or they fail the protocol's checks)."""
    url = part.get("url")
    data = part.get("data")
    detail = part.get("detail")
    try:
        if media_type.lower().startswith("image/"):
            level = detail if detail in ("auto", "low", "high") else None
            if isinstance(url, str) and url.startswith(("https://", "http://", "data:")):
                return ImagePart(url, level)
            if isinstance(data, str):
                return ImagePart(f"data:{media_type};base64,{data}", level)
            return None
        if isinstance(data, str):
            return FilePart(name, media_type, data)
        inline = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
        if inline is not None:
            return FilePart(name, inline.group(1), inline.group(2))
    except ValidationError:
        return None
    return None


def _attachments(
    message: Message,
    patterns: Sequence[str],
    numbering: list[int],
    forwarded: list[tuple[str, ContentPart]],
) -> list[str]:
    out: list[str] = []
    for part in message.parts:
        if part.get("type") != "attachment":
            continue
        media_type = str(part.get("media_type") or "application/octet-stream")
        name = str(part.get("name") or "unnamed")
        image = media_type.lower().startswith("image/")
        numbering[0 if image else 1] += 1
        label = f"{'Image' if image else 'File'} #{numbering[0 if image else 1]}: {name}"
        line = f"[{label}]"
        if attachment_allowed(media_type, patterns):
            details = [media_type]
            url = part.get("url")
            if isinstance(url, str) and not url.startswith("data:"):
                details.append(url)
            if isinstance(part.get("text"), str):
                details.append("text: " + str(part["text"]))
            line += " (" + "; ".join(details) + ")"
            content = _content_part(part, media_type, name)
            if content is not None:
                forwarded.append((label, content))
        out.append(line)
    return out


def _tool_lines(message: Message) -> list[str]:
    lines: list[str] = []
    for part in message.parts:
        if part.get("type") == "tool_call":
            arguments = part.get("arguments")
            # Screened as JSON: an escaped value (``\\u00e8``, ``\\n``) is found too.
            shown = redact_json_text(arguments) if isinstance(arguments, str) else arguments
            lines.append(f"Tool call {part.get('name')}: {_short(shown)}")
    return lines


def _short(value: Any, cap: int = 2_000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= cap else text[:cap] + "… [truncated]"


def format_messages(
    messages: Sequence[Message], *, temporal_markers: bool, attachments: Sequence[str]
) -> str:
    """The messages as the Observer reads them: a date header when the date
    changes, ``Role (HH:MM): text`` lines, tool calls and results, attachment
    placeholders, and, with ``temporal_markers``, a ``[… later]`` line before a
    message that follows a gap of 10 minutes or more."""
    return _format(messages, temporal_markers, attachments, [])


def _format(
    messages: Sequence[Message],
    temporal_markers: bool,
    attachments: Sequence[str],
    forwarded: list[tuple[str, ContentPart]],
) -> str:
    lines: list[str] = []
    day: str | None = None
    previous: datetime | None = None
    numbering = [0, 0]
    for message in messages:
        at = message.created_at
        if temporal_markers and previous is not None:
            gap = (at - previous).total_seconds()
            if gap >= GAP_SECONDS:
                lines.append(f"[{gap_text(gap)}]")
        previous = at
        date = f"{at.strftime('%b')} {at.day}, {at.year}"
        if date != day:
            lines.append(f"Date: {date}")
            day = date
        if message.role == "tool":
            name = next(
                (p.get("name") for p in message.parts if p.get("type") == "tool_result"), "tool"
            )
            text = _short(message.content) if message.content else "[empty result]"
            lines.append(f"Tool result {name} ({_when(at)}): {text}")
            continue
        role = {"user": "User", "assistant": "Assistant", "system": "System"}[message.role]
        if message.content:
            lines.append(f"{role} ({_when(at)}): {message.content}")
        lines.extend(_tool_lines(message))
        lines.extend(_attachments(message, attachments, numbering, forwarded))
    return "\n".join(lines)


def build_observer_messages(
    messages: Sequence[Message],
    previous: str,
    snapshot: ExecutionSnapshot,
    counter: TokenCounter | None = None,
) -> list[ChatMessage]:
    """The Observer request: its fixed system prompt (plus custom guidance) and one
    user message with the trimmed previous observations and the new messages."""
    system, text, forwarded = _observer_request(messages, previous, snapshot, counter)
    return _observer_messages(system, redact_credentials(text)[0], forwarded)


async def observer_request(
    messages: Sequence[Message],
    previous: str,
    snapshot: ExecutionSnapshot,
    counter: TokenCounter | None = None,
) -> list[ChatMessage]:
    """``build_observer_messages`` with its text screened off the event loop (it
    holds every new message, so it can be long)."""
    system, text, forwarded = _observer_request(messages, previous, snapshot, counter)
    return _observer_messages(system, await off_loop(len(text), redacted, text), forwarded)


def _observer_messages(
    system: str, text: str, forwarded: list[tuple[str, ContentPart]]
) -> list[ChatMessage]:
    user = ChatMessage("user", text, attachments=tuple(part for _, part in forwarded))
    return [ChatMessage("system", system), user]


def _observer_request(
    messages: Sequence[Message],
    previous: str,
    snapshot: ExecutionSnapshot,
    counter: TokenCounter | None,
) -> tuple[str, str, list[tuple[str, ContentPart]]]:
    """The request's system prompt, its user text before screening, and the
    attachments forwarded after that text."""
    system = OBSERVER_PROMPT
    if snapshot.observation_instruction:
        system += f"\n\n{_GUIDANCE_HEADING}\n{snapshot.observation_instruction}"
    shown, truncated = trim_previous(
        previous, snapshot.observation_previous_observer_tokens, counter
    )
    parts: list[str] = []
    if shown or truncated:
        parts.append("## Previous observations\n\n" + (shown or "(left out)"))
        if truncated:
            parts.append(
                "Some previous observations were left out here to save space; "
                "the assistant still has all of them."
            )
        parts.append("Do not repeat them: your new observations are appended after them.")
    forwarded: list[tuple[str, ContentPart]] = []
    history = _format(
        messages, snapshot.temporal_markers, snapshot.observation_observe_attachments, forwarded
    )
    parts.append("## New messages to observe\n\n" + history)
    if forwarded:
        names = "\n".join(f"- {label}" for label, _ in forwarded)
        parts.append(
            "The following attachments of the new messages are attached after this text, "
            "in this order:\n" + names
        )
    parts.append("---\n## Your task\n\nWrite the observations of the new messages.")
    return system, "\n\n".join(parts), forwarded


async def run_observer(
    model: ChatModel, request: Sequence[ChatMessage], *, timeout_s: float
) -> str:
    """One Observer call within ``timeout_s``: the parsed observations, credentials redacted.

    Raises ``ObservationFailed`` on a model error, a timeout, or an answer
    without usable (non-looping) observations.
    """
    if timeout_s <= 0:
        raise ObservationFailed("no time was left for the Observer")
    try:
        completion = await asyncio.wait_for(model.complete(request), timeout_s)
    except ModelError as exc:
        raise ObservationFailed(f"the Observer call failed: {exc.message}") from exc
    except TimeoutError as exc:
        raise ObservationFailed(f"the Observer took longer than {timeout_s:g} s") from exc
    raw = completion.message.content or ""
    if is_degenerate(raw):
        raise ObservationFailed("the Observer's answer repeats itself (a repetition loop)")
    observations = await off_loop(len(raw), screened_observations, raw)
    if not observations.strip():
        raise ObservationFailed("the Observer's answer holds no observations")
    return observations


def screened_observations(raw: str) -> str:
    """The observations of a model's answer, credentials redacted."""
    return redact_credentials(parse_observations(raw))[0]
