"""Token counts for messages and observations, offline and deterministic.

Observational memory decides when to observe and reflect by counting tokens,
so the count must be cheap, need nothing at run time (no model, vocabulary or
network), and treat a message the same way whether it is a ``ChatMessage`` on
its way to the model or the stored ``Message`` it came from. Observation text
is counted with the same text estimate.

``EstimateCounter`` (the default) is a pure-Python estimate of the o200k BPE
tokenizer (GPT-4o and later): one regular expression cuts text the way a
GPT-style pre-tokenizer does, with each match sized to stand for about one
token (see ``_PIECE``), and the count is the number of matches.
``ExactTokenCounter`` counts with the real o200k vocabulary when the optional
``bpe-openai`` package is installed (``pip install 'popagent[tokens]'``; its
wheel embeds the vocabulary, so it downloads nothing either) and falls back to
the estimate otherwise. ``bench/tokens.py`` measures the estimate against it;
the measured error is in ``docs/observational-memory.md``, "Token counting".

How a message is counted (the same for both counters):

* its text, plus ``TOKENS_PER_MESSAGE`` for the frame every chat message has;
* a ``name`` on a system/user/assistant message: ``TOKENS_PER_NAME`` plus the
  name's text;
* each tool call: ``TOKENS_PER_TOOL_CALL`` plus the text
  ``{"id":"…","name":"…","arguments":…}`` (the raw arguments embedded as they
  are, not escaped again); a stored ``tool_call`` part renders to the same text;
* a tool result: its text plus ``{"tool_call_id":"…","name":"…"}``, from the
  ``ChatMessage`` fields or from the stored ``tool_result`` part alike;
* an attachment part: see ``attachment_tokens`` (images by OpenAI's tile rule);
* a ``ChatMessage``'s forwarded attachments: an ``ImagePart`` costs
  ``image_tokens`` of an image of unknown size, a ``FilePart`` its file name;
* any other part: its JSON (keys sorted, compact); ``reasoning`` and
  ``data-*`` parts are skipped, as they are never sent back to a model;
* a conversation adds ``TOKENS_PER_CONVERSATION`` once (the primed reply).

Overheads are added fresh on every count and never cached with the text; the
estimate runs at several MB/s, so nothing is cached at all.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from ..llm.protocol import ChatMessage, ImagePart
from ..models import Message

__all__ = [
    "IMAGE_BASE_TOKENS",
    "IMAGE_TILE_TOKENS",
    "IMAGE_UNKNOWN_TILES",
    "TOKENS_PER_CONVERSATION",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOKENS_PER_TOOL_CALL",
    "EstimateCounter",
    "ExactTokenCounter",
    "TokenCounter",
    "attachment_tokens",
    "count_conversation",
    "count_message",
    "count_text",
    "default_counter",
    "image_tokens",
]

#: The frame of one chat message (start marker, role, separator, end marker),
#: as in OpenAI's published counting recipe for its chat models.
TOKENS_PER_MESSAGE = 3
#: A ``name`` on a message costs this beyond the name's own text (same recipe).
TOKENS_PER_NAME = 1
#: Every conversation primes the reply (``<|start|>assistant<|message|>``).
TOKENS_PER_CONVERSATION = 3
#: A tool call's own frame and recipient header (``to=functions.NAME``, the
#: argument format), beyond its id, name and arguments. An estimate: providers
#: do not publish it, and it differs between them by a few tokens.
TOKENS_PER_TOOL_CALL = 7
#: OpenAI's image rule: every image costs the base; at ``detail`` ``high`` or
#: ``auto`` each 512-pixel tile of the scaled image adds the tile cost.
IMAGE_BASE_TOKENS = 85
IMAGE_TILE_TOKENS = 170
#: Tiles assumed when an image's dimensions are unknown (a 1024x1024 image).
IMAGE_UNKNOWN_TILES = 4

_UPPER = r"A-Z\u00c0-\u00d6\u00d8-\u00de"
_LOWER = r"a-z\u00aa\u00b5\u00ba\u00df-\u00f6\u00f8-\u00ff\u0100-\u024f\u1e00-\u1eff"
_CYRILLIC = r"\u0400-\u052f"
_GREEK = r"\u0370-\u03ff"
# Armenian, Hebrew, Arabic, the Indic scripts, Thai, Lao, Georgian.
_OTHER = r"\u0530-\u06ff\u0750-\u077f\u0900-\u0eff\u10a0-\u10ff"
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HANGUL = r"\uac00-\ud7af"
_CONTRACTION = r"(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?"
# Python's \s for ASCII text, spelt out for the bytes pattern.
_ASCII_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f "


def _pieces(*, upper: str, lower: str, digit: str, word: str, space: str, scripts: bool) -> str:
    """The alternatives of the estimate, from its character classes (see ``_PIECE``)."""
    prefix = rf"[^\r\n{word}]?_?"  # a space or a mark, then "_", may start a word
    alternatives = [
        rf" [{lower}]{{1,9}}{_CONTRACTION}",  # the commonest token first: " word"
        rf"(?<=[{lower}])[{lower}]{{1,4}}{_CONTRACTION}",  # a long word goes on
        rf"{prefix}(?:[{upper}]?[{lower}]{{1,9}}|[{upper}]{{1,3}}){_CONTRACTION}",
        rf"[{digit}]{{1,3}}",
        rf" ?[^{space}{word}]{{1,3}}[\r\n]*",
        rf"[{space}]*[\r\n]+",
        rf"[{space}]+(?![^{space}])",
    ]
    if scripts:
        alternatives += [
            rf"{prefix}[{_CYRILLIC}]{{1,6}}",
            rf"{prefix}[{_GREEK}]{{1,3}}",
            rf"{prefix}[{_OTHER}]{{1,4}}",
            rf"[{_CJK}]",
            rf"{prefix}[{_HANGUL}]",
        ]
    return "|".join([*alternatives, r"_{1,3}", rf"[{space}]", rf"[^{space}]"])


# Each match stands for about one token of o200k. The cuts follow o200k's own
# pre-tokenizer (a word takes one leading space or mark and its contraction; a
# capital starts a new word; digits go in threes; a punctuation run takes one
# leading space and its newlines; whitespace before a word leaves it one
# space), then long runs are cut in chunks, as BPE splits rarer, longer words:
# a Latin word is one token up to 9 letters and one more per 4 after that, an
# acronym one per 3 capitals, Cyrillic one per 6 letters, Greek one per 3,
# other alphabets one per 4, a punctuation run one per 3 marks, CJK and Hangul
# one per character, less one per 4 in a row (``_DENSE``). The order of the
# alternatives is part of the rule; the last counts any other character.
_PIECE = re.compile(
    _pieces(upper=_UPPER, lower=_LOWER, digit=r"\d", word=r"\w", space=r"\s", scripts=True)
)
# The same rule for ASCII text, matched as bytes: about 1.5 times as fast, as
# a bytes pattern tests its classes by table instead of by Unicode lookups.
_ASCII_PIECE = re.compile(
    _pieces(
        upper="A-Z", lower="a-z", digit="0-9", word="0-9A-Za-z_", space=_ASCII_SPACE, scripts=False
    ).encode("ascii")
)
_DENSE = re.compile(rf"[{_CJK}{_HANGUL}]{{4}}")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text; message and conversation rules build on it.

    ``name`` says what the count is (``estimate`` or an encoding's name).
    ``count_text`` must be deterministic, return 0 for ``""`` and never count
    fewer tokens when more text is appended at a whitespace character (inside
    a word it may: "I'" is two tokens, "I'm" one, for a real BPE too).
    """

    @property
    def name(self) -> str: ...

    def count_text(self, text: str) -> int: ...


class EstimateCounter:
    """The default counter: an offline estimate of o200k token counts (see the module doc)."""

    @property
    def name(self) -> str:
        return "estimate"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        # subn counts the matches without building a list of them.
        if text.isascii():
            return _ASCII_PIECE.subn(b"", text.encode("ascii"))[1]
        return _PIECE.subn("", text)[1] - len(_DENSE.findall(text))


class ExactTokenCounter:
    """Exact counts with the real vocabulary of ``encoding`` from ``bpe-openai``.

    Optional: without the package (``popagent[tokens]``) it counts with the
    estimate and ``exact`` is false. The package embeds its vocabulary in the
    wheel, so nothing is downloaded at run time.
    """

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in ("o200k_base", "cl100k_base"):
            raise ValueError("encoding must be o200k_base or cl100k_base")
        self._fallback = EstimateCounter()
        self._encoding = _load_encoding(encoding)
        if self._encoding is None:
            self._name = f"{self._fallback.name} (bpe-openai not installed)"
        else:
            self._name = encoding

    @property
    def exact(self) -> bool:
        return self._encoding is not None

    @property
    def name(self) -> str:
        return self._name

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if self._encoding is None:
            return self._fallback.count_text(text)
        # The package refuses a text of a million characters or 200,000
        # tokens, so a long text is counted in pieces cut where a piece of the
        # tokenizer's own must end anyway (after newlines that are followed by
        # neither a space nor "/", or before a space and a letter), which
        # leaves the count exact; a text with neither for 20,000 characters is
        # cut where it must.
        total, start = 0, 0
        while len(text) - start > _EXACT_CHUNK:
            cut = _CUT.search(text, start + _EXACT_CHUNK // 2, start + _EXACT_CHUNK)
            end = cut.end() if cut else start + _EXACT_CHUNK
            total += len(self._encoding.encode_ordinary(text[start:end]))
            start = end
        return total + len(self._encoding.encode_ordinary(text[start:]))


_ENCODINGS: dict[str, Any] = {}


def _load_encoding(encoding: str) -> Any:
    """The package's encoding (loaded once: it unpacks the whole vocabulary), or None."""
    if encoding not in _ENCODINGS:
        with warnings.catch_warnings():
            # bpe-openai 0.1.4 reads its vocabulary with a deprecated importlib API.
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                import bpe_openai
            except ImportError:
                return None
            _ENCODINGS[encoding] = bpe_openai.get_encoding(encoding)
    return _ENCODINGS[encoding]


_DEFAULT = EstimateCounter()
# At most four tokens a character even for rare symbols: under the 200,000.
_EXACT_CHUNK = 40_000
_CUT = re.compile(r"[\r\n]+(?=[^\s/])|(?= [A-Za-z])")


def default_counter() -> TokenCounter:
    """The counter popagent uses unless told otherwise: the offline estimate."""
    return _DEFAULT


def count_text(text: str, counter: TokenCounter | None = None) -> int:
    """Tokens of a bare text (an observation log, a prompt block): no overhead."""
    return (counter or _DEFAULT).count_text(text)


def count_message(message: ChatMessage | Message, counter: TokenCounter | None = None) -> int:
    """Tokens of one message with its frame, tool calls, results and parts.

    A stored ``Message`` and the ``ChatMessage`` rebuilt from it count the same.
    """
    c = counter or _DEFAULT
    total = TOKENS_PER_MESSAGE + c.count_text(message.content or "")
    if isinstance(message, ChatMessage):
        for call in message.tool_calls:
            total += _tool_call_tokens(call.id, call.name, call.arguments, c)
        if message.role == "tool":
            total += c.count_text(_result_text(message.tool_call_id or "", message.name))
        elif message.name:
            total += TOKENS_PER_NAME + c.count_text(message.name)
        for attachment in message.attachments:
            if isinstance(attachment, ImagePart):
                total += image_tokens(None, None, detail=attachment.detail or "auto")
            else:
                total += c.count_text(attachment.filename)
        return total
    for part in message.parts:
        total += _part_tokens(part, c)
    return total


def count_conversation(
    messages: Iterable[ChatMessage | Message], counter: TokenCounter | None = None
) -> int:
    """Tokens of a whole request's messages: each message plus the primed reply."""
    c = counter or _DEFAULT
    return TOKENS_PER_CONVERSATION + sum(count_message(m, c) for m in messages)


def attachment_tokens(part: Mapping[str, Any], counter: TokenCounter | None = None) -> int:
    """Tokens of an ``attachment`` part, by a heuristic.

    An image (``media_type`` ``image/*``) costs its name's text plus
    ``image_tokens`` of its ``width``, ``height`` and ``detail`` when the part
    has them. Another file with extracted ``text`` costs its name and that
    text; without it only its metadata (the part's JSON without ``data``) is
    counted, since popagent cannot know what the model makes of the bytes.
    """
    c = counter or _DEFAULT
    name = part.get("name")
    name_tokens = c.count_text(name) if isinstance(name, str) else 0
    media_type = part.get("media_type")
    if isinstance(media_type, str) and media_type.lower().startswith("image/"):
        detail = part.get("detail")
        return name_tokens + image_tokens(
            _dimension(part.get("width")),
            _dimension(part.get("height")),
            detail=detail if isinstance(detail, str) else "auto",
        )
    text = part.get("text")
    if isinstance(text, str):
        return name_tokens + c.count_text(text)
    return c.count_text(_json({k: v for k, v in part.items() if k not in ("type", "data")}))


def image_tokens(width: int | None, height: int | None, *, detail: str = "auto") -> int:
    """OpenAI's rule for one image: 85, plus 170 per 512-pixel tile unless ``detail`` is low.

    The image is scaled to fit 2048x2048, then so that its short side is at
    most 768 pixels, and tiled in 512-pixel squares. Unknown dimensions count
    ``IMAGE_UNKNOWN_TILES`` tiles.
    """
    if detail == "low":
        return IMAGE_BASE_TOKENS
    if not width or not height or width <= 0 or height <= 0:
        return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * IMAGE_UNKNOWN_TILES
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * tiles


def _part_tokens(part: Mapping[str, Any], c: TokenCounter) -> int:
    kind = part.get("type")
    if kind == "tool_call":
        return _tool_call_tokens(
            _str(part.get("id")), _str(part.get("name")), _str(part.get("arguments")), c
        )
    if kind == "tool_result":
        name = part.get("name")
        return c.count_text(
            _result_text(_str(part.get("tool_call_id")), name if isinstance(name, str) else None)
        )
    if kind == "attachment":
        return attachment_tokens(part, c)
    if kind == "reasoning" or (isinstance(kind, str) and kind.startswith("data-")):
        return 0
    return c.count_text(_json(part))


def _tool_call_tokens(call_id: str, name: str, arguments: str, c: TokenCounter) -> int:
    # The arguments are already JSON text: embedded as they are, so their
    # quotes are not escaped (and counted) twice.
    text = f'{{"id":{_quote(call_id)},"name":{_quote(name)},"arguments":{arguments or "{}"}}}'
    return TOKENS_PER_TOOL_CALL + c.count_text(text)


def _result_text(tool_call_id: str, name: str | None) -> str:
    if name:
        return f'{{"tool_call_id":{_quote(tool_call_id)},"name":{_quote(name)}}}'
    return f'{{"tool_call_id":{_quote(tool_call_id)}}}'


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dimension(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value
