"""Input checks shared by every layer: IDs, text, page limits and times.

Each raises ``ValidationError`` naming the field, before any SQL runs.
"""

from __future__ import annotations

from datetime import datetime

from .errors import ValidationError

__all__ = ["ID_CAP", "RECALL_LIMIT_CAP", "check_id", "check_limit", "check_text", "check_time"]

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


def check_id(field: str, value: object) -> str:
    """A resource or session ID: non-empty, at most 256 characters, kept exactly as given."""
    text = check_text(field, value)
    if not text.strip():
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
