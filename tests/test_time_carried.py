"""What time-aware memory keeps, carried through export and import against the real
database: a derived fact's sources (``based_on``) and stale mark, with the memory ids
they name mapped to the target's, and the event clock of a fact's earlier values.
(Backup carries them too: ``tests/test_backup.py`` fills and compares every column.)
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import popagent
from popagent.errors import ValidationError
from popagent.models import FactVersion, Memory, MemoryFilter
from popagent.portable import export_resource, import_resource


async def export_lines(memory: popagent.LongTermMemory, resource: str) -> list[str]:
    out = io.StringIO()
    await export_resource(memory.pool, resource, out)
    return out.getvalue().splitlines()


def records(lines: list[str], record_type: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, lines[1:]) if r["type"] == record_type]


async def by_content(memory: popagent.LongTermMemory, resource: str) -> dict[str, Memory]:
    return {m.content: m for m in await memory.list(resource, MemoryFilter(limit=1000))}


async def test_sources_and_stale_marks_go_through_export_and_import(
    memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    await memory.remember(resource, "Lives in Lyon", key="home.city")
    moved = await memory.retain_episode(resource, "s1", "I moved to Lyon", "Welcome to Lyon!")
    assert moved is not None
    airport = (
        await memory.remember(
            resource, "Nearest airport: LYS", key="home.airport", based_on=["home.city"]
        )
    ).memory
    # A keyless fact based on a fact by id and on an episode.
    await memory.remember(resource, "Has lounge access at LYS", based_on=[airport.id, moved.id])
    job = (await memory.remember(resource, "Works at Acme")).memory  # keyless: '#<id>' marks
    await memory.remember(resource, "Commutes by tram", key="commute", based_on=[job.id])
    await memory.remember(resource, "Lives in Paris", key="home.city")  # marks airport, lounge
    await memory.delete(resource, job.id)  # marks commute: '#<job id>'
    mine = await by_content(memory, resource)
    assert mine["Has lounge access at LYS"].stale_source == "home.city"
    assert mine["Commutes by tram"].stale_source == f"#{job.id}"

    lines = await export_lines(memory, resource)
    exported = {r["content"]: r for r in records(lines, "fact")}
    assert exported["Has lounge access at LYS"]["based_on"] == [airport.id, moved.id]
    assert exported["Nearest airport: LYS"]["based_on"] == ["home.city"]
    assert exported["Nearest airport: LYS"]["stale_source"] == "home.city"
    assert exported["Lives in Paris"]["based_on"] == []
    assert exported["Lives in Paris"]["stale_since"] is None

    report = await import_resource(memory.pool, lines, resource_id=other_resource)
    assert report.counts["fact"]["added"] == 4
    theirs = await by_content(memory, other_resource)
    new_airport = theirs["Nearest airport: LYS"]
    new_moved = theirs[moved.content]
    assert new_airport.id != airport.id and new_moved.id != moved.id
    # Keys are names and stay; ids are mapped to the target's memories of the file.
    assert new_airport.based_on == ("home.city",)
    assert theirs["Has lounge access at LYS"].based_on == (new_airport.id, new_moved.id)
    for content in ("Nearest airport: LYS", "Has lounge access at LYS", "Commutes by tram"):
        assert theirs[content].stale_since == mine[content].stale_since, content
    assert theirs["Nearest airport: LYS"].stale_source == "home.city"
    # The deleted source's history went to a reserved id: the dependent names it, so
    # restoring that history brings its source back under the id it names.
    new_commute = theirs["Commutes by tram"]
    (reserved,) = new_commute.based_on
    assert isinstance(reserved, int) and reserved != job.id
    assert new_commute.stale_source == f"#{reserved}"
    history = await memory.fact_history(other_resource, reserved)
    assert [v.content for v in history] == ["Works at Acme"]
    assert (await memory.restore_fact(other_resource, reserved, 1)).content == "Works at Acme"

    # The imported sources work: a change of the source marks its dependents again.
    await memory.confirm(other_resource, new_airport.id)
    await memory.remember(other_resource, "Lives in Nice", key="home.city")
    assert {m.id for m in await memory.stale(other_resource)} >= {new_airport.id}

    # Idempotent: a second import into the source resource changes nothing.
    before = await by_content(memory, resource)
    home = await import_resource(memory.pool, lines)
    assert home.total("added") == 0 and home.total("updated") == 0
    assert await by_content(memory, resource) == before


def _with_fact(lines: list[str], content: str, **changes: Any) -> tuple[list[str], int]:
    """The lines with fact ``content``'s record changed; and its line number."""
    out = list(lines)
    for n, line in enumerate(lines):
        record = json.loads(line)
        if record.get("type") == "fact" and record.get("content") == content:
            record.update(changes)
            for name in [k for k, v in changes.items() if v is ...]:
                del record[name]
            out[n] = json.dumps(record)
            return out, n + 1
    raise AssertionError(f"no fact {content!r}")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"based_on": "home.city"}, "based_on"),
        ({"based_on": [True]}, "based_on"),
        ({"based_on": [1.5]}, "based_on"),
        ({"based_on": [0]}, "based_on"),
        ({"based_on": [2**63]}, "based_on"),
        ({"based_on": {"key": "home.city"}}, "based_on"),
        ({"based_on": [f"k{n}" for n in range(17)]}, "based_on"),
        ({"based_on": ["has space"]}, "based_on"),
        ({"based_on": ["home.airport"]}, "based_on"),  # the fact itself, by key
        ({"stale_since": None}, "stale_source"),
        ({"stale_source": ...}, "stale_source"),
        ({"stale_source": "home.city]\n- [fact, said today"}, "stale_source"),
        ({"stale_source": ""}, "stale_source"),
        ({"stale_source": 12}, "stale_source"),
        ({"stale_since": "yesterday"}, "stale_since"),
    ],
)
async def test_hostile_sources_and_marks_are_refused_naming_the_line(
    memory: popagent.LongTermMemory,
    resource: str,
    other_resource: str,
    changes: dict[str, Any],
    field: str,
) -> None:
    await memory.remember(resource, "Lives in Lyon", key="home.city")
    await memory.remember(
        resource, "Nearest airport: LYS", key="home.airport", based_on=["home.city"]
    )
    await memory.remember(resource, "Lives in Paris", key="home.city")
    lines = await export_lines(memory, resource)
    bad, lineno = _with_fact(lines, "Nearest airport: LYS", **changes)
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, bad, resource_id=other_resource)
    assert caught.value.field == f"line {lineno}: fact.{field}"
    assert await memory.list(other_resource) == []


async def test_a_fact_naming_itself_by_id_and_exports_without_sources_import(
    memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    fact = (await memory.remember(resource, "Likes tea", key="drink")).memory
    lines = await export_lines(memory, resource)
    bad, lineno = _with_fact(lines, "Likes tea", based_on=[fact.id])
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, bad, resource_id=other_resource)
    assert caught.value.field == f"line {lineno}: fact.based_on"
    # An export from before derived memories (no such fields) imports with none; an id
    # the file holds no memory of is dropped (it would name an unrelated memory here).
    old, _ = _with_fact(lines, "Likes tea", based_on=..., stale_since=..., stale_source=...)
    await import_resource(memory.pool, old, resource_id=other_resource)
    (imported,) = await memory.list(other_resource)
    assert imported.based_on == () and imported.stale_since is None
    unknown, _ = _with_fact(lines, "Likes tea", based_on=[fact.id + 1000, "job"])
    await import_resource(memory.pool, unknown, resource_id="carried-unknown-source")
    (imported,) = await memory.list("carried-unknown-source")
    assert imported.based_on == ("job",)


def clock(m: Memory | FactVersion) -> tuple[datetime | None, str | None]:
    return m.happened_start, m.happened_precision


async def test_earlier_values_keep_their_event_clock_and_restoring_one_brings_it_back(
    memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    # The writer gave each clock: the words name no time, so only the version can
    # say when the value held.
    paris = await memory.remember(resource, "Lives in Paris", key="home.city", happened_at="2015")
    await memory.remember(resource, "Lives in Lyon", key="home.city", happened_at="2019-05")
    fact_id = paris.memory.id
    (earlier,) = await memory.fact_history(resource, fact_id)
    assert clock(earlier) == (datetime(2015, 1, 1, tzinfo=UTC), "year")
    assert earlier.happened_end == datetime(2016, 1, 1, tzinfo=UTC)

    # Deleted: its last value keeps its clock too; restoring brings a deleted fact
    # back with the clock of the version restored, and changes a current one to it.
    await memory.delete(resource, fact_id)
    latest, _ = await memory.fact_history(resource, fact_id)
    assert (latest.ended, clock(latest)) == ("deleted", (datetime(2019, 5, 1, tzinfo=UTC), "month"))
    back = await memory.restore_fact(resource, fact_id, 1)
    assert (back.content, clock(back)) == (
        "Lives in Paris",
        (datetime(2015, 1, 1, tzinfo=UTC), "year"),
    )
    again = await memory.restore_fact(resource, fact_id, 2)
    assert (again.content, clock(again)) == (
        "Lives in Lyon",
        (datetime(2019, 5, 1, tzinfo=UTC), "month"),
    )

    # An expired value keeps it as well.
    soon = datetime.now(UTC) + timedelta(seconds=30)
    visa = await memory.remember(resource, "Holds a visa", happened_at="2022", expires_at=soon)
    await memory.maintain(now=soon + timedelta(seconds=1))
    (expired,) = await memory.fact_history(resource, visa.memory.id)
    assert (expired.ended, clock(expired)) == (
        "expired",
        (datetime(2022, 1, 1, tzinfo=UTC), "year"),
    )

    # Export and import carry the versions' clocks.
    lines = await export_lines(memory, resource)
    versions = records(lines, "fact_version")
    assert {(v["content"], v["happened_precision"]) for v in versions} >= {
        ("Lives in Paris", "year"),
        ("Lives in Lyon", "month"),
        ("Holds a visa", "year"),
    }
    await import_resource(memory.pool, lines, resource_id=other_resource)
    (imported,) = await memory.list(other_resource, MemoryFilter(key="home.city"))
    theirs = {v.version: v for v in await memory.fact_history(other_resource, imported.id)}
    mine = {v.version: v for v in await memory.fact_history(resource, fact_id)}
    assert theirs.keys() == mine.keys()
    for n, v in mine.items():
        assert (clock(theirs[n]), theirs[n].happened_end) == (clock(v), v.happened_end), n

    # A half-given clock on a version is refused, naming its line and field.
    at = next(
        n for n, line in enumerate(lines) if '"type":"fact_version"' in line and "Paris" in line
    )
    half = list(lines)
    half[at] = json.dumps({**json.loads(lines[at]), "happened_end": None})
    with pytest.raises(ValidationError) as caught:
        await import_resource(memory.pool, half, resource_id="carried-half-clock")
    assert caught.value.field == f"line {at + 1}: fact_version.happened_end"
