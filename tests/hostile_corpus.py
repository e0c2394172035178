"""A corpus of hostile requests for the API, the CLI and MCP (see ``test_hostile_input``).

A few hundred base cases (hostile values, bodies and lines) are crossed with
the places each transport accepts input (``Slot``s: a body field, a query or
path parameter, a CLI option or argument, a tool argument) into several hundred
requests per transport. Every case says what it must get:

- ``REFUSE``: a 4xx (API), exit 2 (CLI), a tool error or JSON-RPC error (MCP)
  that names ``field``; nothing written;
- ``EITHER``: accepted, or refused like ``REFUSE`` (odd but legitimate text,
  e.g. right-to-left marks inside a sentence).

Values are Python values as ``json.loads`` would give them: strings may hold
lone surrogates (sent as ``\\udXXX`` escapes), floats may be NaN or infinite
(sent as ``NaN``/``Infinity``). ``Raw`` is JSON text sent verbatim (deep
nesting, integers too long for Python's ``int`` conversion).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from tests.mcp_support import TOOLS

__all__ = [
    "EITHER",
    "REFUSE",
    "ApiCase",
    "CliCase",
    "Hostile",
    "McpCase",
    "Raw",
    "api_cases",
    "cli_cases",
    "dumps",
    "mcp_cases",
    "mcp_line_cases",
]

Expect = Literal["refuse", "either"]
REFUSE: Expect = "refuse"
EITHER: Expect = "either"

FACT_CAP = 2_000
KEY_CAP = 128
QUERY_CAP = 4_000
#: The API's chat message cap (``web.schemas.CHAT_MESSAGE_CAP``).
CHAT_MESSAGE_CAP = 32_000
TITLE_CAP = 200
ID_CAP = 256
TEN_MB = 10 * 1024 * 1024
DEPTH = 10_000


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text sent as is, in place of a value."""

    text: str


def dumps(value: Any) -> str:
    """``value`` as JSON text: ASCII only (lone surrogates become ``\\udXXX``
    escapes), NaN and Infinity as their JavaScript literals, ``Raw`` verbatim."""
    raws: list[str] = []

    def mark(v: Any) -> Any:
        if isinstance(v, Raw):
            raws.append(v.text)
            return f"@@RAW{len(raws) - 1}@@"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list):
            return [mark(x) for x in v]
        return v

    text = json.dumps(mark(value), ensure_ascii=True, allow_nan=True)
    for i, raw in enumerate(raws):
        text = text.replace(f'"@@RAW{i}@@"', raw, 1)
    return text


@dataclass(frozen=True, slots=True)
class Hostile:
    """One hostile value: ``refused_as_text`` when every stored or searched text
    field must refuse it."""

    name: str
    value: Any
    refused_as_text: bool


def _deep(depth: int = DEPTH) -> Raw:
    return Raw("[" * depth + "]" * depth)


# --- strings --------------------------------------------------------------------------------

#: Text every stored or searched text field must refuse.
BAD_TEXT: list[tuple[str, str]] = [
    ("nul-only", "\x00"),
    ("nul-inside", "dark\x00mode"),
    ("nul-trailing", "dark mode\x00"),
    ("surrogate-high", "\ud800"),
    ("surrogate-low", "\udfff"),
    ("surrogate-inside", "dark \ud83d mode"),
    ("surrogate-reversed-pair", "\ude00\ud83d"),
    ("empty", ""),
    ("spaces", "   "),
    ("tabs-newlines", "\t\n\r\n\t"),
    ("nbsp", "\u00a0\u00a0"),
    ("ideographic-space", "\u3000"),
    ("zero-width-space", "\u200b"),
    ("zero-width-joiners", "\u200c\u200d"),
    ("word-joiner", "\u2060\u2060"),
    ("bom", "\ufeff"),
    ("zero-width-and-spaces", " \u200b \ufeff "),
]

#: Text that is odd but may be stored (a field may still refuse it, naming itself).
ODD_TEXT: list[tuple[str, str]] = [
    ("rtl-override", "\u202egnp.exe"),
    ("rtl-inside", "Prefers \u202edark\u202c mode"),
    ("bidi-isolates", "\u2066abc\u2069 \u2067def\u2069"),
    ("zero-width-inside", "pass\u200bword"),
    ("bom-prefix", "\ufeffPrefers tea"),
    ("traversal", "../../etc/passwd"),
    ("traversal-encoded", "%2e%2e/%2e%2e/etc/passwd"),
    ("absolute-path", "/etc/passwd"),
    ("windows-path", "..\\..\\Windows\\system32"),
    ("sql", "'; DROP TABLE popagent_memories; --"),
    ("template", "{{7*7}} ${7*7} %s %n {0}"),
    ("html", "<script>alert(1)</script>"),
    ("percent-ff", "%FF%00"),
    ("ansi-escape", "\x1b[31mred\x1b[0m"),
    ("crlf", "line\r\nX-Injected: yes"),
    ("line-separator", "a\u2028b\u2029c"),
    ("zalgo", "Z\u0334\u0321\u031ba\u0337l\u0336g\u0335o" * 20),
    ("emoji-zwj", "\U0001f468\u200d\U0001f469\u200d\U0001f467 family"),
    ("valid-pair", "\U0001f600 grin"),
]


def _long(cap: int) -> list[tuple[str, str]]:
    return [("over-cap", "x" * (cap + 1)), ("ten-mb", "y" * TEN_MB)]


def _text_values(cap: int) -> list[Hostile]:
    values = [Hostile(n, v, True) for n, v in [*BAD_TEXT, *_long(cap)]]
    values += [Hostile(n, v, False) for n, v in ODD_TEXT]
    values += [Hostile("at-cap", "z" * cap, False)]
    return values


#: Values of the wrong JSON type for a string field.
NOT_TEXT: list[Hostile] = [
    Hostile("int", 5, True),
    Hostile("float", 1.5, True),
    Hostile("true", True, True),
    Hostile("array", ["a"], True),
    Hostile("object", {"$gt": ""}, True),
    Hostile("nan", float("nan"), True),
    Hostile("infinity", float("inf"), True),
    Hostile("deep-nesting", _deep(), True),
]

#: Values for an integer field with bounds (``refused_as_text`` is unused here).
INTEGERS: list[tuple[str, Any]] = [
    ("negative", -5),
    ("zero", 0),
    ("min-int64", -(2**63)),
    ("over-int64", 2**63),
    ("uint64", 2**64),
    ("huge", 10**30),
    ("huge-5000-digits", Raw("9" * 5000)),
    ("float-fraction", 1.5),
    ("exponent-overflow", Raw("1e400")),
    ("nan", float("nan")),
    ("infinity", float("inf")),
    ("minus-infinity", float("-inf")),
    ("string", "5"),
    ("true", True),
    ("array", [1]),
    ("object", {"n": 1}),
    ("deep-nesting", _deep()),
]

FLOATS: list[tuple[str, Any]] = [
    ("negative", -0.5),
    ("over-one", 1.5),
    ("nan", float("nan")),
    ("infinity", float("inf")),
    ("minus-infinity", float("-inf")),
    ("exponent-overflow", Raw("1e400")),
    ("huge-int", 10**30),
    ("string", "0.5"),
    ("true", True),
    ("array", [0.5]),
    ("deep-nesting", _deep()),
]


def _int_refused(value: Any, low: int, high: int | None) -> Expect:
    if isinstance(value, bool) or not isinstance(value, int):
        return REFUSE
    if value < low or (high is not None and value > high):
        return REFUSE
    return EITHER


# --- API --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiCase:
    """One HTTP request. ``path`` may hold ``{fact}`` and ``{session}`` (the suite's
    fact id and session id). ``body`` is a JSON value (``dumps``), or bytes sent
    as they are, or ``None`` for no body."""

    name: str
    method: str
    path: str
    body: Any = None
    expect: Expect = REFUSE
    field: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def _api_body_slot(
    name: str, method: str, path: str, base: dict[str, Any], key: str, values: Sequence[Hostile]
) -> Iterator[ApiCase]:
    for v in values:
        yield ApiCase(
            f"api {name} {key}={v.name}",
            method,
            path,
            {**base, key: v.value},
            REFUSE if v.refused_as_text else EITHER,
            key,
        )


def _api_int_slot(
    name: str, method: str, path: str, base: dict[str, Any], key: str, low: int, high: int | None
) -> Iterator[ApiCase]:
    for label, value in INTEGERS:
        yield ApiCase(
            f"api {name} {key}={label}",
            method,
            path,
            {**base, key: value},
            _int_refused(value, low, high),
            key,
        )


def _api_query_slot(
    name: str, path: str, key: str, values: Sequence[tuple[str, str, Expect]]
) -> Iterator[ApiCase]:
    for label, raw, expect in values:
        yield ApiCase(f"api {name} ?{key}={label}", "GET", f"{path}?{key}={raw}", None, expect, key)


#: Query strings for integer parameters: (label, already URL-encoded text, refused?).
_QUERY_INTS: list[tuple[str, str]] = [
    ("negative", "-5"),
    ("zero", "0"),
    ("over-int64", str(2**63)),
    ("huge", "9" * 5000),
    ("float", "1.5"),
    ("exponent", "1e3"),
    ("nan", "NaN"),
    ("infinity", "Infinity"),
    ("empty", ""),
    ("spaces", "%20%20"),
    ("nul", "%00"),
    ("word", "ten"),
    ("hex", "0x10"),
    ("percent-ff", "%FF"),
    ("surrogate-bytes", "%ED%A0%80"),
    ("unicode-digit", quote("\u0665")),
]

_QUERY_TEXT: list[tuple[str, str, Expect]] = [
    ("nul", "%00", REFUSE),
    ("nul-inside", "a%00b", REFUSE),
    ("empty", "", REFUSE),
    ("over-cap", "q" * 5000, REFUSE),
    ("percent-ff", "%FF", EITHER),
    ("surrogate-bytes", "%ED%A0%80", EITHER),
    ("rtl", quote("\u202eabc"), EITHER),
    ("zero-width", quote("\u200b"), EITHER),
    ("traversal", quote("../../etc/passwd", safe=""), EITHER),
    ("sql", quote("' OR 1=1 --", safe=""), EITHER),
]


def _query_int_values(low: int, high: int) -> list[tuple[str, str, Expect]]:
    out: list[tuple[str, str, Expect]] = []
    for label, raw in _QUERY_INTS:
        try:
            number: int | None = int(raw) if raw.lstrip("-").isdigit() else None
        except ValueError:
            number = None
        ok = number is not None and low <= number <= high
        out.append((label, raw, EITHER if ok else REFUSE))
    return out


#: Session ids in a URL path: (label, encoded path segment(s), must it be refused?).
SESSION_PATHS: list[tuple[str, str, Expect]] = [
    ("dotdot-encoded", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", EITHER),
    ("dotdot-slash-encoded", "..%2F..%2Fapi%2Fcleanup", EITHER),
    ("dotdot-mixed", "%2e%2e/%2e%2e/etc", EITHER),
    ("absolute-encoded", "%2Fetc%2Fpasswd", EITHER),
    ("backslashes", "..%5C..%5Cwindows", EITHER),
    ("percent-ff", "%FF", REFUSE),
    ("percent-fe-ff", "%FE%FF", REFUSE),
    ("surrogate-bytes", "%ED%A0%80", REFUSE),
    ("overlong-utf8-slash", "%C0%AF", REFUSE),
    ("nul", "%00", REFUSE),
    ("nul-inside", "a%00b", REFUSE),
    ("spaces", "%20%20", REFUSE),
    ("zero-width", quote("\u200b"), REFUSE),
    ("bom", quote("\ufeff"), REFUSE),
    ("over-cap", "s" * (ID_CAP + 1), REFUSE),
    ("rtl", quote("\u202eabc"), EITHER),
    ("double-encoded", "%252e%252e%252f", EITHER),
]

MEMORY_IDS: list[tuple[str, str, Expect]] = [
    ("negative", "-1", REFUSE),
    ("zero", "0", REFUSE),
    ("over-int64", str(2**63), REFUSE),
    ("huge", "9" * 400, REFUSE),
    ("float", "1.5", REFUSE),
    ("exponent", "1e3", REFUSE),
    ("nan", "NaN", REFUSE),
    ("word", "abc", REFUSE),
    ("nul", "%00", REFUSE),
    ("traversal", "..%2F..%2Fcleanup", REFUSE),
]


def _api_bodies() -> Iterator[ApiCase]:
    """Whole bodies that are broken, oversized, nested or mistyped."""
    facts = ("POST", "/api/facts")
    yield ApiCase("api body not-json", *facts, b"not json")
    yield ApiCase("api body truncated", *facts, b'{"content": "a')
    yield ApiCase("api body empty", *facts, b"")
    yield ApiCase("api body array", *facts, [{"content": "a"}], field=None)
    yield ApiCase("api body null", *facts, Raw("null"))
    yield ApiCase("api body number", *facts, 5)
    yield ApiCase("api body string", *facts, "content")
    yield ApiCase("api body deep-nesting", *facts, _deep())
    yield ApiCase("api body deep-nesting-in-field", *facts, {"content": _deep()}, field="content")
    yield ApiCase("api body deep-object", *facts, Raw('{"a":' * DEPTH + "1" + "}" * DEPTH))
    yield ApiCase("api body ten-mb-valid", *facts, {"content": "a" * TEN_MB})
    yield ApiCase("api body ten-mb-garbage", *facts, b"\x00" * TEN_MB)
    yield ApiCase("api body ten-mb-whitespace", *facts, b" " * TEN_MB)
    yield ApiCase("api body invalid-utf8", *facts, b'{"content": "\xff\xfe"}')
    yield ApiCase("api body overlong-utf8", *facts, b'{"content": "\xc0\xaf"}')
    yield ApiCase("api body cesu-surrogate", *facts, b'{"content": "\xed\xa0\x80"}')
    yield ApiCase("api body utf16", *facts, '{"content": "x"}'.encode("utf-16"))
    yield ApiCase(
        "api body nan-literal", *facts, b'{"content": "x", "importance": NaN}', field="importance"
    )
    yield ApiCase(
        "api body duplicate-keys",
        *facts,
        b'{"content": "ok", "content": "\\u0000"}',
        field="content",
    )
    yield ApiCase(
        "api body form-encoded",
        *facts,
        b"content=hello",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    yield ApiCase(
        "api body text-plain", *facts, b'{"content": "x"}', headers={"content-type": "text/plain"}
    )
    for name in ("resource_id", "id", "kind", "__proto__", "constructor", "session_id", "Content"):
        yield ApiCase(
            f"api facts unknown-field {name}", *facts, {"content": "ok", name: "other"}, field=name
        )
    yield ApiCase("api facts missing content", *facts, {"key": "k"}, field="content")
    yield ApiCase(
        "api recall unknown-field resource_id",
        "POST",
        "/api/recall",
        {"query": "x", "resource_id": "other"},
        field="resource_id",
    )
    yield ApiCase("api recall missing query", "POST", "/api/recall", {}, field="query")
    yield ApiCase(
        "api patch fact unknown-field resource_id",
        "PATCH",
        "/api/facts/{fact}",
        {"resource_id": "o"},
        field="resource_id",
    )
    yield ApiCase("api patch fact empty", "PATCH", "/api/facts/{fact}", {}, field=None)
    yield ApiCase("api cleanup missing confirm", "POST", "/api/cleanup", {}, field="confirm")
    yield ApiCase(
        "api cleanup unknown-field resource_id",
        "POST",
        "/api/cleanup",
        {"confirm": False, "resource_id": "o"},
    )
    yield ApiCase(
        "api chat unknown-field resource_id",
        "POST",
        "/api/sessions/hostile-chat/chat",
        {"message": "hi", "resource_id": "o"},
        field="resource_id",
    )
    yield ApiCase(
        "api chat missing message", "POST", "/api/sessions/hostile-chat/chat", {}, field="message"
    )
    yield ApiCase(
        "api settings unknown-setting",
        "PATCH",
        "/api/settings",
        {"resource_id": "o"},
        field="resource_id",
    )
    yield ApiCase("api settings array", "PATCH", "/api/settings", [1, 2])
    yield ApiCase(
        "api settings deep",
        "PATCH",
        "/api/settings",
        {"observer_guidance": _deep()},
        field="observer_guidance",
    )
    yield ApiCase(
        "api rename unknown-field",
        "PATCH",
        "/api/sessions/{session}",
        {"title": "t", "resource_id": "o"},
        field="resource_id",
    )


def api_cases() -> list[ApiCase]:
    """Every API case (several hundred)."""
    cases: list[ApiCase] = []
    fact_text = _text_values(FACT_CAP) + NOT_TEXT
    key_text = _text_values(KEY_CAP) + NOT_TEXT
    query_text = _text_values(QUERY_CAP) + NOT_TEXT
    cases += _api_body_slot("create fact", "POST", "/api/facts", {}, "content", fact_text)
    cases += _api_body_slot(
        "create fact", "POST", "/api/facts", {"content": "Likes tea"}, "key", key_text
    )
    cases += _api_body_slot("patch fact", "PATCH", "/api/facts/{fact}", {}, "content", fact_text)
    cases += _api_body_slot("patch fact", "PATCH", "/api/facts/{fact}", {}, "key", key_text)
    cases += _api_body_slot("recall", "POST", "/api/recall", {}, "query", query_text)
    message = [v for v in _text_values(CHAT_MESSAGE_CAP) + NOT_TEXT if v.refused_as_text]
    cases += _api_body_slot(
        "chat", "POST", "/api/sessions/hostile-chat/chat", {}, "message", message
    )
    title = [
        Hostile(
            v.name,
            v.value,
            v.refused_as_text and v.name.startswith(("nul", "surrogate", "over", "ten")),
        )
        for v in _text_values(TITLE_CAP)
    ] + NOT_TEXT
    cases += _api_body_slot("rename", "PATCH", "/api/sessions/{session}", {}, "title", title)
    guidance = [
        Hostile(
            v.name,
            v.value,
            v.name.startswith(("nul", "surrogate", "ten")) or not isinstance(v.value, str),
        )
        for v in _text_values(QUERY_CAP) + NOT_TEXT
    ]
    cases += _api_body_slot("settings", "PATCH", "/api/settings", {}, "observer_guidance", guidance)
    scope = [Hostile(v.name, v.value, True) for v in _text_values(20) + NOT_TEXT]
    cases += _api_body_slot("settings", "PATCH", "/api/settings", {}, "retrieval_scope", scope)
    for label, value in FLOATS:
        for method, path, base in (
            ("POST", "/api/facts", {"content": "Likes coffee"}),
            ("PATCH", "/api/facts/{fact}", {}),
        ):
            cases.append(
                ApiCase(
                    f"api {method} {path} importance={label}",
                    method,
                    path,
                    {**base, "importance": value},
                    REFUSE,
                    "importance",
                )
            )
    cases += _api_int_slot("recall", "POST", "/api/recall", {"query": "tea"}, "limit", 1, 100)
    cases += _api_int_slot(
        "settings", "PATCH", "/api/settings", {}, "observation_threshold_tokens", 10**9, None
    )
    # confirm: only the JSON boolean true; none of these may delete anything.
    for label, value in [
        ("one", 1),
        ("one-float", 1.0),
        ("string-true", "true"),
        ("string-yes", "yes"),
        ("false", False),
        ("null", None),
        ("array", [True]),
        ("object", {"value": True}),
        ("nan", float("nan")),
        ("infinity", float("inf")),
        ("huge", 10**30),
        ("deep-nesting", _deep()),
    ]:
        cases.append(
            ApiCase(
                f"api cleanup confirm={label}",
                "POST",
                "/api/cleanup",
                {"confirm": value},
                REFUSE,
                "confirm",
            )
        )
    cases += _api_query_slot("memories", "/api/memories", "limit", _query_int_values(1, 200))
    cases += _api_query_slot(
        "memories", "/api/memories", "offset", _query_int_values(0, 10_000_000)
    )
    cases += _api_query_slot("facts", "/api/facts", "text", _QUERY_TEXT)
    cases += _api_query_slot("facts", "/api/facts", "key", _QUERY_TEXT)
    cases += _api_query_slot("sessions", "/api/sessions", "limit", _query_int_values(1, 200))
    cases += _api_query_slot(
        "sessions", "/api/sessions", "offset", _query_int_values(0, 10_000_000)
    )
    cases += _api_query_slot(
        "messages", "/api/sessions/{session}/messages", "after_id", _query_int_values(0, 2**63 - 1)
    )
    for label, segment, expect in SESSION_PATHS:
        cases.append(
            ApiCase(
                f"api session path {label} GET",
                "GET",
                f"/api/sessions/{segment}",
                None,
                expect,
                "session_id",
            )
        )
        cases.append(
            ApiCase(
                f"api session path {label} messages",
                "GET",
                f"/api/sessions/{segment}/messages",
                None,
                expect,
                "session_id",
            )
        )
        cases.append(
            ApiCase(
                f"api session path {label} rename",
                "PATCH",
                f"/api/sessions/{segment}",
                {"title": "t"},
                expect,
                "session_id",
            )
        )
        cases.append(
            ApiCase(
                f"api session path {label} delete",
                "DELETE",
                f"/api/sessions/{segment}",
                None,
                expect,
                "session_id",
            )
        )
        if expect == REFUSE:
            cases.append(
                ApiCase(
                    f"api session path {label} chat",
                    "POST",
                    f"/api/sessions/{segment}/chat",
                    {"message": "hello"},
                    REFUSE,
                    "session_id",
                )
            )
    for label, segment, expect in MEMORY_IDS:
        for method, path in (
            ("GET", "/api/memories/"),
            ("GET", "/api/facts/"),
            ("DELETE", "/api/facts/"),
            ("DELETE", "/api/episodes/"),
        ):
            cases.append(
                ApiCase(
                    f"api id {method} {path}{label}", method, f"{path}{segment}", None, expect, "id"
                )
            )
    cases += _api_bodies()
    return cases


# --- CLI --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CliCase:
    """``popagent ARGS``; ``{fact}`` and ``{session}`` in an argument are replaced.
    A refusal must exit 2 and its output must name ``field`` (case-insensitive)."""

    name: str
    args: tuple[str, ...]
    expect: Expect
    field: str


_CLI_INTS: list[tuple[str, str]] = [
    ("negative", "-5"),
    ("zero", "0"),
    ("over-int64", str(2**63)),
    ("huge", "9" * 5000),
    ("float", "1.5"),
    ("exponent", "1e3"),
    ("nan", "NaN"),
    ("infinity", "inf"),
    ("empty", ""),
    ("spaces", "  "),
    ("nul", "5\x00"),
    ("word", "ten"),
    ("surrogate", "\udcff"),
    ("unicode-digit", "\u0665"),
]


def _cli_int_values(low: int, high: int) -> list[tuple[str, str, Expect]]:
    out: list[tuple[str, str, Expect]] = []
    for label, raw in _CLI_INTS:
        # What click's int type takes is what Python's int() takes (Unicode digits
        # included: "\u0665" is 5); anything else must be refused.
        try:
            number: int | None = int(raw) if len(raw) < 100 else None
        except ValueError:
            number = None
        out.append((label, raw, EITHER if number is not None and low <= number <= high else REFUSE))
    return out


def _cli_text(cap: int, *, ten_mb: bool = True) -> list[Hostile]:
    values = [v for v in _text_values(cap) if ten_mb or v.name != "ten-mb"]
    # A real argv cannot hold a NUL, but click's runner and Python callers can.
    return values


def cli_cases() -> list[CliCase]:
    """Every CLI case, run through click's runner."""
    cases: list[CliCase] = []

    def text_slot(name: str, build: Any, values: Sequence[Hostile], fieldname: str) -> None:
        for v in values:
            cases.append(
                CliCase(
                    f"cli {name} {v.name}",
                    tuple(build(v.value)),
                    REFUSE if v.refused_as_text else EITHER,
                    fieldname,
                )
            )

    def int_slot(name: str, build: Any, low: int, high: int, fieldname: str) -> None:
        for label, raw, expect in _cli_int_values(low, high):
            cases.append(CliCase(f"cli {name} {label}", tuple(build(raw)), expect, fieldname))

    text_slot("remember content", lambda v: ["remember", v], _cli_text(FACT_CAP), "content")
    text_slot(
        "remember --key",
        lambda v: ["remember", "Likes tea", "--key", v],
        _cli_text(KEY_CAP, ten_mb=False),
        "key",
    )
    text_slot("recall query", lambda v: ["recall", v], _cli_text(QUERY_CAP), "query")
    text_slot(
        "facts add content",
        lambda v: ["facts", "add", v],
        _cli_text(FACT_CAP, ten_mb=False),
        "content",
    )
    text_slot(
        "facts edit --content",
        lambda v: ["facts", "edit", "{fact}", "--content", v],
        _cli_text(FACT_CAP, ten_mb=False),
        "content",
    )
    text_slot(
        "facts list --text",
        lambda v: ["facts", "list", "--text", v],
        [
            v
            for v in _cli_text(QUERY_CAP, ten_mb=False)
            if v.refused_as_text and v.name.startswith(("nul", "surrogate"))
        ],
        "text",
    )
    session_ids = [
        Hostile(v.name, v.value, v.refused_as_text and v.name != "over-cap")
        for v in _cli_text(ID_CAP, ten_mb=False)
        if not v.name.startswith("at-cap")
    ] + [Hostile("over-id-cap", "s" * (ID_CAP + 1), True)]
    text_slot("sessions show id", lambda v: ["sessions", "show", v], session_ids, "session_id")
    text_slot(
        "sessions rename title",
        lambda v: ["sessions", "rename", "{session}", v],
        [
            v
            for v in _cli_text(TITLE_CAP, ten_mb=False)
            if v.name.startswith(("nul", "surrogate", "over"))
        ],
        "title",
    )
    for label, raw in FLOATS_CLI:
        cases.append(
            CliCase(
                f"cli remember --importance {label}",
                ("remember", "Likes cocoa", "--importance", raw),
                REFUSE,
                "importance",
            )
        )
    int_slot(
        "sessions show --after-id",
        lambda v: ["sessions", "show", "{session}", "--after-id", v],
        0,
        2**63 - 1,
        "--after-id",
    )
    int_slot(
        "sessions show --limit",
        lambda v: ["sessions", "show", "{session}", "--limit", v],
        1,
        1000,
        "limit",
    )
    int_slot("recall --limit", lambda v: ["recall", "tea", "--limit", v], 1, 100, "limit")
    int_slot("facts list --limit", lambda v: ["facts", "list", "--limit", v], 1, 200, "limit")
    int_slot(
        "facts list --offset", lambda v: ["facts", "list", "--offset", v], 0, 10_000_000, "offset"
    )
    # FACT is an id or a key: what is not an id in range is looked up as a key, so it
    # may be missing (exit 1) but must be refused (exit 2) only when it is no valid key.
    text_slot(
        "facts show key", lambda v: ["facts", "show", v], _cli_text(KEY_CAP, ten_mb=False), "key"
    )
    for label, raw in _CLI_INTS:
        bad_key = label in ("empty", "spaces", "nul", "surrogate")
        # click takes "-5" for an option it does not know, and says so.
        field = raw if label == "negative" else "key"
        expect = REFUSE if bad_key else EITHER
        cases.append(CliCase(f"cli facts show {label}", ("facts", "show", raw), expect, field))
    int_slot("facts delete id", lambda v: ["facts", "delete", v], 1, 2**63 - 1, "id")
    return cases


FLOATS_CLI: list[tuple[str, str]] = [
    ("negative", "-0.5"),
    ("over-one", "1.5"),
    ("nan", "nan"),
    ("infinity", "inf"),
    ("exponent-overflow", "1e400"),
    ("word", "high"),
    ("empty", ""),
    ("nul", "0.5\x00"),
]


# --- MCP --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class McpCase:
    """One ``tools/call``: a refusal must be a tool error (or, for what the protocol
    refuses, a JSON-RPC error) whose text names ``field``."""

    name: str
    tool: str
    arguments: Any
    expect: Expect
    field: str


def mcp_cases() -> list[McpCase]:
    """Every tool-call case (sent over stdio and over streamable HTTP)."""
    cases: list[McpCase] = []

    def text_slot(tool: str, base: dict[str, Any], key: str, values: Sequence[Hostile]) -> None:
        for v in values:
            cases.append(
                McpCase(
                    f"mcp {tool} {key}={v.name}",
                    tool,
                    {**base, key: v.value},
                    REFUSE if v.refused_as_text else EITHER,
                    key,
                )
            )

    def int_slot(tool: str, base: dict[str, Any], key: str, low: int, high: int | None) -> None:
        for label, value in INTEGERS:
            cases.append(
                McpCase(
                    f"mcp {tool} {key}={label}",
                    tool,
                    {**base, key: value},
                    _int_refused(value, low, high),
                    key,
                )
            )

    text_slot("remember", {}, "content", _text_values(FACT_CAP) + NOT_TEXT)
    text_slot("remember", {"content": "Likes tea"}, "key", _text_values(KEY_CAP) + NOT_TEXT)
    text_slot("recall", {}, "query", _text_values(QUERY_CAP) + NOT_TEXT)
    text_slot(
        "list_facts",
        {},
        "text",
        [v for v in _text_values(QUERY_CAP) + NOT_TEXT if v.refused_as_text],
    )
    text_slot(
        "forget_fact", {}, "key", [v for v in _text_values(KEY_CAP) + NOT_TEXT if v.refused_as_text]
    )
    for label, value in FLOATS:
        cases.append(
            McpCase(
                f"mcp remember importance={label}",
                "remember",
                {"content": "Likes coffee", "importance": value},
                REFUSE,
                "importance",
            )
        )
    int_slot("recall", {"query": "tea"}, "limit", 1, 50)
    int_slot("list_facts", {}, "limit", 1, 200)
    int_slot("list_facts", {}, "offset", 0, None)
    int_slot("list_episodes", {}, "limit", 1, 1_000_000)
    int_slot("get_episode", {}, "id", 1, 2**63 - 1)
    int_slot("forget_fact", {}, "id", 1, 2**63 - 1)
    # No hostile text is an ISO 8601 time with a zone still ahead: each is refused.
    for v in [*_text_values(64), *NOT_TEXT, Hostile("past", "2001-01-01T00:00:00Z", True)]:
        cases.append(
            McpCase(
                f"mcp remember expires_at={v.name}",
                "remember",
                {"content": "Likes tea", "expires_at": v.value},
                REFUSE,
                "expires_at",
            )
        )
    int_slot("fact_history", {}, "id", 1, 2**63 - 1)
    int_slot("restore_fact", {"version": 1}, "id", 1, 2**63 - 1)
    int_slot("restore_fact", {"id": 1}, "version", 1, 2**31 - 1)
    bases: dict[str, dict[str, Any]] = {
        "remember": {"content": "x"},
        "recall": {"query": "x"},
        "restore_fact": {"id": 1, "version": 1},
    }
    for tool in TOOLS:
        for unknown in ("resource_id", "resourceId", "session_id", "__proto__"):
            base = bases.get(tool, {})
            cases.append(
                McpCase(
                    f"mcp {tool} unknown {unknown}",
                    tool,
                    {**base, unknown: "bystander"},
                    REFUSE,
                    unknown,
                )
            )
    cases.append(McpCase("mcp remember missing content", "remember", {}, REFUSE, "content"))
    cases.append(McpCase("mcp recall missing query", "recall", {}, REFUSE, "query"))
    return cases


@dataclass(frozen=True, slots=True)
class McpLine:
    """One raw stdio line and the answer it must get: a JSON-RPC error with
    ``code`` and ``id`` (``answer_id``), or no answer at all (``code=None``)."""

    name: str
    line: bytes
    code: int | None
    answer_id: int | str | None = None
    names: str | None = None


def mcp_line_cases() -> list[McpLine]:
    """Lines that are not valid JSON-RPC requests, for the stdio transport."""

    def call(rid: Any, arguments: Any, name: str = "recall") -> bytes:
        return dumps(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        ).encode()

    lines = [
        McpLine("not json", b"not json", -32700),
        McpLine("truncated", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"', -32700),
        McpLine("invalid utf-8", b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', -32700),
        McpLine("nul byte raw", b'{"jsonrpc": "2.0", "id": 1,\x00 "method": "tools/list"}', -32700),
        McpLine("deep nesting", dumps(_deep()).encode(), -32700),
        McpLine(
            "deep params",
            dumps(
                {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"a": _deep()}}
            ).encode(),
            -32700,
        ),
        McpLine(
            "huge integer id",
            b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "tools/list"}',
            -32700,
        ),
        McpLine("array", b"[1, 2]", -32600),
        McpLine("empty array", b"[]", -32600),
        McpLine(
            "batch", dumps([{"jsonrpc": "2.0", "id": 4, "method": "tools/list"}]).encode(), -32600
        ),
        McpLine("number", b"5", -32600),
        McpLine("string", b'"tools/list"', -32600),
        McpLine("null", b"null", -32600),
        McpLine("no jsonrpc", b'{"id": 5, "method": "tools/list"}', -32600, 5),
        McpLine("wrong jsonrpc", b'{"jsonrpc": "1.0", "id": 6, "method": "tools/list"}', -32600, 6),
        McpLine("no method", b'{"jsonrpc": "2.0", "id": 7}', -32600, 7),
        McpLine("method number", b'{"jsonrpc": "2.0", "id": 8, "method": 8}', -32600, 8),
        McpLine(
            "params number",
            b'{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": 5}',
            -32600,
            9,
        ),
        McpLine("id true", b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600),
        McpLine("id null", b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', -32600),
        McpLine("id array", b'{"jsonrpc": "2.0", "id": [1], "method": "tools/list"}', -32600),
        McpLine("id object", b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', -32600),
        McpLine("id float", b'{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', -32600),
        McpLine(
            "id surrogate", b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}', -32600
        ),
        McpLine(
            "method surrogate",
            b'{"jsonrpc": "2.0", "id": 10, "method": "tools/\\ud800"}',
            -32600,
            10,
        ),
        McpLine("surrogate in query", call(11, {"query": "\ud800"}), -32602, 11, "query"),
        McpLine("surrogate low in query", call(12, {"query": "tea \udfff"}), -32602, 12, "query"),
        McpLine(
            "surrogate in content",
            call(13, {"content": "x\ud83d"}, "remember"),
            -32602,
            13,
            "content",
        ),
        McpLine(
            "surrogate in key",
            call(14, {"content": "x", "key": "\udc00"}, "remember"),
            -32602,
            14,
            "key",
        ),
        McpLine("surrogate as argument name", call(15, {"\ud800": 1}), -32602, 15, "\\ud800"),
        McpLine("surrogate nested", call(16, {"query": ["\ud800"]}), -32602, 16, "query"),
        McpLine(
            "surrogate in tool name", call(17, {"query": "x"}, "rec\ud800"), -32602, 17, "name"
        ),
        McpLine("surrogate string id", call("id-\ud800", {"query": "x"}), -32600),
        McpLine(
            "surrogate in notification",
            b'{"jsonrpc": "2.0", "method": "notifications/\\udfff"}',
            -32600,
        ),
        McpLine("arguments array", call(18, [1]), -32602, 18),
        McpLine(
            "tools/call no params",
            b'{"jsonrpc": "2.0", "id": 19, "method": "tools/call"}',
            -32602,
            19,
        ),
        McpLine(
            "unknown method",
            b'{"jsonrpc": "2.0", "id": 20, "method": "../../etc/passwd"}',
            -32601,
            20,
        ),
        McpLine("blank", b"", None),
        McpLine("whitespace", b"   \t ", None),
        McpLine("crlf only", b"\r", None),
    ]
    return lines
