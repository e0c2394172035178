"""How the client reads the server's JSON, and the few values only the client has.

Every answer is one of popagent's own frozen dataclasses (:mod:`popagent.models`:
``Memory``, ``Page``, ``FactHistory``, ``RecallPreview``, ``ChatReply``,
``Settings``, ``PurgeReport``, ...), the same ones the server answers with, read by
:func:`decode`: pydantic derives the reading from the dataclass's fields
(types, literals, ISO 8601 timestamps, defaults for fields older servers
lack); there is no hand-written parser. Here are only what the API's answer
holds in a form of its own: a streamed piece of a reply and the server's
info. A body that does not fit is a ``ValueError`` here and a ``ClientError``
for the caller, never a half-filled value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "ChatDelta",
    "MaintenanceSchedule",
    "ServerInfo",
    "decode",
    "decoder",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """A piece of the reply as the model writes it (streamed chat)."""

    text: str


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
    #: ``None`` also from servers that predate the schedule.
    maintenance: MaintenanceSchedule | None = None


# --- reading JSON: one decoder per shape, derived from its dataclass fields -------------------


_adapters: dict[Any, TypeAdapter[Any]] = {}


def _adapter(shape: Any) -> TypeAdapter[Any]:
    adapter = _adapters.get(shape)
    if adapter is None:
        # pydantic is imported on the first decode, not with the client.
        from pydantic import TypeAdapter

        adapter = _adapters[shape] = TypeAdapter(shape)
    return adapter


def decode(shape: type[T], data: Any) -> T:
    """``data`` (a JSON value as the server documents it) as a ``shape``, checked field
    by field (types, literals, ISO 8601 timestamps); a missing field with a default
    takes it (servers that predate the field). ``ValueError`` when it does not fit."""
    return cast(T, _adapter(shape).validate_python(data))


def decoder(shape: type[T]) -> Callable[[Any], T]:
    """:func:`decode` of ``shape``, as a one-argument function."""
    return lambda data: decode(shape, data)
