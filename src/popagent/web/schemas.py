"""Request and response bodies of the HTTP API, strict and documented in the OpenAPI.

Request bodies forbid unknown fields (so a ``resource_id`` field is refused,
never ignored), refuse wrong types instead of coercing them (``"0.5"`` is not
an importance), and refuse NaN and infinities. The library validates again
(normalization, credential refusal), so both doors have the same rules; these
models state them in the OpenAPI document for clients and fuzzers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ..memory.validation import FACT_CONTENT_CAP, KEY_CAP, QUERY_CAP

__all__ = [
    "CHAT_MESSAGE_CAP",
    "ChatReply",
    "ChatRequest",
    "CleanupReport",
    "CleanupRequest",
    "ComponentOut",
    "ErrorOut",
    "FactCreate",
    "FactHistoryOut",
    "FactPut",
    "FactRestore",
    "FactUpdate",
    "FactVersionOut",
    "Health",
    "ItemOut",
    "ItemPage",
    "ItemPopped",
    "ItemsAdded",
    "ItemsAppend",
    "MaintenanceOut",
    "MemoryOut",
    "MemoryPage",
    "MessageOut",
    "MessagePage",
    "ObservationGroupOut",
    "ObservationLogOut",
    "ObservationsOut",
    "PurgeOut",
    "PurgeRequest",
    "RecallOut",
    "RecallRequest",
    "RecallResultOut",
    "RevertReportOut",
    "RevertRequest",
    "SessionOut",
    "SessionPage",
    "SessionRename",
    "SessionWritesOut",
    "SettingOut",
    "SettingsOut",
    "ToolCallOut",
]

#: A chat message sent over HTTP; long documents belong in files, not one message.
CHAT_MESSAGE_CAP = 32_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


Content = Annotated[str, Field(min_length=1, max_length=FACT_CONTENT_CAP)]
Key = Annotated[str, Field(min_length=1, max_length=KEY_CAP)]
Importance = Annotated[float, Field(ge=0.0, le=1.0)]


def _iso_text(value: object) -> object:
    # Lax datetime parsing also takes numbers (Unix seconds); an expiry is text only.
    if value is not None and not isinstance(value, str):
        raise PydanticCustomError("datetime_type", "must be ISO 8601 text with a time zone")
    return value


#: ISO 8601 with a time zone, in the future (JSON has no datetime type, so this
#: field parses text; the library refuses a time without a zone or in the past).
ExpiresAt = Annotated[
    datetime | None,
    Field(strict=False, description="ISO 8601 with a time zone, in the future."),
    BeforeValidator(_iso_text),
]


class FactCreate(_Strict):
    """A new fact. ``content`` is required; a taken ``key`` is a 409 naming the fact that
    holds it (``PUT /api/facts/by-key/{key}`` replaces its value, PATCH changes it)."""

    content: Content
    key: Key | None = None
    importance: Importance = 0.5
    #: When the fact ends: after it, recall never returns it and maintenance removes it.
    expires_at: ExpiresAt = None


class FactPut(_Strict):
    """The value of the fact of the key in the path: created, or replaced (the replaced
    value is kept as a version). ``expires_at`` left out or ``null``: it never expires."""

    content: Content
    importance: Importance = 0.5
    #: When the fact ends: after it, recall never returns it and maintenance removes it.
    expires_at: ExpiresAt = None


class FactUpdate(_Strict):
    """Fields to change; at least one. ``"key": null`` removes the fact's key and
    ``"expires_at": null`` its expiry. The replaced value is kept as a version."""

    content: Content | None = None
    key: Key | None = None
    importance: Importance | None = None
    expires_at: ExpiresAt = None


class FactRestore(_Strict):
    """The version (from ``GET /api/facts/{id}/versions``) to make current again."""

    version: Annotated[int, Field(ge=1, le=2**31 - 1)]


class RecallRequest(_Strict):
    query: Annotated[str, Field(min_length=1, max_length=QUERY_CAP)]
    limit: Annotated[int, Field(ge=1, le=100)] = 8


def _json_true(value: object) -> object:
    # Literal[True] alone takes 1 and 1.0 (they equal True in Python); a deletion
    # is confirmed by the JSON boolean only.
    if value is not True:
        raise PydanticCustomError("literal_error", "must be true (the JSON boolean)")
    return value


#: The JSON boolean ``true`` and nothing that merely equals it.
JsonTrue = Annotated[Literal[True], BeforeValidator(_json_true)]


class CleanupRequest(_Strict):
    """Explicit cleanup. ``confirm`` must be true: this deletes long-term memory for good."""

    confirm: JsonTrue
    kind: Literal["fact", "episode"] | None = None
    #: ISO 8601 with a time zone (JSON has no datetime type, so this one field parses text).
    older_than: Annotated[datetime | None, Field(strict=False)] = None


class PurgeRequest(_Strict):
    """Purge the server's resource: everything of it, not only long-term memory.
    ``confirm`` must be true (the JSON boolean)."""

    confirm: JsonTrue


class RevertRequest(_Strict):
    """Revert a session's long-term writes. ``confirm`` must be true."""

    confirm: JsonTrue


class SessionRename(_Strict):
    title: Annotated[str, Field(max_length=200)] | None


class ChatRequest(_Strict):
    message: Annotated[str, Field(min_length=1, max_length=CHAT_MESSAGE_CAP)]


# --- responses ------------------------------------------------------------------------------


class ErrorOut(BaseModel):
    """Every 4xx/5xx body: a message for people, the field at fault when there is one."""

    error: str
    message: str
    field: str | None = None


class MemoryOut(BaseModel):
    id: int
    resource_id: str
    session_id: str | None
    kind: Literal["fact", "episode"]
    key: str | None
    content: str
    content_sha256: str
    importance: float
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime | None
    access_count: int
    #: Provenance: where the write came from (``api``, ``gui``, ``agent``, ...), and
    #: when it came from a chat turn, the turn, its source messages and tool call.
    origin: str
    turn_id: int | None
    message_ids: list[int]
    tool_call_id: str | None
    #: Facts only: when the fact ends (``null``: never).
    expires_at: datetime | None
    #: The current value's version number: 1 until the fact changes.
    version: int


class FactVersionOut(BaseModel):
    """A value a fact had from ``valid_from`` until ``valid_to``, who wrote it, and
    how it ended (``updated``, ``deleted``, ``expired``) and by whom."""

    resource_id: str
    fact_id: int
    version: int
    key: str | None
    content: str
    content_sha256: str
    importance: float
    expires_at: datetime | None
    session_id: str | None
    origin: str
    turn_id: int | None
    message_ids: list[int]
    tool_call_id: str | None
    valid_from: datetime
    valid_to: datetime
    ended: Literal["updated", "deleted", "expired"]
    ended_origin: str
    ended_session_id: str | None


class FactHistoryOut(BaseModel):
    fact_id: int
    #: The current value (its ``version`` is the current version number);
    #: ``null`` when the fact is deleted or expired (a version can bring it back).
    current: MemoryOut | None
    #: Every earlier value, newest first.
    versions: list[FactVersionOut]


class SessionWritesOut(BaseModel):
    session_id: str
    #: Current facts and episodes whose value the session wrote, newest first.
    memories: list[MemoryOut]
    #: Fact values the session replaced or deleted.
    ended: list[FactVersionOut]


class RevertReportOut(BaseModel):
    """What a revert did, by memory id: facts restored to their value before the
    session, memories the session created and that are now deleted, and facts
    skipped because their old key or content is now taken by another fact."""

    restored: list[int]
    deleted: list[int]
    skipped: list[int]


class MemoryPage(BaseModel):
    items: list[MemoryOut]
    limit: int
    offset: int
    #: The offset of the next page, ``null`` on the last one.
    next_offset: int | None


class ComponentOut(BaseModel):
    value: float
    weight: float
    contribution: float


class RecallResultOut(BaseModel):
    memory: MemoryOut
    score: float
    components: dict[str, ComponentOut]


class RecallOut(BaseModel):
    query: str
    results: list[RecallResultOut]
    #: Exactly the block a turn would put in the model's context.
    rendered: str
    #: The mode that ran: ``fused`` (words and meaning, the default with a model),
    #: ``lexical`` (no model, or it is unavailable) or ``vector``.
    mode: Literal["lexical", "vector", "fused"]
    #: The mode asked for (``null``: the default); the preview always asks for the default.
    requested: Literal["lexical", "vector", "fused"] | None
    #: The embedding model, ``null`` when semantic recall is off.
    model: str | None
    #: ``loaded`` (works), ``not loaded`` (not used yet), ``unavailable`` (failed).
    model_state: Literal["not loaded", "loaded", "unavailable"] | None
    #: Why the model is unavailable.
    model_error: str | None
    #: The resource's memories whose vectors are still being written (up to 10,000):
    #: found by their words only until then.
    pending_vectors: int
    #: Which mode ran and why, in one sentence.
    reason: str


class CleanupReport(BaseModel):
    deleted: int


class PurgeOut(BaseModel):
    """Rows deleted per table (every table that holds a resource's rows), and the
    tables vacuumed afterwards (``vacuum_error``: why that failed; the purge stands)."""

    deleted: dict[str, int]
    total: int
    vacuumed: list[str]
    vacuum_error: str | None


class MaintenanceOut(BaseModel):
    expired_episodes: int
    capped_episodes: int
    #: Facts past their ``expires_at`` (each keeps its last value as a version).
    expired_facts: int


class SessionOut(BaseModel):
    resource_id: str
    session_id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class SessionPage(BaseModel):
    items: list[SessionOut]
    limit: int
    offset: int
    next_offset: int | None


class MessageOut(BaseModel):
    id: int
    resource_id: str
    session_id: str
    role: str
    content: str
    parts: list[dict[str, Any]]
    created_at: datetime
    #: The chat turn that wrote the message; ``null`` for one written outside a turn.
    turn_id: int | None = None
    #: That turn's status: ``interrupted`` or ``failed`` means the turn ended
    #: without its reply (and stored no episode); a turn still ``running`` far
    #: longer than any turn can take reads ``interrupted``.
    turn_status: Literal["running", "completed", "failed", "interrupted"] | None = None


class MessagePage(BaseModel):
    items: list[MessageOut]
    #: Pass as ``after_id`` for the next page; ``null`` on the last one.
    next_after_id: int | None


class ItemsAppend(_Strict):
    """Framework session items (OpenAI Agents SDK input items) to append, in order."""

    items: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1000)]


class ItemsAdded(BaseModel):
    #: The message id each item was stored as, in order.
    ids: list[int]


class ItemOut(BaseModel):
    id: int
    item: dict[str, Any]


class ItemPage(BaseModel):
    items: list[ItemOut]
    #: Pass as ``after_id`` for the next page; ``null`` on the last one (and with ``last``).
    next_after_id: int | None


class ItemPopped(BaseModel):
    #: The item removed; ``null`` when the session had none.
    item: dict[str, Any] | None


class ObservationLogOut(BaseModel):
    id: int
    generation: int
    origin: Literal["observation", "reflection"]
    observations: str
    observation_tokens: int
    last_observed_message_id: int | None
    covered_group_ids: list[int]
    next_reflection_tokens: int
    created_at: datetime
    updated_at: datetime


class ObservationGroupOut(BaseModel):
    id: int
    log_id: int
    kind: Literal["observation", "reflection"]
    status: str
    #: The exact messages this group observed: ids in ``popagent_messages``.
    first_message_id: int
    last_message_id: int
    observations: str
    observation_tokens: int
    message_tokens: int
    created_at: datetime


class ObservationsOut(BaseModel):
    session_id: str
    #: Every generation of the session's log, oldest first; the last is active.
    generations: list[ObservationLogOut]
    #: The groups of the active generation, with pointers to their source messages.
    groups: list[ObservationGroupOut]


class SettingOut(BaseModel):
    name: str
    value: Any
    default: Any
    #: The value as text, as the settings form and ``popagent settings set`` take it.
    text: str
    kind: str
    unit: str
    accepts: str
    help: str


class SettingsOut(BaseModel):
    version: int
    updated_at: datetime | None
    settings: list[SettingOut]


class ToolCallOut(BaseModel):
    name: str
    outcome: str
    #: For ``remember``: the tool's answer, what it stored (or why it refused); null for
    #: other tools, whose answers can be long or private.
    result: str | None = None


class ChatReply(BaseModel):
    session_id: str
    reply: str
    tool_calls: list[ToolCallOut]
    recalled: list[RecallResultOut]
    memory_block: str
    episode_id: int | None
    model_calls: int
    overhead_ms: float


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    database: str
