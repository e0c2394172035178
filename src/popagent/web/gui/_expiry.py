"""An expiry as the GUI's forms take it: a ``datetime-local`` field, in UTC.

The fact form and the API key form both type an expiry this way; a time with an
offset is taken as given, one without is UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ...errors import ValidationError

__all__ = ["parse_expiry"]


def parse_expiry(text: str) -> datetime:
    """``text`` (ISO 8601) as an aware time; a bad one is a ``ValidationError`` of
    ``expires_at`` with an example of what is expected."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            "expires_at", "must be a date and time like 2026-12-31T18:00 (UTC)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
