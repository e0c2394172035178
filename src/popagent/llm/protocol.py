"""The seam between the agent turn pipeline and a chat model.

The pipeline speaks only these values; the wire format of the OpenAI Chat
Completions API appears in exactly two places, ``to_openai()`` here and the
client that sends it. Invariants:

* every value is frozen; a ``ChatMessage`` is checked when it is made, so a
  message that the wire format would reject (a tool result without the id of
  the call it answers, tool calls on a user message) cannot exist;
* a user message may carry ``attachments`` (``ImagePart``, ``FilePart``), sent
  after its text as Chat Completions content parts; each is checked when made
  (an http(s) or base64 ``data:`` URL, base64 file bytes);
* ``ToolCall.arguments`` is the raw JSON text the model sent, never parsed
  here: models emit invalid JSON often enough that the caller must decide;
* ``ChatModel.complete`` returns the whole assembled reply even when it
  streams, so streaming is only a way to see text early, never a different
  result.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from popagent.errors import ModelError, ValidationError

__all__ = [
    "ChatMessage",
    "ChatModel",
    "ChatRole",
    "Completion",
    "ContentPart",
    "FilePart",
    "ImagePart",
    "ModelError",
    "TextCallback",
    "ToolCall",
    "ToolSpec",
]

ChatRole = Literal["system", "user", "assistant", "tool"]
TextCallback = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for; ``arguments`` is the model's raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def _check_base64(field: str, data: str) -> None:
    if not data:
        raise ValidationError(field, "must not be empty")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValidationError(field, "must be base64") from exc


def _check_media_type(field: str, media_type: object) -> None:
    if not isinstance(media_type, str) or not _MEDIA_TYPE.fullmatch(media_type):
        raise ValidationError(field, f"must be a media type such as image/png: {media_type!r}")


_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][\w.+-]*/[A-Za-z0-9][\w.+-]*")
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image sent with a user message: an ``http(s)`` URL or a base64 ``data:`` URL.

    ``detail`` is the vision detail level (``auto``, ``low``, ``high``), or
    ``None`` to leave it to the server.
    """

    url: str
    detail: Literal["auto", "low", "high"] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str):
            raise ValidationError("url", "must be a string")
        data = _DATA_URL.fullmatch(self.url)
        if data is not None:
            _check_media_type("url", data.group(1))
            _check_base64("url", data.group(2))
        elif not self.url.startswith(("https://", "http://")) or len(self.url) <= 8:
            raise ValidationError("url", "must be an http(s) URL or a base64 data: URL")
        if self.detail not in (None, "auto", "low", "high"):
            raise ValidationError("detail", f"must be auto, low or high: {self.detail!r}")

    def to_openai(self) -> dict[str, Any]:
        image: dict[str, Any] = {"url": self.url}
        if self.detail is not None:
            image["detail"] = self.detail
        return {"type": "image_url", "image_url": image}


@dataclass(frozen=True, slots=True)
class FilePart:
    """A file sent with a user message: its bytes (``data``, base64), media type and name."""

    filename: str
    media_type: str
    data: str

    def __post_init__(self) -> None:
        if not isinstance(self.filename, str) or not self.filename.strip():
            raise ValidationError("filename", "a file needs a name")
        _check_media_type("media_type", self.media_type)
        if not isinstance(self.data, str):
            raise ValidationError("data", "must be a base64 string")
        _check_base64("data", self.data)

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "file",
            "file": {
                "file_data": f"data:{self.media_type};base64,{self.data}",
                "filename": self.filename,
            },
        }


ContentPart = ImagePart | FilePart


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation, as sent to or received from the model.

    ``tool_calls`` only on assistant messages; ``tool_call_id`` is required on
    (and only allowed on) tool results, since it is how the model matches a
    result to its call. ``content`` may be ``None`` only on an assistant
    message that carries tool calls. ``attachments`` only on user messages:
    content parts sent after the text, in order.
    """

    role: ChatRole
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    attachments: tuple[ContentPart, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant", "tool"):
            raise ValidationError("role", f"must be system, user, assistant or tool: {self.role!r}")
        if self.tool_calls and self.role != "assistant":
            raise ValidationError("tool_calls", "only an assistant message can call tools")
        if self.role == "tool" and not self.tool_call_id:
            raise ValidationError("tool_call_id", "a tool result must name the call it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValidationError("tool_call_id", "only a tool result answers a call")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValidationError(
                "content", "only an assistant message with tool calls may omit it"
            )
        if self.attachments:
            if self.role != "user":
                raise ValidationError("attachments", "only a user message carries attachments")
            if not all(isinstance(a, ImagePart | FilePart) for a in self.attachments):
                raise ValidationError("attachments", "must be ImagePart or FilePart values")

    def to_openai(self) -> dict[str, Any]:
        """The Chat Completions wire form of this message; with attachments the
        content is a list of parts: the text (unless empty), then each attachment."""
        content: Any = self.content
        if self.attachments:
            text = [{"type": "text", "text": self.content}] if self.content else []
            content = text + [part.to_openai() for part in self.attachments]
        wire: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            wire["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            wire["tool_call_id"] = self.tool_call_id
        # The wire schema has no ``name`` on tool results; strict servers reject
        # unknown keys, so it is only sent where the schema defines it.
        if self.name is not None and self.role != "tool":
            wire["name"] = self.name
        return wire


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the model may call; ``parameters`` is its JSON Schema (read-only)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("name", "a tool needs a name")

    def to_openai(self) -> dict[str, Any]:
        # A copy, so nothing downstream (the SDK, a test) can mutate the spec.
        parameters = copy.deepcopy(self.parameters) or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }


@dataclass(frozen=True, slots=True)
class Completion:
    """The model's whole reply to one request.

    ``message`` is always an assistant message. Usage counts are ``None``
    when the server did not report them (many local servers do not when
    streaming).
    """

    message: ChatMessage
    finish_reason: str | None
    model: str
    usage_prompt_tokens: int | None
    usage_completion_tokens: int | None


class ChatModel(Protocol):
    """What the turn pipeline needs from a model.

    ``model`` is the model name; ``provider`` is a short, stable name of where
    requests go (for an HTTP model, the base URL's host and port), compared
    across turns to notice that the provider changed.
    """

    @property
    def model(self) -> str: ...

    @property
    def provider(self) -> str: ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        on_text: TextCallback | None = None,
    ) -> Completion:
        """Ask for the next assistant message.

        With ``on_text`` the implementation streams and awaits it with each
        text delta in order; the returned completion is the same as without
        it (text joined, tool calls assembled). Raises ``ModelError``.
        """
        ...
