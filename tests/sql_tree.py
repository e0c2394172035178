"""PostgreSQL's own reading of a statement, for the rules Citus checks on its parse tree.

The scanners of ``tests/sql_text.py`` see a function called by name; they cannot
see an operator, nor which function it runs: ``timestamptz - interval`` is stable
(it depends on the time zone) where ``timestamptz - timestamptz`` is immutable,
and Citus refuses the first in ``ON CONFLICT ... DO UPDATE SET`` and inside CASE
or COALESCE of an UPDATE. PostgreSQL knows: with ``debug_print_parse`` on,
preparing a statement sends its analysed tree to the client as a LOG message, in
which every function call and every operator names the function it runs by oid.

``parse_tree`` prepares one statement (its ``%(name)s`` parameters as ``$n``) and
returns that tree; ``write_rule_breaches`` walks it as Citus's router planner
walks a modification (``multi_router_planner.c``: ``ModifyPartialQuerySupported``
and ``ErrorIfOnConflictNotSupported``). Reading the tree is one pass over its
text, in time linear in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

__all__ = ["Node", "parse_tree", "placeholders_to_dollars", "write_rule_breaches"]

# ``CmdType`` of PostgreSQL's nodes.h: UPDATE, INSERT, DELETE.
_UPDATE, _INSERT, _DELETE = "2", "3", "4"
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")
_TOKEN = re.compile(r'\s+|[{}()]|"(?:\\.|[^"\\])*"|(?:\\.|[^\s{}()"\\])+', re.DOTALL)


@dataclass
class Node:
    """One node of the tree: its tag (``QUERY``, ``OPEXPR``, ...) and its fields."""

    tag: str
    fields: dict[str, Any] = field(default_factory=dict)

    def walk(self) -> Iterator[Node]:
        """This node and every node under it, depth first."""
        stack: list[Any] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, Node):
                yield item
                stack.extend(reversed(list(item.fields.values())))
            elif isinstance(item, list):
                stack.extend(reversed(item))


def placeholders_to_dollars(text: str) -> str:
    """psycopg's ``%(name)s`` as PostgreSQL's ``$n`` (one number per name), ``%%`` as ``%``."""
    numbers: dict[str, int] = {}

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        return f"${numbers.setdefault(name, len(numbers) + 1)}"

    return _PLACEHOLDER.sub(one, text)


def _read(dump: str) -> Any:
    """The node dump (``nodeToString``'s format) as ``Node`` and lists."""
    tokens = [t for t in _TOKEN.findall(dump) if not t.isspace()]
    # An explicit stack of open nodes and lists: a deep tree needs no recursion.
    stack: list[Any] = [[]]
    pending: list[str | None] = [None]  # per open node: the field awaiting its value
    for token in tokens:
        top = stack[-1]
        if token in ("{", "("):
            stack.append(Node("") if token == "{" else [])
            pending.append(None)
            continue
        if token in ("}", ")"):
            done = stack.pop()
            pending.pop()
            token_value: Any = done
        elif isinstance(top, Node) and not top.tag:
            top.tag = token
            continue
        elif isinstance(top, Node) and token.startswith(":"):
            pending[-1] = token[1:]
            top.fields.setdefault(token[1:], None)
            continue
        else:
            token_value = token
        parent = stack[-1]
        if isinstance(parent, Node):
            name = pending[-1]
            if name is None:
                continue  # the bytes of a Const's value: ``[ 1 0 0 0 ]``
            if parent.fields.get(name) is None:
                parent.fields[name] = token_value
        else:
            parent.append(token_value)
    return stack[0][0] if stack[0] else None


async def parse_tree(conn: psycopg.AsyncConnection[Any], text: str) -> Node | None:
    """The analysed tree of statement ``text`` (psycopg placeholders allowed), or
    ``None`` when PostgreSQL cannot prepare it alone (a parameter of no inferable
    type, a temporary table made at run time). Runs in a transaction it rolls back."""
    dumps: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary == "parse tree:" and diag.message_detail:
            dumps.append(diag.message_detail)

    conn.add_notice_handler(keep)
    try:
        async with conn.transaction(force_rollback=True):
            await conn.execute("SET LOCAL debug_print_parse = on")
            await conn.execute("SET LOCAL debug_pretty_print = off")
            await conn.execute("SET LOCAL client_min_messages = log")
            try:
                async with conn.transaction():
                    await conn.execute(f"PREPARE popagent_probe AS {placeholders_to_dollars(text)}")
                    # The PREPARE is a statement too (and so is the savepoint's
                    # release, next): the prepared statement's tree is the last yet.
                    dump = dumps[-1] if dumps else None
            except psycopg.Error:
                return None
            await conn.execute("DEALLOCATE popagent_probe")  # not undone by a rollback
    finally:
        conn.remove_notice_handler(keep)
    tree = _read(dump) if dump else None
    return tree if isinstance(tree, Node) else None


def _functions(node: Any) -> set[str]:
    """The oids of the functions run by ``node``'s calls and operators."""
    found: set[str] = set()
    if not isinstance(node, Node | list):
        return found
    for inner in node if isinstance(node, list) else [node]:
        if not isinstance(inner, Node):
            continue
        for each in inner.walk():
            if each.tag == "FUNCEXPR":
                found.add(str(each.fields.get("funcid")))
            elif each.tag in ("OPEXPR", "DISTINCTEXPR", "NULLIFEXPR", "SCALARARRAYOPEXPR"):
                found.add(str(each.fields.get("opfuncid")))
    return found


def _conditionals(node: Any) -> Iterator[Node]:
    for inner in node if isinstance(node, list) else [node]:
        if isinstance(inner, Node):
            yield from (n for n in inner.walk() if n.tag in ("CASEEXPR", "COALESCEEXPR"))


def _over_columns(node: Any, stable: set[str]) -> Iterator[str]:
    """The oids of the stable functions and operators in ``node`` that a column (a
    ``VAR``) reaches, as an argument or deeper. Like Citus's walk
    (``MasterIrreducibleExpression``), it stops at CASE and COALESCE (the ``case``
    rule's) and at a subquery (a query of its own)."""
    stops = ("QUERY", "CASEEXPR", "COALESCEEXPR")
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, Node) or item.tag in stops:
            continue
        oid = item.fields.get("funcid" if item.tag == "FUNCEXPR" else "opfuncid")
        if str(oid) in stable and _has_column(list(item.fields.values())):
            yield str(oid)
        stack.extend(item.fields.values())


def _has_column(node: Any) -> bool:
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, Node) and item.tag not in ("QUERY", "CASEEXPR", "COALESCEEXPR"):
            if item.tag == "VAR":
                return True
            stack.extend(item.fields.values())
    return False


def write_rule_breaches(
    tree: Node, tables: dict[str, str], mutable: dict[str, str], stable: set[str]
) -> list[tuple[str, str, str]]:
    """Where ``tree``'s writes to a table of ``tables`` (relation oid -> name) run a
    function of ``mutable`` (oid -> name, the functions that are not immutable; of
    them, ``stable`` are the stable ones' oids) where Citus refuses one:
    ``(table, rule, function)``.

    - ``case``: inside CASE or COALESCE of an UPDATE's SET, or of the conditions of
      an UPDATE or DELETE (Citus evaluates a stable function once, on the
      coordinator, but cannot where it might not run);
    - ``column``: a stable one given a column, in an UPDATE's SET or the conditions
      of an UPDATE or DELETE (``now() + t.minutes * interval '1 minute'``: the
      coordinator cannot evaluate it alone; Citus says "STABLE functions used in
      UPDATE queries cannot be called with column references");
    - ``do update``: anywhere in ``ON CONFLICT ... DO UPDATE`` (its SET but a plain
      column, and its WHERE).

    Every query of the statement is walked, its CTEs and subqueries too: Citus plans
    a modifying CTE as a statement of its own."""
    found: list[tuple[str, str, str]] = []
    for query in tree.walk():
        if query.tag != "QUERY":
            continue
        command = query.fields.get("commandType")
        if command not in (_UPDATE, _INSERT, _DELETE):
            continue
        rtable = query.fields.get("rtable") or []
        index = int(query.fields.get("resultRelation") or 0)
        if not 0 < index <= len(rtable) or not isinstance(rtable[index - 1], Node):
            continue
        table = tables.get(str(rtable[index - 1].fields.get("relid")))
        if table is None:
            continue
        parts: list[tuple[str, Any]] = []
        jointree = query.fields.get("jointree")
        quals = jointree.fields.get("quals") if isinstance(jointree, Node) else None
        if command == _UPDATE:
            entries = [
                e
                for e in query.fields.get("targetList") or []
                if isinstance(e, Node) and e.fields.get("resjunk") != "true"
            ]
            parts += [("case", c) for e in entries for c in _conditionals(e)]
            found += [
                (table, "column", mutable[oid])
                for e in entries
                for oid in _over_columns(e.fields.get("expr"), stable)
            ]
        if command in (_UPDATE, _DELETE):
            parts += [("case", c) for c in _conditionals(quals)]
            found += [(table, "column", mutable[oid]) for oid in _over_columns(quals, stable)]
        conflict = query.fields.get("onConflict")
        if isinstance(conflict, Node):
            for entry in conflict.fields.get("onConflictSet") or []:
                expr = entry.fields.get("expr") if isinstance(entry, Node) else None
                if not (isinstance(expr, Node) and expr.tag == "VAR"):
                    parts.append(("do update", expr))
            parts.append(("do update", conflict.fields.get("onConflictWhere")))
        for rule, part in parts:
            for oid in sorted(_functions(part)):
                if oid in mutable:
                    found.append((table, rule, mutable[oid]))
    return found
