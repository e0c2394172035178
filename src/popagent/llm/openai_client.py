"""``ChatModel`` over any OpenAI-compatible Chat Completions server.

Built on the official ``openai`` SDK's ``AsyncOpenAI`` client, with the SDK's
own retries switched off (``max_retries=0``) so that exactly one policy,
the one below, decides what is retried. Invariants:

* one call makes at most ``1 + settings.max_retries`` HTTP requests;
* only transient failures are retried: timeouts, lost connections and HTTP
  408, 409, 429 and 5xx (and whatever the server marks with
  ``x-should-retry``); anything else, HTTP 400/401/403/404/422 above all,
  fails on the first attempt;
* between attempts the wait is exponential with jitter, or the server's
  ``Retry-After``/``retry-after-ms`` when it sends one, and never longer
  than ``settings.backoff_max_s``;
* a stream that breaks after text reached ``on_text`` is never retried,
  since a second attempt would deliver that text twice;
* every failure leaves as ``ModelError``, except what ``on_text`` itself
  raises, which propagates untouched; the API key is in no message or log.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)

from popagent.llm.protocol import (
    ChatMessage,
    Completion,
    ModelError,
    TextCallback,
    ToolCall,
    ToolSpec,
)
from popagent.llm.settings import ModelSettings

__all__ = ["OpenAIChatModel"]

log = logging.getLogger(__name__)

# Local servers (Ollama, llama.cpp, vLLM without --api-key) ignore the key, but
# the SDK refuses to start without one.
_PLACEHOLDER_API_KEY = "not-needed"

_RETRYABLE_STATUS = frozenset({408, 409, 429})

# What the SDK raises for a failed request, and what a body that does not parse
# as the schema raises (pydantic's error is a ValueError too).
_REQUEST_ERRORS = (openai.APIError, ValueError)


class _Request(TypedDict):
    """What one Chat Completions request asks, the same whether it streams or not."""

    messages: list[ChatCompletionMessageParam]
    model: str
    tools: list[ChatCompletionToolUnionParam] | openai.Omit
    temperature: float | openai.Omit


class _AttemptFailed(Exception):
    """One attempt failed; carries what the retry policy needs to decide."""

    def __init__(
        self,
        what: str,
        *,
        transient: bool,
        status_code: int | None = None,
        retry_after: float | None = None,
        delivered: bool = False,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.transient = transient
        self.status_code = status_code
        self.retry_after = retry_after
        self.delivered = delivered


class OpenAIChatModel:
    """A ``ChatModel`` talking to ``settings.base_url``; close it with ``aclose()``."""

    def __init__(self, settings: ModelSettings) -> None:
        self._settings = settings
        self._client = openai.AsyncOpenAI(
            api_key=settings.api_key or _PLACEHOLDER_API_KEY,
            base_url=settings.base_url,
            timeout=openai.Timeout(settings.timeout_s, connect=settings.connect_timeout_s),
            max_retries=0,
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, provider={self.provider!r})"

    @property
    def model(self) -> str:
        return self._settings.model

    @property
    def provider(self) -> str:
        return self._settings.provider

    @property
    def settings(self) -> ModelSettings:
        return self._settings

    async def aclose(self) -> None:
        """Close the HTTP connections; the model is unusable afterwards."""
        await self._client.close()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        on_text: TextCallback | None = None,
    ) -> Completion:
        # The SDK's parameter types are TypedDict unions of exactly this wire
        # format; ``to_openai()`` is the one place that format is written.
        wire_tools = cast("list[ChatCompletionToolUnionParam]", [t.to_openai() for t in tools])
        request = _Request(
            messages=cast("list[ChatCompletionMessageParam]", [m.to_openai() for m in messages]),
            model=self.model,
            tools=wire_tools or openai.omit,
            temperature=_given(self._settings.temperature),
        )
        attempts = 1 + self._settings.max_retries
        for attempt in range(1, attempts + 1):
            try:
                if on_text is None:
                    return await self._complete_once(request)
                return await self._stream_once(request, on_text)
            except _AttemptFailed as failure:
                if failure.delivered or not failure.transient or attempt == attempts:
                    raise self._model_error(failure, attempt) from failure.__cause__
                delay = self._delay(attempt, failure.retry_after)
                log.warning(
                    "model request to %s failed (%s); retrying in %.2fs (attempt %d of %d)",
                    self.provider,
                    failure.what,
                    delay,
                    attempt + 1,
                    attempts,
                )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt always returns or raises")

    async def _complete_once(self, request: _Request) -> Completion:
        try:
            response = await self._client.chat.completions.create(**request)
        except _REQUEST_ERRORS as exc:
            raise self._failure(exc) from exc
        try:
            # A body that is not JSON comes back from the SDK as plain text.
            if not isinstance(response, ChatCompletion):
                raise ValueError(f"expected a JSON chat completion, got {type(response).__name__}")
            return _from_response(response, self.model)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise _AttemptFailed(f"malformed response: {exc}", transient=False) from exc

    async def _stream_once(self, request: _Request, on_text: TextCallback) -> Completion:
        try:
            stream = await self._client.chat.completions.create(
                **request,
                stream=True,
                # Servers that do not know the option ignore it; the final
                # usage chunk then simply never comes.
                stream_options={"include_usage": True},
            )
        except _REQUEST_ERRORS as exc:
            raise self._failure(exc) from exc
        assembly = _StreamAssembly()
        async with stream:
            while True:
                try:
                    chunk = await anext(stream)
                except StopAsyncIteration:
                    break
                except _REQUEST_ERRORS as exc:
                    raise self._failure(exc, delivered=assembly.delivered) from exc
                try:
                    text = assembly.add(chunk)
                except (AttributeError, TypeError, ValueError) as exc:
                    raise _AttemptFailed(
                        f"malformed stream chunk: {exc}",
                        transient=False,
                        delivered=assembly.delivered,
                    ) from exc
                if text:
                    assembly.delivered = True
                    # Outside every ``try``: what the callback raises is the
                    # caller's own error and must reach it unchanged.
                    await on_text(text)
        if not assembly.chunks:
            raise _AttemptFailed("the stream ended before any data", transient=True)
        return assembly.completion(self.model)

    def _failure(self, exc: Exception, *, delivered: bool = False) -> _AttemptFailed:
        """Classify what the SDK raised for one attempt."""
        if isinstance(exc, openai.APITimeoutError):
            return _AttemptFailed(
                f"timed out (no data within {self._settings.timeout_s:g}s)",
                transient=True,
                delivered=delivered,
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
            return _AttemptFailed(
                f"connection failed ({detail})", transient=True, delivered=delivered
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            headers = exc.response.headers
            transient = status in _RETRYABLE_STATUS or 500 <= status <= 599
            # OpenAI marks its own answers; trust that over the status code.
            should_retry = headers.get("x-should-retry", "").strip().lower()
            if should_retry in ("true", "false"):
                transient = should_retry == "true"
            return _AttemptFailed(
                f"HTTP {status}: {_error_detail(exc.body, exc.message)}",
                transient=transient,
                status_code=status,
                retry_after=_retry_after(headers.get("retry-after-ms"), headers.get("retry-after")),
                delivered=delivered,
            )
        if isinstance(exc, openai.APIError):
            # An error event inside an otherwise good stream, or a body that
            # failed validation: the server answered, and would answer the same.
            return _AttemptFailed(
                f"the server reported an error: {exc.message}", transient=False, delivered=delivered
            )
        return _AttemptFailed(f"malformed response: {exc}", transient=False, delivered=delivered)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        settings = self._settings
        if retry_after is not None:
            return min(retry_after, settings.backoff_max_s)
        base = min(settings.backoff_initial_s * 2.0 ** (attempt - 1), settings.backoff_max_s)
        # Jitter between half and all of the step, so that clients that failed
        # together do not come back together, yet the wait still grows.
        return base * (0.5 + random.random() / 2)

    def _model_error(self, failure: _AttemptFailed, attempts: int) -> ModelError:
        noun = "attempt" if attempts == 1 else "attempts"
        message = (
            f"chat completion from {self.provider} (model {self.model!r}) failed after "
            f"{attempts} {noun}: {failure.what}"
        )
        if failure.delivered:
            message += "; text had already been streamed, so it was not retried"
        elif not failure.transient:
            message += "; this failure is not retried"
        return ModelError(
            message,
            retryable=failure.transient and not failure.delivered,
            status_code=failure.status_code,
            attempts=attempts,
        )


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _StreamAssembly:
    """Collects stream chunks into one completion."""

    chunks: int = 0
    delivered: bool = False
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take one chunk in; return its text delta ('' when it has none)."""
        self.chunks += 1
        self.model = self.model or chunk.model or None
        if chunk.usage is not None:
            self.prompt_tokens = chunk.usage.prompt_tokens
            self.completion_tokens = chunk.usage.completion_tokens
        text: list[str] = []
        for choice in chunk.choices or ():
            if choice.index not in (0, None):
                continue  # only one choice is ever asked for
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            # A refusal is the reply the user should see, so it counts as text.
            for piece in (delta.content, delta.refusal):
                if piece:
                    text.append(piece)
            for call in delta.tool_calls or ():
                # Servers that send each call whole may leave out the index.
                index = call.index if isinstance(call.index, int) else len(self.calls)
                partial = self.calls.setdefault(index, _PartialCall())
                # Some servers repeat the id and name on every fragment; the
                # first one wins, only the arguments are pieces of a whole.
                partial.id = partial.id or call.id or None
                if call.function is not None:
                    partial.name = partial.name or call.function.name or None
                    if call.function.arguments:
                        partial.arguments.append(call.function.arguments)
        joined = "".join(text)
        self.text.append(joined)
        return joined

    def completion(self, fallback_model: str) -> Completion:
        calls = tuple(
            ToolCall(
                id=partial.id or _new_call_id(),
                name=partial.name or "",
                arguments="".join(partial.arguments),
            )
            for _, partial in sorted(self.calls.items())
        )
        text = "".join(self.text)
        return Completion(
            message=ChatMessage(
                role="assistant",
                content=None if calls and not text else text,
                tool_calls=calls,
            ),
            finish_reason=self.finish_reason,
            model=self.model or fallback_model,
            usage_prompt_tokens=self.prompt_tokens,
            usage_completion_tokens=self.completion_tokens,
        )


def _from_response(response: ChatCompletion, fallback_model: str) -> Completion:
    if not response.choices:
        raise ValueError("the response has no choices")
    choice = response.choices[0]
    message = choice.message
    calls = tuple(
        ToolCall(
            id=call.id or _new_call_id(),
            name=call.function.name or "",
            arguments=call.function.arguments or "",
        )
        for call in message.tool_calls or ()
        # Only function tools are ever offered, so only function calls can be
        # answered; anything else would be a call to a tool that does not exist.
        if isinstance(call, ChatCompletionMessageFunctionToolCall)
    )
    text = message.content if message.content is not None else message.refusal
    usage = response.usage
    return Completion(
        message=ChatMessage(
            role="assistant",
            content=text if text is not None or calls else "",
            tool_calls=calls,
        ),
        finish_reason=choice.finish_reason,
        model=response.model or fallback_model,
        usage_prompt_tokens=usage.prompt_tokens if usage is not None else None,
        usage_completion_tokens=usage.completion_tokens if usage is not None else None,
    )


def _given(value: float | None) -> float | openai.Omit:
    return openai.omit if value is None else value


def _new_call_id() -> str:
    # Some local servers send calls without an id; the tool result must still
    # be able to name the call it answers.
    return f"call_{uuid.uuid4().hex[:24]}"


def _error_detail(body: object, fallback: str) -> str:
    """The server's own words from an error body, kept short."""
    detail: object = body
    if isinstance(body, dict):
        detail = cast("dict[str, Any]", body).get("message") or body
    text = str(detail) if detail not in (None, "") else fallback
    return text if len(text) <= 300 else text[:297] + "..."


def _retry_after(milliseconds: str | None, seconds: str | None) -> float | None:
    """The server's requested wait in seconds, or ``None`` when it gave none usable."""
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000
        except ValueError:
            pass
        else:
            if math.isfinite(value) and value >= 0:
                return value
    if seconds is None:
        return None
    try:
        value = float(seconds)
    except ValueError:
        # The other form Retry-After may take is an HTTP date.
        try:
            parsed = email.utils.parsedate_to_datetime(seconds)
        except (TypeError, ValueError):
            return None
        return max(0.0, parsed.timestamp() - time.time())
    return value if math.isfinite(value) and value >= 0 else None
