"""The rules every write path applies, in one place.

Each check raises ``ValidationError`` naming the field and the limit; nothing
is ever silently cut except episode text, which is capped with an explicit
truncation marker as the retention contract requires.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

from ..checks import (
    ID_CAP,
    check_id,
    check_limit,
    check_text,
    check_time,
    is_blank,
    is_invisible,
    strip_blank,
)
from ..credentials import find_credentials, redact_credentials
from ..errors import SecretRefusedError, ValidationError
from ..models import HAPPENED_AT_CAP, ORIGINS, Kind, MemoryFilter, Provenance
from .temporal import TimeWindow, given_window

__all__ = [
    "ASSISTANT_TEXT_CAP",
    "FACT_CONTENT_CAP",
    "FILTER_FIELDS",
    "ID_CAP",
    "KEY_CAP",
    "LIST_LIMIT_CAP",
    "QUERY_CAP",
    "USER_TEXT_CAP",
    "cap_text",
    "check_credentials",
    "check_expires_at",
    "check_filter",
    "check_happened_at",
    "check_id",
    "check_importance",
    "check_kind",
    "check_limit",
    "check_offset",
    "check_provenance",
    "check_query",
    "check_text",
    "episode_content",
    "filter_from",
    "normalize_fact_content",
    "normalize_key",
    "truncation_marker",
]

#: The most source message ids one memory records.
MESSAGE_IDS_CAP = 64
#: A tool call id's longest (the providers' ids are far shorter).
TOOL_CALL_ID_CAP = 256
_BIGINT_MAX = 2**63 - 1

FACT_CONTENT_CAP = 2_000
KEY_CAP = 128
USER_TEXT_CAP = 4_000
ASSISTANT_TEXT_CAP = 8_000
QUERY_CAP = 4_000
#: The most memories one list returns.
LIST_LIMIT_CAP = 1_000
#: A writer's ``happened_at``: a date, a time or a short phrase.
_HAPPENED_AT_CAP = HAPPENED_AT_CAP

_WHITESPACE = re.compile(r"\s+")
_EMPTY = "is required and must not be empty"


_JSON_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code[1:], 16)) if code.startswith("u") else _ESCAPED[code]


def check_credentials(field: str, text: str) -> None:
    """Refuse ``text`` with ``SecretRefusedError`` naming ``field`` if it holds a credential.

    The one check every fact write path applies (library, remember tool, API,
    GUI, MCP, CLI all reach it through ``normalize_fact_content`` and
    ``normalize_key``); the message names the kinds found, never the value.
    """
    findings = find_credentials(text)
    if not findings and "\\" in text:
        # Text that holds JSON (a LangGraph store item, a pasted config) hides a
        # credential's context behind escapes: {\"password\": \"...\"}. Screened
        # once more with JSON's string escapes undone (linear, one pass).
        findings = find_credentials(_JSON_ESCAPE.sub(_unescape, text))
    if findings:
        kinds = ", ".join(sorted({f.kind for f in findings}))
        raise SecretRefusedError(
            field,
            f"looks like it contains a credential ({kinds}); secrets are never stored as "
            "memories, use the secret store instead",
        )


def normalize_fact_content(value: object, field: str = "content") -> str:
    """NFC, whitespace runs collapsed to one space, trimmed (of invisible characters too);
    1 to 2,000 characters; no credentials."""
    text = unicodedata.normalize("NFC", check_text(field, value))
    text = strip_blank(_WHITESPACE.sub(" ", text))
    if not text:
        raise ValidationError(field, _EMPTY)
    if len(text) > FACT_CONTENT_CAP:
        raise ValidationError(
            field,
            f"is {len(text)} characters; a fact is limited to {FACT_CONTENT_CAP} characters",
        )
    check_credentials(field, text)
    return text


def normalize_key(value: object, field: str = "key") -> str | None:
    """``None`` stays ``None``; otherwise trimmed and lower-cased, 1 to 128 characters,
    no whitespace, control or invisible characters, no credentials."""
    if value is None:
        return None
    raw = unicodedata.normalize("NFC", check_text(field, value))
    if is_blank(raw):
        raise ValidationError(field, "must not be empty when given")
    stripped = raw.strip()
    text = stripped.lower()
    if len(text) > KEY_CAP:
        raise ValidationError(field, f"must be at most {KEY_CAP} characters")
    # Screened before lower-casing: several token shapes are case-sensitive.
    check_credentials(field, stripped)
    if any(ch.isspace() or unicodedata.category(ch) == "Cc" for ch in text):
        raise ValidationError(field, "must not contain whitespace or control characters")
    if any(is_invisible(ch) for ch in text):
        raise ValidationError(
            field, "must not contain invisible characters (zero-width, BOM, bidi marks)"
        )
    return text


def check_importance(value: object, field: str = "importance") -> float:
    """A finite number in [0, 1] (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(field, f"must be a number in [0, 1], not {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValidationError(field, "must be a finite number in [0, 1]")
    if not 0.0 <= number <= 1.0:
        raise ValidationError(field, f"must be in [0, 1], got {number}")
    return number


def check_query(value: object, field: str = "query") -> str:
    """Trimmed; 1 to 4,000 characters, not only whitespace or invisible characters."""
    text = check_text(field, value).strip()
    if is_blank(text):
        raise ValidationError(field, "must not be empty")
    if len(text) > QUERY_CAP:
        raise ValidationError(field, f"must be at most {QUERY_CAP} characters")
    return text


def truncation_marker(dropped: int) -> str:
    return f" [truncated: {dropped} more characters]"


def cap_text(text: str, cap: int) -> str:
    """``text`` if it fits in ``cap`` characters, else a prefix plus a marker, ``cap`` in all."""
    if len(text) <= cap:
        return text
    # The marker's length depends on how much is dropped; two passes settle it.
    keep = cap - len(truncation_marker(len(text) - cap))
    keep = cap - len(truncation_marker(len(text) - keep))
    return text[:keep] + truncation_marker(len(text) - keep)


def episode_content(user_text: object, assistant_text: object) -> tuple[str, int] | None:
    """The stored text of one turn, and how many credentials were redacted.

    ``None`` when either side is empty (no episode is kept for such a turn).
    Credentials are redacted before capping, so a cap never leaves half a secret.
    """
    user = check_text("user_text", user_text).strip()
    assistant = check_text("assistant_text", assistant_text).strip()
    if is_blank(user) or is_blank(assistant):
        return None
    user, n_user = redact_credentials(unicodedata.normalize("NFC", user))
    assistant, n_assistant = redact_credentials(unicodedata.normalize("NFC", assistant))
    content = (
        f"User: {cap_text(user, USER_TEXT_CAP)}\n"
        f"Assistant: {cap_text(assistant, ASSISTANT_TEXT_CAP)}"
    )
    return content, n_user + n_assistant


def check_expires_at(value: object, *, now: datetime | None = None) -> datetime | None:
    """``None`` (never expires) or a timezone-aware time still in the future."""
    expires_at = check_time("expires_at", value)
    if expires_at is not None and expires_at <= (now or datetime.now(UTC)):
        raise ValidationError("expires_at", "must be in the future")
    return expires_at


def check_happened_at(value: object, now: datetime) -> TimeWindow | None:
    """A writer's ``happened_at`` as its event interval (``temporal.given_window``),
    read against ``now``; ``None`` for ``None``."""
    if value is None:
        return None
    if not isinstance(value, str) or is_blank(value) or len(value) > _HAPPENED_AT_CAP:
        raise ValidationError(
            "happened_at",
            f"must be a date, a time or a time phrase of 1 to {_HAPPENED_AT_CAP} characters",
        )
    window = given_window(value, now)
    if window is None:
        raise ValidationError(
            "happened_at",
            "names no time: give a date (2023-07-28), a month (2023-07), a year (2021), "
            "a timestamp, or a phrase such as 'spring 2021' or 'last Friday'",
        )
    return window


def _positive_id(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _BIGINT_MAX:
        raise ValidationError(field, "must be a positive 64-bit integer")
    return value


def check_provenance(value: object) -> Provenance:
    """A ``Provenance`` whose origin is known and whose ids are in range, its
    ``tool_call_id`` with any credential redacted."""
    if value is None:
        return Provenance()
    if not isinstance(value, Provenance):
        raise ValidationError("provenance", "must be a Provenance")
    if value.origin not in ORIGINS:
        raise ValidationError("origin", f"must be one of {', '.join(ORIGINS)}")
    if value.turn_id is not None:
        _positive_id("turn_id", value.turn_id)
    if not isinstance(value.message_ids, tuple) or len(value.message_ids) > MESSAGE_IDS_CAP:
        raise ValidationError("message_ids", f"must be a tuple of at most {MESSAGE_IDS_CAP} ids")
    for message_id in value.message_ids:
        _positive_id("message_ids", message_id)
    if value.tool_call_id is not None:
        tool_call_id = check_text("tool_call_id", value.tool_call_id)
        if not tool_call_id or len(tool_call_id) > TOOL_CALL_ID_CAP:
            raise ValidationError("tool_call_id", f"must be 1 to {TOOL_CALL_ID_CAP} characters")
        # Redacted as in a message's tool call (``threads.items.screen_item``): a tool
        # call's id is the client's text, stored and exported with the memory.
        screened, found = redact_credentials(tool_call_id)
        if found:
            return replace(value, tool_call_id=screened)
    return value


def check_kind(value: object) -> Kind | None:
    """``None`` (both kinds), ``"fact"`` or ``"episode"``."""
    if value is None or value in ("fact", "episode"):
        return value
    raise ValidationError("kind", "must be 'fact' or 'episode'")


def check_offset(value: object) -> int:
    """An integer >= 0 (booleans are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError("offset", "must be an integer >= 0")
    return value


#: ``MemoryFilter``'s fields, in order: what a surface's list options, query parameters
#: or tool arguments are read from (``filter_from``), never spelled out again.
FILTER_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MemoryFilter))


def filter_from(values: Mapping[str, Any], **defaults: Any) -> MemoryFilter:
    """The ``MemoryFilter`` of ``values``' entries that name one of its fields (other
    entries are ignored; an entry given as ``None`` is ``None``). A field ``values``
    lacks takes ``defaults``' value (a route's ``kind``, a tool's ``limit``), else the
    dataclass default. Built as given: ``check_filter`` checks it."""
    given = {name: values[name] for name in FILTER_FIELDS if name in values}
    return MemoryFilter(**{**defaults, **given})


def check_filter(value: object) -> MemoryFilter:
    """``value`` checked field by field, in field order, as a normalized copy: the one
    place a list's filter is validated (``ValidationError`` names the field).

    Keys are trimmed and lower-cased (``normalize_key``), ``text`` trimmed
    (``check_query``), ``limit`` 1 to ``LIST_LIMIT_CAP``, ``offset`` >= 0, times
    timezone-aware.
    """
    if not isinstance(value, MemoryFilter):
        raise ValidationError("where", "must be a MemoryFilter")
    return replace(
        value,
        kind=check_kind(value.kind),
        key=normalize_key(value.key),
        session_id=check_id("session_id", value.session_id)
        if value.session_id is not None
        else None,
        text=check_query(value.text, "text") if value.text is not None else None,
        created_after=check_time("created_after", value.created_after),
        created_before=check_time("created_before", value.created_before),
        limit=check_limit(value.limit, cap=LIST_LIMIT_CAP),
        offset=check_offset(value.offset),
    )
