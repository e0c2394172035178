"""Input checks shared by every layer: IDs, text, page limits, times, and what is blank.

Each raises ``ValidationError`` naming the field, before any SQL runs.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime

from .credentials import credential_kinds
from .errors import ValidationError

__all__ = [
    "ID_CAP",
    "RECALL_LIMIT_CAP",
    "check_id",
    "check_limit",
    "check_new_session_id",
    "check_no_credential",
    "check_text",
    "check_time",
    "is_blank",
    "is_invisible",
    "is_path_segment",
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


def check_id(field: str, value: object, *, screen: bool = True) -> str:
    """A resource or session ID: 1 to 256 characters, none of them whitespace, a control
    or an invisible character, and no credential (``check_no_credential``); kept exactly
    as given (no trimming, no case folding).

    ``screen=False`` leaves out the credential screen, for deletes alone: an ID stored
    before the screen existed can still be deleted (and so its credential with it).

    The one rule for every identifier a caller chooses (a fact's key adds lower-casing
    and its own cap): ``"alice smith"`` is refused rather than silently naming a
    resource nobody can find again.
    """
    text = check_text(field, value)
    # The common case, in C: printable ASCII without a space holds no whitespace,
    # control or invisible character (imports check tens of thousands of IDs).
    if text.isascii() and text.isprintable() and " " not in text and 0 < len(text) <= ID_CAP:
        return check_no_credential(field, text) if screen else text
    if is_blank(text):
        raise ValidationError(field, "must not be empty")
    if len(text) > ID_CAP:
        raise ValidationError(field, f"must be at most {ID_CAP} characters")
    for ch in text:
        if ch.isspace() or unicodedata.category(ch) == "Cc":
            raise ValidationError(
                field, "must not contain whitespace or control characters (use - or _)"
            )
        if is_invisible(ch):
            raise ValidationError(
                field, "must not contain invisible characters (zero-width, BOM, bidi marks)"
            )
    return check_no_credential(field, text) if screen else text


def check_no_credential(field: str, text: str) -> str:
    """``text``, an identifier or a name, when it holds no credential, else
    ``ValidationError`` naming ``field`` and the kinds found (never the value).

    The same screen as every stored text's (``popagent.credentials``), but refusing:
    an identifier is a key that rows are found by, which cannot be redacted. Session
    and resource IDs arrive in URLs and land in every table of a resource; a
    credential there would be stored in clear and written to logs."""
    kinds = credential_kinds(text)
    if kinds is not None:
        raise ValidationError(
            field,
            f"looks like it contains a credential ({kinds}); an identifier is stored and "
            "shown in clear, so choose one that holds no secret",
        )
    return text


def is_path_segment(text: str) -> bool:
    """Whether ``text`` can be one segment of a URL path: no ``/``, and not ``.`` or ``..``
    (which clients resolve away before sending)."""
    return "/" not in text and text not in (".", "..")


def check_new_session_id(value: object) -> str:
    """The ID of a session about to be created: ``check_id``'s rule, and one URL segment.

    A session is named in the GUI's and the API's paths (``/sessions/{session_id}``),
    so an ID with ``/`` (or ``.``/``..``) could be created but never viewed, renamed
    or deleted over HTTP. Every surface that creates a session applies this (the
    library, the API, the GUI, the CLI, MCP, adapters, import). Sessions created
    before the rule keep their IDs and stay readable, writable and deletable through
    the library: only creating one is refused (no migration rewrites IDs).
    """
    text = check_id("session_id", value)
    if not is_path_segment(text):
        raise ValidationError(
            "session_id",
            "must not contain '/' nor be '.' or '..' (a session ID is one segment of the "
            "GUI's and the API's URLs; use - or _)",
        )
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
