"""LangGraph items as popagent facts: the reversible mapping, and LangGraph's filter and
namespace rules (those of ``InMemoryStore``), for ``popagent.adapters.langgraph``.

How an item becomes a fact (see that module's doc for the whole story):

- **Key**: ``prefix`` plus 40 hex digits of the SHA-256 of the exact namespace and
  key (``json.dumps([list(namespace), key])``).
- **Content**: the item as compact JSON, ``{"namespace":[...],"key":...,"value":{...}}``
  and, for an item with a TTL, ``"ttl":minutes`` after the value (so a read that
  refreshes the TTL knows its length), written so that popagent's normalization
  leaves it unchanged; ``decode_item`` parses it back exactly.

Pure functions: nothing here imports LangGraph or touches the database.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..checks import strip_blank
from ..errors import ValidationError
from ..memory.validation import FACT_CONTENT_CAP, normalize_fact_content
from ..models import Memory

__all__ = [
    "DEFAULT_PREFIX",
    "DIGEST_CHARS",
    "TTL_KEYS",
    "Condition",
    "Decoded",
    "check_count",
    "check_ttl",
    "check_ttl_config",
    "decode_fact",
    "decode_item",
    "encode_item",
    "fact_key",
    "filtered",
    "live",
    "matches",
    "prefix_pattern",
]

DEFAULT_PREFIX = "langgraph:"
DIGEST_CHARS = 40

_WHITESPACE = re.compile(r"\s+")
#: The keys of LangGraph's ``TTLConfig`` (``omit_expired``: expired items are never returned).
TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"})
_COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


# --- the item <-> fact mapping ----------------------------------------------------------


def fact_key(prefix: str, namespace: Sequence[str], key: str) -> str:
    """The popagent fact key of the item ``(namespace, key)``: prefix + 40 hex digits."""
    ident = json.dumps([list(namespace), key], ensure_ascii=True, separators=(",", ":"))
    return prefix + hashlib.sha256(ident.encode("ascii")).hexdigest()[:DIGEST_CHARS]


def _json(obj: object, *, ascii: bool) -> str:
    """Compact JSON that popagent's normalization leaves as it is (NFC aside)."""
    text = json.dumps(obj, ensure_ascii=ascii, separators=(",", ":"), allow_nan=False)
    out: list[str] = []
    prev = ""
    for ch in text:
        # Outside strings compact JSON has no whitespace, so every space is in one.
        if (ch.isspace() and (ch != " " or prev == " ")) or unicodedata.category(ch) == "Cs":
            out.append(f"\\u{ord(ch):04x}")
            prev = ""
        else:
            out.append(ch)
            prev = ch
    return "".join(out)


def _plain(value: object, field: str) -> Any:
    """``value`` checked as JSON: objects with string keys, lists, strings, finite numbers,
    booleans and null (tuples are lists, as JSON has it)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValidationError(field, "must hold only finite numbers (JSON has no NaN)")
        return value
    if isinstance(value, Mapping):
        plain: dict[str, Any] = {}
        for name, inner in value.items():
            if not isinstance(name, str):
                raise ValidationError(
                    field, f"object keys must be strings, not {type(name).__name__}"
                )
            plain[name] = _plain(inner, field)
        return plain
    if isinstance(value, list | tuple):
        return [_plain(inner, field) for inner in value]
    raise ValidationError(field, f"must be JSON: {type(value).__name__} is not")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def check_ttl(ttl: object) -> float | None:
    """A TTL in minutes: ``None`` (never expires) or a finite number above 0."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise ValidationError("ttl", f"must be minutes as a number, not {type(ttl).__name__}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValidationError("ttl", "must be a finite number of minutes above 0")
    return float(ttl)


def encode_item(
    namespace: Sequence[str], key: str, value: Mapping[str, Any], ttl: float | None = None
) -> str:
    """The fact content of an item (see the module doc); ``ValidationError`` when it cannot fit.

    ``decode_item`` of the result gives back exactly ``(namespace, key, value, ttl)``.
    """
    if not isinstance(key, str):
        raise ValidationError("key", f"must be a string, not {type(key).__name__}")
    if not isinstance(value, Mapping):
        raise ValidationError("value", f"must be a JSON object, not {type(value).__name__}")
    plain = _plain(value, "value")
    for ascii in (False, True):
        body = (
            '{"namespace":'
            + _json(list(namespace), ascii=ascii)
            + ',"key":'
            + _json(key, ascii=ascii)
            + ',"value":'
            + _json(plain, ascii=ascii)
            + ("" if ttl is None else ',"ttl":' + _json(check_ttl(ttl), ascii=True))
            + "}"
        )
        if ascii or unicodedata.is_normalized("NFC", body):
            break
    if len(body) > FACT_CONTENT_CAP:
        raise ValidationError(
            "value",
            f"the item (namespace, key and value as JSON) takes {len(body)} characters; "
            f"a popagent fact holds at most {FACT_CONTENT_CAP}",
        )
    # Words the escapes glue together or hide (newlines, tabs, non-NFC text in ASCII
    # escapes), as plain text after the JSON, for recall only.
    hidden = [
        strip_blank(_WHITESPACE.sub(" ", unicodedata.normalize("NFC", s)))
        for s in _strings(plain)
        if _json(s, ascii=ascii)[1:-1] != s
    ]
    tail = " ".join(h for h in hidden if h)[: max(0, FACT_CONTENT_CAP - len(body) - 1)]
    content = f"{body} {tail}" if tail.strip() else body
    try:
        normalized = normalize_fact_content(content, "value")
    except ValidationError as exc:
        if exc.field != "value" or content == body:
            raise
        normalized = normalize_fact_content(body, "value")
    if not normalized.startswith(body):
        normalized = normalize_fact_content(body, "value")
    if not normalized.startswith(body):  # pragma: no cover - the escapes above prevent it
        raise ValidationError("value", "cannot be stored exactly as a popagent fact")
    return normalized


@dataclass(frozen=True, slots=True)
class Decoded:
    """An item read back from its fact: where it is, its value, its TTL in minutes."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    ttl: float | None
    memory: Memory


def decode_item(prefix: str, memory: Memory) -> Decoded | None:
    """The item of a fact this mapping wrote under ``prefix``, else ``None`` (another
    fact of the resource, an episode, or a fact whose key does not match its item)."""
    if memory.kind != "fact" or memory.key is None or not memory.key.startswith(prefix):
        return None
    try:
        parsed, _end = json.JSONDecoder().raw_decode(memory.content)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or set(parsed) - {"ttl"} != {"namespace", "key", "value"}:
        return None
    namespace, key, value = parsed["namespace"], parsed["key"], parsed["value"]
    try:
        ttl = check_ttl(parsed.get("ttl"))
    except ValidationError:
        return None
    if (
        not isinstance(namespace, list)
        or not all(isinstance(label, str) for label in namespace)
        or not isinstance(key, str)
        or not isinstance(value, dict)
        or fact_key(prefix, namespace, key) != memory.key
    ):
        return None
    return Decoded(tuple(namespace), key, value, ttl, memory)


def decode_fact(prefix: str, memory: Memory) -> tuple[tuple[str, ...], str, dict[str, Any]] | None:
    """``(namespace, key, value)`` of a fact this mapping wrote under ``prefix``, else ``None``
    (``decode_item`` without the TTL)."""
    item = decode_item(prefix, memory)
    return None if item is None else (item.namespace, item.key, item.value)


def prefix_pattern(namespace_prefix: tuple[str, ...]) -> str | None:
    """Text every item under ``namespace_prefix`` holds, to narrow a scan; ``None`` when the
    labels' encoding depends on the rest of the item."""
    if not namespace_prefix:
        return None
    readable = _json(list(namespace_prefix), ascii=False)
    if readable != _json(list(namespace_prefix), ascii=True):
        return None
    return '"namespace":' + readable[:-1]


# --- filters and namespace matching (InMemoryStore's rules) ------------------------------


def _compare(item_value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(name.startswith("$") for name in wanted):
            return all(_operator(item_value, op, arg) for op, arg in wanted.items())
        if not isinstance(item_value, dict):
            return False
        return all(_compare(item_value.get(name), inner) for name, inner in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(item_value, wanted, strict=True))
        )
    return bool(item_value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op not in _COMPARISONS:
        raise ValidationError("filter", f"unsupported operator {op!r} (use one of {_COMPARISONS})")
    try:
        left, right = float(value), float(arg)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return left > right
    if op == "$gte":
        return left >= right
    if op == "$lt":
        return left < right
    return left <= right


class Condition(Protocol):
    """LangGraph's ``MatchCondition``, as far as ``matches`` reads it."""

    @property
    def match_type(self) -> str: ...

    @property
    def path(self) -> Sequence[str]: ...


_MISSING = object()


def _field(value: dict[str, Any], name: str) -> Any:
    """``value[name]``; else, for a dotted name, the nested field it names
    (``"user.level"``, as LangGraph's SQL stores read filter keys); else ``None``."""
    if name in value:
        return value[name]
    found: Any = value
    for part in name.split(".") if "." in name else ():
        found = found.get(part, _MISSING) if isinstance(found, dict) else _MISSING
        if found is _MISSING:
            return None
    return None if found is value else found


def filtered(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return not filter or all(_compare(_field(value, name), want) for name, want in filter.items())


def matches(condition: Condition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValidationError(
            "match_type", f"must be 'prefix' or 'suffix', not {condition.match_type!r}"
        )
    return all(want == "*" or have == want for have, want in pairs)


def check_count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(field, "must be an integer >= 0")
    return value


# --- TTL ------------------------------------------------------------------------------


def live(memory: Memory, now: datetime) -> bool:
    """Whether the fact has not expired (maintenance may not have removed it yet)."""
    return memory.expires_at is None or memory.expires_at > now


def check_ttl_config(ttl: object) -> dict[str, Any] | None:
    """LangGraph's ``TTLConfig``, checked: ``default_ttl`` and ``sweep_interval_minutes``
    minutes (or ``None``), ``refresh_on_read`` a bool."""
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise ValidationError("ttl", "must be LangGraph's TTLConfig (a dict)")
    unknown = set(ttl) - TTL_KEYS
    if unknown:
        raise ValidationError("ttl", f"unknown keys {sorted(unknown)}")
    check_ttl(ttl.get("default_ttl"))
    check_ttl(ttl.get("sweep_interval_minutes"))
    if not isinstance(ttl.get("refresh_on_read", True), bool):
        raise ValidationError("ttl.refresh_on_read", "must be true or false")
    return dict(ttl)
