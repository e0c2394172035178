"""Frozen domain values shared by every layer.

Field names follow the one vocabulary of the project: the same words are the
SQL columns, the dataclass fields, the JSON keys and the CLI flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "ORIGINS",
    "AuditHookName",
    "AuditRecord",
    "Candidate",
    "CorpusStats",
    "EpisodeTurn",
    "FactVersion",
    "Kind",
    "MaintenanceReport",
    "Memory",
    "MemoryFilter",
    "Message",
    "Neighbour",
    "ObservationGroup",
    "ObservationLog",
    "Outcome",
    "Provenance",
    "RecallResult",
    "RememberResult",
    "Role",
    "ScoreComponent",
    "Session",
    "TurnStatus",
    "Vectors",
    "turn_marker",
    "unfinished_turn_ends",
]

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


@dataclass(frozen=True, slots=True)
class Memory:
    """One row of ``popagent_memories``.

    ``content_sha256`` is the hex SHA-256 of ``content`` (UTF-8); ``key`` is
    only ever set on facts. ``accessed_at`` is ``None`` until a recall returns
    the memory.
    """

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

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict with ISO-8601 timestamps."""
        return {
            "id": self.id,
            "resource_id": self.resource_id,
            "session_id": self.session_id,
            "kind": self.kind,
            "key": self.key,
            "content": self.content,
            "content_sha256": self.content_sha256,
            "importance": self.importance,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "accessed_at": self.accessed_at.isoformat() if self.accessed_at else None,
            "access_count": self.access_count,
            "origin": self.origin,
            "turn_id": self.turn_id,
            "message_ids": list(self.message_ids),
            "tool_call_id": self.tool_call_id,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "version": self.version,
        }


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


@dataclass(frozen=True, slots=True)
class FactVersion:
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

    def to_json(self) -> dict[str, object]:
        return {
            "resource_id": self.resource_id,
            "fact_id": self.fact_id,
            "version": self.version,
            "key": self.key,
            "content": self.content,
            "content_sha256": self.content_sha256,
            "importance": self.importance,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "session_id": self.session_id,
            "origin": self.origin,
            "turn_id": self.turn_id,
            "message_ids": list(self.message_ids),
            "tool_call_id": self.tool_call_id,
            "valid_from": self.valid_from.isoformat(),
            "valid_to": self.valid_to.isoformat(),
            "ended": self.ended,
            "ended_origin": self.ended_origin,
            "ended_session_id": self.ended_session_id,
        }


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

    ``score`` is exactly the sum of the components' contributions.
    """

    memory: Memory
    score: float
    components: tuple[ScoreComponent, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "memory": self.memory.to_json(),
            "score": self.score,
            "components": {
                c.name: {"value": c.value, "weight": c.weight, "contribution": c.contribution}
                for c in self.components
            },
        }


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

    expired_episodes: int = 0
    capped_episodes: int = 0
    #: Facts past their ``expires_at`` (their last value is kept as a version).
    expired_facts: int = 0

    @property
    def total(self) -> int:
        return self.expired_episodes + self.capped_episodes + self.expired_facts


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
class Session:
    """A chat session (thread) of one resource."""

    resource_id: str
    session_id: str
    title: str | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, object]:
        return {
            "resource_id": self.resource_id,
            "session_id": self.session_id,
            "title": self.title,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Message:
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

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "resource_id": self.resource_id,
            "session_id": self.session_id,
            "role": self.role,
            "content": self.content,
            "parts": list(self.parts),
            "created_at": self.created_at.isoformat(),
            "turn_id": self.turn_id,
            "turn_status": self.turn_status,
        }


@dataclass(frozen=True, slots=True)
class AuditRecord:
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

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "resource_id": self.resource_id,
            "session_id": self.session_id,
            "call_id": self.call_id,
            "hook": self.hook,
            "tool": self.tool,
            "model": self.model,
            "started_at": self.started_at.isoformat(),
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
            "error_type": self.error_type,
            "input_chars": self.input_chars,
            "output_chars": self.output_chars,
            "message_count": self.message_count,
            "argument_names": (
                list(self.argument_names) if self.argument_names is not None else None
            ),
        }


@dataclass(frozen=True, slots=True)
class ObservationLog:
    """One generation of a session's observation log (``popagent_observation_logs``).

    Only the newest generation is active. ``last_observed_message_id`` is the
    cursor: the session's messages with greater ids are unobserved.
    ``covered_group_ids`` lists, for a reflection, the groups it rewrote.
    """

    id: int
    resource_id: str
    session_id: str
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
class ObservationGroup:
    """One observation batch (or reflection) and its group pointer: the first and
    last source message id it came from (``popagent_observation_groups``)."""

    id: int
    resource_id: str
    session_id: str
    log_id: int
    kind: Literal["observation", "reflection"]
    status: str
    first_message_id: int
    last_message_id: int
    observations: str
    observation_tokens: int
    message_tokens: int
    created_at: datetime


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
