"""``import_mem0``: Mem0's memories as popagent facts (``popagent import --from mem0``).

What is read (docs/export-format.md, "Importing from Mem0"): one JSON document,
either the object ``get_all`` returns (``{"results": [...]}``, other keys
ignored) or a plain list of memories (the v1 platform API's shape). Of each
memory: ``memory`` (its text, required), ``user_id`` (the resource, unless the
caller names one), ``created_at`` and ``updated_at`` (kept; a time without a
UTC offset is read as UTC), ``id`` (named in errors only). ``hash``,
``metadata``, ``categories``, ``agent_id``, ``run_id`` and anything else are
ignored: a fact has no place for them. Each fact's event clock is read from its
text against its ``created_at`` (docs/time.md); a memory without ``created_at``
has none.

The document is read memory by memory (``reading.DocumentReader``), checked
in batches off the event loop and staged in a temporary table, as a popagent
export is (``importer``): memory holds a batch, not the document.

Invariants: each memory becomes a keyless fact (content normalized and checked
as ``remember`` checks it, importance 0.5, origin ``import``); a memory holding
a credential is refused like any fact write; every memory is checked before
anything is written, and all are written in one transaction; keyless facts
deduplicate by content hash, so importing the same file twice adds nothing.
"""

from __future__ import annotations

import asyncio
import io
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO, Any

import psycopg

from ..checks import check_id, check_text
from ..errors import ConflictError, ValidationError
from ..memory.longterm import sha256_hex
from ..memory.manage import event_params
from ..memory.temporal import event_window
from ..memory.validation import normalize_fact_content
from ..offload import json_size, off_loop
from ..store import portable_import as sql
from ..store.database import Conn, Pool
from .reading import DocumentReader
from .report import ImportReport, Tally

__all__ = ["MEM0_IMPORTANCE", "import_mem0", "parse_mem0"]

MEM0_IMPORTANCE = 0.5
#: Memories checked at once (off the event loop), and batches in flight.
_BATCH = 1_000
_IN_FLIGHT = 3
_SHAPE = 'must be a list of memories or an object with "results" (get_all)'


def _time(item: dict[str, Any], field: str, where: str) -> datetime | None:
    value = item.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{where}.{field}", "must be an ISO-8601 time string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"{where}.{field}", "must be an ISO-8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _fact(item: object, where: str, override: str | None) -> dict[str, Any]:
    """One memory as the fact it becomes; ``ValidationError`` naming its place."""
    if not isinstance(item, dict):
        raise ValidationError(where, "must be an object")
    try:
        content = normalize_fact_content(item.get("memory"), "memory")
    except ValidationError as exc:
        raise type(exc)(f"{where}.{exc.field}", exc.message) from None
    if override is not None:
        resource = override
    elif item.get("user_id") is None:
        raise ValidationError(
            f"{where}.user_id", "is missing: name the resource with --resource-id"
        )
    else:
        resource = check_id(f"{where}.user_id", check_text(f"{where}.user_id", item["user_id"]))
    created_at = _time(item, "created_at", where)
    updated_at = _time(item, "updated_at", where) or created_at
    # The event clock as any fact write reads it from its text, against when the memory
    # was written; without that time a relative phrase would be a guess: none.
    event = event_window(content, created_at) if created_at is not None else None
    return {
        "resource_id": resource,
        "content": content,
        "sha": sha256_hex(content),
        "created_at": created_at,
        "updated_at": max(updated_at, created_at) if updated_at and created_at else None,
        **event_params(event),
    }


def parse_mem0(document: object, *, resource_id: str | None = None) -> list[dict[str, Any]]:
    """The facts a parsed Mem0 document holds, checked; ``ValidationError`` naming the
    memory (``results[3].memory``) on the first bad one."""
    if isinstance(document, dict) and "results" in document:
        items, path = document["results"], "results"
    elif isinstance(document, list):
        items, path = document, ""
    else:
        raise ValidationError("document", _SHAPE)
    if not isinstance(items, list):
        raise ValidationError(path, "must be a list of memories")
    override = None if resource_id is None else check_id("resource_id", resource_id)
    return [_fact(item, f"{path}[{i}]", override) for i, item in enumerate(items)]


def _memories(reader: DocumentReader) -> Iterator[tuple[str, object]]:
    """``(place, memory)`` of each memory of the document, in order, read one at a time."""
    first = reader.peek()
    if first == "[":
        yield from _array(reader, "")
    elif first == "{":
        reader.take("document", "{")
        found = False
        if reader.peek() == "}":
            reader.take("document", "}")
        else:
            while True:
                key = reader.value("document")
                if not isinstance(key, str):
                    raise reader.fail("document", "is not valid JSON (an object key is text)")
                reader.take("document", ":")
                if key == "results":
                    if found:
                        raise reader.fail("results", "appears twice")
                    found = True
                    if reader.peek() != "[":
                        raise reader.fail("results", "must be a list of memories")
                    yield from _array(reader, "results")
                else:
                    reader.value("document")  # another key of get_all's answer: ignored
                if reader.take("document", ",}") == "}":
                    break
        if not found:
            raise ValidationError("document", _SHAPE)
    else:
        reader.value("document")  # a JSON error, if it is not JSON at all
        raise ValidationError("document", _SHAPE)
    reader.end()


def _array(reader: DocumentReader, path: str) -> Iterator[tuple[str, object]]:
    where = path or "document"
    reader.take(where, "[")
    if reader.peek() == "]":
        reader.take(where, "]")
        return
    i = 0
    while True:
        place = f"{path}[{i}]"
        yield place, reader.value(place)
        i += 1
        if reader.take(where, ",]") == "]":
            return


def _check(batch: list[tuple[int, str, object]], override: str | None) -> str:
    """A batch of memories checked, as ``COPY`` text for ``import_mem0``."""
    rows = []
    for position, where, item in batch:
        fact = _fact(item, where, override)
        rows.append(sql.copy_row([position, *(fact[c] for c in sql.MEM0_COLUMNS[1:])]))
    return "".join(rows)


def _batches(
    memories: Iterator[tuple[str, object]],
) -> Iterator[tuple[int, list[tuple[int, str, object]]]]:
    batch: list[tuple[int, str, object]] = []
    size = 0
    for position, (where, item) in enumerate(memories):
        batch.append((position, where, item))
        size += json_size(item)
        if len(batch) >= _BATCH:
            yield size, batch
            batch, size = [], 0
    if batch:
        yield size, batch


async def import_mem0(
    pool: Pool,
    document: str | bytes | IO[bytes] | IO[str],
    *,
    resource_id: str | None = None,
    dry_run: bool = False,
) -> ImportReport:
    """Import a Mem0 JSON document (its text, or an open file read piece by piece);
    counts under ``fact``."""
    override = None if resource_id is None else check_id("resource_id", resource_id)
    if isinstance(document, str):
        document = io.StringIO(document)
    elif isinstance(document, bytes):
        document = io.BytesIO(document)
    reader = DocumentReader(document)
    tally = Tally()
    tally.counts["fact"] = {"added": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    try:
        async with pool.connection() as conn, conn.transaction(force_rollback=dry_run):
            await conn.execute(sql.STAGING_MEM0)
            pending: deque[asyncio.Future[str]] = deque()
            try:
                for size, batch in _batches(_memories(reader)):
                    pending.append(asyncio.ensure_future(off_loop(size, _check, batch, override)))
                    while len(pending) >= _IN_FLIGHT or (pending and pending[0].done()):
                        await _copy(conn, await pending.popleft())
                while pending:
                    await _copy(conn, await pending.popleft())
            finally:
                for future in pending:
                    future.cancel()
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)
            cur = await conn.execute(sql.MEM0_TOTAL)
            total = int((await cur.fetchone() or {"n": 0})["n"])
            cur = await conn.execute(sql.INSERT_MEM0, {"importance": MEM0_IMPORTANCE})
            added = int((await cur.fetchone() or {"n": 0})["n"])
            cur = await conn.execute(sql.MEM0_RESOURCES)
            resources = tuple(row["resource_id"] for row in await cur.fetchall())
    except psycopg.errors.IntegrityError as exc:
        raise ConflictError(
            "the import met a concurrent write of the same memory; nothing was written, "
            "run it again"
        ) from exc
    tally.add("fact", "added", added)
    tally.add("fact", "unchanged", total - added)
    return ImportReport.of(resources, tally, dry_run=dry_run)


async def _copy(conn: Conn, rows: str) -> None:
    async with conn.cursor().copy(sql.COPY_MEM0) as copy:
        await copy.write(rows)
