"""What a popagent backup may hold, and its rows read without running any of it.

A restore never runs the archive's SQL: the schema comes from popagent's own
migrations, and the archive contributes rows only. This module holds the two
readers that make that so, both pure (no connection, no process):

- ``parse_toc`` reads ``pg_restore --list`` and ``check_toc`` compares every
  entry with the objects popagent's migrations create (``Expected``, read from
  a catalog by ``store.restore``): anything else is refused, naming the entry.
- ``DataScript`` reads ``pg_restore --data-only --file=-`` (the archive's rows as
  the SQL script ``pg_restore`` would run) and turns it into events: a table's
  ``COPY`` with its columns, the rows in COPY's text format, a sequence's
  position. Every other line must be one of the few harmless lines
  ``pg_dump`` writes around them (comments, ``SET``, the search path,
  ``\\restrict``), which are read and dropped; anything else is refused,
  naming the line. The rows then go to a ``COPY ... FROM STDIN`` statement
  popagent builds itself from the checked names.

Invariants:

- Nothing from the archive is ever sent to the server as SQL: names are
  checked against the expected objects and quoted by the caller, sequence
  positions are integers, and rows travel as COPY data.
- Linear cost: each line is read once; a line outside the rows (a statement)
  longer than ``STATEMENT_CAP`` is refused rather than buffered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import BackupError

__all__ = [
    "STATEMENT_CAP",
    "CopyEnd",
    "CopyRows",
    "CopyStart",
    "DataScript",
    "Event",
    "Expected",
    "SequenceSet",
    "TocEntry",
    "check_toc",
    "migration_rows",
    "parse_toc",
]

#: The longest line outside a table's rows that a data script may hold.
STATEMENT_CAP = 16_384

# The entry kinds a popagent backup holds, longest first (so that "TABLE DATA" is
# read before "TABLE"). Anything else (FUNCTION of another name, EVENT TRIGGER,
# VIEW, RULE, LARGE OBJECT, PROCEDURE, ...) is refused by name; a POLICY or ROW
# SECURITY entry only as migration 0018 makes it (row-level security).
_KINDS = (
    "SEQUENCE OWNED BY",
    "CHECK CONSTRAINT",
    "FK CONSTRAINT",
    "ROW SECURITY",
    "SEQUENCE SET",
    "TABLE DATA",
    "CONSTRAINT",
    "EXTENSION",
    "SEQUENCE",
    "FUNCTION",
    "TRIGGER",
    "COMMENT",
    "DEFAULT",
    "SCHEMA",
    "POLICY",
    "INDEX",
    "TABLE",
    "ACL",
)
_TOC_LINE = re.compile(r"(\d{1,10}); \d{1,10} \d{1,10} ")
# Kinds whose entries are about another object: their tag is "<KIND> <name>".
_ABOUT = ("COMMENT", "ACL")


@dataclass(frozen=True, slots=True)
class TocEntry:
    """One line of ``pg_restore --list``: its dump id, kind, schema (``-`` for none) and text."""

    dump_id: int
    kind: str
    schema: str
    rest: str  # "<tag> <owner>" as listed

    @property
    def tag(self) -> str:
        """The first word of the tag: the object's name for tables, sequences, indexes."""
        return self.rest.split(" ", 1)[0]

    @property
    def text(self) -> str:
        """The entry as ``pg_restore --list`` shows it, without the ids (for messages)."""
        return f"{self.kind} {self.schema} {self.rest}".rstrip()


def parse_toc(listing: str) -> list[TocEntry]:
    """The entries of a ``pg_restore --list`` output; comment lines (``;``) are skipped.

    ``BackupError`` for a line that is no entry, an entry of a kind no popagent
    backup holds (naming it), or a line longer than ``STATEMENT_CAP``.
    """
    entries: list[TocEntry] = []
    for line in listing.splitlines():
        if not line or line.startswith(";"):
            continue
        if len(line) > STATEMENT_CAP:
            raise BackupError(f"the backup lists an entry of {len(line)} characters: {_cut(line)}")
        match = _TOC_LINE.match(line)
        if match is None:
            raise BackupError(
                f"pg_restore --list printed a line popagent cannot read: {_cut(line)}"
            )
        body = line[match.end() :]
        kind = next((k for k in _KINDS if body.startswith(k + " ")), None)
        if kind is None:
            raise _foreign(int(match.group(1)), body)
        schema, _, rest = body[len(kind) + 1 :].partition(" ")
        entries.append(TocEntry(int(match.group(1)), kind, schema, rest))
    return entries


@dataclass(frozen=True, slots=True)
class Expected:
    """The objects popagent's migrations create, as ``pg_restore --list`` names them.

    ``tags`` maps a kind (``TABLE``, ``INDEX``, ``FK CONSTRAINT``, ...) to the
    tags its entries may have; ``columns`` gives each table's columns that
    hold data (generated columns excluded); ``extensions`` the extensions the
    migrations create.
    """

    tags: dict[str, frozenset[str]]
    columns: dict[str, tuple[str, ...]]
    extensions: frozenset[str]
    sequences: frozenset[str] = field(default_factory=frozenset)

    def allows(self, kind: str, tag: str) -> bool:
        return tag in self.tags.get(kind, frozenset())


def _cut(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _foreign(dump_id: int, text: str) -> BackupError:
    return BackupError(
        f"the backup holds entry {dump_id} ({_cut(text.rstrip())}), which popagent's "
        "migrations do not create: a popagent backup holds only popagent's tables and "
        "their rows (and the functions, triggers, indexes and extensions its migrations "
        "make); nothing was restored"
    )


def _matches(rest: str, tags: Iterable[str]) -> bool:
    """Whether ``rest`` ("<tag> <owner>") starts with one of ``tags`` followed by the owner."""
    wanted = set(tags)
    if rest.rstrip(" ") in wanted:  # no owner (extensions and their comments)
        return True
    cut = rest.find(" ")
    while cut != -1:
        if rest[:cut] in wanted:
            return True
        cut = rest.find(" ", cut + 1)
    return False


def _about_tags(expected: Expected, schema: str) -> set[str]:
    """The tags a COMMENT or ACL entry on one of popagent's own objects has."""
    about = {f"SCHEMA {schema}"}
    about.update(f"EXTENSION {name}" for name in expected.extensions)
    for kind, word in (("TABLE", "TABLE"), ("SEQUENCE", "SEQUENCE"), ("FUNCTION", "FUNCTION")):
        about.update(f"{word} {tag}" for tag in expected.tags.get(kind, ()))
    for table, columns in expected.columns.items():
        about.update(f"COLUMN {table}.{column}" for column in columns)
    return about


def check_toc(entries: Iterable[TocEntry], expected: Expected, schema: str) -> None:
    """Refuse, naming it, any entry that is not one of the ``expected`` objects in ``schema``.

    ``schema`` is the archive's schema of popagent's tables (that of
    ``popagent_schema_migrations``); every schema-qualified entry must be in it.
    Extensions and their comments are schema-less (``-``).
    """
    about = _about_tags(expected, schema)
    # Schema-less entries: extensions, the schema itself, and comments or grants on them.
    unqualified = {
        "EXTENSION": set(expected.extensions),
        "SCHEMA": {schema},
        "COMMENT": {f"EXTENSION {name}" for name in expected.extensions} | {f"SCHEMA {schema}"},
        "ACL": {f"SCHEMA {schema}"},
    }
    for entry in entries:
        if entry.schema == "-":
            if _matches(entry.rest, unqualified.get(entry.kind, ())):
                continue
        elif entry.schema == schema:
            if entry.kind in _ABOUT:
                if _matches(entry.rest, about):
                    continue
            elif _matches(entry.rest, expected.tags.get(entry.kind, ())):
                continue
        raise _foreign(entry.dump_id, entry.text)


# --- the data script ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CopyStart:
    """A table's rows begin: ``COPY schema.table (columns) FROM stdin;``."""

    schema: str
    table: str
    columns: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CopyRows:
    """Complete rows of the current table, in COPY's text format (each ends with a newline)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class CopyEnd:
    """The current table's rows are complete (the ``\\.`` line)."""


@dataclass(frozen=True, slots=True)
class SequenceSet:
    """``SELECT pg_catalog.setval('schema.sequence', value, called);``."""

    schema: str
    sequence: str
    value: int
    called: bool


Event = CopyStart | CopyRows | CopyEnd | SequenceSet

# The settings pg_dump writes at the top of a script; read and dropped (client_encoding
# is checked: the rows are passed on as bytes, so they must be UTF-8).
_SETTINGS = frozenset(
    {
        "statement_timeout",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
        "transaction_timeout",
        "client_encoding",
        "standard_conforming_strings",
        "check_function_bodies",
        "xmloption",
        "client_min_messages",
        "row_security",
        "default_tablespace",
        "default_table_access_method",
        "default_with_oids",
    }
)
_SET = re.compile(r"SET ([a-z_]{1,64}) = ('[A-Za-z0-9_]{0,64}'|[A-Za-z0-9_]{1,64});")
_SEARCH_PATH = "SELECT pg_catalog.set_config('search_path', '', false);"
# psql meta-commands pg_dump writes since 17.6 / 18 (a random key; psql refuses other
# meta-commands between them). Not SQL; dropped.
_RESTRICT = re.compile(r"\\(?:un)?restrict [A-Za-z0-9]{1,128}")
_SETVAL = re.compile(r"SELECT pg_catalog\.setval\('((?:[^']|'')*+)', (-?\d{1,19}), (true|false)\);")
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")
_COPY_PREFIX = "COPY "
_COPY_SUFFIX = ") FROM stdin;"


def _name(text: str, pos: int) -> tuple[str, int]:
    """An identifier as pg_dump writes it (plain, or double-quoted with ``""``) at ``pos``."""
    if text.startswith('"', pos):
        parts: list[str] = []
        i = pos + 1
        while True:
            end = text.find('"', i)
            if end == -1:
                raise ValueError("unterminated quoted name")
            parts.append(text[i:end])
            if text.startswith('"', end + 1):
                parts.append('"')
                i = end + 2
                continue
            name = "".join(parts)
            if not name:
                raise ValueError("empty quoted name")
            return name, end + 1
    match = _PLAIN_NAME.match(text, pos)
    if match is None:
        raise ValueError("no name")
    return match.group(0), match.end()


def _qualified(text: str, pos: int) -> tuple[str, str, int]:
    schema, pos = _name(text, pos)
    if not text.startswith(".", pos):
        raise ValueError("no schema")
    name, pos = _name(text, pos + 1)
    return schema, name, pos


def _copy_start(line: str) -> CopyStart | None:
    """``COPY schema.table (a, b) FROM stdin;`` read by hand (linear; no backtracking)."""
    if not (line.startswith(_COPY_PREFIX) and line.endswith(_COPY_SUFFIX)):
        return None
    end = len(line) - len(_COPY_SUFFIX)
    try:
        schema, table, pos = _qualified(line, len(_COPY_PREFIX))
        if not line.startswith(" (", pos):
            return None
        pos += 2
        columns: list[str] = []
        while True:
            column, pos = _name(line, pos)
            columns.append(column)
            if pos == end:
                break
            if not line.startswith(", ", pos):
                return None
            pos += 2
    except ValueError:
        return None
    return CopyStart(schema, table, tuple(columns))


def _sequence_set(line: str) -> SequenceSet | None:
    match = _SETVAL.fullmatch(line)
    if match is None:
        return None
    literal = match.group(1).replace("''", "'")
    try:
        schema, sequence, pos = _qualified(literal, 0)
    except ValueError:
        return None
    if pos != len(literal):
        return None
    return SequenceSet(schema, sequence, int(match.group(2)), match.group(3) == "true")


class DataScript:
    """A streaming reader of ``pg_restore --data-only --file=-`` output.

    ``feed`` takes the output in chunks of any size and returns the events of
    the complete lines so far; ``close`` checks that the script ended outside
    a table's rows. ``BackupError`` names the first line that is not one of
    the lines a popagent backup's data script holds.
    """

    def __init__(self) -> None:
        self._partial: list[bytes] = []
        self._partial_size = 0
        self._in_copy = False
        self._line = 0
        self.encoding: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        events: list[Event] = []
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            self._keep(lines[0])
            return events
        if self._partial:
            lines[0] = b"".join([*self._partial, lines[0]])
            self._partial, self._partial_size = [], 0
        tail = lines.pop()
        rows: list[bytes] = []
        for line in lines:
            self._line += 1
            if self._in_copy:
                if line == b"\\.":
                    if rows:
                        events.append(CopyRows(b"\n".join(rows) + b"\n"))
                        rows = []
                    events.append(CopyEnd())
                    self._in_copy = False
                else:
                    rows.append(line)
                continue
            event = self._statement(line)
            if event is not None:
                events.append(event)
                if isinstance(event, CopyStart):
                    self._in_copy = True
        if rows:
            events.append(CopyRows(b"\n".join(rows) + b"\n"))
        self._keep(tail)
        return events

    def close(self) -> None:
        if self._partial or self._in_copy:
            raise BackupError(
                "the backup's data ends in the middle of a table's rows (a damaged file?); "
                "nothing was restored"
            )

    def _keep(self, piece: bytes) -> None:
        if not piece:
            return
        self._partial.append(piece)
        self._partial_size += len(piece)
        if not self._in_copy and self._partial_size > STATEMENT_CAP:
            raise BackupError(
                f"line {self._line + 1} of the backup's data is a statement of more than "
                f"{STATEMENT_CAP} characters, which no popagent backup holds; nothing was restored"
            )

    def _statement(self, raw: bytes) -> Event | None:
        """Check one line outside a table's rows: an event, or ``None`` for a dropped line."""
        if len(raw) > STATEMENT_CAP:
            self._refuse(raw)
        line = raw.decode("utf-8", "replace")
        if not line or line.startswith("--") or line == _SEARCH_PATH:
            return None
        if _RESTRICT.fullmatch(line):
            return None
        if (match := _SET.fullmatch(line)) and match.group(1) in _SETTINGS:
            if match.group(1) == "client_encoding":
                self.encoding = match.group(2).strip("'")
                if self.encoding.upper().replace("-", "") != "UTF8":
                    raise BackupError(
                        f"the backup's data is in the encoding {self.encoding}; popagent "
                        "restores UTF8 backups only (its databases are UTF8)"
                    )
            return None
        event = _copy_start(line) or _sequence_set(line)
        if event is None:
            self._refuse(raw)
        return event

    def _refuse(self, raw: bytes) -> None:
        shown = _cut(raw.decode("utf-8", "replace"), 120)
        raise BackupError(
            f"line {self._line} of the backup's data is a statement popagent does not run "
            f"({shown!r}): a popagent backup's data holds only rows and sequence positions; "
            "nothing was restored"
        )


_MIGRATION_ROW = re.compile(rb"(\d{1,9})\t([a-z0-9_]{1,200})\t[^\t\n]*")


def migration_rows(data: bytes) -> list[tuple[int, str]]:
    """The ``(version, name)`` rows of ``popagent_schema_migrations`` in COPY text format.

    ``BackupError`` for a row that is not ``version<TAB>name<TAB>applied_at``.
    """
    rows: list[tuple[int, str]] = []
    for line in data.splitlines():
        match = _MIGRATION_ROW.fullmatch(line)
        if match is None:
            raise BackupError(
                "the backup's popagent_schema_migrations holds a row popagent cannot read "
                f"({_cut(line.decode('utf-8', 'replace'), 80)!r}); nothing was restored"
            )
        rows.append((int(match.group(1)), match.group(2).decode()))
    return rows
