"""The stdio reader in front of the SDK: every line gets an answer or a valid message.

The SDK's ``stdio_server`` parses each stdin line with pydantic and, when that
fails, hands the exception to its dispatcher, which drops it: a client that
sends invalid JSON, a batch, an envelope without ``jsonrpc`` or ``method``, or
a string holding a lone surrogate (``"\\ud800"``, which pydantic's parser
refuses) waits forever. ``screened_lines`` reads stdin itself and passes on
only the lines the SDK will accept; for every other line it writes the error
JSON-RPC 2.0 defines on the SDK's own write stream, and goes on reading:

- ``-32700`` (parse error, ``id: null``): not UTF-8, not JSON, nested too deep,
  or longer than ``MAX_LINE_BYTES``;
- ``-32602`` (invalid params, the request's id): a lone surrogate inside
  ``params``; the message names the tool argument (``argument 'query'``) or the
  parameter that holds it;
- ``-32600`` (invalid request, the id when one can be read, else ``null``): not
  a JSON object (arrays too: MCP has no batches), ``jsonrpc`` not ``"2.0"``, no
  string ``method``, ``params`` not an object, an ``id`` that is neither a
  string nor an integer (the SDK would take such a request for a notification
  and never answer it), or a lone surrogate outside ``params``.

Blank lines are skipped without an answer. Invalid messages are answered even
when they lack an id: the client cannot be told otherwise that its line was
not understood.

Invariants:
- A line is passed on only if the SDK's own parser accepts it, so the SDK never
  drops one; the check runs the same ``jsonrpc_message_adapter``.
- Errors go through the SDK's write stream, so they never interleave with its
  responses inside a line.
- stdin is read by a daemon thread with ``os.read`` on a private duplicate of
  fd 0 (fd 0 itself points at the null device while serving, as the SDK does
  for the streams it claims). A blocked read therefore never holds up a
  cancelled server (SIGTERM) nor the interpreter's exit, and no buffered-reader
  lock is left held at shutdown.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

__all__ = ["MAX_LINE_BYTES", "LineScreen", "claimed_stdin", "screen_line"]

#: The longest line read; a longer one is discarded up to its newline and answered
#: with a parse error, so a client cannot make the server hold unbounded input.
MAX_LINE_BYTES = 32 * 1024 * 1024
_CHUNK = 1024 * 1024


class _TooLong:
    """Marks a line that was cut off at ``MAX_LINE_BYTES``."""


_TOO_LONG = _TooLong()


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def _valid_id(value: Any) -> str | int | None:
    """``value`` if it can be echoed as a request id, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _unicode(value):
        return value
    return None


def _unicode(text: str) -> bool:
    """Does ``text`` encode as UTF-8 (no lone surrogate)?"""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(name: str) -> str:
    """``name`` safe to put in an error (a lone surrogate written as ``\\udXXX``)."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _surrogate_path(value: Any) -> tuple[str, ...] | None:
    """The path (keys and indexes) to the first string, or key, with a lone surrogate."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not _unicode(item):
                return path
        elif isinstance(item, dict):
            children: list[tuple[tuple[str, ...], Any]] = []
            for key, child in item.items():
                if not _unicode(key):
                    return (*path, key)
                children.append(((*path, key), child))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(((*path, str(i)), child) for i, child in reversed(list(enumerate(item))))
    return None


def _parse_reason(exc: ValidationError) -> str | None:
    """pydantic's message when it could not parse the JSON at all, else ``None``."""
    for detail in exc.errors(include_url=False):
        if detail["type"] == "json_invalid":
            return str(detail.get("ctx", {}).get("error") or detail["msg"])
    return None


def _surrogate_error(obj: Any, path: tuple[str, ...], request_id: str | int | None) -> JSONRPCError:
    what = "is not valid Unicode (it holds an unpaired surrogate)"
    shown = [_shown(p) for p in path]
    if isinstance(obj, dict) and path[0] == "params" and len(path) > 1:
        if obj.get("method") == "tools/call" and path[1] == "arguments" and len(path) > 2:
            where = f"argument '{shown[2]}'"
            if len(path) > 3:
                where += f" (at {'.'.join(shown[2:])})"
        else:
            where = f"parameter '{'.'.join(shown[1:])}'"
        return _error(request_id, INVALID_PARAMS, f"Invalid params: {where} {what}")
    return _error(request_id, INVALID_REQUEST, f"Invalid Request: '{'.'.join(shown)}' {what}")


def _envelope_problem(obj: dict[str, Any]) -> str:
    if obj.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in obj and _valid_id(obj["id"]) is None:
        return "id must be a string or an integer"
    if "method" in obj:
        if not isinstance(obj["method"], str):
            return "method must be a string"
        if "params" in obj and not isinstance(obj["params"], dict):
            return "params must be an object"
        return "the request does not match the JSON-RPC 2.0 request or notification shape"
    if "result" in obj or "error" in obj:
        return "the response does not match the JSON-RPC 2.0 response shape"
    return "method is missing (a request needs a string method)"


def _diagnose(text: str, exc: ValidationError) -> JSONRPCError:
    """The error for a line the SDK's parser refused."""
    reason = _parse_reason(exc)
    try:
        obj = json.loads(text)
    except RecursionError:
        return _error(None, PARSE_ERROR, "Parse error: the JSON is nested too deeply")
    except ValueError as parse:  # JSONDecodeError, or an integer too long to convert
        return _error(None, PARSE_ERROR, f"Parse error: {reason or parse}")
    request_id = _valid_id(obj.get("id")) if isinstance(obj, dict) else None
    path = _surrogate_path(obj)
    if path is not None:
        return _surrogate_error(obj, path, request_id)
    if reason is not None:  # parsed here, but not by pydantic (its nesting limit is lower)
        return _error(None, PARSE_ERROR, f"Parse error: {reason}")
    if isinstance(obj, list):
        return _error(None, INVALID_REQUEST, "Invalid Request: batches are not supported")
    if not isinstance(obj, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object")
    return _error(request_id, INVALID_REQUEST, f"Invalid Request: {_envelope_problem(obj)}")


def screen_line(raw: bytes) -> str | JSONRPCError | None:
    """One stdin line (without its newline): the text to pass on to the SDK, the
    error to answer instead, or ``None`` for a blank line."""
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _error(None, PARSE_ERROR, "Parse error: the line is not valid UTF-8")
    try:
        message = jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        return _diagnose(text, exc)
    if isinstance(message, JSONRPCNotification):
        # pydantic reads a request whose id is not a string or an integer as a
        # notification, which is never answered.
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if isinstance(obj, dict) and "id" in obj:
            return _error(
                None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer"
            )
    return text


def _pump(fd: int, deliver: Callable[[bytes | _TooLong], None]) -> None:
    """Read ``fd`` to its end, handing each line to ``deliver`` (run in a thread)."""
    pending = bytearray()
    too_long = False
    while chunk := os.read(fd, _CHUNK):
        parts = chunk.split(b"\n")
        for i, part in enumerate(parts):
            if i > 0:
                deliver(_TOO_LONG if too_long else bytes(pending))
                pending.clear()
                too_long = False
            if too_long:
                continue
            pending += part
            if len(pending) > MAX_LINE_BYTES:
                pending.clear()
                too_long = True
    if too_long:
        deliver(_TOO_LONG)
    elif pending:
        deliver(bytes(pending))


async def _read_lines(fd: int) -> AsyncIterator[bytes | _TooLong]:
    """The lines of ``fd``, read by a daemon thread; one line is buffered at a time."""
    send, receive = anyio.create_memory_object_stream[bytes | _TooLong](1)
    token = anyio.lowlevel.current_token()

    def run() -> None:
        # An error ends the thread quietly: the server stopped listening (it was
        # cancelled, or its loop is closed), so there is nobody left to tell.
        with suppress(Exception):
            _pump(fd, lambda line: anyio.from_thread.run(send.send, line, token=token))
        with suppress(Exception):
            anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=run, name="popagent-mcp-stdin", daemon=True).start()
    async with receive:
        async for line in receive:
            yield line


class LineScreen:
    """Screened stdin lines for ``stdio_server(stdin=...)``; errors go to ``write_stream``.

    Iterate ``lines()``; set ``write_stream`` to the SDK's write stream as soon as
    ``stdio_server`` yields it (an error waits until then).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._ready = anyio.Event()
        self._write_stream: Any = None

    @property
    def write_stream(self) -> Any:
        return self._write_stream

    @write_stream.setter
    def write_stream(self, stream: Any) -> None:
        self._write_stream = stream
        self._ready.set()

    async def lines(self) -> AsyncIterator[str]:
        async for raw in _read_lines(self._fd):
            if isinstance(raw, _TooLong):
                verdict: str | JSONRPCError | None = _error(
                    None,
                    PARSE_ERROR,
                    f"Parse error: the line is longer than {MAX_LINE_BYTES} bytes",
                )
            else:
                verdict = screen_line(raw)
            if isinstance(verdict, str):
                yield verdict
            elif verdict is not None:
                await self._ready.wait()
                try:
                    await self._write_stream.send(SessionMessage(verdict))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return


@contextmanager
def claimed_stdin() -> Iterator[int]:
    """A private duplicate of fd 0 to read the protocol from, with fd 0 itself
    pointed at the null device until exit (so nothing else reads the client's
    bytes). Falls back to fd 0 itself where it cannot be duplicated.

    The duplicate is never closed: the reading thread may still be blocked on it.
    """
    try:
        private = os.dup(0)
    except OSError:
        yield 0
        return
    os.set_inheritable(private, False)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
    except OSError:
        yield private
        return
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield private
    finally:
        with suppress(OSError):
            os.dup2(private, 0)
