# Generated from src/popagent/client/async_.py by `python tools/async_to_sync.py`: DO NOT EDIT.
# Change async_.py (or the tool's tables) and run the command again;
# `scripts/check` fails while this file differs from what the tool makes.
"""``Client``: the blocking client of ``popagent serve``'s JSON API (one ``httpx.Client``).

Every method is one request (``iter`` and the ``iter_*`` helpers one per page) and returns
popagent's own values (``popagent.models``: ``Memory``, ``Page``, ``ChatReply``, ...,
the ones the server answers with) or the few of ``popagent.client.shapes``. Errors are
popagent's (``popagent.client.errors``). The resource is the server's: no
method takes a ``resource_id``.

A client is safe to share between threads (``httpx.Client`` is);
close it, or use it as a context manager.

Generated from the asyncio ``AsyncClient`` (``popagent.client.async_``), method for method:
change that one, then run ``python tools/async_to_sync.py`` (``scripts/check`` fails
while the generated module is stale).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx

from ..models import (
    ChatReply,
    FactHistory,
    Health,
    ItemPage,
    Kind,
    MaintenanceReport,
    Memory,
    MemoryFilter,
    Message,
    MessagePage,
    Observations,
    Page,
    PurgeReport,
    RecallOptions,
    RecallPreview,
    RevertReport,
    Session,
    SessionItem,
    SessionWrites,
    Settings,
)
from . import calls
from ._base import (
    DEFAULT_CHAT_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    AfterPage,
    ClientConfig,
    SseReader,
    chat_event,
    finish,
    transport_error,
)
from .calls import UNSET, Call, Unset
from .errors import error_from_response
from .shapes import ChatDelta, ServerInfo

__all__ = ["Client", "paged"]

T = TypeVar("T")


class Client:
    """A blocking client of one ``popagent serve``.

    ``token`` is the server's bearer token (``None``: send none; a loopback
    server without a token needs none). It is never read from the environment
    behind your back; :meth:`from_env` does that on request. ``timeout`` bounds
    connecting and each read of a call, ``chat_timeout`` the wait for a chat
    reply (or, streamed, between two pieces of it).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        chat_timeout: float = DEFAULT_CHAT_TIMEOUT_S,
    ) -> None:
        self.config = ClientConfig.make(base_url, token, timeout, chat_timeout)
        self._http = httpx.Client(
            base_url=self.config.base_url,
            headers=self.config.headers(),
            timeout=self.config.timeout(),
        )

    @classmethod
    def from_env(
        cls,
        base_url: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        chat_timeout: float = DEFAULT_CHAT_TIMEOUT_S,
    ) -> Client:
        """A client configured as the server is: ``POPAGENT_URL`` (default
        ``http://127.0.0.1:8787``) and ``POPAGENT_TOKEN`` or ``POPAGENT_TOKEN_FILE``."""
        config = ClientConfig.from_env(base_url, env, timeout, chat_timeout)
        return cls(config.base_url, token=config.token, timeout=timeout, chat_timeout=chat_timeout)

    @property
    def base_url(self) -> str:
        return self.config.base_url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r}, token={'set' if self.config.token else None})"

    def _run(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                timeout=self.config.timeout_for(call),
            )
        except httpx.HTTPError as exc:
            raise transport_error(call, self.base_url, exc) from exc
        return finish(call, response.status_code, response.content)

    # --- memories, facts, episodes -------------------------------------------------------------

    def list(self, where: MemoryFilter | None = None) -> Page[Memory]:
        """One page of the memories ``where`` selects (``None``: the 50 newest of either
        kind), newest first: ``GET /api/memories`` with every filter that is set. The
        server checks ``where`` and names the field at fault."""
        return self._run(calls.list_memories(MemoryFilter() if where is None else where))

    def iter(self, where: MemoryFilter | None = None) -> Iterator[Memory]:
        """Every memory ``where`` selects (``None``: all of them), newest first, from
        ``where.offset`` on, one request per page of ``where.limit``. Offset paging: a
        memory written meanwhile can shift one into the next page or out of it."""
        first = MemoryFilter() if where is None else where
        return paged(lambda offset: self.list(replace(first, offset=offset)), first.offset)

    def get(self, id: int, *, kind: Kind | None = None) -> Memory:
        """Memory ``id``, of ``kind`` when given (``None``: a fact or an episode);
        ``NotFoundError`` otherwise. As ``LongTermMemory.get``. A fact by its key:
        ``list(MemoryFilter(kind="fact", key=key))``, as in the library."""
        return self._run(calls.get(id, kind=kind))

    def delete(self, id: int, *, kind: Kind | None = None, purge: bool = False) -> None:
        """Delete memory ``id``, of ``kind`` when given (``None``: whichever kind it is,
        which costs one more request to learn); ``NotFoundError`` when there is none.

        As ``LongTermMemory.delete``: a fact's last value stays in its history
        (restorable) unless ``purge``, which removes every version too (with
        ``kind="fact"``, also of a fact deleted earlier); an episode has no history,
        so ``purge`` is refused for one (``ValidationError``). The server records
        who ended a fact itself (``origin="api"``, no session): no ``origin`` or
        ``session_id`` here."""
        if kind is None:  # each kind has its own route: learn it, as the library does
            found = self.get(id)
            kind = found.kind
        self._run(calls.delete(id, kind=kind, purge=purge))

    def create_fact(
        self,
        content: str,
        *,
        key: str | None = None,
        importance: float = 0.5,
        expires_at: datetime | None = None,
        based_on: Sequence[str | int] | None = None,
        happened_at: str | None = None,
    ) -> Memory:
        """Strict create: a taken ``key`` or an identical keyless fact is a ``ConflictError``.
        ``expires_at`` (time-zone aware, in the future) ends the fact then; ``based_on``
        names what it was derived from (fact keys, memory ids); ``happened_at`` gives its
        event clock (docs/time.md)."""
        return self._run(
            calls.create_fact(
                content,
                key=key,
                importance=importance,
                expires_at=expires_at,
                based_on=based_on,
                happened_at=happened_at,
            )
        )

    def put_fact(
        self,
        key: str,
        content: str,
        *,
        importance: float = 0.5,
        expires_at: datetime | None = None,
        based_on: Sequence[str | int] | None = None,
        happened_at: str | None = None,
    ) -> Memory:
        """Set ``key``'s value: create its fact, or replace the value (kept as a version).
        Idempotent, the API's upsert by key; ``expires_at=None`` means it never expires."""
        return self._run(
            calls.put_fact(
                key,
                content,
                importance=importance,
                expires_at=expires_at,
                based_on=based_on,
                happened_at=happened_at,
            )
        )

    def update_fact(
        self,
        id: int,
        *,
        content: str | Unset = UNSET,
        key: str | Unset | None = UNSET,
        importance: float | Unset = UNSET,
        expires_at: datetime | Unset | None = UNSET,
        based_on: Sequence[str | int] | Unset = UNSET,
        happened_at: str | None = None,
    ) -> Memory:
        """Change what is given; ``key=None`` removes the fact's key,
        ``expires_at=None`` its expiry and ``based_on=[]`` its sources. The replaced
        value is kept as a version."""
        return self._run(
            calls.update_fact(
                id,
                content=content,
                key=key,
                importance=importance,
                expires_at=expires_at,
                based_on=based_on,
                happened_at=happened_at,
            )
        )

    def fact_history(self, id: int) -> FactHistory:
        """The fact as it stands (``current``, ``None`` once deleted or expired) and
        every earlier value, newest first; ``NotFoundError`` once purged."""
        return self._run(calls.fact_history(id))

    def restore_fact(self, id: int, version: int) -> Memory:
        """Make ``version`` (from :meth:`fact_history`) current again; a deleted fact
        comes back under its id. ``NotFoundError`` for an unknown version,
        ``ConflictError`` when its key or content is now another fact's."""
        return self._run(calls.restore_fact(id, version))

    def recall(
        self, query: str, *, limit: int = 8, **moments: Unpack[RecallOptions]
    ) -> RecallPreview:
        """What a turn would recall for ``query`` (a preview: access stats stay as they were).
        ``as_of``/``known_at`` (a date, a time or ISO text) answer from that moment."""
        return self._run(calls.recall(query, limit=limit, **moments))

    def stale(self, *, limit: int = 100) -> Sequence[Memory]:
        """The memories marked stale (a source they were based on changed or went)."""
        return self._run(calls.stale(limit=limit))

    def confirm(self, id: int) -> Memory:
        """Confirm memory ``id`` still holds: clear its stale mark."""
        return self._run(calls.confirm(id))

    def cleanup(
        self, *, confirm: bool, kind: Kind | None = None, older_than: datetime | None = None
    ) -> int:
        """Delete long-term memory for good (all, or of ``kind``/before ``older_than``);
        the number deleted. The server refuses unless ``confirm`` is ``True``."""
        return self._run(calls.cleanup(confirm=confirm, kind=kind, older_than=older_than))

    def purge(self, *, confirm: bool) -> PurgeReport:
        """Delete everything of the server's resource (memories with their history,
        sessions, messages, observations, settings, secrets, audit rows), then vacuum.
        The server refuses unless ``confirm`` is ``True``."""
        return self._run(calls.purge(confirm=confirm))

    # --- sessions -------------------------------------------------------------------------------

    def list_sessions(self, *, limit: int = 50, offset: int = 0) -> Page[Session]:
        """One page of sessions, most recently active first."""
        return self._run(calls.list_sessions(limit=limit, offset=offset))

    def iter_sessions(self, *, page_size: int = 100) -> Iterator[Session]:
        return paged(lambda offset: self.list_sessions(limit=page_size, offset=offset))

    def get_session(self, session_id: str) -> Session:
        return self._run(calls.get_session(session_id))

    def rename_session(self, session_id: str, title: str | None) -> Session:
        """Set the session's title (``None`` removes it)."""
        return self._run(calls.rename_session(session_id, title))

    def delete_session(self, session_id: str) -> None:
        """Delete the session, its messages and observations (long-term memory stays)."""
        self._run(calls.delete_session(session_id))

    def list_messages(
        self, session_id: str, *, after_id: int | None = None, limit: int = 100
    ) -> MessagePage:
        """A page of the session's exact history, oldest first."""
        return self._run(calls.list_messages(session_id, after_id=after_id, limit=limit))

    def iter_messages(self, session_id: str, *, page_size: int = 100) -> Iterator[Message]:
        """The session's whole history, oldest first, page by page."""
        return _pages_after(
            lambda after: self.list_messages(session_id, after_id=after, limit=page_size)
        )

    def observations(self, session_id: str) -> Observations:
        return self._run(calls.observations(session_id))

    def session_writes(self, session_id: str) -> SessionWrites:
        """What the session wrote to long-term memory that still stands, and the fact
        values it replaced or deleted (an unknown session has none)."""
        return self._run(calls.session_writes(session_id))

    def revert_session(self, session_id: str, *, confirm: bool) -> RevertReport:
        """Undo the session's long-term writes in one transaction (every undone value
        stays in its fact's history). The server refuses unless ``confirm`` is ``True``."""
        return self._run(calls.revert_session(session_id, confirm=confirm))

    # --- framework session items ---------------------------------------------------------------

    def list_items(
        self,
        session_id: str,
        *,
        after_id: int | None = None,
        limit: int = 100,
        last: int | None = None,
    ) -> ItemPage:
        """A page of the session's items, oldest first, after ``after_id``; with
        ``last``, the newest ``last`` items instead (and no next page)."""
        return self._run(calls.list_items(session_id, after_id=after_id, limit=limit, last=last))

    def iter_items(self, session_id: str, *, page_size: int = 100) -> Iterator[SessionItem]:
        """Every item of the session, oldest first, page by page."""
        return _pages_after(
            lambda after: self.list_items(session_id, after_id=after, limit=page_size)
        )

    def add_items(self, session_id: str, items: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
        """Append items (1 to 1,000 JSON objects), all or none; the id each is stored
        as, in order. Creates the session; credentials in items are redacted."""
        return self._run(calls.add_items(session_id, items))

    def pop_item(self, session_id: str) -> dict[str, Any] | None:
        """Remove and return the newest item (``None`` when the session has none)."""
        return self._run(calls.pop_item(session_id))

    def clear_items(self, session_id: str) -> None:
        """Remove every item and the session's thread-scoped state; the session stays."""
        self._run(calls.clear_items(session_id))

    def chat(self, session_id: str, message: str) -> ChatReply:
        """One agent turn; a session that does not exist yet is started by it."""
        return self._run(calls.chat(session_id, message))

    def chat_stream(self, session_id: str, message: str) -> Generator[ChatDelta | ChatReply, None]:
        """One agent turn, streamed: ``ChatDelta`` pieces as the model writes, then the
        ``ChatReply``. A failure mid-turn is raised as the whole-answer call raises it.
        Leaving the loop early closes the connection as soon as the generator is dropped
        (or closed); the turn still runs to its end on the server."""
        call = calls.chat(session_id, message)
        try:
            with self._http.stream(
                call.method,
                call.path,
                json=call.json,
                headers={"accept": "text/event-stream"},
                timeout=self.config.timeout_for(call),
            ) as response:
                if response.status_code not in call.ok:
                    raise error_from_response(response.status_code, response.read(), call.what)
                reader = SseReader()
                for line in response.iter_lines():
                    event = reader.feed(line)
                    value = None if event is None else chat_event(call, event)
                    if value is not None:
                        yield value
                        if isinstance(value, ChatReply):
                            return
        except httpx.HTTPError as exc:
            raise transport_error(call, self.base_url, exc) from exc
        raise transport_error(call, self.base_url, httpx.RemoteProtocolError("stream ended early"))

    # --- settings and system --------------------------------------------------------------------

    def get_settings(self) -> Settings:
        return self._run(calls.read_settings())

    def update_settings(self, changes: Mapping[str, Any]) -> Settings:
        """Change settings by name, all or nothing; ``None`` turns off what can be off."""
        return self._run(calls.update_settings(changes))

    def reset_settings(self) -> Settings:
        return self._run(calls.reset_settings())

    def info(self) -> ServerInfo:
        return self._run(calls.info())

    def health(self) -> Health:
        """``/healthz``: a server whose database is away answers ``status="unavailable"``."""
        return self._run(calls.health())

    def maintain(self) -> MaintenanceReport:
        """Run retention maintenance now for the server's resource."""
        return self._run(calls.maintain())


def paged(fetch: Callable[[int], Page[T]], start: int = 0) -> Iterator[T]:
    """Every item of the pages ``fetch(offset)`` returns, from ``start`` to the last page."""
    offset: int | None = start
    while offset is not None:
        page = fetch(offset)
        yield from page.items
        offset = page.next_offset


def _pages_after(fetch: Callable[[int | None], AfterPage[T]]) -> Iterator[T]:
    """Every item of the pages ``fetch(after_id)`` returns, oldest first: the first page
    (``after_id=None``), then each page after the last id of the one before."""
    after: int | None = None
    while True:
        page = fetch(after)
        yield from page.items
        if page.next_after_id is None:
            return
        after = page.next_after_id
