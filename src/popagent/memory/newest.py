"""The newest value first: among recalled memories about the same thing, the newer
one ranks before the older for a question in the present tense.

Keyed facts hold one value per key by construction; episodes and keyless facts
do not, so "I have three cats now", said weeks after "I have two cats", could
rank below it. ``newest_first`` reorders a ranked list without a model: two
results are about the same thing when both hold a word of the question and they
share enough of their own content words (``SAME_TOPIC``, the overlap
coefficient of their sets of content words); of such a pair the newer
(``created_at``) takes the older's place and the older moves down behind it.
Scores are kept as ranked: each result still explains its own.

A question about a past period or an earlier value ("in 2021", "before this
one", ``memory.versions.past_period``) is left as ranked: there the older may
be the answer. Pure, and linear in the results' text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..models import RecallResult

__all__ = ["SAME_TOPIC", "content_words", "newest_first", "same_topic"]

#: Least overlap coefficient of two memories' content words for them to be about
#: the same thing (with a word of the question in both).
SAME_TOPIC = 0.2

_WORD = re.compile(r"[^\W\d_]{3,}")
# Words that carry no topic: function words, and the speaker labels of episodes.
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "your",
        "yours",
        "all",
        "any",
        "can",
        "had",
        "has",
        "have",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "its",
        "our",
        "ours",
        "out",
        "she",
        "they",
        "them",
        "their",
        "theirs",
        "this",
        "that",
        "these",
        "those",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "could",
        "should",
        "from",
        "into",
        "onto",
        "over",
        "under",
        "about",
        "than",
        "then",
        "there",
        "here",
        "been",
        "being",
        "just",
        "also",
        "very",
        "really",
        "now",
        "still",
        "some",
        "more",
        "most",
        "much",
        "many",
        "such",
        "only",
        "own",
        "same",
        "too",
        "did",
        "does",
        "doing",
        "done",
        "get",
        "got",
        "gets",
        "let",
        "lets",
        "may",
        "might",
        "must",
        "shall",
        "yes",
        "yeah",
        "okay",
        "well",
        "like",
        "know",
        "think",
        "want",
        "going",
        "user",
        "assistant",
        "today",
        "yesterday",
        "tomorrow",
    ]
)


def content_words(text: str) -> frozenset[str]:
    """The lower-cased words of ``text`` that can name a topic (3+ letters, no stop word)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


def same_topic(a: frozenset[str], b: frozenset[str], asked: frozenset[str]) -> bool:
    """Whether two memories (their content words) answer the same words of the question."""
    if not a or not b:
        return False
    shared = a & b
    if not shared & asked:
        return False
    return len(shared) / min(len(a), len(b)) >= SAME_TOPIC


def newest_first(results: Sequence[RecallResult], query: str) -> list[RecallResult]:
    """``results`` with each newer memory before an older one about the same thing
    (see the module docstring); keyed facts and past values keep their places."""
    out = list(results)
    if len(out) < 2:
        return out
    asked = content_words(query)
    if not asked:
        return out
    words = {id(r): content_words(r.memory.content) for r in out}
    movable = [r for r in out if r.memory.key is None and r.until is None]
    # One pass per result, newest first: each takes the place of the highest-ranked
    # older result about the same thing above it.
    for newer in sorted(movable, key=lambda r: r.memory.created_at, reverse=True):
        at = out.index(newer)
        for i in range(at):
            older = out[i]
            if (
                older.memory.key is None
                and older.until is None
                and older.memory.created_at < newer.memory.created_at
                and same_topic(words[id(older)], words[id(newer)], asked)
            ):
                out.insert(i, out.pop(at))
                break
    return out
