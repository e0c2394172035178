"""``import_resource``: load a popagent export into a resource, idempotently, streaming.

The file is read once, in batches: each batch's lines are parsed and checked
(``records.check_record``: the normal write paths' checks and credential
screens) off the event loop (``popagent.offload``: a worker thread, or a worker
process after ``use_processes()``), and copied into temporary staging tables
(``store.portable_import``) inside the import's transaction. Then the
references between records are checked in SQL, and the records are written
with a few set-based statements per type. So memory holds a few batches
whatever the file's size, and the lines after the header may come in any order.

Invariants:
- Every line is checked, and every reference between records, before any row
  of the target is written; a bad line raises ``ValidationError`` whose field
  names the line, the record type and the field (``line 7: fact.content``).
- Everything (staging and writes) happens in one transaction: any error, a
  bad line, a conflict or the database, leaves the target as it was.
- A second import of the same file changes nothing: every record is matched
  by its natural key first (docs/export-format.md, "Import").
- Imported rows get the target's ids; the map from source ids lives in the
  staging tables of one import. Provenance that names a message or turn is
  remapped when that message or turn is in the target after the import, and
  dropped when not.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

import psycopg

from ..checks import check_id
from ..errors import ConflictError, ValidationError
from ..observe.settings import MemorySettings
from ..observe.settings_store import settings_from_row, settings_to_row
from ..offload import off_loop
from ..store import portable_import as sql
from ..store import portable_vectors as vector_sql
from ..store import settings as settings_sql
from ..store.database import Conn, Pool
from .reading import LINE_CAP, decode_line, is_blank_line, line_error, parse_line, read_lines
from .records import RECORD_TYPES, check_header, check_record, check_unicode
from .report import ImportReport, Tally

__all__ = ["BATCH_BYTES", "BATCH_LINES", "Line", "import_resource", "parse_export"]

#: A batch of lines checked at once: at most this many lines, or bytes (characters)...
BATCH_LINES = 2_000
BATCH_BYTES = 1 << 20
#: ...and at most this many batches in flight (checked or being checked, not yet copied):
#: enough to keep worker processes busy (``offload.use_processes``), few enough that
#: memory holds a handful of batches.
_IN_FLIGHT = 2 + min(8, (os.cpu_count() or 1) // 2)

#: What one of the lines an import reads may be.
RawLine = str | bytes


@dataclass(frozen=True, slots=True)
class Line:
    """One checked record and the line it came from."""

    lineno: int
    type: str
    values: dict[str, Any]


# What a concurrent change did, by the error PostgreSQL raised.
_INTEGRITY: dict[type[psycopg.Error], str] = {
    psycopg.errors.UniqueViolation: "a key or content it adds was taken meanwhile",
    psycopg.errors.ForeignKeyViolation: "a row it refers to was deleted meanwhile",
}
_COPY_CONTEXT = re.compile(r"COPY import_(\w+), line (\d+)(?:, column (\w+))?")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]")
_T = TypeVar("_T")


def _fail(lineno: int, record_type: str, field: str, message: str) -> ValidationError:
    return ValidationError(f"line {lineno}: {record_type}.{field}", message)


# --- reading and checking (pure: runs in a worker thread or process) -----------------------


def check_line(lineno: int, raw: RawLine) -> Line | None:
    """The checked record of one line after the header (``None`` for a blank line);
    ``ValidationError`` naming the line, type and field."""
    checked = _checked(lineno, raw, check_record, _record_label)
    if checked is None:
        return None
    record_type, values = checked
    return Line(lineno, record_type, values)


def _record_label(obj: object) -> str:
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) and kind in RECORD_TYPES else "record"


def _check_header_line(lineno: int, raw: RawLine) -> str | None:
    """The exported resource ID of the header line (``None``: a blank line)."""
    return _checked(lineno, raw, check_header, lambda _obj: "header")


def _checked(
    lineno: int, raw: RawLine, check: Callable[[Any], _T], label: Callable[[object], str]
) -> _T | None:
    """``check`` of line ``lineno``'s JSON value (``None`` for a blank line), its text
    first screened for escaped lone surrogates; a ``ValidationError`` names the line,
    the ``label`` of the value (its record type) and the field."""
    text = decode_line(lineno, raw)
    if is_blank_line(text):
        return None
    obj = parse_line(lineno, text)
    try:
        if isinstance(obj, dict) and _SURROGATE_ESCAPE.search(text):
            check_unicode(obj)
        return check(obj)
    except ValidationError as exc:
        raise type(exc)(f"line {lineno}: {label(obj)}.{exc.field}", exc.message) from None


@dataclass(slots=True)
class _Batch:
    """A batch of lines checked: ``COPY`` text and line numbers per record type."""

    copy: dict[str, list[str]] = field(default_factory=dict)
    lines: dict[str, list[int]] = field(default_factory=dict)
    settings: list[tuple[int, MemorySettings]] = field(default_factory=list)


def _row(line: Line) -> list[object]:
    values = line.values
    row: list[object] = [line.lineno]
    for column in sql.COLUMNS[line.type]:
        value = values[column]
        if column in ("metadata", "parts", "item", "based_on") and value is not None:
            value = _json_text(value)
        row.append(value)
    return row


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_batch(batch: Sequence[tuple[int, RawLine]]) -> _Batch:
    """Check a batch of lines; what the staging tables take of them. Pure and linear
    in the batch's size (module doc of ``popagent.credentials``)."""
    out = _Batch()
    for lineno, raw in batch:
        line = check_line(lineno, raw)
        if line is None:
            continue
        if line.type == "settings":
            out.settings.append((lineno, line.values["settings"]))
            continue
        out.copy.setdefault(line.type, []).append(sql.copy_row(_row(line)))
        out.lines.setdefault(line.type, []).append(lineno)
    return out


def _numbered(lines: Iterable[RawLine] | IO[bytes] | IO[str]) -> Iterator[tuple[int, RawLine]]:
    """``(line number, line)`` from 1, each line at most ``LINE_CAP`` long."""
    if isinstance(lines, io.IOBase):
        yield from read_lines(lines)  # type: ignore[arg-type]
        return
    for lineno, raw in enumerate(lines, 1):
        if len(raw) > LINE_CAP:
            raise line_error(
                lineno, f"is longer than {LINE_CAP:,} bytes, the most a record may take"
            )
        yield lineno, raw


def _batches(
    numbered: Iterator[tuple[int, RawLine]],
) -> Iterator[tuple[int, list[tuple[int, RawLine]]]]:
    """Batches of at most ``BATCH_LINES`` lines and about ``BATCH_BYTES``; with their size."""
    batch: list[tuple[int, RawLine]] = []
    size = 0
    for item in numbered:
        batch.append(item)
        size += len(item[1])
        if len(batch) >= BATCH_LINES or size >= BATCH_BYTES:
            yield size, batch
            batch, size = [], 0
    if batch:
        yield size, batch


def parse_export(lines: Iterable[RawLine]) -> tuple[str, list[Line]]:
    """The exported resource ID and every checked record, all in memory (for tools and
    tests; ``import_resource`` streams); ``ValidationError`` on the first bad line. The
    references between records are not checked here."""
    numbered = _numbered(lines)
    source = _header(numbered)
    records = [line for n, raw in numbered if (line := check_line(n, raw)) is not None]
    return source, records


def _header(numbered: Iterator[tuple[int, RawLine]]) -> str:
    for lineno, raw in numbered:
        source = _check_header_line(lineno, raw)
        if source is not None:
            return source
    raise line_error(1, "the file is empty: expected a popagent-export header line")


# --- staging --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Staged:
    """What staging learnt besides the rows: the settings record (one at most)."""

    settings: tuple[int, MemorySettings] | None = None
    second_settings: int | None = None


async def _copy(conn: Conn, batch: _Batch, staged: _Staged) -> None:
    for lineno, settings in batch.settings:
        if staged.settings is None:
            staged.settings = (lineno, settings)
        elif staged.second_settings is None:
            staged.second_settings = lineno
    for record_type, rows in batch.copy.items():
        try:
            async with conn.cursor().copy(sql.copy_statement(record_type)) as copy:
                await copy.write("".join(rows))
        except psycopg.errors.DataError as exc:
            raise _refused_value(exc, batch) from None


def _refused_value(exc: psycopg.errors.DataError, batch: _Batch) -> ValidationError:
    """A value the database refused while staging, named by its line when it can be."""
    reason = exc.diag.message_primary or type(exc).__name__
    found = _COPY_CONTEXT.search(exc.diag.context or "")
    if found is not None:
        record_type, row, column = found.group(1), int(found.group(2)), found.group(3)
        linenos = batch.lines.get(record_type, [])
        if 1 <= row <= len(linenos):
            return _fail(
                linenos[row - 1], record_type, column or "record", f"is refused ({reason})"
            )
    return ValidationError("file", f"a value is refused by the database ({reason})")


async def _stage(conn: Conn, numbered: Iterator[tuple[int, RawLine]]) -> _Staged:
    """Check the lines batch by batch, a few batches at once off the event loop, and
    copy each into the staging tables in file order (so the first bad line is the one
    reported)."""
    staged = _Staged()
    pending: deque[asyncio.Future[_Batch]] = deque()
    try:
        for size, batch in _batches(numbered):
            pending.append(asyncio.ensure_future(off_loop(size, check_batch, batch)))
            while len(pending) >= _IN_FLIGHT or (pending and pending[0].done()):
                await _copy(conn, await pending.popleft(), staged)
        while pending:
            await _copy(conn, await pending.popleft(), staged)
    finally:
        for future in pending:
            future.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    return staged


async def _check_references(conn: Conn, staged: _Staged) -> None:
    """What one record may say of another, checked across the whole file."""
    if staged.second_settings is not None:
        raise _fail(staged.second_settings, "settings", "settings", "appears more than once")
    for check, name in sql.CHECKS:
        if check == "duplicate":
            record_type, column, key, where = sql.DUPLICATES[name]
            row = await sql.first_line(conn, sql.duplicate_query(record_type, key, where))
            if row is not None:
                raise _fail(row["lineno"], record_type, column, f"repeats line {row['first']}")
        else:
            record_type, column, message, query = sql.ORPHANS[name]
            row = await sql.first_line(conn, query)
            if row is not None:
                raise _fail(row["lineno"], record_type, column, message)


# --- writing --------------------------------------------------------------------------------


class _Writer:
    """One import's writes on one connection, inside the caller's transaction."""

    def __init__(self, conn: Conn, target: str) -> None:
        self.conn = conn
        self.target = target
        self.params = {"resource_id": target}
        self.tally = Tally()
        self.step = "settings"  # what is being written, for a conflict's message

    async def _run(self, query: Any, params: dict[str, Any] | None = None) -> None:
        await self.conn.execute(query, {**self.params, **(params or {})})

    async def _count(self, query: Any, params: dict[str, Any] | None = None) -> int:
        return int(await sql.scalar(self.conn, query, {**self.params, **(params or {})}) or 0)

    async def _tally(self, record_type: str, query: Any) -> None:
        for row in await sql.outcomes(self.conn, query, self.params):
            self.tally.add(record_type, row["outcome"], row["n"])

    async def settings(self, staged: _Staged) -> None:
        if staged.settings is None:
            return
        wanted = staged.settings[1]
        await settings_sql.insert_default_row(self.conn, self.target)
        row = await settings_sql.select_settings(self.conn, self.target, for_update=True)
        assert row is not None, "the row was just ensured"
        current = settings_from_row(self.target, row)
        if current.version > 0 and current.settings == wanted:
            self.tally.add("settings", "unchanged")
            return
        await settings_sql.write_settings(self.conn, self.target, settings_to_row(wanted))
        self.tally.add("settings", "added" if current.version == 0 else "updated")

    async def sessions(self, sequences: dict[str, str]) -> None:
        self.step = "sessions"
        await self._run(sql.ADD_SESSIONS)
        await self._run(sql.MATCH_SESSIONS)
        await self._run(sql.ANALYZE_SESSIONS)
        await self._run(sql.MAP_MATCHED_MESSAGES)
        await self._run(sql.MAP_MATCHED_TURNS)
        for record_type in ("turn", "message", "observation_log", "observation_group"):
            await sql.allocate(self.conn, record_type, sequences[record_type])
        for statement in (
            sql.INSERT_TURNS,
            sql.INSERT_MESSAGES,
            sql.INSERT_LOGS,
            sql.INSERT_GROUPS,
            sql.INSERT_ACTORS,
        ):
            await self._run(statement)
        await self._tally("session", sql.SESSION_OUTCOMES)
        for record_type in (
            "turn",
            "message",
            "observation_log",
            "observation_group",
            "observation_actor",
        ):
            await self._tally(record_type, sql.child_outcomes(record_type))
        cur = await self.conn.execute(sql.SKIPPED_SESSIONS)
        self.tally.skipped_sessions.extend(row["session_id"] for row in await cur.fetchall())

    async def facts(self, sequence: str, total: int) -> None:
        self.step = "facts"
        await self._run(sql.MATCH_KEYED_FACTS)
        await self._run(sql.MATCH_KEYLESS_FACTS)
        conflict = await sql.first_line(self.conn, sql.FIRST_CONFLICT)
        if conflict is not None:
            field = "key" if conflict["key"] is not None else "content"
            raise ConflictError(
                f"line {conflict['lineno']}: fact.{field}: resource {self.target!r} already "
                f"holds a different value for this fact (fact {conflict['target_id']}); the "
                "import never overwrites one: change or delete it there first, or import "
                "into another resource"
            )
        await sql.allocate(self.conn, "fact", sequence)
        added = await self._count(sql.INSERT_FACTS)
        self._add("fact", added=added, unchanged=total - added)

    async def fact_versions(self, sequence: str, total: int) -> None:
        self.step = "fact versions"
        await self._run(sql.TARGET_FILED_VERSIONS)
        await self._run(sql.TARGET_DELETED_VERSIONS, {"sequence": sequence})
        added = await self._count(sql.INSERT_FACT_VERSIONS)
        skipped = await self._count(sql.FACT_VERSIONS_SKIPPED)
        self._add("fact_version", added=added, unchanged=total - added - skipped, skipped=skipped)

    async def episodes(self, total: int) -> None:
        self.step = "episodes"
        added = await self._count(sql.INSERT_EPISODES)
        self._add("episode", added=added, unchanged=total - added)
        # The added facts' sources name facts and episodes: all are in by now.
        await self._run(sql.MAP_EPISODES)
        await self._run(sql.SET_FACT_SOURCES)

    async def caller_vectors(self, total: int) -> None:
        """After the facts and episodes: each vector to its memory in the target."""
        if not total:
            return
        self.step = "caller vectors"
        for statement in (
            vector_sql.MATCH_EPISODES,
            vector_sql.TARGET_FACT_VECTORS,
            vector_sql.TARGET_EPISODE_VECTORS,
            vector_sql.HELD_VECTORS,
        ):
            await self._run(statement)
        added = await self._count(vector_sql.INSERT_CALLER_VECTORS)
        await self._run(vector_sql.SAME_VECTORS)
        same = await self._count(vector_sql.SAME_VECTORS_COUNT)
        self._add("caller_vector", added=added, unchanged=same - added, skipped=total - same)

    async def secrets(self) -> None:
        self.step = "secrets"
        await self._run(sql.ADD_SECRETS)
        await self._run(sql.MATCH_SECRETS)
        await self._tally("secret", sql.SECRET_OUTCOMES)

    def _add(self, record_type: str, **outcomes: int) -> None:
        for outcome, n in outcomes.items():
            if n:
                self.tally.add(record_type, outcome, n)

    def report(self, *, dry_run: bool) -> ImportReport:
        ordered = Tally(
            counts={t: self.tally.counts[t] for t in RECORD_TYPES if t in self.tally.counts},
            skipped_sessions=self.tally.skipped_sessions,
        )
        return ImportReport.of((self.target,), ordered, dry_run=dry_run)


@asynccontextmanager
async def _database_errors(target: str, writer: list[_Writer]) -> AsyncIterator[None]:
    """The database's refusals said as popagent's errors (never a traceback)."""
    try:
        yield
    except psycopg.errors.IntegrityError as exc:
        # A concurrent writer took a key or content between the lookups and the writes.
        # Said by what was being written: a distributed table (Citus) reports no
        # constraint name.
        step = writer[0].step if writer else "records"
        raise ConflictError(
            f"the import met a concurrent change of resource {target!r} while writing "
            f"its {step} ({_INTEGRITY.get(type(exc), 'a constraint failed')}); nothing "
            "was written, run it again"
        ) from exc
    except psycopg.errors.DataError as exc:
        raise ValidationError(
            "file",
            f"a value is refused by the database ({exc.diag.message_primary}); nothing was written",
        ) from exc


async def import_resource(
    pool: Pool,
    lines: Iterable[RawLine] | IO[bytes] | IO[str],
    *,
    resource_id: str | None = None,
    dry_run: bool = False,
) -> ImportReport:
    """Import an export into ``resource_id`` (default: the exported resource).

    ``lines`` is the file's lines (``str``, or ``bytes`` of UTF-8), or an open file,
    binary or text, which is read line by line: memory stays bounded whatever its
    size. Checks every line and every reference between records, then writes, all
    in one transaction (rolled back afterwards with ``dry_run``, which reports what
    an import would do). ``ValidationError`` names the bad line and field;
    ``ConflictError`` a fact whose key the target holds with another value. Either
    way nothing is written. The vectors callers made with their own models
    (``caller_vector`` records) are written with their memories; popagent's own
    model's are not part of an export: the imported memories wait for them
    (``popagent_pending_vectors``), which a vector worker writes after the commit (a
    server's, or ``LongTermMemory.wait_for_vectors``, or ``popagent embed``).
    """
    numbered = _numbered(lines)
    source = _header(numbered)
    target = source if resource_id is None else check_id("resource_id", resource_id)
    writers: list[_Writer] = []
    async with (
        pool.connection() as conn,
        _database_errors(target, writers),
        conn.transaction(force_rollback=dry_run),
    ):
        await sql.create_staging(conn)
        staged = await _stage(conn, numbered)
        await sql.index_staging(conn)
        await _check_references(conn, staged)
        totals = await sql.totals(conn)
        if totals["secret"] and target != source:
            row = await sql.first_line(conn, sql.FIRST_SECRET)
            assert row is not None
            raise _fail(
                row["lineno"],
                "secret",
                "name",
                f"secrets are sealed for resource {source!r} and decrypt only there: "
                f"import into {source!r}, or export without --include-secrets",
            )
        sequences = await sql.sequences(conn)
        writer = _Writer(conn, target)
        writers.append(writer)
        await writer.settings(staged)
        await writer.sessions(sequences)
        await writer.facts(sequences["fact"], totals["fact"])
        await writer.fact_versions(sequences["fact"], totals["fact_version"])
        await writer.episodes(totals["episode"])
        await writer.caller_vectors(totals["caller_vector"])
        await writer.secrets()
    return writer.report(dry_run=dry_run)
