"""A scripted OpenAI-compatible Chat Completions server for tests.

Serves ``POST /v1/chat/completions`` on 127.0.0.1 from a background thread,
in the real wire format: a JSON ``chat.completion`` body, or, when the request
asks for ``stream``, ``text/event-stream`` chunks ending in ``data: [DONE]``
with text split at word boundaries and tool-call arguments split across
chunks. Each request takes the next queued step; when the queue is empty the
answer is HTTP 500 "script exhausted", so an unexpected call fails loudly.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.background_server import BackgroundServer, OwnedHTTPServer, QuietHandler

__all__ = ["CallTools", "Fail", "Hang", "Reply", "Respond", "ScriptedModelServer", "Step"]


@dataclass(frozen=True)
class Reply:
    """Answer with text. ``cut_after``: drop the connection after that many text
    chunks (streaming) or half way through the body (non-streaming)."""

    text: str
    cut_after: int | None = None


@dataclass(frozen=True)
class CallTools:
    """Answer with tool calls ``[(name, arguments), ...]``, optionally after some text.

    Arguments given as a string are sent as they are (to script invalid JSON)."""

    calls: Sequence[tuple[str, dict[str, Any] | str]]
    text: str | None = None


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error; ``body`` defaults to an OpenAI-style error object."""

    status: int
    body: Any = None
    retry_after: float | None = None


@dataclass(frozen=True)
class Hang:
    """Wait ``seconds`` (or until the server closes), then answer with ``then``."""

    seconds: float
    then: Step = field(default_factory=lambda: Reply("late reply"))


@dataclass(frozen=True)
class Respond:
    """Compute the step from the request body."""

    fn: Callable[[dict[str, Any]], Step]


Step = Reply | CallTools | Fail | Hang | Respond


class ScriptedModelServer(BackgroundServer):
    """The server; use as a context manager, queue steps with ``script()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: deque[Step] = deque()
        self._requests: list[dict[str, Any]] = []
        self._closing = threading.Event()
        self._closed = False
        super().__init__(OwnedHTTPServer(self, _Handler, join_handlers=True))

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._steps)

    def script(self, *steps: Step) -> None:
        with self._lock:
            self._steps.extend(steps)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing.set()  # wakes any Hang
        super().close()

    def _take(self, body: dict[str, Any]) -> Step | None:
        with self._lock:
            self._requests.append(body)
            return self._steps.popleft() if self._steps else None


class _Handler(QuietHandler):
    server: OwnedHTTPServer[ScriptedModelServer]

    def do_POST(self) -> None:
        # The client may have given up (a timeout test); then there is no one to answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._serve()

    def _serve(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, _error(f"no route {self.path}", "not_found"))
            return
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        step = self.server.owner._take(body)
        while True:
            if step is None:
                self._json(500, _error("script exhausted", "server_error"))
                return
            if isinstance(step, Respond):
                try:
                    step = step.fn(body)
                except Exception as exc:
                    self._json(500, _error(f"Respond raised {exc!r}", "server_error"))
                    return
            elif isinstance(step, Hang):
                if self.server.owner._closing.wait(step.seconds):
                    return
                step = step.then
            elif isinstance(step, Fail):
                headers = (
                    {} if step.retry_after is None else {"Retry-After": f"{step.retry_after:g}"}
                )
                error = step.body if step.body is not None else _error(f"scripted {step.status}")
                self._json(step.status, error, headers)
                return
            else:
                self._answer(step, body)
                return

    def _answer(self, step: Reply | CallTools, body: dict[str, Any]) -> None:
        text = step.text
        calls = [] if isinstance(step, Reply) else list(step.calls)
        cut = step.cut_after if isinstance(step, Reply) else None
        model = str(body.get("model", "scripted"))
        usage = {
            "prompt_tokens": sum(
                len(str(m.get("content") or "").split()) for m in body["messages"]
            ),
            "completion_tokens": len((text or "").split()) + len(calls),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        finish = "tool_calls" if calls else "stop"
        head = {"id": "chatcmpl-scripted", "created": 1700000000, "model": model}
        wire_calls: list[dict[str, Any]] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)},
            }
            for i, (n, a) in enumerate(calls)
        ]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if wire_calls:
                message["tool_calls"] = wire_calls
            choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            payload = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
            data = json.dumps(payload).encode()
            self._start(200, "application/json", len(data))
            self.wfile.write(data if cut is None else data[: len(data) // 2])
            return
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        pieces = re.findall(r"\S+\s*|\s+", text or "")
        deltas += [{"content": piece} for piece in pieces]
        for i, call in enumerate(wire_calls):
            first = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
            deltas.append({"tool_calls": [{"index": i, **first}]})
            deltas += [
                {"tool_calls": [{"index": i, "function": {"arguments": part}}]}
                for part in _thirds(call["function"]["arguments"])
            ]
        chunk = {**head, "object": "chat.completion.chunk"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**chunk, "choices": [], "usage": usage})
        frames = [f"data: {json.dumps(e)}\n\n".encode() for e in events] + [b"data: [DONE]\n\n"]
        if cut is None:
            self._start(200, "text/event-stream", None)  # HTTP/1.0: the close ends the body
        else:
            # Promise the whole body, then break off: the client sees a truncated stream.
            self._start(200, "text/event-stream", sum(len(f) for f in frames))
            frames = frames[: 1 + cut]
        for frame in frames:
            self.wfile.write(frame)
            self.wfile.flush()

    def _start(self, status: int, content_type: str, length: int | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _thirds(text: str) -> list[str]:
    step = max(1, -(-len(text) // 3))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]
