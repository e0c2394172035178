"""The records of the export format (docs/export-format.md): writing them and checking them.

``to_line`` turns one exported row into its JSON line; ``check_record`` turns
one parsed line back into the values an import writes, through the checks and
screens of the normal write paths themselves, not copies of them:
``memory.validation`` for facts (content and keys normalized, a credential
refused), ``threads.service.screen_message`` for a message's content and parts,
``threads.items.check_item``/``screen_item`` for its framework item,
``threads.service.check_title``/``screen_metadata`` for a session, and the
credential screen (``credentials.redacted``, as ``observe.writes`` applies it)
for episodes, observations and actors. Each check raises ``ValidationError``
naming the field; ``popagent.portable.importer`` adds the line number.

Records are as strict as the API's bodies: a field a record type does not
have (``FIELDS``) is refused, never ignored, and values are never coerced
(``"0.5"`` is no importance, ``true`` no id).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, get_args

from ..checks import check_id, check_new_session_id, check_text, is_blank
from ..credentials import redacted
from ..errors import ValidationError
from ..memory.caller_vectors import MAX_CALLER_VECTORS, check_model, check_vector
from ..memory.derived import check_based_on
from ..memory.longterm import sha256_hex
from ..memory.temporal import PRECISIONS
from ..memory.validation import (
    ASSISTANT_TEXT_CAP,
    USER_TEXT_CAP,
    check_importance,
    check_provenance,
    normalize_fact_content,
    normalize_key,
)
from ..models import ORIGINS, Provenance, Role, TurnStatus, VersionEnd
from ..observe.settings import MemorySettings
from ..store.caller_vectors import caller_literal
from ..store.derived import DERIVED_COLUMNS
from ..store.memories import EVENT_COLUMNS
from ..threads.items import check_item, screen_item
from ..threads.service import (
    MESSAGE_CAP,
    check_json_object,
    check_title,
    screen_message,
    screen_metadata,
)

__all__ = [
    "FIELDS",
    "FORMAT",
    "FORMAT_VERSION",
    "HEADER_FIELDS",
    "RECORD_TYPES",
    "check_header",
    "check_record",
    "check_unicode",
    "header",
    "now",
    "to_line",
]

FORMAT = "popagent-export"
FORMAT_VERSION = 1
#: Every record type, in the order an export writes them.
RECORD_TYPES = (
    "settings",
    "session",
    "turn",
    "message",
    "observation_log",
    "observation_group",
    "observation_actor",
    "fact",
    "fact_version",
    "episode",
    "caller_vector",
    "secret",
)
#: An episode is "User: ...\nAssistant: ..." with both sides capped.
EPISODE_CAP = USER_TEXT_CAP + ASSISTANT_TEXT_CAP + len("User: \nAssistant: ")
ACTOR_CAP = 512
_BIGINT_MAX = 2**63 - 1
#: Counts, generations and versions are 32-bit columns.
_INT_MAX = 2**31 - 1
_PROVENANCE_FIELDS = ("origin", "turn_id", "message_ids", "tool_call_id")
#: The event clock (docs/time.md); absent or null in a record: unknown.
_EVENT_FIELDS = EVENT_COLUMNS
#: A derived fact's sources and stale mark (docs/time.md, "Derived memories"); absent
#: or null in a record: none.
_DERIVED_FIELDS = DERIVED_COLUMNS
#: A stale mark's source that is a memory id rather than a key: ``#`` and the id.
_ID_SOURCE = re.compile(r"#[1-9][0-9]{0,18}")
#: The fields of each record type besides ``type``: exactly what an export writes.
FIELDS: dict[str, frozenset[str]] = {
    "settings": frozenset({"settings"}),
    "session": frozenset({"session_id", "title", "metadata", "created_at", "updated_at"}),
    "turn": frozenset({"session_id", "turn_id", "status", "started_at", "ended_at"}),
    "message": frozenset(
        {"session_id", "id", "turn_id", "role", "content", "parts", "item", "created_at"}
    ),
    "observation_log": frozenset(
        {"session_id", "id", "generation", "origin", "observations", "observation_tokens"}
        | {"last_observed_message_id", "covered_group_ids", "next_reflection_tokens"}
        | {"created_at", "updated_at"}
    ),
    "observation_group": frozenset(
        {"session_id", "id", "log_id", "kind", "status", "first_message_id", "last_message_id"}
        | {"observations", "observation_tokens", "message_tokens", "created_at"}
    ),
    "observation_actor": frozenset({"session_id", "actor", "recorded_at"}),
    "fact": frozenset(
        {"id", "key", "content", "content_sha256", "importance", "session_id", "expires_at"}
        | {"version", "created_at", "updated_at", *_PROVENANCE_FIELDS, *_EVENT_FIELDS}
        | set(_DERIVED_FIELDS)
    ),
    "fact_version": frozenset(
        {"fact_id", "version", "key", "content", "content_sha256", "importance", "expires_at"}
        | {"session_id", "valid_from", "valid_to", "ended", "ended_origin", "ended_session_id"}
        | set(_PROVENANCE_FIELDS)
        | set(_EVENT_FIELDS)
    ),
    "episode": frozenset(
        {"id", "session_id", "content", "content_sha256", "importance", "created_at"}
        | set(_PROVENANCE_FIELDS)
        | set(_EVENT_FIELDS)
    ),
    "caller_vector": frozenset({"memory_id", "model", "chunk", "content_sha256", "embedding"}),
    "secret": frozenset(
        {"name", "ciphertext", "nonce", "key_id", "created_at", "updated_at", "last_used_at"}
        | {"expires_at"}
    ),
}
HEADER_FIELDS = frozenset({"format", "version", "resource_id", "exported_at", "popagent_version"})
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SECRET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")


# --- writing --------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def to_line(record_type: str, row: dict[str, Any]) -> str:
    """One record as its JSON line (without the newline): ``type`` first, then the row."""
    record = {"type": record_type, **{k: _json_value(v) for k, v in row.items()}}
    if record_type in ("fact", "fact_version", "episode"):
        record["message_ids"] = list(record.get("message_ids") or [])
    if record_type == "fact":
        record["based_on"] = list(record.get("based_on") or [])
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def header(resource_id: str, exported_at: datetime, popagent_version: str) -> str:
    return json.dumps(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "resource_id": resource_id,
            "exported_at": exported_at.isoformat(),
            "popagent_version": popagent_version,
        },
        ensure_ascii=False,
    )


# --- field checks ---------------------------------------------------------------------------

_MISSING = object()


def _get(obj: dict[str, Any], name: str, optional: bool) -> Any:
    value = obj.get(name, _MISSING)
    if value is _MISSING or value is None:
        if optional:
            return None
        raise ValidationError(name, "is required")
    return value


def _int(
    obj: dict[str, Any],
    name: str,
    *,
    low: int = 1,
    high: int = _BIGINT_MAX,
    optional: bool = False,
) -> Any:
    value = _get(obj, name, optional)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError(name, f"must be an integer from {low} to {high}")
    return value


def _count(obj: dict[str, Any], name: str, *, low: int = 0) -> Any:
    """A 32-bit count, generation or version."""
    return _int(obj, name, low=low, high=_INT_MAX)


def _ids(obj: dict[str, Any], name: str, cap: int | None = None) -> list[int]:
    value = obj.get(name)
    if value is None:
        value = []
    if not isinstance(value, list) or (cap is not None and len(value) > cap):
        limit = f" of at most {cap}" if cap is not None else ""
        raise ValidationError(name, f"must be a list{limit} of positive integers")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= _BIGINT_MAX:
            raise ValidationError(name, "must be a list of positive integers")
    return value


def _text(obj: dict[str, Any], name: str, *, optional: bool = False, cap: int | None = None) -> Any:
    value = _get(obj, name, optional)
    if value is None:
        return None
    text = check_text(name, value)
    if cap is not None and len(text) > cap:
        raise ValidationError(name, f"must be at most {cap:,} characters")
    return text


def _session(obj: dict[str, Any], name: str = "session_id", optional: bool = False) -> Any:
    value = _get(obj, name, optional)
    return None if value is None else check_id(name, value)


def _time(obj: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    value = _get(obj, name, optional)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(name, "must be an ISO-8601 time string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(name, "must be an ISO-8601 time with a UTC offset") from None
    if parsed.tzinfo is None:
        raise ValidationError(name, "must carry a UTC offset (e.g. +00:00)")
    return parsed


def _choice(obj: dict[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = _get(obj, name, False)
    if value not in choices:
        raise ValidationError(name, f"must be one of {', '.join(choices)}")
    return str(value)


def _bytes(obj: dict[str, Any], name: str) -> bytes:
    value = _get(obj, name, False)
    if not isinstance(value, str):
        raise ValidationError(name, "must be base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(name, "must be base64 text") from None


def _provenance(obj: dict[str, Any]) -> dict[str, Any]:
    origin = _text(obj, "origin")
    checked = check_provenance(
        Provenance(
            origin=origin,
            turn_id=_int(obj, "turn_id", optional=True),
            message_ids=tuple(_ids(obj, "message_ids", 64)),
            tool_call_id=_text(obj, "tool_call_id", optional=True),
        )
    )
    return {
        "origin": checked.origin,
        "turn_id": checked.turn_id,
        "message_ids": list(checked.message_ids),
        "tool_call_id": checked.tool_call_id,
    }


def _sha(obj: dict[str, Any]) -> None:
    """``content_sha256`` is read for its form only: the import hashes the content it
    writes (normalized or redacted on the way) itself."""
    value = obj.get("content_sha256")
    if value is not None and not (isinstance(value, str) and _SHA256.fullmatch(value)):
        raise ValidationError("content_sha256", "must be 64 lower-case hex digits")


def _fact_value(obj: dict[str, Any]) -> dict[str, Any]:
    """The value fields a fact and a fact version share, normalized as a write would."""
    content = normalize_fact_content(_get(obj, "content", False))
    _sha(obj)
    return {
        "key": normalize_key(obj.get("key")),
        "content": content,
        "sha": sha256_hex(content),
        "importance": check_importance(_get(obj, "importance", False)),
        "expires_at": _time(obj, "expires_at", optional=True),
        "session_id": _session(obj, optional=True),
        **_provenance(obj),
    }


def _event(obj: dict[str, Any]) -> dict[str, Any]:
    """A memory's event clock as the write path stores it: all four fields absent or
    null (unknown; an export from before migration 0021 has none), or an interval
    with its precision and, optionally, the words it was read from."""
    start = _time(obj, "happened_start", optional=True)
    end = _time(obj, "happened_end", optional=True)
    precision = obj.get("happened_precision")
    phrase = _text(obj, "happened_phrase", optional=True, cap=200)
    if start is None and end is None and precision is None and phrase is None:
        return dict.fromkeys(_EVENT_FIELDS)
    if start is None or end is None or end <= start:
        raise ValidationError(
            "happened_end", "must be after happened_start (or the event clock left out whole)"
        )
    if precision not in PRECISIONS:
        raise ValidationError("happened_precision", f"must be one of {', '.join(PRECISIONS)}")
    if phrase is not None and is_blank(phrase):
        raise ValidationError("happened_phrase", "must not be empty")
    return {
        "happened_start": start,
        "happened_end": end,
        "happened_precision": precision,
        "happened_phrase": None if phrase is None else redacted(phrase),
    }


def _derived(obj: dict[str, Any], fact_id: int, key: str | None) -> dict[str, Any]:
    """A fact's sources and stale mark as the write path stores them: ``based_on``
    checked as ``remember`` checks it (1 to 16 keys and ids; empty, null or absent:
    none), never naming the fact itself; a mark whole (``stale_since`` and
    ``stale_source`` both or neither), its source a key or ``#`` and an id, as
    migration 0022's triggers write it (the block shows it, so nothing else may be
    there). Which memory an id names is settled by the import (``store.portable_import``)."""
    based_on = check_based_on(obj.get("based_on"))
    if based_on and (fact_id in based_on or (key is not None and key in based_on)):
        raise ValidationError("based_on", "must not name the fact itself")
    since = _time(obj, "stale_since", optional=True)
    source = _get(obj, "stale_source", True)
    if (since is None) != (source is None):
        raise ValidationError("stale_source", "is given exactly when stale_since is")
    is_id = isinstance(source, str) and _ID_SOURCE.fullmatch(source) is not None
    if source is not None and not (is_id and int(source[1:]) <= _BIGINT_MAX):
        source = normalize_key(source, "stale_source")
    return {
        "based_on": list(based_on) if based_on else None,
        "stale_since": since,
        "stale_source": source,
    }


# --- records --------------------------------------------------------------------------------


def _times(obj: dict[str, Any]) -> dict[str, Any]:
    """A record's ``created_at`` and ``updated_at``."""
    return {"created_at": _time(obj, "created_at"), "updated_at": _time(obj, "updated_at")}


def _settings(obj: dict[str, Any]) -> dict[str, Any]:
    values = check_json_object("settings", _get(obj, "settings", False))
    if isinstance(values.get("forward_attachments"), list):
        values["forward_attachments"] = tuple(values["forward_attachments"])
    return {"settings": MemorySettings(**values)}


def _session_record(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return {
        # A new session: the identifier rule of every surface that creates one.
        "session_id": check_new_session_id(_get(obj, "session_id", False)),
        "title": check_title(obj.get("title")),
        # ``ThreadStore.create_session``'s screen: keys and values redacted.
        "metadata": screen_metadata({} if metadata is None else metadata),
        **_times(obj),
    }


def _turn(obj: dict[str, Any]) -> dict[str, Any]:
    status = _choice(obj, "status", get_args(TurnStatus))
    ended_at = _time(obj, "ended_at", optional=True)
    if (status == "running") != (ended_at is None):
        raise ValidationError("ended_at", "is set exactly when the turn is not running")
    return {
        "session_id": _session(obj),
        "turn_id": _int(obj, "turn_id"),
        "status": status,
        "started_at": _time(obj, "started_at"),
        "ended_at": ended_at,
    }


def _message(obj: dict[str, Any]) -> dict[str, Any]:
    parts = obj.get("parts")
    if parts is None:
        parts = []
    elif not isinstance(parts, list):
        raise ValidationError("parts", "must be a list of objects")
    role = _choice(obj, "role", get_args(Role))
    content = obj.get("content")
    # ``ThreadStore.append_message``'s check and screen (MESSAGE_CAP characters).
    content, screened = screen_message(role, "" if content is None else content, parts)
    return {
        "session_id": _session(obj),
        "id": _int(obj, "id"),
        "turn_id": _int(obj, "turn_id", optional=True),
        "role": role,
        "content": content,
        "parts": screened,
        "item": _item(obj.get("item")),
        "created_at": _time(obj, "created_at"),
    }


def _item(value: object) -> dict[str, Any] | None:
    """A framework's own record of the message (migration 0013), screened as
    ``SessionItems`` screens it."""
    if value is None:
        return None
    try:
        checked = check_item(0, value)
    except ValidationError as exc:
        raise ValidationError("item", exc.message) from None
    screened: dict[str, Any] = screen_item(checked)
    return screened


def _observations(obj: dict[str, Any]) -> str:
    # ``observe.writes``' screen of every observations text the engine stores.
    return redacted(_text(obj, "observations", cap=MESSAGE_CAP))


def _observation_log(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "session_id": _session(obj),
        "id": _int(obj, "id"),
        "generation": _count(obj, "generation"),
        "origin": _choice(obj, "origin", ("observation", "reflection")),
        "observations": _observations(obj),
        "observation_tokens": _count(obj, "observation_tokens"),
        "last_observed_message_id": _int(obj, "last_observed_message_id", optional=True),
        "covered_group_ids": _ids(obj, "covered_group_ids"),
        "next_reflection_tokens": _count(obj, "next_reflection_tokens"),
        **_times(obj),
    }


def _observation_group(obj: dict[str, Any]) -> dict[str, Any]:
    first, last = _int(obj, "first_message_id"), _int(obj, "last_message_id")
    if last < first:
        raise ValidationError("last_message_id", "must not be below first_message_id")
    return {
        "session_id": _session(obj),
        "id": _int(obj, "id"),
        "log_id": _int(obj, "log_id"),
        "kind": _choice(obj, "kind", ("observation", "reflection")),
        "status": _choice(obj, "status", ("active", "buffered")),
        "first_message_id": first,
        "last_message_id": last,
        "observations": _observations(obj),
        "observation_tokens": _count(obj, "observation_tokens"),
        "message_tokens": _count(obj, "message_tokens"),
        "created_at": _time(obj, "created_at"),
    }


def _observation_actor(obj: dict[str, Any]) -> dict[str, Any]:
    actor = _text(obj, "actor", cap=ACTOR_CAP)
    if is_blank(actor):
        raise ValidationError("actor", "must not be empty")
    return {
        "session_id": _session(obj),
        "actor": redacted(actor),
        "recorded_at": _time(obj, "recorded_at"),
    }


def _fact(obj: dict[str, Any]) -> dict[str, Any]:
    # An expiry already past is kept: the fact was exported before maintenance
    # ended it; recall skips it and maintenance ends it here as it would have there.
    fact_id, value = _int(obj, "id"), _fact_value(obj)
    return {
        "id": fact_id,
        **value,
        "version": _count(obj, "version", low=1),
        **_times(obj),
        **_event(obj),
        **_derived(obj, fact_id, value["key"]),
    }


def _fact_version(obj: dict[str, Any]) -> dict[str, Any]:
    valid_from, valid_to = _time(obj, "valid_from"), _time(obj, "valid_to")
    if valid_to < valid_from:
        raise ValidationError("valid_to", "must not be before valid_from")
    ended_origin = _choice(obj, "ended_origin", ORIGINS)
    return {
        "fact_id": _int(obj, "fact_id"),
        "version": _count(obj, "version", low=1),
        **_fact_value(obj),
        "valid_from": valid_from,
        "valid_to": valid_to,
        "ended": _choice(obj, "ended", get_args(VersionEnd)),
        "ended_origin": ended_origin,
        "ended_session_id": _session(obj, "ended_session_id", optional=True),
        **_event(obj),
    }


def _episode(obj: dict[str, Any]) -> dict[str, Any]:
    text = unicodedata.normalize("NFC", _text(obj, "content", cap=EPISODE_CAP)).strip()
    if is_blank(text):
        raise ValidationError("content", "must not be empty")
    content = redacted(text)  # as ``memory.validation.episode_content`` screens each side
    _sha(obj)
    return {
        "id": _int(obj, "id"),
        "session_id": _session(obj, optional=True),
        "content": content,
        "sha": sha256_hex(content),
        "importance": check_importance(_get(obj, "importance", False)),
        **_provenance(obj),
        "created_at": _time(obj, "created_at"),
        **_event(obj),
    }


def _caller_vector(obj: dict[str, Any]) -> dict[str, Any]:
    """One vector a caller made with its own model (LangGraph's ``index=``), checked as
    ``LongTermMemory.write_caller_vectors`` checks it; the import writes it only where
    its memory holds the content whose hash it names."""
    value = obj.get("content_sha256")
    if not (isinstance(value, str) and _SHA256.fullmatch(value)):
        raise ValidationError("content_sha256", "must be 64 lower-case hex digits")
    vector = check_vector(_get(obj, "embedding", False), "embedding")
    return {
        "memory_id": _int(obj, "memory_id"),
        "model": check_model(_get(obj, "model", False)),
        "chunk": _int(obj, "chunk", low=0, high=MAX_CALLER_VECTORS - 1),
        "sha": value,
        "dimensions": len(vector),
        "embedding": caller_literal(vector),
    }


def _secret(obj: dict[str, Any]) -> dict[str, Any]:
    name = _text(obj, "name")
    if not _SECRET_NAME.fullmatch(name):
        raise ValidationError("name", "must be a letter then up to 63 of [A-Za-z0-9_.-]")
    nonce = _bytes(obj, "nonce")
    if len(nonce) != 12:
        raise ValidationError("nonce", "must be 12 bytes")
    key_id = _text(obj, "key_id")
    if not _KEY_ID.fullmatch(key_id):
        raise ValidationError("key_id", "must be 16 lower-case hex digits")
    return {
        "name": name,
        "ciphertext": _bytes(obj, "ciphertext"),
        "nonce": nonce,
        "key_id": key_id,
        **_times(obj),
        "last_used_at": _time(obj, "last_used_at", optional=True),
        "expires_at": _time(obj, "expires_at", optional=True),
    }


_CHECKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "settings": _settings,
    "session": _session_record,
    "turn": _turn,
    "message": _message,
    "observation_log": _observation_log,
    "observation_group": _observation_group,
    "observation_actor": _observation_actor,
    "fact": _fact,
    "fact_version": _fact_version,
    "episode": _episode,
    "caller_vector": _caller_vector,
    "secret": _secret,
}


def _shown(name: str) -> str:
    """A field name fit to print: as it is when plain, else JSON-quoted and cut."""
    return name if _PLAIN_NAME.fullmatch(name) else json.dumps(name[:64])


def _only_known(obj: dict[str, Any], known: frozenset[str], what: str) -> None:
    for name in obj:
        if name not in known and name != "type":
            raise ValidationError(
                _shown(name), f"is not a field of {what} (unknown fields are refused, not ignored)"
            )


def check_unicode(obj: dict[str, Any]) -> None:
    """Refuse a lone surrogate (an unpaired ``\\ud800`` escape) anywhere in a parsed
    record, naming its top-level field: PostgreSQL cannot store one. Costly for a large
    record; the importer calls it only when the line's text holds such an escape."""
    for name, value in obj.items():
        try:
            json.dumps({name: value}, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(
                _shown(name),
                "is not valid Unicode (it holds an unpaired surrogate escape such as \\ud800)",
            ) from None


def check_record(obj: object) -> tuple[str, dict[str, Any]]:
    """``(type, values)`` of one parsed line; ``ValidationError`` naming the field."""
    if not isinstance(obj, dict):
        raise ValidationError("record", "must be a JSON object")
    record_type = obj.get("type")
    if record_type not in _CHECKS:
        raise ValidationError("type", f"must be one of {', '.join(RECORD_TYPES)}")
    kind = str(record_type)
    _only_known(obj, FIELDS[kind], f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} record")
    return kind, _CHECKS[kind](obj)


def check_header(obj: object) -> str:
    """The exported resource ID of a header line; ``ValidationError`` naming the field."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValidationError("format", f"the first line must be a header with format {FORMAT!r}")
    version = obj.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValidationError("version", "must be a positive integer")
    if version > FORMAT_VERSION:
        raise ValidationError(
            "version",
            f"is {version}; this popagent reads version {FORMAT_VERSION} (upgrade popagent)",
        )
    _only_known(obj, HEADER_FIELDS, "the header")
    _time(obj, "exported_at", optional=True)
    _text(obj, "popagent_version", optional=True, cap=64)
    return check_id("resource_id", obj.get("resource_id"))


def now() -> datetime:
    return datetime.now(UTC)
