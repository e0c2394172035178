"""Splitting a memory's text into the pieces that are embedded.

Small models read a few hundred tokens (all-MiniLM-L6-v2: 256 word pieces,
about 1,000 characters of English); an episode may hold 12,000. A memory is
therefore embedded as one or more *chunks*, and vector search scores a memory
by its best chunk. Invariants: the chunks of a text cover all of it in order;
each is at most ``max_chars`` long unless a single word is longer; a text that
fits is one chunk, unchanged; at most ``max_chunks`` chunks are made (the rest
of a very long text is not embedded: its words still count lexically).
"""

from __future__ import annotations

import re

__all__ = ["MAX_CHARS", "MAX_CHUNKS", "chunk_text"]

MAX_CHARS = 1_000
MAX_CHUNKS = 16

# Break after a line end, a sentence end, or at least between words.
_BREAKS = (re.compile(r"\n+"), re.compile(r"(?<=[.!?])\s+"), re.compile(r"\s+"))


def chunk_text(text: str, *, max_chars: int = MAX_CHARS, max_chunks: int = MAX_CHUNKS) -> list[str]:
    """The chunks of ``text`` (see the module docstring); ``[]`` for blank text."""
    text = text.strip()
    if not text:
        return []
    if len(text) <= max_chars:
        return [text]
    chunks: list[str] = []
    rest = text
    while rest and len(chunks) < max_chunks:
        if len(rest) <= max_chars:
            chunks.append(rest)
            break
        cut = _cut(rest, max_chars)
        chunks.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    return [c for c in chunks if c]


def _cut(text: str, max_chars: int) -> int:
    """Where to end the next chunk: the last break of the strongest kind that leaves
    the chunk at least half full, else a hard cut."""
    window = text[: max_chars + 1]
    for pattern in _BREAKS:
        ends = [
            m.end() for m in pattern.finditer(window) if max_chars // 2 <= m.start() <= max_chars
        ]
        if ends:
            return ends[-1]
    return max_chars
