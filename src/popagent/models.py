"""Frozen domain values shared by every layer.

Field names follow the one vocabulary of the project: the same words are the
SQL columns, the dataclass fields, the JSON keys and the CLI flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "ORIGINS",
    "AuditHookName",
    "AuditRecord",
    "Candidate",
    "ChatReply",
    "CorpusStats",
    "EpisodeTurn",
    "FactHistory",
    "FactOptions",
    "FactVersion",
    "Health",
    "ItemPage",
    "ItemPopped",
    "ItemsAdded",
    "Kind",
    "MaintenanceReport",
    "Memory",
    "MemoryFilter",
    "Message",
    "MessagePage",
    "Neighbour",
    "ObservationGeneration",
    "ObservationGroup",
    "ObservationGroupInfo",
    "ObservationLog",
    "Observations",
    "Outcome",
    "Page",
    "Provenance",
    "PurgeReport",
    "RecallPreview",
    "RecallResult",
    "RememberResult",
    "RevertReport",
    "Role",
    "ScoreComponent",
    "Session",
    "SessionItem",
    "SessionWrites",
    "Setting",
    "Settings",
    "ToolCallSummary",
    "TurnStatus",
    "Vectors",
    "turn_marker",
    "unfinished_turn_ends",
]

T = TypeVar("T")
#: pydantic's reading of a value whose fields have defaults (``__pydantic_config__``):
#: the JSON always holds every field, so the JSON Schema of a response requires each.
_ALWAYS_SENT: Any = {"json_schema_serialization_defaults_required": True}
Kind = Literal["fact", "episode"]
#: Embedding vectors: one unit-length float32 row per text (``popagent.embed``
#: makes them, ``popagent.store.vectors`` keeps them).
Vectors = NDArray[np.float32]
Role = Literal["system", "user", "assistant", "tool"]
RememberAction = Literal["created", "updated", "unchanged"]
#: Where a memory came from. ``agent``: a tool call in a chat turn; ``turn``: an
#: episode retained at a turn's end; ``api``/``gui``/``cli``/``mcp``: those
#: surfaces; ``library``: a direct call; ``import``: ``popagent import``;
#: ``maintenance``: the scheduler (it only ends facts); the rest: the
#: framework adapters of ``popagent.adapters``.
ORIGINS = (
    "library",
    "agent",
    "turn",
    "api",
    "gui",
    "cli",
    "mcp",
    "import",
    "maintenance",
    "langgraph",
    "langchain",
    "openai-agents",
    "pydantic-ai",
)
#: How a fact version stopped being current.
VersionEnd = Literal["updated", "deleted", "expired"]
#: How a model or tool call ended: ``refused`` is a tool declining its input.
Outcome = Literal["ok", "error", "refused"]
#: Where a chat turn stands: ``running`` until it ends; ``completed`` with its final
#: message and episode; ``failed`` when it raised (the model failed, the tool
#: limit); ``interrupted`` when it was cancelled or its process died.
TurnStatus = Literal["running", "completed", "failed", "interrupted"]
AuditHookName = Literal[
    "before_model_call", "after_model_call", "before_tool_call", "after_tool_call"
]


class _JsonFields:
    """Gives a dataclass ``to_json``: every field by name, in declaration order,
    datetimes as ISO 8601 (``isoformat``), tuples as lists, nested values by their
    own ``to_json``; dicts as they are. The library's JSON (the CLI's ``--json``,
    MCP's projections); the HTTP API's comes from the same fields through pydantic."""

    __slots__ = ()

    def to_json(self) -> dict[str, object]:
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))  # type: ignore[arg-type]
        return {name: _json(getattr(self, name)) for name in names}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _json(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, _JsonFields | RecallResult):
        return value.to_json()
    return value


@dataclass(frozen=True, slots=True)
class Memory(_JsonFields):
    """One row of ``popagent_memories``.

    ``content_sha256`` is the hex SHA-256 of ``content`` (UTF-8); ``key`` is
    only ever set on facts. ``accessed_at`` is ``None`` until a recall returns
    the memory.
    """

    __pydantic_config__ = _ALWAYS_SENT

    id: int
    resource_id: str
    session_id: str | None
    kind: Kind
    key: str | None
    content: str
    content_sha256: str
    importance: float
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime | None
    access_count: int
    #: Provenance (``Provenance``'s fields) and lifecycle: the current value's
    #: version number (1 until the fact changes) and when it expires.
    origin: str = "library"
    turn_id: int | None = None
    message_ids: tuple[int, ...] = ()
    tool_call_id: str | None = None
    expires_at: datetime | None = None
    version: int = 1
    #: What this memory was derived from (``FactOptions.based_on``): fact keys (text)
    #: and memory ids (numbers). Empty: based on nothing.
    based_on: tuple[str | int, ...] = ()
    #: Set when a source changed, expired or went (migration 0022): when it did, and
    #: which (its key, or ``#`` and its id). ``confirm_memory`` clears both.
    stale_since: datetime | None = None
    stale_source: str | None = None
    #: The event clock (docs/time.md): when what the memory tells happened, is
    #: planned or holds, as ``[happened_start, happened_end)``, how precisely
    #: (``"day"``, ``"week"``, ``"month"``, ``"season"`` or ``"year"``) and the words
    #: it was read from (``None`` for a date its writer gave). All ``None`` when
    #: unknown; ``created_at``/``updated_at`` are the record clock.
    happened_start: datetime | None = None
    happened_end: datetime | None = None
    happened_precision: str | None = None
    happened_phrase: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which memories of a resource a list returns, and which page of them.

    One value for every list of facts and episodes (library, API, clients, GUI,
    CLI, MCP); a field left at ``None`` does not filter. Built as given: the
    service checks and normalizes it (``popagent.memory.validation.check_filter``)
    and names the field at fault. Lists are newest first (``created_at``, then id).
    """

    #: ``"fact"`` or ``"episode"``; ``None``: both kinds.
    kind: Kind | None = None
    #: A fact's exact key (trimmed and lower-cased as keys are stored); episodes have none.
    key: str | None = None
    #: Only memories written in this session.
    session_id: str | None = None
    #: A case-insensitive substring of the content (trimmed; 1 to 4,000 characters).
    text: str | None = None
    #: Only memories created at or after this time (timezone-aware).
    created_after: datetime | None = None
    #: Only memories created before this time (timezone-aware).
    created_before: datetime | None = None
    #: The most memories returned: 1 to ``LIST_LIMIT_CAP`` (1,000).
    limit: int = 50
    #: How many of the matching memories to skip first (>= 0).
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a write came from: its origin (one of ``ORIGINS``), and when it came
    from a chat turn, that turn, the source messages and the tool call.

    The session is the write's own ``session_id`` argument. Provenance holds
    identifiers only, never content.
    """

    origin: str = "library"
    turn_id: int | None = None
    message_ids: tuple[int, ...] = ()
    tool_call_id: str | None = None


class FactOptions(TypedDict, total=False):
    """The optional fields of a fact write, by name: what ``MemoryBackend.remember``
    takes after the content, as ``**options: Unpack[FactOptions]``, and passes on.

    Left out, each takes the library's default (``LongTermMemory.remember``): no
    key, importance 0.5, no session, no expiry. Stating them once here means a new
    settable field reaches every backend without re-typing their signatures; mypy
    checks each forwarding call against the library's keyword arguments.
    """

    key: str | None
    importance: float
    session_id: str | None
    expires_at: datetime | None
    #: What the fact was derived from: fact keys (text) and memory ids (numbers) of
    #: the same resource, at most 16. When one of them changes, expires or is
    #: deleted, the fact is marked stale (``Memory.stale_since``), never deleted.
    based_on: Sequence[str | int] | None
    #: When what the fact tells happened or since when it holds (the event clock):
    #: a date (``2023-07-28``), a month (``2023-07``), a year (``2021``), a
    #: timestamp, or a phrase (``spring 2021``, ``last Friday``) read against the
    #: time of the write. Left out, it is read from the content, if it names one.
    happened_at: str | None


#: ``FactOptions.happened_at`` as every surface that writes a fact states it: the most
#: characters it takes, and what it means (the API's schema, the CLI's ``--happened-at``,
#: the GUI's fact form; ``memory.validation.check_happened_at`` enforces both).
HAPPENED_AT_CAP = 200
HAPPENED_AT_HELP = (
    "When it happened or since when it holds: 2023-07-28, 2023-07, 2021, an ISO 8601 "
    "time, or a phrase such as 'spring 2021' or 'last Friday' (read against now)."
)


#: The moments a recall may answer from, by name, with what each means: every surface
#: (the API's body, the client, the CLI's options, MCP's arguments, the GUI's preview)
#: takes these names and passes them on to ``LongTermMemory.recall`` by name.
RECALL_MOMENTS: dict[str, str] = {
    "as_of": (
        "Answer from the world as it was then: each fact by the value that held then, "
        "the episodes written by then. A date (2021-06-01, the end of that day, UTC) "
        "or an ISO 8601 time with a time zone. Where the event clock is known, a value "
        "holds from when it began and an episode counts from when it happened."
    ),
    "known_at": (
        "Answer from what the store knew then (when each value was written and "
        "replaced). A date or an ISO 8601 time with a time zone."
    ),
}


class RecallOptions(TypedDict, total=False):
    """The optional moments of a recall (``RECALL_MOMENTS`` says what each means):
    a timezone-aware ``datetime``, a ``date``, or ISO 8601 text of either."""

    as_of: datetime | date | str | None
    known_at: datetime | date | str | None


@dataclass(frozen=True, slots=True)
class FactVersion(_JsonFields):
    """A value a fact had from ``valid_from`` until ``valid_to``, and who wrote it.

    ``ended`` says how it stopped being current (updated, deleted, expired)
    and ``ended_origin``/``ended_session_id`` who ended it.
    """

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
    message_ids: tuple[int, ...]
    tool_call_id: str | None
    valid_from: datetime
    valid_to: datetime
    ended: VersionEnd
    ended_origin: str
    ended_session_id: str | None
    #: The value's event clock, as ``Memory`` has it (migration 0025): when what it
    #: told happened or since when it held. All ``None`` when unknown, and for
    #: versions written before that migration.
    happened_start: datetime | None = None
    happened_end: datetime | None = None
    happened_precision: str | None = None
    happened_phrase: str | None = None


@dataclass(frozen=True, slots=True)
class FactHistory:
    """A fact's history: ``current`` is the fact as it stands (``None`` once deleted
    or expired; its ``version`` is the current number), ``versions`` every earlier
    value, newest first (pass one's ``version`` to restore it)."""

    fact_id: int
    current: Memory | None
    versions: tuple[FactVersion, ...]


@dataclass(frozen=True, slots=True)
class SessionWrites(_JsonFields):
    """What one session wrote that still stands, and the fact values it ended.

    ``memories``: current facts and episodes whose value the session wrote,
    newest first; ``ended``: fact versions the session replaced or deleted.
    """

    session_id: str
    memories: tuple[Memory, ...]
    ended: tuple[FactVersion, ...]


@dataclass(frozen=True, slots=True)
class RevertReport(_JsonFields):
    """What reverting a session did, by memory id: facts restored to their value
    before the session, memories it created that are now deleted, and facts
    skipped because their old key or content is now another fact's."""

    __pydantic_config__ = _ALWAYS_SENT

    restored: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ScoreComponent:
    """One signal of a recall score: its value in [0, 1], its weight, and their product."""

    name: str
    value: float
    weight: float

    @property
    def contribution(self) -> float:
        return self.value * self.weight


@dataclass(frozen=True, slots=True)
class RecallResult:
    """A recalled memory with the explanation of its rank.

    ``score`` is exactly the sum of the components' contributions. ``until`` is
    set on a fact's past value (recall as of a date, or a question about a past
    period): ``memory`` is the value it had from ``memory.updated_at`` until then.
    """

    memory: Memory
    score: float
    components: tuple[ScoreComponent, ...]
    #: What admitted the memory: ``words`` (a word of the question), ``look-alike
    #: words``, ``meaning`` (a similarity well above the resource's background),
    #: ``whole store``, ``next turn`` (the reply after a result); "" where the
    #: ranking does not say (lexical recall: always words).
    evidence: str = ""
    until: datetime | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "memory": self.memory.to_json(),
            "score": self.score,
            "components": {
                c.name: {"value": c.value, "weight": c.weight, "contribution": c.contribution}
                for c in self.components
            },
            "evidence": self.evidence,
            "until": self.until.isoformat() if self.until is not None else None,
        }

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """The JSON form (``to_json``'s, the API's) for pydantic, both ways and in the
        JSON Schema: ``components`` maps each name, in rank-explanation order, to its
        value, weight and contribution.

        pydantic is imported here, not at module import, so a reader of these
        values (the HTTP client) pays for it only when it decodes JSON.
        """
        from pydantic_core import core_schema as cs

        def from_json(data: Any) -> Any:
            components = data.get("components") if isinstance(data, dict) else None
            if isinstance(components, dict):
                listed = [{**c, "name": n} for n, c in components.items()]
                return {**data, "components": listed}
            return data

        def to_json(value: RecallResult) -> Any:
            # ``wire`` (the return schema) then serializes the memory.
            components = RecallResult.to_json(value)["components"]
            return {
                "memory": value.memory,
                "score": value.score,
                "components": components,
                "evidence": value.evidence,
                "until": value.until,
            }

        number = cs.typed_dict_field(cs.float_schema())
        component = cs.typed_dict_schema(
            {"value": number, "weight": number, "contribution": number}
        )
        wire = cs.typed_dict_schema(
            {
                "memory": cs.typed_dict_field(handler.generate_schema(Memory)),
                "score": cs.typed_dict_field(cs.float_schema()),
                "components": cs.typed_dict_field(cs.dict_schema(cs.str_schema(), component)),
                "evidence": cs.typed_dict_field(cs.str_schema(), required=False),
                "until": cs.typed_dict_field(
                    cs.nullable_schema(cs.datetime_schema()), required=False
                ),
            },
            ref="RecallResult",
        )
        return cs.no_info_before_validator_function(
            from_json,
            handler(source),
            json_schema_input_schema=wire,
            serialization=cs.plain_serializer_function_ser_schema(to_json, return_schema=wire),
        )


@dataclass(frozen=True, slots=True)
class RememberResult:
    """What ``remember`` did: created a fact, updated the fact of that key, or found it unchanged."""

    memory: Memory
    action: RememberAction


@dataclass(frozen=True, slots=True)
class EpisodeTurn:
    """One completed turn to retain in bulk (see ``LongTermMemory.retain_episodes``)."""

    session_id: str
    user_text: str
    assistant_text: str
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """Rows deleted by one maintenance run."""

    __pydantic_config__ = _ALWAYS_SENT

    expired_episodes: int = 0
    capped_episodes: int = 0
    #: Facts past their ``expires_at`` (their last value is kept as a version).
    expired_facts: int = 0

    @property
    def total(self) -> int:
        return self.expired_episodes + self.capped_episodes + self.expired_facts


@dataclass(frozen=True, slots=True)
class PurgeReport(_JsonFields):
    """What one purge of a resource deleted, and the tables it vacuumed afterwards
    (``LongTermMemory.purge``; ``POST /api/purge`` answers it, the client returns it).

    ``deleted`` maps every table that holds a resource's rows to the rows deleted
    from it, in purge order (``popagent.store.purge.PURGE_TABLES``), zeros
    included; ``total`` is their sum. A mapping rather than pairs, because its JSON
    is an object (table to rows).
    """

    __pydantic_config__ = _ALWAYS_SENT

    deleted: dict[str, int]
    total: int
    #: The tables vacuumed after the commit: those with rows deleted, unless the
    #: vacuum was skipped or failed (``vacuum_error``).
    vacuumed: tuple[str, ...] = ()
    #: Why the vacuum failed (the purge stands); ``None`` when it ran or was skipped.
    vacuum_error: str | None = None

    def count(self, table: str) -> int:
        """Rows deleted from ``table`` (0 for a table the report does not list)."""
        return self.deleted.get(table, 0)


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """What ranking needs to know of the resource for one query.

    ``document_frequency`` maps each distinct query lexeme (English stems, stop
    words removed) to how many of the resource's memories hold it (0: none).
    ``neighbours`` maps a query lexeme to the resource's lexemes that look like
    it (trigram similarity at least 0.3, best first, at most a few), each with
    its similarity and document frequency: the misspelled or partial words'
    likely meanings.
    """

    documents: int
    average_length: float
    document_frequency: dict[str, int]
    neighbours: dict[str, tuple[Neighbour, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A lexeme of the resource that looks like a query lexeme."""

    lexeme: str
    similarity: float
    documents: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory the indexes proposed, with its term frequencies and length.

    ``term_frequency`` covers the query's lexemes and their neighbours.
    ``similarity`` is the cosine similarity of the memory's best-matching
    vector to the query's (semantic recall), ``None`` when the memory has no
    vector of the query's model or recall runs without embeddings.
    """

    memory: Memory
    term_frequency: dict[str, int]
    length: int
    similarity: float | None = None


@dataclass(frozen=True, slots=True)
class Session(_JsonFields):
    """A chat session (thread) of one resource."""

    resource_id: str
    session_id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Message(_JsonFields):
    """One message of a thread's exact history.

    ``parts`` holds the structured parts as JSON objects, each with a ``type``:
    ``tool_call`` (``id``, ``name``, ``arguments``), ``tool_result``
    (``tool_call_id``, ``name``) or ``attachment`` (``name``, ``media_type``, ...).

    ``turn_id`` names the chat turn that wrote the message (``None`` for a
    message written outside a turn); ``turn_status`` is that turn's status when
    the message was read, where a turn left ``running`` longer than any turn
    can take reads ``interrupted``. A turn that is not ``completed`` has no
    final answer and no episode.
    """

    id: int
    resource_id: str
    session_id: str
    role: Role
    content: str
    parts: tuple[dict[str, Any], ...]
    created_at: datetime
    turn_id: int | None = None
    turn_status: TurnStatus | None = None


@dataclass(frozen=True, slots=True)
class AuditRecord(_JsonFields):
    """One row of ``popagent_audit``: a hook firing around a model or tool call.

    It holds names, ids, counts, sizes, timing and the outcome, never content:
    no message text, memory, argument value, error message or secret. A call's
    ``before_*`` and ``after_*`` rows share ``call_id``; only ``after_*`` rows
    have ``duration_ms``, ``outcome`` and ``output_chars``. ``tool`` is ``None``
    on model-call rows, ``model`` on tool-call rows.
    """

    id: int
    resource_id: str
    session_id: str | None
    call_id: str
    hook: AuditHookName
    tool: str | None
    model: str | None
    started_at: datetime
    duration_ms: float | None
    outcome: Outcome | None
    error_type: str | None
    input_chars: int | None
    output_chars: int | None
    message_count: int | None
    argument_names: tuple[str, ...] | None


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
    """One observation batch of the active generation, pointing at its source messages
    (``first_message_id`` to ``last_message_id``: ids of ``popagent_messages``)."""

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
class ObservationLog(ObservationGeneration):
    """A generation as stored (``popagent_observation_logs``): with its resource and
    session. Only the newest generation is active. ``last_observed_message_id`` is
    the cursor: the session's messages with greater ids are unobserved.
    ``covered_group_ids`` lists, for a reflection, the groups it rewrote.
    """

    resource_id: str
    session_id: str


@dataclass(frozen=True, slots=True)
class ObservationGroup(ObservationGroupInfo):
    """An observation batch (or reflection) as stored (``popagent_observation_groups``):
    with its resource and session."""

    resource_id: str
    session_id: str


# --- values of the HTTP API (the server answers them, the client returns them) ---------------


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
    """What a turn would recall for ``query``: the ranked results, exactly the block
    the model would see (``rendered``), and which recall mode ran and why.

    ``mode``: ``fused`` (words and meaning, the default with a model), ``lexical``
    (no model, or it is unavailable) or ``vector``; ``requested``: the mode asked
    for (``None``: the default). ``model``: the embedding model (``None``: semantic
    recall is off), ``model_state`` whether it works and ``model_error`` why not.
    ``pending_vectors``: the resource's memories whose vectors are still being
    written (counted up to 10,000), found by their words only until then.
    ``reason``: the mode and why, in one sentence.
    """

    query: str
    results: tuple[RecallResult, ...]
    rendered: str
    mode: Literal["lexical", "vector", "fused"]
    requested: Literal["lexical", "vector", "fused"] | None
    model: str | None
    model_state: Literal["not loaded", "loaded", "unavailable"] | None
    model_error: str | None
    pending_vectors: int
    reason: str


@dataclass(frozen=True, slots=True)
class ToolCallSummary:
    """A tool the model called during a chat turn, and how the call ended."""

    name: str
    outcome: str
    #: For ``remember``: the tool's answer, what it stored (or why it refused);
    #: ``None`` for other tools, whose answers can be long or private.
    result: str | None = None


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
class Setting:
    """One memory setting as the API lists it: its value, default, the value as text
    (as the settings form and ``popagent settings set`` take it), and its documentation
    (``popagent.observe.settings.SETTINGS``)."""

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
class Health:
    """``/healthz``: ``status`` is ``"ok"`` or ``"unavailable"``; ``database`` says why."""

    status: Literal["ok", "unavailable"]
    database: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


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


@dataclass(frozen=True, slots=True)
class ItemsAdded:
    """The message id each added session item was stored as, in order."""

    ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ItemPopped:
    """The session item removed; ``None`` when the session had none."""

    item: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Observations:
    """A session's observational-memory state, read-only."""

    session_id: str
    generations: tuple[ObservationGeneration, ...]
    groups: tuple[ObservationGroupInfo, ...]


def unfinished_turn_ends(messages: Sequence[Message], *, last_page: bool) -> dict[int, TurnStatus]:
    """Where a reader marks the turns of ``messages`` (oldest first) that are not
    completed: the id of each such turn's last message here, with its status.

    The turn of the last message is marked only when ``last_page`` (its later
    messages may be on the next page).
    """
    ends: dict[int, TurnStatus] = {}
    for i, message in enumerate(messages):
        status = message.turn_status
        if message.turn_id is None or status is None or status == "completed":
            continue
        following = messages[i + 1] if i + 1 < len(messages) else None
        if following is None and not last_page:
            continue
        if following is None or following.turn_id != message.turn_id:
            ends[message.id] = status
    return ends


def turn_marker(turn_id: int, status: TurnStatus) -> str:
    """The line a reader shows after the last message of a turn that is not completed."""
    if status == "running":
        return f"turn {turn_id} is still running"
    what = "was interrupted" if status == "interrupted" else "failed"
    return f"turn {turn_id} {what} before its reply: no reply and no episode were stored"
