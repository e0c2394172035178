"""``import_mem0``: Mem0's memories as popagent facts (``popagent import --from mem0``).

What is read (docs/export-format.md, "Importing from Mem0"): one JSON document,
either the object ``get_all`` returns (``{"results": [...]}``, other keys
ignored) or a plain list of memories (the v1 platform API's shape). Of each
memory: ``memory`` (its text, required), ``user_id`` (the resource, unless the
caller names one), ``created_at`` and ``updated_at`` (kept; a time without a
UTC offset is read as UTC), ``id`` (named in errors only). ``hash``,
``metadata``, ``categories``, ``agent_id``, ``run_id`` and anything else are
ignored: a fact has no place for them.

Invariants: each memory becomes a keyless fact (content normalized and checked
as ``remember`` checks it, importance 0.5, origin ``import``); a memory holding
a credential is refused like any fact write; every memory is checked before
anything is written, and all are written in one transaction; keyless facts
deduplicate by content hash, so importing the same file twice adds nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg

from ..checks import check_id, check_text
from ..errors import ConflictError, ValidationError
from ..memory.longterm import sha256_hex
from ..memory.validation import normalize_fact_content
from ..store import portable as sql
from ..store.database import Pool
from .report import ImportReport, Tally

__all__ = ["MEM0_IMPORTANCE", "import_mem0", "parse_mem0"]

MEM0_IMPORTANCE = 0.5


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


def parse_mem0(document: object, *, resource_id: str | None = None) -> list[dict[str, Any]]:
    """The facts a Mem0 document holds, checked; ``ValidationError`` naming the memory
    (``results[3].memory``) on the first bad one."""
    if isinstance(document, dict) and "results" in document:
        items, path = document["results"], "results"
    elif isinstance(document, list):
        items, path = document, ""
    else:
        raise ValidationError(
            "document", 'must be a list of memories or an object with "results" (get_all)'
        )
    if not isinstance(items, list):
        raise ValidationError(path, "must be a list of memories")
    override = None if resource_id is None else check_id("resource_id", resource_id)
    facts = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
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
                f"{where}.user_id", "is missing: name the resource with --resource"
            )
        else:
            resource = check_id(f"{where}.user_id", check_text(f"{where}.user_id", item["user_id"]))
        created_at = _time(item, "created_at", where)
        updated_at = _time(item, "updated_at", where) or created_at
        facts.append(
            {
                "resource_id": resource,
                "content": content,
                "sha": sha256_hex(content),
                "created_at": created_at,
                "updated_at": max(updated_at, created_at) if updated_at and created_at else None,
            }
        )
    return facts


async def import_mem0(
    pool: Pool, text: str, *, resource_id: str | None = None, dry_run: bool = False
) -> ImportReport:
    """Import a Mem0 JSON document (``text``); counts under ``fact``."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            "document", f"is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    facts = parse_mem0(document, resource_id=resource_id)
    tally = Tally()
    tally.counts["fact"] = {"added": 0, "updated": 0, "unchanged": 0, "skipped": 0}
    resources: list[str] = []
    try:
        await _write(pool, facts, tally, resources, dry_run=dry_run)
    except psycopg.errors.IntegrityError as exc:
        raise ConflictError(
            "the import met a concurrent write of the same memory; nothing was written, "
            "run it again"
        ) from exc
    return ImportReport.of(tuple(resources), tally, dry_run=dry_run)


async def _write(
    pool: Pool,
    facts: list[dict[str, Any]],
    tally: Tally,
    resources: list[str],
    *,
    dry_run: bool,
) -> None:
    async with pool.connection() as conn, conn.transaction(force_rollback=dry_run):
        for fact in facts:
            resource = fact["resource_id"]
            if resource not in resources:
                resources.append(resource)
            if await sql.find_fact(conn, resource, None, fact["sha"]) is not None:
                tally.add("fact", "unchanged")
                continue
            now = datetime.now(UTC)
            await sql.insert_fact(
                conn,
                resource,
                {
                    "session_id": None,
                    "key": None,
                    "content": fact["content"],
                    "sha": fact["sha"],
                    "importance": MEM0_IMPORTANCE,
                    "expires_at": None,
                    "origin": "import",
                    "turn_id": None,
                    "message_ids": None,
                    "tool_call_id": None,
                    "version": 1,
                    "created_at": fact["created_at"] or now,
                    "updated_at": fact["updated_at"] or fact["created_at"] or now,
                },
            )
            tally.add("fact", "added")
