"""Reading an import file: its lines and their JSON, hostile input refused by line number.

An import file comes from outside and may be anything: not UTF-8, one line of
a gigabyte, JSON nested a hundred thousand levels deep, an integer of ten
thousand digits, ``NaN``. Each is refused with ``ValidationError`` whose field
is ``line N`` (the CLI exits with 2), never with a traceback, and at a cost
linear in the input:

- ``read_lines`` reads a binary stream line by line, never more than
  ``LINE_CAP`` bytes of one line (a longer line is refused before the rest of
  it is read), so memory stays bounded whatever the file holds;
- ``parse_line`` decodes one line as UTF-8 (a byte-order mark at the start of
  the file is skipped; a CR before the LF is JSON whitespace) and parses it as
  JSON, refusing ``NaN`` and infinities, integers beyond Python's 4,300 digits,
  and nesting deeper than ``MAX_DEPTH`` (as the line's error, whatever layer
  of the parser notices).

Blank lines (JSON whitespace only) are skipped by the importers.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterator
from typing import IO, Any

from ..errors import ValidationError

__all__ = [
    "LINE_CAP",
    "MAX_DEPTH",
    "DocumentReader",
    "decode_line",
    "is_blank_line",
    "line_error",
    "parse_line",
    "read_lines",
]

#: The longest line read, in bytes. A record's largest text is a message's content
#: or item (1,000,000 characters each, up to 4 bytes a character in UTF-8).
LINE_CAP = 16 * 1024 * 1024
#: The deepest nesting of arrays and objects a line may hold.
MAX_DEPTH = 128
_JSON_BLANK = " \t\r\n"
_BOM = "\ufeff"


def line_error(lineno: int, message: str) -> ValidationError:
    return ValidationError(f"line {lineno}", message)


def read_lines(stream: IO[bytes], *, cap: int = LINE_CAP) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of a binary stream, from 1; a line longer than ``cap``
    bytes is refused (``line N``) after reading at most ``cap + 1`` bytes of it."""
    lineno = 0
    while True:
        raw = stream.readline(cap + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > cap and not raw.endswith(b"\n"):
            raise line_error(lineno, f"is longer than {cap:,} bytes, the most a record may take")
        yield lineno, raw


def decode_line(lineno: int, raw: str | bytes) -> str:
    """The line as text: UTF-8, with a byte-order mark at the start of the file dropped."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise line_error(
                lineno,
                f"is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} "
                "of the line); an export is UTF-8 text",
            ) from None
    else:
        text = raw
    if lineno == 1 and text.startswith(_BOM):
        text = text[1:]
    return text.rstrip("\r\n")


def is_blank_line(text: str) -> bool:
    return not text.strip(_JSON_BLANK)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


class _DuplicateKey(ValueError):
    """An object names a key twice: JSON leaves it to the reader, and Python's reader
    would keep the last silently. A record names each field once, so it is refused."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)  # in C; the slow search below runs for a refused line only
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(
                    f"holds the key {key[:40]!r} twice in one object (each field is named once)"
                )
            seen.add(key)
    return value


_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_unique_keys
)


def _too_deep(value: object, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in ``value`` (iterative)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_line(lineno: int, text: str) -> object:
    """One line's JSON value; ``ValidationError`` (``line N``) for anything that is not
    plain JSON within the limits (module doc)."""
    if text.startswith(_BOM):
        raise line_error(
            lineno, "starts with a byte-order mark (U+FEFF): only the file's first line may"
        )
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        reason = exc.msg.removesuffix(" at")
        raise line_error(lineno, f"is not valid JSON ({reason} at column {exc.colno})") from None
    except RecursionError:
        raise line_error(
            lineno, f"nests arrays or objects too deeply (at most {MAX_DEPTH} levels)"
        ) from None
    except _DuplicateKey as exc:
        raise line_error(lineno, str(exc)) from None
    except ValueError as exc:
        reason = str(exc)
        if "integer string conversion" in reason:
            reason = "an integer has more than 4,300 digits"
        raise line_error(lineno, f"is not valid JSON here ({reason})") from None
    # Counting brackets is cheap; the walk runs only for a line that could be too deep.
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(value, MAX_DEPTH):
        raise line_error(lineno, f"nests arrays or objects too deeply (at most {MAX_DEPTH} levels)")
    return value


# --- one JSON document, element by element ------------------------------------------------

_CHUNK = 1 << 16
# What a value's end is looked for by: a string (escapes and all), a bracket, the
# end of a number or literal.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRUCTURE = re.compile(r'["\[\]{}]')
_SCALAR_END = re.compile(r"[,\]}\s]")
_BLANK_RUN = re.compile(r"[ \t\r\n]*")
_TOO_DEEP = f"nests arrays or objects too deeply (at most {MAX_DEPTH} levels)"


class DocumentReader:
    """A JSON document read piece by piece from a stream (bytes of UTF-8, or text).

    The caller walks the document's outer structure (``peek``, ``take``) and has
    each element parsed whole (``value``), so memory holds one element (at most
    ``cap`` characters) however long the document. Finding an element's end is a
    scan that never goes back (strings skipped by one regular-expression match
    each, brackets counted), so the whole read is linear in the document's
    length. Errors are ``ValidationError`` whose field starts with the line the
    problem is on (``line 3: results[2]``).
    """

    def __init__(self, stream: IO[bytes] | IO[str], *, cap: int = LINE_CAP) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._buffer = ""
        self._pos = 0
        self._line = 1  # the line of self._pos
        self._eof = False
        self._started = False
        self._cap = cap

    def _fill(self) -> bool:
        """Read more of the stream (dropping what was consumed); ``False`` at its end.
        Offsets relative to ``self._pos`` stay valid."""
        if self._eof:
            return False
        if self._pos:
            self._buffer = self._buffer[self._pos :]
            self._pos = 0
        chunk = self._stream.read(max(_CHUNK, len(self._buffer)))
        if isinstance(chunk, bytes):
            try:
                text = self._decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                # Lines so far, and within this chunk up to the bad byte.
                line = self._line + self._buffer.count("\n", self._pos)
                line += exc.object.count(b"\n", 0, exc.start)
                raise line_error(
                    line,
                    f"is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x}); "
                    "the document must be UTF-8 text",
                ) from None
        else:
            text = chunk
        if not chunk:
            self._eof = True
        if not self._started and text:
            self._started = True
            text = text.removeprefix(_BOM)
        self._buffer += text
        return bool(chunk)

    def _advance(self, to: int) -> None:
        self._line += self._buffer.count("\n", self._pos, to)
        self._pos = to

    def fail(self, where: str, message: str) -> ValidationError:
        return ValidationError(f"line {self._line}: {where}", message)

    def peek(self) -> str:
        """The next character that is not JSON whitespace ('' at the end)."""
        while True:
            blank = _BLANK_RUN.match(self._buffer, self._pos)
            assert blank is not None  # it matches the empty string
            self._advance(blank.end())
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._fill():
                return ""

    def take(self, where: str, expected: str) -> str:
        """Consume the next character, one of ``expected``."""
        ch = self.peek()
        if ch == "" or ch not in expected:
            shown = repr(ch) if ch else "the end of the document"
            wanted = " or ".join(repr(c) for c in expected)
            raise self.fail(where, f"is not valid JSON (expected {wanted}, found {shown})")
        self._advance(self._pos + 1)
        return ch

    def _length(self, where: str) -> int:
        """The length of the value at ``self._pos`` (reading as much as it takes), or of
        what there is when the document ends first (the parse then says what is wrong)."""
        depth = 0
        at = 0  # relative to self._pos
        while True:
            if at > self._cap:
                raise self.fail(
                    where, f"is larger than {self._cap:,} characters, the most one may take"
                )
            text, base = self._buffer, self._pos
            if depth == 0 and at == 0 and text[base] not in '"[{':
                end = _SCALAR_END.search(text, base)
                if end is not None:
                    return end.start() - base
            else:
                found = _STRUCTURE.search(text, base + at)
                if found is not None:
                    ch = found.group()
                    if ch == '"':
                        string = _STRING.match(text, found.start())
                        if string is not None:
                            at = string.end() - base
                            if depth == 0:
                                return at
                            continue
                    else:
                        depth += 1 if ch in "[{" else -1
                        at = found.end() - base
                        if depth <= 0:
                            return at
                        continue
            if not self._fill():
                return len(self._buffer) - self._pos

    def value(self, where: str) -> object:
        """The next JSON value, whole, within the limits of ``parse_line``."""
        if self.peek() == "":
            raise self.fail(where, "is not valid JSON (the document ends before it)")
        length = self._length(where)
        text = self._buffer[self._pos : self._pos + length]
        try:
            value = _DECODER.decode(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"line {self._line + exc.lineno - 1}: {where}",
                f"is not valid JSON ({exc.msg})",
            ) from None
        except RecursionError:
            raise self.fail(where, _TOO_DEEP) from None
        except _DuplicateKey as exc:
            raise self.fail(where, str(exc)) from None
        except ValueError as exc:
            reason = str(exc)
            if "integer string conversion" in reason:
                reason = "an integer has more than 4,300 digits"
            raise self.fail(where, f"is not valid JSON here ({reason})") from None
        if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(value, MAX_DEPTH):
            raise self.fail(where, _TOO_DEEP)
        self._advance(self._pos + length)
        return value

    def end(self) -> None:
        """Refuse anything but whitespace after the document."""
        if self.peek() != "":
            raise self.fail("document", "is not valid JSON (more data after the document)")
