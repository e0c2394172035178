"""One shape per value: the server writes the dataclasses of ``popagent.models`` and
the client reads the same ones back, both derived from their fields.

No server here: the JSON is what FastAPI writes for a response model (pydantic's
serialization of the dataclass), and the client's ``decode`` must give back the
value it came from. The routes themselves are covered against a real server in
``test_client.py`` and ``test_web_api.py``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from popagent.client.shapes import decode
from popagent.mcp.shapes import fact_version_json, memory_json, recall_result_json
from popagent.models import (
    ChatReply,
    FactHistory,
    FactVersion,
    Health,
    MaintenanceReport,
    Memory,
    Message,
    ObservationGeneration,
    ObservationGroup,
    ObservationGroupInfo,
    ObservationLog,
    Observations,
    Page,
    PurgeReport,
    RecallPreview,
    RecallResult,
    RevertReport,
    ScoreComponent,
    Session,
    SessionWrites,
    Setting,
    Settings,
    ToolCallSummary,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
LATER = NOW + timedelta(days=1)
FACT = Memory(1, "r", None, "fact", "drink", "tea", "ab", 0.5, NOW, LATER, None, 0)
EPISODE = Memory(
    2,
    "r",
    "s",
    "episode",
    None,
    "we talked",
    "cd",
    0.25,
    NOW,
    LATER,
    LATER,
    3,
    origin="agent",
    turn_id=4,
    message_ids=(5, 6),
    tool_call_id="call-1",
    expires_at=LATER,
    version=2,
)
VERSION = FactVersion(
    "r", 1, 1, "drink", "coffee", "ef", 0.5, None, "s", "api", None, (7,), None, NOW, LATER,
    "updated", "gui", None,
)  # fmt: skip
RECALLED = RecallResult(
    EPISODE, 0.7, (ScoreComponent("bm25", 0.5, 0.6), ScoreComponent("a", 1, 0.4))
)

VALUES: list[tuple[Any, Any]] = [
    (Memory, FACT),
    (Memory, EPISODE),
    (Page[Memory], Page(items=(FACT, EPISODE), limit=2, offset=0, next_offset=2)),
    (FactHistory, FactHistory(fact_id=1, current=FACT, versions=(VERSION,))),
    (FactHistory, FactHistory(fact_id=1, current=None, versions=())),
    (SessionWrites, SessionWrites("s", (EPISODE,), (VERSION,))),
    (RevertReport, RevertReport((1,), (2, 3), ())),
    (RecallResult, RECALLED),
    (
        RecallPreview,
        RecallPreview(
            "q", (RECALLED,), "block", "lexical", None, "m", "unavailable", "E", 3, "why"
        ),
    ),
    (
        ChatReply,
        ChatReply(
            "s", "hi", (ToolCallSummary("remember", "ok", "stored"),), (RECALLED,), "b", 9, 2, 1.5
        ),
    ),
    (Session, Session("r", "s", None, {"a": [1, {"b": None}]}, NOW, LATER)),
    (
        Message,
        Message(
            1, "r", "s", "tool", "x", ({"type": "tool_result", "name": "n"},), NOW, 3, "failed"
        ),
    ),
    (MaintenanceReport, MaintenanceReport(1, 2, 3)),
    (PurgeReport, PurgeReport({"popagent_memories": 2, "popagent_audit": 0}, 2, ("x",), "why")),
    (Health, Health("unavailable", "OperationalError")),
    (
        Settings,
        Settings(3, NOW, (Setting("limit", [1, 2], None, "1, 2", "list", "", "numbers", "help"),)),
    ),
    (
        Observations,
        Observations(
            "s",
            (ObservationGeneration(1, 1, "reflection", "o", 5, None, (1, 2), 100, NOW, LATER),),
            (ObservationGroupInfo(1, 1, "observation", "active", 3, 4, "o", 5, 6, NOW),),
        ),
    ),
]


@pytest.mark.parametrize(("shape", "value"), VALUES, ids=lambda v: getattr(v, "__name__", ""))
def test_what_the_server_writes_the_client_reads_back(shape: Any, value: Any) -> None:
    body = json.loads(TypeAdapter(shape).dump_json(value))
    assert decode(shape, body) == value


def test_recall_results_keep_the_map_of_components_both_ways() -> None:
    """The API's form: each component's name maps to its value, weight and contribution."""
    body = TypeAdapter(RecallResult).dump_python(RECALLED, mode="json")
    assert list(body) == ["memory", "score", "components", "evidence", "until"]
    assert body["components"] == RECALLED.to_json()["components"]
    schema = TypeAdapter(RecallResult).json_schema(mode="serialization")
    assert schema["properties"]["components"]["type"] == "object"


def test_a_field_an_older_server_lacks_takes_its_default() -> None:
    body = TypeAdapter(Memory).dump_python(FACT, mode="json")
    for name in ("origin", "turn_id", "message_ids", "tool_call_id", "expires_at", "version"):
        del body[name]
    assert decode(Memory, body) == FACT
    assert (
        decode(MaintenanceReport, {"expired_episodes": 1, "capped_episodes": 2}).expired_facts == 0
    )


@pytest.mark.parametrize(
    ("shape", "body"),
    [
        (Health, {"status": "maybe", "database": "ok"}),
        (
            FactVersion,
            {**TypeAdapter(FactVersion).dump_python(VERSION, mode="json"), "ended": "gone"},
        ),
        (Memory, {k: v for k, v in FACT.to_json().items() if k != "content"}),
        (Memory, {**FACT.to_json(), "created_at": "yesterday"}),
        (Page[Memory], {"items": "nope", "limit": 1, "offset": 0, "next_offset": None}),
        # The API's ``deleted`` is an object (table to rows), never pairs.
        (PurgeReport, {"deleted": [["popagent_memories", 1]], "total": 1, "vacuumed": []}),
    ],
)
def test_a_body_that_does_not_fit_is_refused_whole(shape: Any, body: Any) -> None:
    with pytest.raises(ValueError):  # pydantic's ValidationError; the client's ClientError
        decode(shape, body)


def test_to_json_is_every_field_in_order_with_iso_timestamps() -> None:
    assert EPISODE.to_json() == {
        "id": 2,
        "resource_id": "r",
        "session_id": "s",
        "kind": "episode",
        "key": None,
        "content": "we talked",
        "content_sha256": "cd",
        "importance": 0.25,
        "created_at": NOW.isoformat(),
        "updated_at": LATER.isoformat(),
        "accessed_at": LATER.isoformat(),
        "access_count": 3,
        "origin": "agent",
        "turn_id": 4,
        "message_ids": [5, 6],
        "tool_call_id": "call-1",
        "expires_at": LATER.isoformat(),
        "version": 2,
        "based_on": [],
        "stale_since": None,
        "stale_source": None,
        "happened_start": None,
        "happened_end": None,
        "happened_precision": None,
        "happened_phrase": None,
    }
    writes = SessionWrites("s", (EPISODE,), (VERSION,)).to_json()
    assert writes == {
        "session_id": "s",
        "memories": [EPISODE.to_json()],
        "ended": [VERSION.to_json()],
    }


def test_mcp_shapes_are_projections_of_to_json() -> None:
    memory = memory_json(EPISODE)
    assert list(memory) == [
        "id", "kind", "key", "content", "importance", "session_id", "created_at", "updated_at",
        "origin", "expires_at", "version", "based_on", "stale_since", "stale_source",
        "happened_start", "happened_end", "happened_precision", "happened_phrase",
    ]  # fmt: skip
    assert memory == {name: EPISODE.to_json()[name] for name in memory}
    version = fact_version_json(VERSION)
    assert version == {name: VERSION.to_json()[name] for name in version}
    assert "resource_id" not in memory and "resource_id" not in version
    assert recall_result_json(RECALLED) == {**RECALLED.to_json(), "memory": memory}


def test_stored_observations_answer_without_their_resource() -> None:
    """The stored log and group are the API's values plus resource and session, which
    the response leaves out (the resource is the server's, never a client's to read)."""
    log = ObservationLog(1, 1, "observation", "o", 5, None, (), 100, NOW, LATER, "r", "s")
    group = ObservationGroup(1, 1, "observation", "active", 3, 4, "o", 5, 6, NOW, "r", "s")
    body = json.loads(TypeAdapter(Observations).dump_json(Observations("s", (log,), (group,))))
    assert "resource_id" not in json.dumps(body)
    read = decode(Observations, body)
    assert read.generations == (
        ObservationGeneration(1, 1, "observation", "o", 5, None, (), 100, NOW, LATER),
    )
    assert read.groups == (
        ObservationGroupInfo(1, 1, "observation", "active", 3, 4, "o", 5, 6, NOW),
    )
