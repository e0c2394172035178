"""Every API route as a :class:`Call`: method, path, query, body, and how to read the answer.

Both clients run the same calls (``Client`` blocking, ``AsyncClient`` on the
event loop), so a route is written once here and exposed by one small method
in each client (``get`` and ``delete`` pick the route of the memory's kind, as
the library's verbs take a ``kind``). Builders do no I/O and send arguments as
given: the server validates them and names the field at fault. The exceptions
are what picks no route or that no route takes (a ``kind`` other than
``"fact"``/``"episode"``, ``purge`` of an episode): refused here with the
library's ``ValidationError``, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any, Generic, TypeVar, Unpack
from urllib.parse import quote

from ..errors import ValidationError
from ..models import (
    ChatReply,
    FactHistory,
    Health,
    ItemPage,
    ItemPopped,
    ItemsAdded,
    Kind,
    MaintenanceReport,
    Memory,
    MemoryFilter,
    MessagePage,
    Observations,
    Page,
    PurgeReport,
    RecallOptions,
    RecallPreview,
    RevertReport,
    Session,
    SessionWrites,
    Settings,
)
from .shapes import ServerInfo, decode, decoder

__all__ = ["UNSET", "Call", "Unset"]

T = TypeVar("T")


class Unset:
    """The type of :data:`UNSET`: a PATCH field left out (``None`` may mean "clear")."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()


def _none(_: Any) -> None:
    return None


def _item_ids(data: Any) -> tuple[int, ...]:
    return decode(ItemsAdded, data).ids


def _popped_item(data: Any) -> dict[str, Any] | None:
    return decode(ItemPopped, data).item


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the reader of its success body.

    ``name`` is the client's method (the builder's name, but ``list`` and
    ``get_settings``). ``ok`` lists the statuses that are success; ``parse`` reads the JSON body of
    one (``None`` for a 204). ``accept_errors`` lists error statuses whose body is
    still a valid answer (``/healthz``'s 503).
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] | None = None
    json: Any = None
    ok: tuple[int, ...] = (200,)
    accept_errors: tuple[int, ...] = field(default=())
    chat: bool = False
    #: The client's method that makes this call: errors name it before the route.
    name: str = ""

    @property
    def what(self) -> str:
        """The call as an error names it: ``put_fact (PUT /api/facts/by-key/k)``."""
        route = f"{self.method} {self.path}"
        return f"{self.name} ({route})" if self.name else route


def _seg(value: str | int) -> str:
    # Ids are free text: quote everything, including "/".
    return quote(str(value), safe="")


def _query(**values: Any) -> dict[str, Any]:
    """Query parameters without the ones left at ``None``; datetimes in ISO 8601."""
    return {
        name: value.isoformat() if isinstance(value, datetime) else value
        for name, value in values.items()
        if value is not None
    }


# --- memories, facts, episodes ---------------------------------------------------------------


def filter_params(where: MemoryFilter) -> dict[str, Any]:
    """The query parameters of a list: ``where``'s fields that are set, times in ISO 8601.

    The one place a ``MemoryFilter`` becomes a query: every field, by name.
    """
    return _query(**{f.name: getattr(where, f.name) for f in fields(where)})


def list_memories(where: MemoryFilter) -> Call[Page[Memory]]:
    """``GET /api/memories``: facts and episodes, with every filter of ``where``."""
    params = filter_params(where)
    return Call("GET", "/api/memories", decoder(Page[Memory]), params=params, name="list")


#: The collection of each kind's routes (``None``: either kind).
_KIND_PATH: dict[Kind | None, str] = {None: "memories", "fact": "facts", "episode": "episodes"}


def _kind_path(kind: Kind | None) -> str:
    # The library's check (``memory.validation.check_kind``), before a request is sent.
    if kind is None or kind in ("fact", "episode"):
        return _KIND_PATH[kind]
    raise ValidationError("kind", "must be 'fact' or 'episode'")


def get(id: int, *, kind: Kind | None) -> Call[Memory]:
    """``GET /api/memories/{id}``, or the route of ``kind``: ``/api/facts/{id}``,
    ``/api/episodes/{id}``."""
    return Call("GET", f"/api/{_kind_path(kind)}/{_seg(id)}", decoder(Memory), name="get")


def delete(id: int, *, kind: Kind, purge: bool) -> Call[None]:
    """``DELETE /api/facts/{id}`` (with ``purge``) or ``DELETE /api/episodes/{id}``."""
    path = f"/api/{_kind_path(kind)}/{_seg(id)}"
    if kind == "episode":
        if purge:
            # The episode route takes no ``purge`` and would delete anyway: refuse, as
            # the library does, rather than do something other than what was asked.
            raise ValidationError(
                "purge", "only a fact has earlier versions to purge, not an episode"
            )
        return Call("DELETE", path, _none, ok=(204,), name="delete")
    # The route takes exactly "true" or "false"; leaving it out is "false".
    params = {"purge": "true"} if purge else None
    return Call("DELETE", path, _none, params=params, ok=(204,), name="delete")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _fact_body(
    content: str,
    importance: float,
    expires_at: datetime | None,
    based_on: Sequence[str | int] | None,
    happened_at: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"content": content, "importance": importance}
    if expires_at is not None:
        body["expires_at"] = expires_at.isoformat()
    if based_on:
        body["based_on"] = list(based_on)
    if happened_at is not None:
        body["happened_at"] = happened_at
    return body


def create_fact(
    content: str,
    *,
    key: str | None,
    importance: float,
    expires_at: datetime | None,
    based_on: Sequence[str | int] | None = None,
    happened_at: str | None = None,
) -> Call[Memory]:
    body = _fact_body(content, importance, expires_at, based_on, happened_at)
    if key is not None:
        body["key"] = key
    return Call("POST", "/api/facts", decoder(Memory), json=body, ok=(201,), name="create_fact")


def put_fact(
    key: str,
    content: str,
    *,
    importance: float,
    expires_at: datetime | None,
    based_on: Sequence[str | int] | None = None,
    happened_at: str | None = None,
) -> Call[Memory]:
    """``PUT /api/facts/by-key/{key}``: the upsert by key (201 created, 200 otherwise)."""
    body = _fact_body(content, importance, expires_at, based_on, happened_at)
    path = f"/api/facts/by-key/{_seg(key)}"
    return Call("PUT", path, decoder(Memory), json=body, ok=(200, 201), name="put_fact")


def update_fact(
    id: int,
    *,
    content: str | Unset,
    key: str | Unset | None,
    importance: float | Unset,
    expires_at: datetime | Unset | None,
    based_on: Sequence[str | int] | Unset = UNSET,
    happened_at: str | None = None,
) -> Call[Memory]:
    body: dict[str, Any] = {
        name: value
        for name, value in (("content", content), ("key", key), ("importance", importance))
        if not isinstance(value, Unset)
    }
    if not isinstance(based_on, Unset):
        body["based_on"] = list(based_on)  # []: the fact is based on nothing
    if happened_at is not None:
        body["happened_at"] = happened_at
    if not isinstance(expires_at, Unset):
        body["expires_at"] = _iso(expires_at)  # None: "expires_at": null clears it
    return Call("PATCH", f"/api/facts/{_seg(id)}", decoder(Memory), json=body, name="update_fact")


def fact_history(id: int) -> Call[FactHistory]:
    return Call("GET", f"/api/facts/{_seg(id)}/versions", decoder(FactHistory), name="fact_history")


def restore_fact(id: int, version: int) -> Call[Memory]:
    path = f"/api/facts/{_seg(id)}/restore"
    return Call("POST", path, decoder(Memory), json={"version": version}, name="restore_fact")


def recall(query: str, *, limit: int, **moments: Unpack[RecallOptions]) -> Call[RecallPreview]:
    """``POST /api/recall``; each moment given (``RECALL_MOMENTS``) as ISO 8601 text."""
    body: dict[str, Any] = {"query": query, "limit": limit}
    for name, value in moments.items():
        if isinstance(value, date):  # a datetime too
            body[name] = value.isoformat()
        elif value is not None:
            body[name] = value
    return Call("POST", "/api/recall", decoder(RecallPreview), json=body, name="recall")


def stale(*, limit: int) -> Call[list[Memory]]:
    """``GET /api/memories/stale``: memories whose source changed or went."""
    return Call(
        "GET", "/api/memories/stale", decoder(list[Memory]), params={"limit": limit}, name="stale"
    )


def confirm(id: int) -> Call[Memory]:
    """``POST /api/memories/{id}/confirm``: clear memory ``id``'s stale mark."""
    return Call("POST", f"/api/memories/{_seg(id)}/confirm", decoder(Memory), name="confirm")


def _deleted(data: Any) -> int:
    return int(data["deleted"])


def cleanup(*, confirm: bool, kind: Kind | None, older_than: datetime | None) -> Call[int]:
    body: dict[str, Any] = {"confirm": confirm}
    if kind is not None:
        body["kind"] = kind
    if older_than is not None:
        body["older_than"] = older_than.isoformat()
    return Call("POST", "/api/cleanup", _deleted, json=body, name="cleanup")


def purge(*, confirm: bool) -> Call[PurgeReport]:
    return Call("POST", "/api/purge", decoder(PurgeReport), json={"confirm": confirm}, name="purge")


# --- sessions ---------------------------------------------------------------------------------


def list_sessions(*, limit: int, offset: int) -> Call[Page[Session]]:
    params = _query(limit=limit, offset=offset)
    return Call("GET", "/api/sessions", decoder(Page[Session]), params=params, name="list_sessions")


def get_session(session_id: str) -> Call[Session]:
    return Call("GET", f"/api/sessions/{_seg(session_id)}", decoder(Session), name="get_session")


def rename_session(session_id: str, title: str | None) -> Call[Session]:
    path = f"/api/sessions/{_seg(session_id)}"
    return Call("PATCH", path, decoder(Session), json={"title": title}, name="rename_session")


def delete_session(session_id: str) -> Call[None]:
    return Call(
        "DELETE", f"/api/sessions/{_seg(session_id)}", _none, ok=(204,), name="delete_session"
    )


def list_messages(session_id: str, *, after_id: int | None, limit: int) -> Call[MessagePage]:
    path = f"/api/sessions/{_seg(session_id)}/messages"
    params = _query(after_id=after_id, limit=limit)
    return Call("GET", path, decoder(MessagePage), params=params, name="list_messages")


def observations(session_id: str) -> Call[Observations]:
    path = f"/api/sessions/{_seg(session_id)}/observations"
    return Call("GET", path, decoder(Observations), name="observations")


def session_writes(session_id: str) -> Call[SessionWrites]:
    path = f"/api/sessions/{_seg(session_id)}/writes"
    return Call("GET", path, decoder(SessionWrites), name="session_writes")


def revert_session(session_id: str, *, confirm: bool) -> Call[RevertReport]:
    path = f"/api/sessions/{_seg(session_id)}/revert"
    return Call(
        "POST", path, decoder(RevertReport), json={"confirm": confirm}, name="revert_session"
    )


def list_items(
    session_id: str, *, after_id: int | None, limit: int, last: int | None
) -> Call[ItemPage]:
    path = f"/api/sessions/{_seg(session_id)}/items"
    # With ``last`` the route ignores paging; send only what applies.
    params = _query(last=last) if last is not None else _query(after_id=after_id, limit=limit)
    return Call("GET", path, decoder(ItemPage), params=params, name="list_items")


def add_items(session_id: str, items: Sequence[Mapping[str, Any]]) -> Call[tuple[int, ...]]:
    path = f"/api/sessions/{_seg(session_id)}/items"
    body = {"items": [dict(item) for item in items]}
    return Call("POST", path, _item_ids, json=body, ok=(201,), name="add_items")


def pop_item(session_id: str) -> Call[dict[str, Any] | None]:
    path = f"/api/sessions/{_seg(session_id)}/items/last"
    return Call("DELETE", path, _popped_item, name="pop_item")


def clear_items(session_id: str) -> Call[None]:
    path = f"/api/sessions/{_seg(session_id)}/items"
    return Call("DELETE", path, _none, ok=(204,), name="clear_items")


def chat(session_id: str, message: str) -> Call[ChatReply]:
    path = f"/api/sessions/{_seg(session_id)}/chat"
    return Call("POST", path, decoder(ChatReply), json={"message": message}, chat=True, name="chat")


# --- settings and system ----------------------------------------------------------------------


def read_settings() -> Call[Settings]:
    return Call("GET", "/api/settings", decoder(Settings), name="get_settings")


def update_settings(changes: Mapping[str, Any]) -> Call[Settings]:
    return Call(
        "PATCH", "/api/settings", decoder(Settings), json=dict(changes), name="update_settings"
    )


def reset_settings() -> Call[Settings]:
    return Call("POST", "/api/settings/reset", decoder(Settings), name="reset_settings")


def info() -> Call[ServerInfo]:
    return Call("GET", "/api/info", decoder(ServerInfo), name="info")


def health() -> Call[Health]:
    return Call("GET", "/healthz", decoder(Health), accept_errors=(503,), name="health")


def maintain() -> Call[MaintenanceReport]:
    return Call("POST", "/api/maintenance", decoder(MaintenanceReport), name="maintain")
