"""What ``Client`` and ``AsyncClient`` share: configuration, reading answers, and the
server-sent events of a streamed chat turn.

Nothing here does I/O; the two clients differ only in how they send.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from ..defaults import DEFAULT_URL, TOKEN_ENV, TOKEN_FILE_ENV, URL_ENV
from ..errors import ClientError, PopagentError, TransportError
from ..models import ChatReply
from .calls import Call
from .errors import error_from_body, error_from_response
from .shapes import ChatDelta, decode

__all__ = [
    "DEFAULT_CHAT_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_URL",
    "URL_ENV",
    "AfterPage",
    "ClientConfig",
    "SseEvent",
    "SseReader",
    "chat_event",
    "finish",
    "transport_error",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: Seconds for connecting and for each read of a management call.
DEFAULT_TIMEOUT_S = 30.0
#: Seconds to wait for a chat reply (or, streamed, between two pieces of it):
#: a turn waits on the model, with its retries.
DEFAULT_CHAT_TIMEOUT_S = 300.0

# The error codes a streamed turn's ``error`` event carries, with the status the
# same failure has as a whole answer (``popagent.web.errors``).
_STREAM_STATUS = {
    "validation_error": 422,
    "model_failed": 502,
    "database_unavailable": 503,
    "database_busy": 503,
}


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The settings of one client: where, which token, how long to wait."""

    base_url: str
    token: str | None
    timeout_s: float
    chat_timeout_s: float

    @classmethod
    def make(
        cls, base_url: str, token: str | None, timeout_s: float, chat_timeout_s: float
    ) -> ClientConfig:
        url = base_url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ClientError(f"base_url must be an http:// or https:// URL, not {base_url!r}")
        for name, value in (("timeout", timeout_s), ("chat_timeout", chat_timeout_s)):
            if not value > 0:
                raise ClientError(f"{name} must be a positive number of seconds, not {value!r}")
        if token is not None and (not token.strip() or "\n" in token):
            raise ClientError("token must be one non-empty line")
        return cls(url, token.strip() if token else None, timeout_s, chat_timeout_s)

    @classmethod
    def from_env(
        cls,
        base_url: str | None,
        env: Mapping[str, str] | None,
        timeout_s: float,
        chat_timeout_s: float,
    ) -> ClientConfig:
        """``POPAGENT_URL`` (default :data:`DEFAULT_URL`) and the server's own token
        settings, ``POPAGENT_TOKEN`` or ``POPAGENT_TOKEN_FILE``."""
        values = os.environ if env is None else env
        url = base_url or values.get(URL_ENV) or DEFAULT_URL
        token = _env_token(values)
        return cls.make(url, token, timeout_s, chat_timeout_s)

    def headers(self) -> dict[str, str]:
        headers = {"accept": "application/json", "user-agent": "popagent-client"}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_s)

    def timeout_for(self, call: Call[Any]) -> httpx.Timeout:
        if call.chat:
            return httpx.Timeout(self.timeout_s, read=self.chat_timeout_s)
        return self.timeout()


class AfterPage(Protocol[T_co]):
    """A page read after an id (``MessagePage``, ``ItemPage``), oldest first:
    ``next_after_id`` is the ``after_id`` of the next page, ``None`` on the last."""

    @property
    def items(self) -> tuple[T_co, ...]: ...

    @property
    def next_after_id(self) -> int | None: ...


def _env_token(values: Mapping[str, str]) -> str | None:
    token = values.get(TOKEN_ENV)
    if token:
        return token.strip()
    path = values.get(TOKEN_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip() or None
    except OSError as exc:
        raise ClientError(f"cannot read the token file {path}: {exc.strerror}") from exc


def transport_error(call: Call[Any], base_url: str, exc: httpx.HTTPError) -> ClientError:
    """The one-sentence error for a request that got no (complete) answer."""
    if isinstance(exc, httpx.TimeoutException):
        what = "timed out"
    elif isinstance(exc, httpx.ConnectError):
        what = "could not connect"
    else:
        what = "failed without an answer"
    return TransportError(f"{call.what} to {base_url} {what} ({type(exc).__name__}: {exc})")


def finish(call: Call[T], status: int, content: bytes) -> T:
    """The value of an answer to ``call``, or its error raised."""
    if status not in call.ok and status not in call.accept_errors:
        raise error_from_response(status, content, call.what)
    try:
        body = json.loads(content) if content else None
        return call.parse(body)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ClientError(
            f"{call.what} answered {status} with a body this client cannot read "
            f"({type(exc).__name__}: {exc}); is the server a popagent serve of this version?",
            status=status,
        ) from exc


@dataclass(frozen=True, slots=True)
class SseEvent:
    name: str
    data: str


class SseReader:
    """Server-sent events from lines (as ``httpx`` yields them, without line ends)."""

    def __init__(self) -> None:
        self._name = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        """The event a blank line completes, else ``None``."""
        if not line:
            if not self._data:
                self._name = "message"
                return None
            event = SseEvent(self._name, "\n".join(self._data))
            self._name, self._data = "message", []
            return event
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._name = value
        elif name == "data":
            self._data.append(value)
        return None


def chat_event(call: Call[Any], event: SseEvent) -> ChatDelta | ChatReply | None:
    """A chat stream's event as a value; an ``error`` event is raised, an unknown one
    skipped (``None``)."""
    if event.name not in ("delta", "done", "error"):
        return None
    try:
        body: Any = json.loads(event.data)
        if event.name == "delta":
            return ChatDelta(text=body["text"])
        if event.name == "done":
            return decode(ChatReply, body)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ClientError(
            f"{call.what} streamed a {event.name} event this client cannot read "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    code = body.get("error") if isinstance(body, dict) else None
    raise _stream_error(_STREAM_STATUS.get(str(code), 500), body, call.what)


def _stream_error(status: int, body: Any, what: str) -> PopagentError:
    return error_from_body(status, body, f"{what} (streamed)")
