"""Request and response bodies of the HTTP API, strict and documented in the OpenAPI.

Request bodies forbid unknown fields (so a ``resource_id`` field is refused,
never ignored), refuse wrong types instead of coercing them (``"0.5"`` is not
an importance), and refuse NaN and infinities. The library validates again
(normalization, credential refusal), so both doors have the same rules; these
models state them in the OpenAPI document for clients and fuzzers.

A response that is one of popagent's values is that value: routes answer with
the frozen dataclasses of ``popagent.models`` (``Memory``, ``Page``,
``FactHistory``, ``Settings``, ...), whose fields FastAPI documents. The
response models here are the API's own: errors and counts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ..memory.derived import BASED_ON_CAP
from ..memory.validation import FACT_CONTENT_CAP, KEY_CAP, QUERY_CAP
from ..models import HAPPENED_AT_CAP, HAPPENED_AT_HELP, RECALL_MOMENTS, RecallOptions

__all__ = [
    "CHAT_MESSAGE_CAP",
    "ChatRequest",
    "CleanupReport",
    "CleanupRequest",
    "ErrorOut",
    "FactCreate",
    "FactPut",
    "FactRestore",
    "FactUpdate",
    "ItemsAppend",
    "PurgeRequest",
    "RecallRequest",
    "RevertRequest",
    "SessionRename",
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


#: What a fact was derived from: fact keys (strings) and memory ids (integers).
BasedOn = Annotated[
    list[Key | Annotated[int, Field(ge=1, le=2**63 - 1)]],
    Field(
        max_length=BASED_ON_CAP,
        description="What the fact was derived from: fact keys (strings) and memory ids "
        "(integers) of this resource. When one changes or goes, the fact is marked stale.",
    ),
]
#: A moment of recall: a date or an ISO 8601 time with a zone (the library parses it).
Moment = Annotated[str, Field(min_length=1, max_length=64)]
#: When what a fact tells happened or since when it holds (its event clock,
#: docs/time.md): a date, a month, a year, a timestamp or a phrase of the grammar.
HappenedAt = Annotated[
    str | None,
    Field(
        max_length=HAPPENED_AT_CAP,
        description=HAPPENED_AT_HELP + " Left out: read from the content, if it names a time.",
    ),
]


class _FactValue(_Strict):
    """The settable fields of a fact's value, stated once: the create and the put bodies
    are these (plus the key, for a create), and the routes pass them on by name to the
    library's keyword arguments of the same names. ``FactUpdate`` has each of them, and
    the key, as optional (``tests/test_web_api.py`` pins that it names them all)."""

    content: Content
    importance: Importance = 0.5
    #: When the fact ends: after it, recall never returns it and maintenance removes it.
    expires_at: ExpiresAt = None
    based_on: BasedOn | None = None
    #: Its event clock (``HappenedAt``).
    happened_at: HappenedAt = None


class FactPut(_FactValue):
    """The value of the fact of the key in the path: created, or replaced (the replaced
    value is kept as a version). ``expires_at`` left out or ``null``: it never expires."""


class FactCreate(_FactValue):
    """A new fact. ``content`` is required; a taken ``key`` is a 409 naming the fact that
    holds it (``PUT /api/facts/by-key/{key}`` replaces its value, PATCH changes it)."""

    key: Key | None = None


class FactUpdate(_Strict):
    """Fields to change; at least one. ``"key": null`` removes the fact's key and
    ``"expires_at": null`` its expiry. The replaced value is kept as a version."""

    content: Content | None = None
    key: Key | None = None
    importance: Importance | None = None
    expires_at: ExpiresAt = None
    #: Replaces the fact's sources; ``[]`` removes them.
    based_on: BasedOn | None = None
    happened_at: HappenedAt = None


class FactRestore(_Strict):
    """The version (from ``GET /api/facts/{id}/versions``) to make current again."""

    version: Annotated[int, Field(ge=1, le=2**31 - 1)]


class RecallRequest(_Strict):
    """A recall preview; ``as_of``/``known_at`` (``models.RECALL_MOMENTS``) answer
    from a moment in the past."""

    query: Annotated[str, Field(min_length=1, max_length=QUERY_CAP)]
    limit: Annotated[int, Field(ge=1, le=100)] = 8
    as_of: Annotated[Moment | None, Field(description=RECALL_MOMENTS["as_of"])] = None
    known_at: Annotated[Moment | None, Field(description=RECALL_MOMENTS["known_at"])] = None

    def moments(self) -> RecallOptions:
        """The moments given, by name, for ``recall``'s keyword arguments."""
        return cast(RecallOptions, self.model_dump(include=set(RECALL_MOMENTS), exclude_none=True))


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


class CleanupReport(BaseModel):
    deleted: int


class ItemsAppend(_Strict):
    """Framework session items (OpenAI Agents SDK input items) to append, in order."""

    items: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=1000)]
