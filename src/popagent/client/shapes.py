"""What the client returns, and how each is read from the server's JSON.

popagent's own values where the library has them (``Memory``, ``FactVersion``,
``RecallResult``, ``ScoreComponent``, ``Session``, ``Message``,
``MaintenanceReport``); small frozen dataclasses here for what only the HTTP
API has (pages, chat replies, settings, server info) or what the library keeps
in a layer the client does not import (fact history, session writes, revert
and purge reports, session items). The parsers trust the server's documented shapes
(``popagent.web.schemas``): a body that does not fit is a ``ClientError``,
raised by the caller, never a half-filled value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, cast

from ..models import (
    FactVersion,
    MaintenanceReport,
    Memory,
    Message,
    RecallResult,
    ScoreComponent,
    Session,
)

__all__ = [
    "ChatDelta",
    "ChatReply",
    "FactHistory",
    "Health",
    "ItemPage",
    "MaintenanceSchedule",
    "MessagePage",
    "ObservationGeneration",
    "ObservationGroupInfo",
    "Observations",
    "Page",
    "PurgeReport",
    "RecallPreview",
    "RevertReport",
    "ServerInfo",
    "SessionItem",
    "SessionWrites",
    "Setting",
    "Settings",
    "ToolCallSummary",
    "parse_chat_reply",
    "parse_fact_history",
    "parse_fact_version",
    "parse_health",
    "parse_info",
    "parse_item_ids",
    "parse_item_page",
    "parse_maintenance",
    "parse_memory",
    "parse_memory_page",
    "parse_message",
    "parse_message_page",
    "parse_observations",
    "parse_popped_item",
    "parse_purge",
    "parse_recall_preview",
    "parse_recall_result",
    "parse_revert",
    "parse_session",
    "parse_session_page",
    "parse_session_writes",
    "parse_settings",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list, newest first; ``next_offset`` is ``None`` on the last page."""

    items: tuple[T, ...]
    limit: int
    offset: int
    next_offset: int | None


@dataclass(frozen=True, slots=True)
class MessagePage:
    """Messages oldest first; pass ``next_after_id`` as ``after_id`` for the next page
    (``None`` on the last one)."""

    items: tuple[Message, ...]
    next_after_id: int | None


@dataclass(frozen=True, slots=True)
class RecallPreview:
    """What a turn would recall for ``query``, and exactly the block the model would see."""

    query: str
    results: tuple[RecallResult, ...]
    rendered: str


@dataclass(frozen=True, slots=True)
class ToolCallSummary:
    """A tool the model called during a chat turn, and how the call ended."""

    name: str
    outcome: str


@dataclass(frozen=True, slots=True)
class ChatReply:
    """One finished chat turn: the reply, what it recalled, the episode it stored."""

    session_id: str
    reply: str
    tool_calls: tuple[ToolCallSummary, ...]
    recalled: tuple[RecallResult, ...]
    memory_block: str
    episode_id: int | None
    model_calls: int
    overhead_ms: float


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """A piece of the reply as the model writes it (streamed chat)."""

    text: str


@dataclass(frozen=True, slots=True)
class Setting:
    """One memory setting: its value, default, the value as text, and its documentation."""

    name: str
    value: Any
    default: Any
    text: str
    kind: str
    unit: str
    accepts: str
    help: str


@dataclass(frozen=True, slots=True)
class Settings:
    """The resource's stored memory settings (``version`` counts changes)."""

    version: int
    updated_at: datetime | None
    settings: tuple[Setting, ...]

    def value(self, name: str) -> Any:
        """The value of setting ``name``; ``KeyError`` for a name the server did not list."""
        for setting in self.settings:
            if setting.name == name:
                return setting.value
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class MaintenanceSchedule:
    """The server's retention schedule (``/api/info``)."""

    interval_s: float
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_outcome: str | None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The server's resource, version, chat model (``None``: chat is off) and schedule."""

    version: str
    resource_id: str
    model: str | None
    maintenance: MaintenanceSchedule | None


@dataclass(frozen=True, slots=True)
class Health:
    """``/healthz``: ``status`` is ``"ok"`` or ``"unavailable"``; ``database`` says why."""

    status: Literal["ok", "unavailable"]
    database: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class ObservationGeneration:
    """One generation of a session's observation log (the last one is active)."""

    id: int
    generation: int
    origin: Literal["observation", "reflection"]
    observations: str
    observation_tokens: int
    last_observed_message_id: int | None
    covered_group_ids: tuple[int, ...]
    next_reflection_tokens: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ObservationGroupInfo:
    """One observation batch of the active generation, pointing at its source messages."""

    id: int
    log_id: int
    kind: Literal["observation", "reflection"]
    status: str
    first_message_id: int
    last_message_id: int
    observations: str
    observation_tokens: int
    message_tokens: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Observations:
    """A session's observational-memory state, read-only."""

    session_id: str
    generations: tuple[ObservationGeneration, ...]
    groups: tuple[ObservationGroupInfo, ...]


@dataclass(frozen=True, slots=True)
class FactHistory:
    """A fact's history: ``current`` is the fact as it stands (``None`` once deleted
    or expired; its ``version`` is the current number), ``versions`` every earlier
    value, newest first; pass a ``version`` to ``restore_fact``."""

    fact_id: int
    current: Memory | None
    versions: tuple[FactVersion, ...]


@dataclass(frozen=True, slots=True)
class SessionWrites:
    """What one session wrote that still stands, and the fact values it ended.

    ``memories``: current facts and episodes whose value the session wrote,
    newest first; ``ended``: fact versions the session replaced or deleted.
    """

    session_id: str
    memories: tuple[Memory, ...]
    ended: tuple[FactVersion, ...]


@dataclass(frozen=True, slots=True)
class RevertReport:
    """What reverting a session did, by memory id: facts restored to their value
    before the session, memories it created that are now deleted, and facts
    skipped because their old key or content is now another fact's."""

    restored: tuple[int, ...]
    deleted: tuple[int, ...]
    skipped: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge deleted, per table (every table that holds a resource's rows,
    in purge order, zeros included), and the tables vacuumed afterwards
    (``vacuum_error``: why the vacuum failed; the purge stands)."""

    deleted: tuple[tuple[str, int], ...]
    total: int
    vacuumed: tuple[str, ...]
    vacuum_error: str | None

    def count(self, table: str) -> int:
        """Rows deleted from ``table`` (0 for a table the server did not list)."""
        return dict(self.deleted).get(table, 0)


@dataclass(frozen=True, slots=True)
class SessionItem:
    """One framework session item (an OpenAI Agents SDK input item), exactly as
    added unless it held a credential; ``id`` is the message it is stored as."""

    id: int
    item: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ItemPage:
    """Session items oldest first; pass ``next_after_id`` as ``after_id`` for the
    next page (``None`` on the last one, and always for a ``last=N`` read)."""

    items: tuple[SessionItem, ...]
    next_after_id: int | None


# --- parsers: JSON (as the server documents it) to values -----------------------------------


def _when(value: Any) -> datetime:
    return datetime.fromisoformat(cast(str, value))


def _maybe_when(value: Any) -> datetime | None:
    return None if value is None else _when(value)


def parse_memory(data: Any) -> Memory:
    return Memory(
        id=int(data["id"]),
        resource_id=data["resource_id"],
        session_id=data["session_id"],
        kind=data["kind"],
        key=data["key"],
        content=data["content"],
        content_sha256=data["content_sha256"],
        importance=float(data["importance"]),
        created_at=_when(data["created_at"]),
        updated_at=_when(data["updated_at"]),
        accessed_at=_maybe_when(data["accessed_at"]),
        access_count=int(data["access_count"]),
        # Provenance and lifecycle: absent from servers that predate fact versions.
        origin=data.get("origin") or "library",
        turn_id=data.get("turn_id"),
        message_ids=tuple(int(i) for i in data.get("message_ids") or ()),
        tool_call_id=data.get("tool_call_id"),
        expires_at=_maybe_when(data.get("expires_at")),
        version=int(data.get("version") or 1),
    )


def parse_fact_version(data: Any) -> FactVersion:
    ended = data["ended"]
    if ended not in ("updated", "deleted", "expired"):
        raise ValueError(f"unknown version end {ended!r}")
    return FactVersion(
        resource_id=data["resource_id"],
        fact_id=int(data["fact_id"]),
        version=int(data["version"]),
        key=data["key"],
        content=data["content"],
        content_sha256=data["content_sha256"],
        importance=float(data["importance"]),
        expires_at=_maybe_when(data["expires_at"]),
        session_id=data["session_id"],
        origin=data["origin"],
        turn_id=data["turn_id"],
        message_ids=tuple(int(i) for i in data["message_ids"]),
        tool_call_id=data["tool_call_id"],
        valid_from=_when(data["valid_from"]),
        valid_to=_when(data["valid_to"]),
        ended=ended,
        ended_origin=data["ended_origin"],
        ended_session_id=data["ended_session_id"],
    )


def parse_fact_history(data: Any) -> FactHistory:
    current = data["current"]
    return FactHistory(
        fact_id=int(data["fact_id"]),
        current=None if current is None else parse_memory(current),
        versions=tuple(parse_fact_version(v) for v in data["versions"]),
    )


def parse_session_writes(data: Any) -> SessionWrites:
    return SessionWrites(
        session_id=data["session_id"],
        memories=tuple(parse_memory(m) for m in data["memories"]),
        ended=tuple(parse_fact_version(v) for v in data["ended"]),
    )


def _ids(values: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in values)


def parse_revert(data: Any) -> RevertReport:
    return RevertReport(
        restored=_ids(data["restored"]),
        deleted=_ids(data["deleted"]),
        skipped=_ids(data["skipped"]),
    )


def parse_purge(data: Any) -> PurgeReport:
    return PurgeReport(
        deleted=tuple((str(table), int(n)) for table, n in data["deleted"].items()),
        total=int(data["total"]),
        vacuumed=tuple(str(t) for t in data["vacuumed"]),
        vacuum_error=data["vacuum_error"],
    )


def _item(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"a session item is a JSON object, not {type(value).__name__}")
    return value


def parse_item_page(data: Any) -> ItemPage:
    return ItemPage(
        items=tuple(SessionItem(id=int(i["id"]), item=_item(i["item"])) for i in data["items"]),
        next_after_id=data["next_after_id"],
    )


def parse_item_ids(data: Any) -> tuple[int, ...]:
    return _ids(data["ids"])


def parse_popped_item(data: Any) -> dict[str, Any] | None:
    item = data["item"]
    return None if item is None else _item(item)


def parse_recall_result(data: Any) -> RecallResult:
    components = tuple(
        ScoreComponent(name=name, value=float(c["value"]), weight=float(c["weight"]))
        for name, c in data["components"].items()
    )
    return RecallResult(
        memory=parse_memory(data["memory"]), score=float(data["score"]), components=components
    )


def _page(parse: Callable[[Any], T]) -> Callable[[Any], Page[T]]:
    def parse_page(data: Any) -> Page[T]:
        return Page(
            items=tuple(parse(item) for item in data["items"]),
            limit=int(data["limit"]),
            offset=int(data["offset"]),
            next_offset=data["next_offset"],
        )

    return parse_page


parse_memory_page = _page(parse_memory)


def parse_recall_preview(data: Any) -> RecallPreview:
    return RecallPreview(
        query=data["query"],
        results=tuple(parse_recall_result(r) for r in data["results"]),
        rendered=data["rendered"],
    )


def parse_session(data: Any) -> Session:
    return Session(
        resource_id=data["resource_id"],
        session_id=data["session_id"],
        title=data["title"],
        metadata=dict(data["metadata"]),
        created_at=_when(data["created_at"]),
        updated_at=_when(data["updated_at"]),
    )


parse_session_page = _page(parse_session)


def parse_message(data: Any) -> Message:
    return Message(
        id=int(data["id"]),
        resource_id=data["resource_id"],
        session_id=data["session_id"],
        role=data["role"],
        content=data["content"],
        parts=tuple(dict(p) for p in data["parts"]),
        created_at=_when(data["created_at"]),
        turn_id=data.get("turn_id"),
        turn_status=data.get("turn_status"),
    )


def parse_message_page(data: Any) -> MessagePage:
    return MessagePage(
        items=tuple(parse_message(m) for m in data["items"]),
        next_after_id=data["next_after_id"],
    )


def parse_observations(data: Any) -> Observations:
    return Observations(
        session_id=data["session_id"],
        generations=tuple(
            ObservationGeneration(
                id=int(g["id"]),
                generation=int(g["generation"]),
                origin=g["origin"],
                observations=g["observations"],
                observation_tokens=int(g["observation_tokens"]),
                last_observed_message_id=g["last_observed_message_id"],
                covered_group_ids=tuple(int(i) for i in g["covered_group_ids"]),
                next_reflection_tokens=int(g["next_reflection_tokens"]),
                created_at=_when(g["created_at"]),
                updated_at=_when(g["updated_at"]),
            )
            for g in data["generations"]
        ),
        groups=tuple(
            ObservationGroupInfo(
                id=int(g["id"]),
                log_id=int(g["log_id"]),
                kind=g["kind"],
                status=g["status"],
                first_message_id=int(g["first_message_id"]),
                last_message_id=int(g["last_message_id"]),
                observations=g["observations"],
                observation_tokens=int(g["observation_tokens"]),
                message_tokens=int(g["message_tokens"]),
                created_at=_when(g["created_at"]),
            )
            for g in data["groups"]
        ),
    )


def parse_settings(data: Any) -> Settings:
    return Settings(
        version=int(data["version"]),
        updated_at=_maybe_when(data["updated_at"]),
        settings=tuple(
            Setting(
                name=s["name"],
                value=s["value"],
                default=s["default"],
                text=s["text"],
                kind=s["kind"],
                unit=s["unit"],
                accepts=s["accepts"],
                help=s["help"],
            )
            for s in data["settings"]
        ),
    )


def parse_chat_reply(data: Any) -> ChatReply:
    return ChatReply(
        session_id=data["session_id"],
        reply=data["reply"],
        tool_calls=tuple(
            ToolCallSummary(name=c["name"], outcome=c["outcome"]) for c in data["tool_calls"]
        ),
        recalled=tuple(parse_recall_result(r) for r in data["recalled"]),
        memory_block=data["memory_block"],
        episode_id=data["episode_id"],
        model_calls=int(data["model_calls"]),
        overhead_ms=float(data["overhead_ms"]),
    )


def parse_info(data: Any) -> ServerInfo:
    schedule = data.get("maintenance")
    return ServerInfo(
        version=data["version"],
        resource_id=data["resource_id"],
        model=data["model"],
        maintenance=None
        if schedule is None
        else MaintenanceSchedule(
            interval_s=float(schedule["interval_s"]),
            next_run_at=_maybe_when(schedule["next_run_at"]),
            last_run_at=_maybe_when(schedule["last_run_at"]),
            last_outcome=schedule["last_outcome"],
        ),
    )


def parse_health(data: Any) -> Health:
    status = data["status"]
    if status not in ("ok", "unavailable"):
        raise ValueError(f"unknown health status {status!r}")
    return Health(status=status, database=str(data["database"]))


def parse_maintenance(data: Any) -> MaintenanceReport:
    return MaintenanceReport(
        expired_episodes=int(data["expired_episodes"]),
        capped_episodes=int(data["capped_episodes"]),
        # Absent from servers that predate fact expiry.
        expired_facts=int(data.get("expired_facts") or 0),
    )
