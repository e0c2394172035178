"""Reading popagent's SQL as text, for the checks of what a distributed database accepts.

``tests/test_distributable.py`` checks on plain PostgreSQL the rules Citus
enforces on distributed tables, by reading the statements of ``store/`` (and the
bodies of popagent's SQL functions): where each table is referenced, at which
query level, what that level says about ``resource_id``, and which functions a
clause calls. These are small scanners over SQL text, not a parser: comments
and string literals are blanked first, then parentheses give the query levels.
Each runs in time linear in the text (a few passes; the group lists are
bounded by the text's parentheses).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator

import popagent.store

__all__ = [
    "Reference",
    "calls",
    "conditional_parts",
    "do_update_clauses",
    "level",
    "references",
    "statements",
    "strip",
    "writes",
]

_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)
_TABLE = re.compile(r"\bpopagent_[a-z_]+\b")
_SUBQUERY = re.compile(r"\s*(SELECT|WITH|INSERT|UPDATE|DELETE|VALUES)\b", re.IGNORECASE)
_CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(", re.IGNORECASE)
_WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(popagent_[a-z_]+)\b", re.I)
_REFERENCE = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|DELETE\s+FROM)\s+(popagent_[a-z_]+)\b"
    r"(?:\s+(?:AS\s+)?([a-z_][a-z0-9_]*))?",
    re.IGNORECASE,
)
# Words that may follow a table name and are not its alias.
_NOT_ALIAS = frozenset((
    "where", "set", "using", "on", "join", "left", "right", "inner", "cross", "full",
    "natural", "lateral", "group", "order", "limit", "offset", "returning", "for", "union",
    "except", "intersect", "having", "window", "select",
))  # fmt: skip


def statements() -> list[tuple[str, str, str]]:
    """``(module, name, text)`` of every SQL statement constant of ``popagent.store``."""
    found = []
    for info in pkgutil.iter_modules(popagent.store.__path__):
        module = importlib.import_module(f"popagent.store.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, str) and _STATEMENT.match(value) and _TABLE.search(value):
                found.append((info.name, name, value))
    return found


def strip(text: str) -> str:
    """``text`` with comments and the insides of string literals blanked, same length."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif text[i] == "'":
            end = i + 1
            while end < n and not (text[end] == "'" and not text.startswith("''", end)):
                end += 2 if text.startswith("''", end) else 1
            out[i + 1 : end] = " " * (end - i - 1)
            i = end + 1
        else:
            i += 1
    return "".join(out)


def _groups(text: str) -> list[tuple[int, int]]:
    """``(open, close)`` of every parenthesized group of a stripped text."""
    stack: list[int] = []
    spans = []
    for i, char in enumerate(text):
        if char == "(":
            stack.append(i)
        elif char == ")":
            spans.append((stack.pop(), i))
    assert not stack, "unbalanced parentheses"
    return spans


def level(text: str, position: int) -> str:
    """The query level of a stripped text that holds ``position``: the innermost
    parenthesized query around it (or the whole text), with the queries nested in
    that level blanked, so what remains is what this level itself says."""
    spans = _groups(text)
    queries = [(a, b) for a, b in spans if _SUBQUERY.match(text, a + 1)]
    around = [(a, b) for a, b in queries if a < position < b]
    start, end = max(around) if around else (-1, len(text))
    chars = list(text[start + 1 : end])
    for a, b in queries:
        if start < a and b < end and not a < position < b:
            chars[a - start : b - start - 1] = " " * (b - a - 1)
    return "".join(chars)


class Reference:
    """A table named after ``FROM``, ``JOIN``, ``UPDATE`` or ``DELETE FROM``."""

    def __init__(self, position: int, table: str, alias: str | None) -> None:
        self.position = position
        self.table = table
        self.alias = alias

    def __repr__(self) -> str:
        return f"{self.table} {self.alias or ''}".strip()


def references(text: str) -> Iterator[Reference]:
    """Every table reference of a stripped text (an ``INSERT``'s target is none: its
    rows carry their own ``resource_id``)."""
    for match in _REFERENCE.finditer(text):
        alias = match.group(2)
        if alias and alias.lower() in _NOT_ALIAS:
            alias = None
        yield Reference(match.start(), match.group(1), alias)


def filters_resource(level_text: str, reference: Reference, *, many: bool = False) -> bool:
    """Whether a query level says which resource ``reference`` reads: an equality on
    its ``resource_id`` (qualified by its alias or table name, or unqualified). With
    ``many``, ``resource_id = ANY(...)`` counts too."""
    any_ok = "" if many else r"(?!\s*ANY\b)"
    for name in filter(None, (reference.alias, reference.table)):
        qualified = re.escape(name) + r"\.resource_id"
        if re.search(rf"\b{qualified}\s*={any_ok}", level_text, re.I):
            return True
        if re.search(rf"=\s*{qualified}\b", level_text, re.I):
            return True
    return re.search(rf"(?<![\w.%(])resource_id\s*={any_ok}", level_text, re.I) is not None


def do_update_clauses(text: str) -> Iterator[str]:
    """Each ``ON CONFLICT ... DO UPDATE`` clause of ``text`` (stripped): its ``SET`` and
    ``WHERE``, up to the statement's ``RETURNING``, its end or the end of its CTE."""
    clean = strip(text)
    for match in re.finditer(r"\bDO\s+UPDATE\b", clean, re.IGNORECASE):
        depth, i = 0, match.end()
        while i < len(clean):
            char = clean[i]
            if char == "(":
                depth += 1
            elif char == ")":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and (
                char == ";"
                or (
                    clean[i : i + 9].upper() == "RETURNING"
                    and not clean[i - 1].isalnum()
                    and not clean[i + 9 : i + 10].isalnum()
                )
            ):
                break
            i += 1
        yield clean[match.start() : i]


def calls(text: str) -> set[str]:
    """The names called in ``text`` (lower case): functions, and words like ``IN`` or
    ``coalesce`` that look the same, which the caller looks up in ``pg_proc``."""
    return {m.group(1).lower() for m in _CALL.finditer(strip(text))}


def writes(text: str) -> set[str]:
    """The tables ``text`` inserts into, updates or deletes from."""
    return {m.group(1) for m in _WRITE.finditer(strip(text))}


_MODIFICATION = re.compile(r"\b(?:UPDATE|DELETE\s+FROM)\s+(popagent_[a-z_]+)\b", re.IGNORECASE)
_COALESCE = re.compile(r"\bcoalesce\s*\(", re.IGNORECASE)
_CASE_WORD = re.compile(r"\b(CASE|END)\b", re.IGNORECASE)


def conditional_parts(text: str) -> Iterator[tuple[str, str]]:
    """``(table, part)``: each ``coalesce(...)`` and ``CASE ... END`` of each UPDATE or
    DELETE of ``text`` (stripped), within that statement's own query level."""
    spans = _groups(text)
    for match in _MODIFICATION.finditer(text):
        around = [(a, b) for a, b in spans if a < match.start() < b]
        end = min(around, key=lambda span: span[1] - span[0])[1] if around else len(text)
        body = text[match.start() : end]
        for call in _COALESCE.finditer(body):
            close = next(b for a, b in _groups(body) if a == call.end() - 1)
            yield match.group(1), body[call.start() : close + 1]
        depth, start = 0, 0
        for word in _CASE_WORD.finditer(body):
            if word.group(1).upper() == "CASE":
                if depth == 0:
                    start = word.start()
                depth += 1
            elif depth:
                depth -= 1
                if depth == 0:
                    yield match.group(1), body[start : word.end()]
