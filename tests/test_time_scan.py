"""The scan that finds time phrases in text (``memory.temporal._matches``) finds what a
search with the whole grammar finds, while it skips the texts that name no time.

``_matches`` tries the grammar only where a word that can begin a phrase starts, and
not at all in a text with no digit and no word of ``_TIME_WORDS``. Both shortcuts must
leave the result unchanged: the matches are compared with ``_PHRASE.finditer`` on the
team's phrase set and on edge cases, and every phrase the grammar reads in a large
set of generated texts is checked to hold a digit or a time word, so that a phrase
added to the grammar without its word in ``_TIME_WORDS`` fails here.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

from popagent.memory import temporal
from popagent.memory.temporal import (
    _MONTHS,
    _NUMBERS,
    _PHRASE,
    _SEASONS,
    _WEEKDAYS,
    _matches,
    _may_name_time,
    _normalized,
    event_window,
    query_window,
)

PHRASES = Path(__file__).resolve().parents[1] / "bench" / "time" / "phrases.tsv"
SUNDAY = datetime(2023, 7, 30, 14, 0, tzinfo=UTC)

EDGES = [
    "mid-may we moved",
    "on 2023-05-08 and 2023-06 and in 2021",
    "the 12th of may, 2023 and may 3rd",
    "(yesterday) and [last friday], 'next week'",
    "a couple of weeks ago, in the past 3 days, 10 years from now",
    "thé theyesterday yesterdays x_2023 ²2023 2023x",
    "from may to july 2023, between 2019 and 2021",
    "the week before last and the day before i left",
    "may i ask about the fall of rome in spring?",
    "early summer of 2021, late 2020, the start of march",
    "in 9999 years, may 32, 2023-13-45",
    "nothing here at all",
    "",
]


def _texts() -> list[str]:
    rows = [line.split("\t") for line in PHRASES.read_text(encoding="utf-8").splitlines()]
    return [row[2] for row in rows if len(row) == 4 and not row[0].startswith("#")] + EDGES


def _spans(found: object) -> list[tuple[int, int]]:
    return [m.span() for m in found]  # type: ignore[attr-defined]


def test_the_scan_finds_what_a_search_with_the_grammar_finds() -> None:
    texts = [_normalized(t) for t in _texts()]
    assert len(texts) > 200
    found = 0
    for text in texts:
        expected = _spans(_PHRASE.finditer(text))
        assert _spans(_matches(text)) == expected, text
        found += bool(expected)
    assert found > 150, "the phrase set should name times"


# The grammar's other words, and a few plain ones.
GRAMMAR_WORDS = [
    "the", "this", "last", "next", "past", "previous", "over", "coming", "following",
    "in", "on", "of", "at", "from", "between", "to", "and", "until", "till", "through",
    "since", "before", "after", "during", "early", "mid", "late", "start", "end",
    "beginning", "middle", "earlier", "later", "ago", "now", "yesterday", "tomorrow",
    "today", "tonight", "night", "morning", "afternoon", "evening", "recently", "lately",
    "i", "we", "went", "a", "an", "my",
]  # fmt: skip


def _generated(count: int) -> list[str]:
    """Texts of 2 to 6 words drawn from the grammar's own words, numbers and dates,
    and plain words (seeded: the same texts every run)."""
    units = ["day", "days", "week", "weeks", "month", "months", "year", "years", "weekend"]
    words = (
        list(_MONTHS)
        + list(_SEASONS)
        + list(_WEEKDAYS)
        + [w for n in _NUMBERS for w in n.split(" ")]
        + units
        + GRAMMAR_WORDS
        + ["3", "12", "12th", "1st", "2021", "2023", "2023-05", "2023-05-08", "2023,", "-"]
    )
    rng = random.Random(39)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(2, 6))) for _ in range(count)]


def test_every_phrase_of_the_grammar_holds_a_digit_or_a_time_word() -> None:
    """The invariant that lets ``_matches`` skip a text (``_may_name_time``)."""
    phrases = set()
    for text in _generated(40_000) + [_normalized(t) for t in _texts()]:
        for match in _PHRASE.finditer(text):
            phrases.add(match[1])
            assert _may_name_time(match[1]), match[1]
        assert _spans(_matches(text)) == _spans(_PHRASE.finditer(text)), text
    assert len(phrases) > 500, "the generated texts should reach most of the grammar"


def test_a_text_that_names_no_time_is_skipped_and_one_that_does_is_read() -> None:
    # A month's name: the text is read, and the grammar leaves the verb alone.
    assert _may_name_time(_normalized("May I ask what you think of the garden?"))
    assert event_window("May I ask what you think of the garden?", SUNDAY) is None
    assert not _may_name_time("i think the garden is lovely")
    assert event_window("I think the garden is lovely", SUNDAY) is None
    assert query_window("what do I think of the garden?", SUNDAY) is None
    window = event_window("I went to the dentist last Friday", SUNDAY)
    assert window is not None
    assert (window.start.day, window.precision) == (28, "day")
    assert temporal.EVENT_SCAN == 2_000
