"""``MemoryFilter`` and the one call per verb (``list``, ``get``, ``delete`` taking ``kind``),
on the suite's real database, and the HTTP client passing a filter to a real server.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import popagent
from popagent.client import AsyncClient, Client, calls
from popagent.errors import NotFoundError, ValidationError
from popagent.memory.validation import FILTER_FIELDS, LIST_LIMIT_CAP, check_filter, filter_from
from popagent.models import Memory, MemoryFilter
from popagent.web import ServerConfig
from tests.web_support import uvicorn_server

T0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


@dataclasses.dataclass(frozen=True)
class Rows:
    """What ``seed`` wrote: two facts and three episodes of known sessions and times."""

    tea: Memory
    plain: Memory
    old: Memory
    middle: Memory
    new: Memory


async def seed(memory: popagent.LongTermMemory, resource: str) -> Rows:
    tea = await memory.remember(resource, "Prefers green tea", key="drink", session_id="s-a")
    plain = await memory.remember(resource, "Lives by the sea")
    episodes = []
    for i, (session, when) in enumerate(
        (("s-a", T0), ("s-b", T0 + timedelta(days=1)), ("s-a", T0 + timedelta(days=2)))
    ):
        episode = await memory.retain_episode(
            resource, session, f"Question {i} about GREEN things", f"Answer {i}", created_at=when
        )
        assert episode is not None
        episodes.append(episode)
    return Rows(tea.memory, plain.memory, *episodes)


def ids(rows: list[Memory]) -> list[int]:
    return [m.id for m in rows]


# --- the value --------------------------------------------------------------------------------


def test_the_filter_is_a_frozen_value() -> None:
    where = MemoryFilter(kind="fact", key="drink")
    with pytest.raises(dataclasses.FrozenInstanceError):
        where.kind = "episode"  # type: ignore[misc]
    with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
        where.colour = "red"  # type: ignore[attr-defined]
    assert where == MemoryFilter(kind="fact", key="drink")
    assert hash(where) == hash(MemoryFilter(kind="fact", key="drink"))
    assert (where.limit, where.offset, where.text) == (50, 0, None)
    assert [f.name for f in dataclasses.fields(MemoryFilter)] == [
        "kind",
        "key",
        "session_id",
        "text",
        "created_after",
        "created_before",
        "limit",
        "offset",
    ]


def test_filter_from_reads_the_fields_by_name() -> None:
    assert tuple(f.name for f in dataclasses.fields(MemoryFilter)) == FILTER_FIELDS
    given = {"text": "tea", "limit": 7, "json": True, "resource_id": "other"}
    assert filter_from(given) == MemoryFilter(text="tea", limit=7)  # other names ignored
    # Defaults fill what is not given; what is given wins, even None.
    assert filter_from({"limit": 3, "key": None}, kind="fact", limit=10, key="k") == MemoryFilter(
        kind="fact", limit=3
    )
    every = {name: f"v-{name}" for name in FILTER_FIELDS}
    assert dataclasses.asdict(filter_from(every)) == every


def test_check_filter_returns_a_normalized_copy() -> None:
    given = MemoryFilter(key="  Drink ", text="  green tea  ", limit=LIST_LIMIT_CAP)
    checked = check_filter(given)
    assert checked == dataclasses.replace(given, key="drink", text="green tea")
    assert given.key == "  Drink "  # the caller's value is untouched
    assert check_filter(MemoryFilter()) == MemoryFilter()


BAD_FIELDS: list[tuple[str, Any]] = [
    ("kind", "note"),
    ("key", "   "),
    ("key", "two words"),
    ("session_id", ""),
    ("text", "   "),
    ("text", "x" * 4_001),
    ("created_after", datetime(2026, 1, 1)),  # naive
    ("created_before", "yesterday"),
    ("limit", 0),
    ("limit", LIST_LIMIT_CAP + 1),
    ("limit", True),
    ("offset", -1),
    ("offset", 1.5),
]


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
def test_check_filter_names_the_field_at_fault(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        check_filter(MemoryFilter(**{field: value}))
    assert caught.value.field == field


def test_check_filter_refuses_what_is_not_a_filter() -> None:
    with pytest.raises(ValidationError) as caught:
        check_filter({"kind": "fact"})
    assert caught.value.field == "where"


# --- list -------------------------------------------------------------------------------------


async def test_list_filters_by_each_field(memory: popagent.LongTermMemory, resource: str) -> None:
    r = await seed(memory, resource)
    everything = await memory.list(resource)
    assert set(ids(everything)) == {r.tea.id, r.plain.id, r.old.id, r.middle.id, r.new.id}
    # Newest first: the facts were written now, the episodes carry January's times.
    assert ids(everything)[2:] == [r.new.id, r.middle.id, r.old.id]
    assert ids(await memory.list(resource, MemoryFilter())) == ids(everything)

    async def listed(**fields: Any) -> list[int]:
        return ids(await memory.list(resource, MemoryFilter(**fields)))

    assert set(await listed(kind="fact")) == {r.tea.id, r.plain.id}
    assert await listed(kind="episode") == [r.new.id, r.middle.id, r.old.id]
    assert await listed(key=" DRINK ") == [r.tea.id]  # normalized as keys are stored
    assert await listed(key="nothing-has-this") == []
    assert set(await listed(session_id="s-a")) == {r.tea.id, r.new.id, r.old.id}
    assert await listed(session_id="s-a", kind="episode") == [r.new.id, r.old.id]
    assert set(await listed(text="green")) == {r.tea.id, r.new.id, r.middle.id, r.old.id}
    assert await listed(text="100%_") == []  # LIKE's wildcards are literal
    after = T0 + timedelta(days=1)
    assert await listed(kind="episode", created_after=after) == [r.new.id, r.middle.id]
    assert await listed(created_before=after) == [r.old.id]
    assert await listed(created_after=T0, created_before=after + timedelta(days=1)) == [
        r.middle.id,
        r.old.id,
    ]
    assert await listed(kind="episode", limit=2) == [r.new.id, r.middle.id]
    assert await listed(kind="episode", limit=2, offset=2) == [r.old.id]
    assert await listed(kind="episode", offset=3) == []


@pytest.mark.parametrize(("field", "value"), BAD_FIELDS)
async def test_list_refuses_a_bad_field_naming_it(
    memory: popagent.LongTermMemory, resource: str, field: str, value: Any
) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.list(resource, MemoryFilter(**{field: value}))
    assert caught.value.field == field


async def test_list_checks_the_resource_and_the_filter_type(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        await memory.list("", MemoryFilter())
    assert caught.value.field == "resource_id"
    with pytest.raises(ValidationError) as caught:
        await memory.list(resource, "kind=fact")  # type: ignore[arg-type]
    assert caught.value.field == "where"


# --- get and delete ---------------------------------------------------------------------------


async def test_get_takes_an_optional_kind(memory: popagent.LongTermMemory, resource: str) -> None:
    r = await seed(memory, resource)
    assert await memory.get(resource, r.tea.id) == r.tea
    assert await memory.get(resource, r.tea.id, kind="fact") == r.tea
    assert await memory.get(resource, r.old.id, kind="episode") == r.old
    with pytest.raises(NotFoundError, match=f"^no episode {r.tea.id} in this resource$"):
        await memory.get(resource, r.tea.id, kind="episode")
    with pytest.raises(NotFoundError, match=f"^no fact {r.old.id} in this resource$"):
        await memory.get(resource, r.old.id, kind="fact")
    missing = r.new.id + 1_000_000
    with pytest.raises(NotFoundError, match=f"^no memory {missing} in this resource$"):
        await memory.get(resource, missing)
    with pytest.raises(ValidationError) as caught:
        await memory.get(resource, r.tea.id, kind="note")  # type: ignore[arg-type]
    assert caught.value.field == "kind"


async def test_delete_of_the_wrong_kind_deletes_nothing(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    r = await seed(memory, resource)
    with pytest.raises(NotFoundError, match=f"^no episode {r.tea.id} in this resource$"):
        await memory.delete(resource, r.tea.id, kind="episode")
    with pytest.raises(NotFoundError, match=f"^no fact {r.old.id} in this resource$"):
        await memory.delete(resource, r.old.id, kind="fact")
    assert len(await memory.list(resource)) == 5


async def test_delete_by_kind_or_whichever_kind_it_is(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    r = await seed(memory, resource)
    await memory.delete(resource, r.old.id, kind="episode")
    await memory.delete(resource, r.middle.id)  # an episode, found by its id
    await memory.delete(resource, r.tea.id, origin="cli", session_id="s-z")  # a fact
    assert ids(await memory.list(resource)) == [r.plain.id, r.new.id]
    # A deleted fact keeps its last value as a version, ended by whoever deleted it.
    (version,) = await memory.fact_history(resource, r.tea.id)
    assert (version.content, version.ended, version.ended_origin) == (
        "Prefers green tea",
        "deleted",
        "cli",
    )
    assert version.ended_session_id == "s-z"
    # Only its history is left: purging needs the kind, as nothing says it was a fact.
    with pytest.raises(NotFoundError, match=f"^no memory {r.tea.id} in this resource$"):
        await memory.delete(resource, r.tea.id, purge=True)
    await memory.delete(resource, r.tea.id, kind="fact", purge=True)
    with pytest.raises(NotFoundError):
        await memory.fact_history(resource, r.tea.id)
    with pytest.raises(NotFoundError, match=f"^no episode {r.old.id} in this resource$"):
        await memory.delete(resource, r.old.id, kind="episode")


async def test_purge_is_for_facts_only(memory: popagent.LongTermMemory, resource: str) -> None:
    r = await seed(memory, resource)
    for kind in ("episode", None):
        with pytest.raises(ValidationError) as caught:
            await memory.delete(resource, r.old.id, kind=kind, purge=True)
        assert caught.value.field == "purge"
    assert await memory.get(resource, r.old.id) == r.old  # nothing was deleted
    refused: list[tuple[str, dict[str, Any]]] = [
        ("kind", {"kind": "note"}),
        ("purge", {"purge": "yes"}),
        ("origin", {"origin": "nowhere"}),
        ("session_id", {"session_id": ""}),
        ("id", {}),
    ]
    for field, kwargs in refused:
        target = 0 if field == "id" else r.plain.id
        with pytest.raises(ValidationError) as caught:
            await memory.delete(resource, target, **kwargs)
        assert caught.value.field == field
    await memory.delete(resource, r.plain.id, kind="fact", purge=True)
    with pytest.raises(NotFoundError):
        await memory.fact_history(resource, r.plain.id)


# --- the HTTP client --------------------------------------------------------------------------


def test_filter_params_is_the_one_query_of_a_filter() -> None:
    where = MemoryFilter(
        kind="episode", session_id="s-a", created_after=T0, created_before=None, limit=5
    )
    assert calls.filter_params(where) == {
        "kind": "episode",
        "session_id": "s-a",
        "created_after": T0.isoformat(),
        "limit": 5,
        "offset": 0,
    }
    assert calls.list_memories(where).path == "/api/memories"
    assert calls.list_memories(where).params == calls.filter_params(where)
    facts = calls.list_memories(MemoryFilter(kind="fact", key="drink", text="tea", limit=2))
    assert facts.params == {"kind": "fact", "key": "drink", "text": "tea", "limit": 2, "offset": 0}


async def test_the_clients_pass_a_filter_to_the_server(
    memory: popagent.LongTermMemory, database_url: str
) -> None:
    resource = f"filter-{uuid.uuid4().hex[:12]}"
    r = await seed(memory, resource)
    config = ServerConfig(resource_id=resource, maintenance_interval_s=None)
    with uvicorn_server(config, database_url=database_url, model_from_env=False) as base:
        async with AsyncClient(base, timeout=10) as client:
            page = await client.list(
                MemoryFilter(kind="episode", session_id="s-a", created_after=T0, limit=1)
            )
            assert [m.id for m in page.items] == [r.new.id] and page.next_offset == 1
            everything = await client.list()
            assert {m.id for m in everything.items} == {
                r.tea.id,
                r.plain.id,
                r.old.id,
                r.middle.id,
                r.new.id,
            }
            with pytest.raises(ValidationError) as caught:
                await client.list(MemoryFilter(limit=0))
            assert caught.value.field == "limit"
            # iter walks the same list, one page of the filter's limit at a time.
            walked = [m.id async for m in client.iter(MemoryFilter(limit=2))]
            assert walked == [m.id for m in everything.items]
        with Client(base, timeout=10) as sync:
            assert [m.id for m in sync.list(MemoryFilter(text="GREEN", offset=3)).items] == [
                r.old.id
            ]
            assert [m.id for m in sync.iter(MemoryFilter(text="GREEN", limit=1, offset=3))] == [
                r.old.id
            ]
            before = MemoryFilter(
                kind="episode", session_id="s-b", created_before=T0 + timedelta(3)
            )
            assert [m.id for m in sync.list(before).items] == [r.middle.id]
            with pytest.raises(ValidationError) as caught:
                sync.list(MemoryFilter(kind="note"))  # type: ignore[arg-type]
            assert caught.value.field == "kind"
