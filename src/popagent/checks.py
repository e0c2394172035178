"""Input checks shared by every layer: IDs, text, page limits, times, and what is blank.

Each raises ``ValidationError`` naming the field, before any SQL runs.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime

from .errors import ValidationError

__all__ = [
    "ID_CAP",
    "RECALL_LIMIT_CAP",
    "check_id",
    "check_limit",
    "check_text",
    "check_time",
    "is_blank",
    "is_invisible",
    "strip_blank",
]

ID_CAP = 256
RECALL_LIMIT_CAP = 1_000


def check_text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise ValidationError(field, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            field, "is not valid Unicode (it holds an unpaired surrogate)"
        ) from exc
    return value


# Format characters (zero-width space and joiners, word joiner, BOM, bidi marks,
# soft hyphen) and the blank fillers (Hangul fillers, braille blank, ...): a reader
# sees nothing, so text made only of them is empty, and nothing may hide in them.
_FILLERS = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u180e\u2800\u3164\uffa0")


def is_invisible(ch: str) -> bool:
    """Whether ``ch`` shows nothing: a format character (``Cf``) or a blank filler."""
    return ch in _FILLERS or unicodedata.category(ch) == "Cf"


def _blank(ch: str) -> bool:
    return ch.isspace() or is_invisible(ch) or unicodedata.category(ch) == "Cc"


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing visible: only whitespace, controls and invisible characters."""
    return all(_blank(ch) for ch in text)


def strip_blank(text: str) -> str:
    """``text`` without leading and trailing whitespace, controls and invisible characters."""
    start, end = 0, len(text)
    while start < end and _blank(text[start]):
        start += 1
    while end > start and _blank(text[end - 1]):
        end -= 1
    return text[start:end]


def check_id(field: str, value: object) -> str:
    """A resource or session ID: non-empty, at most 256 characters, kept exactly as given."""
    text = check_text(field, value)
    if is_blank(text):
        raise ValidationError(field, "must not be empty")
    if len(text) > ID_CAP:
        raise ValidationError(field, f"must be at most {ID_CAP} characters")
    return text


def check_limit(value: object, field: str = "limit", cap: int = RECALL_LIMIT_CAP) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, "must be an integer")
    if not 1 <= value <= cap:
        raise ValidationError(field, f"must be between 1 and {cap}")
    return value


def check_time(field: str, value: object) -> datetime | None:
    """``None``, or a timezone-aware datetime (a naive one is ambiguous across servers)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValidationError(field, "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must be timezone-aware")
    return value
