"""The newest value first: among recalled episodes about the same thing, the newer
one ranks before the older for a question in the present tense about a state.

Keyed facts hold one value per key by construction; episodes do not, so "I have
three cats now", said weeks after "I have two cats", could rank below it.
``newest_first`` reorders a ranked list without a model. A newer episode takes
the place of an older one ranked above it only when all of these hold:

* both are episodes (a keyless fact is a statement of its own, a keyed one is
  current by construction, a past value keeps its place);
* they are about the same thing: they share a word of the question and enough
  of their own content words (``SAME_TOPIC``, the overlap coefficient of their
  sets of content words; speaker labels such as ``User:`` or ``Maria:`` are no
  content);
* both told it: what the user said in each (``told``, the turn's user side, not
  the reply) holds a word of the question, and the newer's holds every word of
  the question the older's does, so the newer says at least as much about what
  is asked;
* they are close in relevance: the newer's score is at least ``CLOSE`` times the
  older's, so a weakly related newer episode never jumps a clear answer.

Scores are kept as ranked: each result still explains its own.
``present_tense`` says which questions get this (``memory.recall.newest_applies``
also leaves out questions about a past period or asking when). Measured in
``bench/newest.py`` on the team's labelled updates, LoCoMo, and the relevance
and implicit sets, where the looser rule (any shared question word, a fifth of
the words, every tense) moved a newer turn of the same chat above the evidence
(docs/benchmarks.md). Pure, and linear in the results' text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..models import RecallResult

__all__ = [
    "CLOSE",
    "SAME_TOPIC",
    "content_words",
    "newest_first",
    "present_tense",
    "same_topic",
    "told",
]

#: Least overlap coefficient of two memories' content words for them to be about
#: the same thing (with a word of the question in both).
SAME_TOPIC = 0.25
#: Least ratio of the newer's score to the older's for the newer to go first.
CLOSE = 0.8

_WORD = re.compile(r"[^\W\d_]{3,}")
# A speaker label: "User:", "Assistant:", a name before what that person said.
_LABEL = re.compile(r"[^\W\d_]+:")
# Where the reply starts in an episode's text (``validation.episode_content``).
_REPLY = "\nAssistant: "
# The present tense of a question about a state ("how many cats do I have?",
# "what is my job?", "what's my rent now?") ...
_PRESENT = re.compile(
    r"\b(?:do|does|am|is|are|now|currently|current|nowadays|these\s+days|at\s+the\s+moment)\b"
    r"|\b(?:what|who|where|which|how|that|it|there|i|you|we|they|he|she)['\u2019](?:s|m|re)\b",
    re.IGNORECASE,
)
# ... and the past or perfect, which asks about what happened ("what did I paint?",
# "how long has she been ...?"): there the older may be the answer.
_PAST = re.compile(r"\b(?:did|was|were|had|been|ago|ever|used\s+to)\b", re.IGNORECASE)
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


def present_tense(query: str) -> bool:
    """Whether ``query`` asks in the present tense (a verb or word of the present,
    none of the past): "where do I work?", not "where did I work?" nor "cats"."""
    return _PRESENT.search(query) is not None and _PAST.search(query) is None


def content_words(text: str) -> frozenset[str]:
    """The lower-cased words of ``text`` that can name a topic (3+ letters, no stop
    word, no speaker label)."""
    return frozenset(w for w in _WORD.findall(_LABEL.sub(" ", text).lower()) if w not in _STOP)


def told(content: str) -> str:
    """What the user said in an episode's ``content`` (the reply left out)."""
    return content.split(_REPLY, 1)[0]


def same_topic(a: frozenset[str], b: frozenset[str], asked: frozenset[str]) -> bool:
    """Whether two memories (their content words) answer the same words of the question."""
    if not a or not b:
        return False
    shared = a & b
    if not shared & asked:
        return False
    return len(shared) / min(len(a), len(b)) >= SAME_TOPIC


def newest_first(results: Sequence[RecallResult], query: str) -> list[RecallResult]:
    """``results`` with each newer episode before an older one about the same thing
    (see the module docstring); facts and past values keep their places."""
    out = list(results)
    if len(out) < 2:
        return out
    asked = content_words(query)
    if not asked:
        return out
    episodes = [r for r in out if r.memory.kind == "episode" and r.until is None]
    words = {id(r): content_words(r.memory.content) for r in episodes}
    said = {id(r): content_words(told(r.memory.content)) & asked for r in episodes}
    # One pass per episode, newest first: each takes the place of the highest-ranked
    # older episode about the same thing above it.
    for newer in sorted(episodes, key=lambda r: r.memory.created_at, reverse=True):
        at = out.index(newer)
        for i in range(at):
            older = out[i]
            if id(older) in words and _updates(older, newer, words, said, asked):
                out.insert(i, out.pop(at))
                break
    return out


def _updates(
    older: RecallResult,
    newer: RecallResult,
    words: dict[int, frozenset[str]],
    said: dict[int, frozenset[str]],
    asked: frozenset[str],
) -> bool:
    """Whether episode ``newer`` tells the same thing as ``older``, later, as relevantly."""
    return (
        older.memory.created_at < newer.memory.created_at
        and newer.score >= CLOSE * older.score
        and bool(said[id(older)])
        and said[id(older)] <= said[id(newer)]
        and same_topic(words[id(older)], words[id(newer)], asked)
    )
