"""``import_resource``: load a popagent export into a resource, idempotently.

Invariants:
- Every line is parsed and checked (``records.check_record``, then the
  references between records) before anything is written; a bad line raises
  ``ValidationError`` whose field names the line, the record type and the
  field (``line 7: fact.content``), and nothing is written.
- Everything is written in one transaction: an import that fails part-way
  (a conflict, the database) leaves the target as it was.
- A second import of the same file changes nothing: every record is matched
  by its natural key first (docs/export-format.md, "Import").
- Imported rows get the target's ids; source ids live only in the in-memory
  maps of one import. Provenance that names a message or turn is remapped when
  that message or turn is in the target after the import, and dropped when not.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from ..checks import check_id
from ..errors import ConflictError, ValidationError
from ..observe.settings_store import settings_from_row, settings_to_row
from ..store import portable as sql
from ..store import settings as settings_sql
from ..store.database import Conn, Pool
from .records import RECORD_TYPES, check_header, check_record
from .report import ImportReport, Tally

__all__ = ["import_resource", "parse_export"]


@dataclass(frozen=True, slots=True)
class Line:
    """One checked record and the line it came from."""

    lineno: int
    type: str
    values: dict[str, Any]


def _fail(line: Line | int, field: str, message: str) -> ValidationError:
    if isinstance(line, Line):
        return ValidationError(f"line {line.lineno}: {line.type}.{field}", message)
    return ValidationError(f"line {line}", message)


def parse_export(lines: Iterable[str]) -> tuple[str, list[Line]]:
    """The exported resource ID and every checked record; ``ValidationError`` on the first
    bad line."""
    source: str | None = None
    records: list[Line] = []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(lineno, "", f"is not valid JSON ({exc.msg})") from None
        if source is None:
            try:
                source = check_header(obj)
            except ValidationError as exc:
                raise ValidationError(f"line {lineno}: header.{exc.field}", exc.message) from None
            continue
        try:
            record_type, values = check_record(obj)
        except ValidationError as exc:
            kind = obj.get("type") if isinstance(obj, dict) else None
            label = kind if isinstance(kind, str) and kind in RECORD_TYPES else "record"
            raise type(exc)(f"line {lineno}: {label}.{exc.field}", exc.message) from None
        records.append(Line(lineno, record_type, values))
    if source is None:
        raise _fail(1, "", "the file is empty: expected a popagent-export header line")
    return source, records


def _unique(lines: list[Line], field: str, key: Any = None) -> dict[Any, Line]:
    seen: dict[Any, Line] = {}
    for line in lines:
        value = key(line) if key else line.values[field]
        if value is None:
            continue
        if value in seen:
            raise _fail(line, field, f"repeats line {seen[value].lineno}")
        seen[value] = line
    return seen


def _check_references(by_type: dict[str, list[Line]]) -> None:
    """What one record may say of another, checked across the whole file."""
    if len(by_type["settings"]) > 1:
        raise _fail(by_type["settings"][1], "settings", "appears more than once")
    sessions = _unique(by_type["session"], "session_id")
    for record_type in ("turn", "message", "observation_log", "observation_group"):
        for line in by_type[record_type]:
            if line.values["session_id"] not in sessions:
                raise _fail(line, "session_id", "names no session record of this file")
    _unique(by_type["observation_actor"], "session_id")
    for line in by_type["observation_actor"]:
        if line.values["session_id"] not in sessions:
            raise _fail(line, "session_id", "names no session record of this file")
    turns = _unique(by_type["turn"], "turn_id")
    for line in by_type["message"]:
        turn = turns.get(line.values["turn_id"])
        if line.values["turn_id"] is not None and (
            turn is None or turn.values["session_id"] != line.values["session_id"]
        ):
            raise _fail(line, "turn_id", "names no turn record of this message's session")
    _unique(by_type["message"], "id")
    logs = _unique(by_type["observation_log"], "id")
    _unique(
        by_type["observation_log"],
        "generation",
        key=lambda x: (x.values["session_id"], x.values["generation"]),
    )
    for line in by_type["observation_group"]:
        log = logs.get(line.values["log_id"])
        if log is None or log.values["session_id"] != line.values["session_id"]:
            raise _fail(line, "log_id", "names no observation_log of this group's session")
    _unique(by_type["observation_group"], "id")
    facts = _unique(by_type["fact"], "id")
    _unique(by_type["fact"], "key")
    _unique(
        by_type["fact"],
        "content",
        key=lambda x: x.values["sha"] if x.values["key"] is None else None,
    )
    _unique(
        by_type["fact_version"],
        "version",
        key=lambda x: (x.values["fact_id"], x.values["version"]),
    )
    for line in by_type["fact_version"]:
        fact = facts.get(line.values["fact_id"])
        if fact is not None and line.values["version"] >= fact.values["version"]:
            raise _fail(line, "version", "must be below the current version of its fact")
    _unique(by_type["episode"], "id")
    _unique(by_type["secret"], "name")


def _nearest(ids: list[int], value: int | None, mapping: dict[int, int], *, up: bool) -> int | None:
    """The target id of source message ``value``, or of its nearest neighbour in the
    session (the next one for a range's start, the previous one otherwise)."""
    if value is None:
        return None
    if value in mapping:
        return mapping[value]
    at = bisect.bisect_left(ids, value) if up else bisect.bisect_right(ids, value) - 1
    if 0 <= at < len(ids):
        return mapping.get(ids[at])
    return None


class _Writer:
    """One import's writes on one connection, inside the caller's transaction."""

    def __init__(self, conn: Conn, target: str, by_type: dict[str, list[Line]]) -> None:
        self.conn = conn
        self.target = target
        self.by_type = by_type
        self.tally = Tally()
        self.messages: dict[int, int] = {}
        self.turns: dict[int, int] = {}

    def provenance(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with its turn and message ids mapped to the target's, or dropped."""
        message_ids = [self.messages[m] for m in values["message_ids"] if m in self.messages]
        return {
            **values,
            "turn_id": self.turns.get(values["turn_id"]) if values["turn_id"] else None,
            "message_ids": message_ids or None,
        }

    async def settings(self) -> None:
        for line in self.by_type["settings"]:
            wanted = line.values["settings"]
            await settings_sql.insert_default_row(self.conn, self.target)
            row = await settings_sql.select_settings(self.conn, self.target, for_update=True)
            assert row is not None, "the row was just ensured"
            current = settings_from_row(self.target, row)
            if current.version > 0 and current.settings == wanted:
                self.tally.add("settings", "unchanged")
                continue
            await settings_sql.write_settings(self.conn, self.target, settings_to_row(wanted))
            self.tally.add("settings", "added" if current.version == 0 else "updated")

    async def sessions(self) -> None:
        children: dict[str, dict[str, list[Line]]] = defaultdict(lambda: defaultdict(list))
        for record_type in ("turn", "message", "observation_log", "observation_group"):
            for line in self.by_type[record_type]:
                children[line.values["session_id"]][record_type].append(line)
        for line in self.by_type["observation_actor"]:
            children[line.values["session_id"]]["observation_actor"].append(line)
        for line in self.by_type["session"]:
            own = children[line.values["session_id"]]
            if await sql.insert_session(self.conn, self.target, line.values):
                self.tally.add("session", "added")
                await self._write_session(own)
            else:
                await self._match_session(line.values["session_id"], own)

    async def _write_session(self, own: dict[str, list[Line]]) -> None:
        conn, target = self.conn, self.target
        for line in sorted(own["turn"], key=lambda x: x.values["turn_id"]):
            values = {k: v for k, v in line.values.items() if k != "turn_id"}
            self.turns[line.values["turn_id"]] = await sql.insert_turn(conn, target, values)
            self.tally.add("turn", "added")
        ids = sorted(line.values["id"] for line in own["message"])
        for line in sorted(own["message"], key=lambda x: x.values["id"]):
            values = {k: v for k, v in line.values.items() if k != "id"}
            values["turn_id"] = self.turns.get(values["turn_id"]) if values["turn_id"] else None
            self.messages[line.values["id"]] = await sql.insert_message(conn, target, values)
            self.tally.add("message", "added")
        logs: dict[int, int] = {}
        for line in sorted(own["observation_log"], key=lambda x: x.values["generation"]):
            values = dict(line.values)
            values["last_observed_message_id"] = _nearest(
                ids, values["last_observed_message_id"], self.messages, up=False
            )
            logs[values["id"]] = await sql.insert_log(conn, target, values)
            self.tally.add("observation_log", "added")
        groups: dict[int, int] = {}
        for line in sorted(own["observation_group"], key=lambda x: x.values["id"]):
            values = dict(line.values)
            first = _nearest(ids, values["first_message_id"], self.messages, up=True)
            last = _nearest(ids, values["last_message_id"], self.messages, up=False)
            # A range whose messages are not in the file keeps its source pointers.
            values["first_message_id"] = first or values["first_message_id"]
            values["last_message_id"] = max(last or values["last_message_id"], first or 0)
            values["log_id"] = logs[values["log_id"]]
            groups[values["id"]] = await sql.insert_group(conn, target, values)
            self.tally.add("observation_group", "added")
        for line in own["observation_log"]:
            covered = [groups[g] for g in line.values["covered_group_ids"] if g in groups]
            if covered:
                await sql.set_covered_groups(conn, target, logs[line.values["id"]], covered)
        for line in own["observation_actor"]:
            await sql.insert_actor(conn, target, line.values)
            self.tally.add("observation_actor", "added")

    async def _match_session(self, session_id: str, own: dict[str, list[Line]]) -> None:
        """A session the target holds already is never merged: ``unchanged`` when its
        messages equal the file's (role, content, parts, item; their ids then map onto
        the stored ones), else
        ``skipped`` with every record of it."""
        stored = await sql.session_messages(self.conn, self.target, session_id)
        lines = sorted(own["message"], key=lambda x: x.values["id"])
        same = [(r["role"], r["content"], r["parts"], r["item"]) for r in stored] == [
            (x.values["role"], x.values["content"], x.values["parts"], x.values["item"])
            for x in lines
        ]
        outcome = "unchanged" if same else "skipped"
        self.tally.add("session", outcome)
        for record_type, records in own.items():
            if records:
                self.tally.add(record_type, outcome, len(records))
        if not same:
            self.tally.skipped_sessions.append(session_id)
            return
        self.messages.update(
            zip((x.values["id"] for x in lines), (r["id"] for r in stored), strict=True)
        )
        turns = await sql.session_turns(self.conn, self.target, session_id)
        file_turns = sorted(x.values["turn_id"] for x in own["turn"])
        if len(turns) == len(file_turns):
            self.turns.update(zip(file_turns, turns, strict=True))

    async def facts(self) -> dict[int, int | None]:
        """Write or match every fact; the target id of each source fact whose versions
        may follow (``None``: a matched fact with another history; its versions are skipped)."""
        targets: dict[int, int | None] = {}
        for line in self.by_type["fact"]:
            v = line.values
            found = await sql.find_fact(self.conn, self.target, v["key"], v["sha"])
            if found is None:
                params = self.provenance({k: x for k, x in v.items() if k != "id"})
                targets[v["id"]] = await sql.insert_fact(self.conn, self.target, params)
                self.tally.add("fact", "added")
                continue
            value = (found["content_sha256"], found["importance"], found["expires_at"])
            if value != (v["sha"], v["importance"], v["expires_at"]):
                field = "key" if v["key"] is not None else "content"
                raise ConflictError(
                    f"line {line.lineno}: fact.{field}: resource {self.target!r} already "
                    f"holds a different value for this fact (fact {found['id']}); the import "
                    "never overwrites one: change or delete it there first, or import into "
                    "another resource"
                )
            targets[v["id"]] = found["id"] if found["version"] == v["version"] else None
            self.tally.add("fact", "unchanged")
        return targets

    async def fact_versions(self, facts: dict[int, int | None]) -> None:
        by_fact: dict[int, list[Line]] = defaultdict(list)
        for line in self.by_type["fact_version"]:
            by_fact[line.values["fact_id"]].append(line)
        for source_id, lines in by_fact.items():
            lines.sort(key=lambda x: x.values["version"])
            if source_id in facts:
                target_id = facts[source_id]
                if target_id is None:
                    self.tally.add("fact_version", "skipped", len(lines))
                    continue
            else:
                first = lines[0].values
                target_id = await sql.find_deleted_fact_id(
                    self.conn,
                    self.target,
                    version=first["version"],
                    sha=first["sha"],
                    valid_from=first["valid_from"],
                ) or await sql.reserve_fact_id(self.conn)
            for line in lines:
                params = self.provenance({**line.values, "fact_id": target_id})
                added = await sql.insert_fact_version(self.conn, self.target, params)
                self.tally.add("fact_version", "added" if added else "unchanged")

    async def episodes(self) -> None:
        for line in self.by_type["episode"]:
            params = self.provenance({k: x for k, x in line.values.items() if k != "id"})
            added = await sql.insert_episode(self.conn, self.target, params)
            self.tally.add("episode", "added" if added else "unchanged")

    async def secrets(self) -> None:
        for line in self.by_type["secret"]:
            v = line.values
            if await sql.insert_secret(self.conn, self.target, v):
                self.tally.add("secret", "added")
                continue
            stored = await sql.secret_ciphertext(self.conn, self.target, v["name"])
            same = stored is not None and (
                bytes(stored["ciphertext"]),
                bytes(stored["nonce"]),
                stored["key_id"],
            ) == (v["ciphertext"], v["nonce"], v["key_id"])
            self.tally.add("secret", "unchanged" if same else "skipped")


async def import_resource(
    pool: Pool,
    lines: Iterable[str],
    *,
    resource_id: str | None = None,
    dry_run: bool = False,
) -> ImportReport:
    """Import an export's lines into ``resource_id`` (default: the exported resource).

    Checks every line first, then writes in one transaction (rolled back
    afterwards with ``dry_run``, which reports what an import would do).
    ``ValidationError`` names the bad line and field; ``ConflictError`` a fact
    whose key the target holds with another value. Either way nothing is written.
    Embeddings are not part of an export: run ``popagent embed`` afterwards.
    """
    source, records = parse_export(lines)
    target = source if resource_id is None else check_id("resource_id", resource_id)
    by_type: dict[str, list[Line]] = {t: [] for t in RECORD_TYPES}
    for line in records:
        by_type[line.type].append(line)
    _check_references(by_type)
    if by_type["secret"] and target != source:
        raise _fail(
            by_type["secret"][0],
            "name",
            f"secrets are sealed for resource {source!r} and decrypt only there: import "
            f"into {source!r}, or export without --include-secrets",
        )
    async with pool.connection() as conn:
        try:
            async with conn.transaction(force_rollback=dry_run):
                writer = _Writer(conn, target, by_type)
                await writer.settings()
                await writer.sessions()
                facts = await writer.facts()
                await writer.fact_versions(facts)
                await writer.episodes()
                await writer.secrets()
        except psycopg.errors.IntegrityError as exc:
            # A concurrent writer took a key or content between the lookups and the writes.
            raise ConflictError(
                f"the import met a concurrent change of resource {target!r} "
                f"({exc.diag.constraint_name or type(exc).__name__}); nothing was written, "
                "run it again"
            ) from exc
    return ImportReport.of((target,), writer.tally, dry_run=dry_run)
