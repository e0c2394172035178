"""Time in text: the one grammar that reads the periods questions name and the times
memories tell, and how well a memory's time fits a question's period.

Two readers share one grammar (``_PHRASE`` finds a candidate phrase, ``_period``
resolves it against a reference time to a half-open UTC interval ``[start, end)``
and its precision: day, week, month, season or year):

``query_window(query, now)``
    The period a question names, relative to ``now``:

    * relative days: "today", "yesterday", "the day before yesterday", "tomorrow",
      "N days/weeks/months/years ago" (that day, week, month or year), "in N
      days" and "N weeks from now" (the day or week then), "recently" / "lately"
      (the last 14 days);
    * calendar periods: "this/last/past/next week", "this/last/next month",
      "this/last/next year", "last weekend", "over the weekend", "the week
      before" (last week), "the week before last", "last <weekday>" / "on
      <weekday>" (the most recent one before ``now``), "next <weekday>" (the
      first one after today), "in the past/last/next N days/weeks/months";
    * named dates: "in May 2023", "May 2023", "May 8, 2023", "8 May 2023",
      "May 8" (the latest not after ``now``), "2023-05-08", "2023-05", "in
      2022", "in May" (the latest May not after ``now``), "early May" (May),
      "in spring 2023" / "last summer" / "the summer of 2021" (northern seasons);
    * ranges: "from May to July 2023", "between 2019 and 2021": from the first's
      start to the second's end (a first without a year takes the second's);
    * "before X" / "after X" / "since X" with X any of the above: everything
      before X's start, or from X's end (from its start, for "since"), bounded by
      a year on the open side so that the signal still prefers nearby times.

``event_window(text, said_at)``
    When what a memory tells happened (or is planned, or holds), read from its
    own text against the time it was said: the first phrase above that names a
    time with a precision ("recently" names none), "since X" as the interval
    from X to when it was said; "before/after X" name no time of the event and
    are passed over. Stricter than questions about words that are also
    ordinary words: a bare month or season name counts only after a preposition
    ("in May", not "May I ask"; "in the fall", not "I might fall").

A text that names no time gives ``None``. Phrases that name a time only through
an event ("before the trip") are not resolved here: they need the event's own
memory, which the lexical and semantic signals already find. Every reader costs
time linear in its input: ``_PHRASE`` has no nested repetition, each candidate
looks at a bounded span around it, and ``event_window`` reads at most the first
``EVENT_SCAN`` characters.

``recall_window(query, now)`` is ``query_window``'s window, or for a question
that asks when something happened ("when did I …?", "what date …") a window
that marks it (``asks_when``): the ``time`` signal then prefers a memory that
dates its event. ``time_score(when, window, until)`` scores a memory's time: a
point (the record clock) or an interval (the event clock). All are pure.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

#: Decays stop at this many half-lives (0.5 ** 1000 is about 9e-302): PostgreSQL's
#: ``power()`` raises an underflow error below the smallest double where Python
#: returns 0, and the SQL and Python rankings must agree (``store.ranked``). Without
#: it "what happened on 3 March 2020?" (a one-day scale, 2,000 days away) failed.
HALF_LIVES_CAP = 1000.0
#: ``event_window`` reads at most this many characters of a memory's text.
EVENT_SCAN = 2_000
#: How precisely an event's time is known, finest first.
PRECISIONS = ("day", "week", "month", "season", "year")
Precision = Literal["day", "week", "month", "season", "year"]

__all__ = [
    "EVENT_SCAN",
    "HALF_LIVES_CAP",
    "PRECISIONS",
    "Precision",
    "TimeWindow",
    "event_window",
    "given_window",
    "query_window",
    "recall_window",
    "time_score",
]

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTHS["sept"] = 9
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2,
    "a few": 3, "few": 3, "several": 3,
}  # fmt: skip
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAY_RE = "|".join(_WEEKDAYS)
_SEASON_RE = "|".join(_SEASONS)
# At most four digits: int() of a long digit string is quadratic, and no count of
# days is longer.
_NUMBER_RE = r"\d{1,4}|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True))
_UNIT_RE = r"days?|weeks?|months?|years?"
_ORDINAL = r"(?:st|nd|rd|th)?"
_OPEN_SIDE = timedelta(days=365)
# Written with escaped spaces: it joins both the plain and the verbose patterns.
_PART = r"(?:early|mid|late|the\ (?:start|end|beginning|middle)\ of)[\ -]"
_UNIT_PRECISION: dict[str, Precision] = {
    "day": "day",
    "week": "week",
    "month": "month",
    "year": "year",
}


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A half-open UTC interval ``[start, end)``, the words that named it, and how
    precisely they did (``None``: a span with no calendar precision, "recently").

    ``asks_when``: the window of a question that asks when something happened and
    names no period (``recall_window``); its interval is empty and unused.
    """

    start: datetime
    end: datetime
    phrase: str
    precision: Precision | None = None
    asks_when: bool = False

    @property
    def days(self) -> float:
        return (self.end - self.start).total_seconds() / 86_400.0

    @property
    def scale(self) -> float:
        """The ``time`` signal's half-life in days: the window's length, at least a
        day; 0 for an ``asks_when`` window (``memory.ranking``'s SQL reads it so)."""
        return 0.0 if self.asks_when else max(self.days, 1.0)


def time_score(when: datetime, window: TimeWindow, until: datetime | None = None) -> float:
    """How well a memory's time fits ``window``, in [0, 1].

    ``when`` alone is a point (a memory's record time); with ``until`` it is the
    event interval ``[when, until)``. 1 when they overlap; else halves per
    window-length (at least one day) between them. For an ``asks_when`` window:
    1 for an event interval, 0 for a point.
    """
    if window.asks_when:
        return 0.0 if until is None else 1.0
    end = when if until is None else until
    if when < window.end and (end > window.start or when >= window.start):
        return 1.0
    gap = (window.start - end) if end <= window.start else (when - window.end)
    return float(0.5 ** min(gap.total_seconds() / 86_400.0 / window.scale, HALF_LIVES_CAP))


def _day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def _shift_months(moment: datetime, months: int) -> tuple[int, int]:
    index = moment.year * 12 + moment.month - 1 - months
    return index // 12, index % 12 + 1


def _number(text: str) -> int:
    return int(text) if text.isdigit() else _NUMBERS[text]


def _year(year: int) -> tuple[datetime, datetime]:
    return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)


def _units_back(now: datetime, n: int, unit: str) -> tuple[datetime, datetime]:
    """The calendar day, week, month or year ``n`` units before ``now`` (after it for
    a negative ``n``)."""
    today = _day(now)
    if unit == "day":
        day = today - timedelta(days=n)
        return day, day + timedelta(days=1)
    if unit == "week":
        start = today - timedelta(days=today.weekday()) - timedelta(weeks=n)
        return start, start + timedelta(weeks=1)
    if unit == "month":
        return _month(*_shift_months(now, n))
    return _year(now.year - n)


def _weekend(now: datetime, back: int) -> tuple[datetime, datetime]:
    """A weekend counted from the latest one begun by ``now``: 0 that one ("this
    weekend", "over the weekend"), 1 the last one over ("last weekend": the one before
    when ``now`` is in a weekend), 2 the one before that, -1 the next one."""
    today = _day(now)
    saturday = today - timedelta(days=today.weekday()) + timedelta(days=5)
    if saturday > today:
        saturday -= timedelta(weeks=1)
    if back > 0 and today.weekday() < 5:
        back -= 1  # the latest begun weekend is over: it is the last one
    saturday -= timedelta(weeks=back)
    return saturday, saturday + timedelta(days=2)


def _season(first: int, year: int) -> tuple[datetime, datetime]:
    start = _month(year, first)[0]
    return start, _month(*_shift_months(start, -3))[0]


Period = tuple[datetime, datetime, Precision | None]
#: How many weeks, months or years back "this/next/last week" is (-1: ahead).
_BACK = {"this": 0, "over the": 0, "next": -1, "the coming": -1, "the following": -1}


def _period(text: str, now: datetime) -> Period | None:
    """The period one time phrase names (no before/after), or None."""
    try:
        return _resolve(text, now)
    except (ValueError, OverflowError):  # "May 32", "in 9999 years"
        return None


def _resolve(text: str, now: datetime) -> Period | None:
    today = _day(now)
    week_start = today - timedelta(days=today.weekday())
    if m := re.fullmatch(_PART + "(.+)", text):
        return _resolve(m[1], now)  # "early May": May
    if re.fullmatch(r"today|tonight|this (?:morning|afternoon|evening)", text):
        return today, today + timedelta(days=1), "day"
    if text in ("yesterday", "last night", "the day before"):
        return today - timedelta(days=1), today, "day"
    if text == "tomorrow":
        return today + timedelta(days=1), today + timedelta(days=2), "day"
    if text == "the day before yesterday":
        return today - timedelta(days=2), today - timedelta(days=1), "day"
    if text == "the day after tomorrow":
        return today + timedelta(days=2), today + timedelta(days=3), "day"
    if text in ("recently", "lately"):
        return now - timedelta(days=14), now, None
    if m := re.fullmatch(rf"({_NUMBER_RE}) ({_UNIT_RE}) (ago|from now)", text):
        n, unit = _number(m[1]), m[2].rstrip("s")
        return *_units_back(now, n if m[3] == "ago" else -n, unit), _UNIT_PRECISION[unit]
    if m := re.fullmatch(rf"in ({_NUMBER_RE}) ({_UNIT_RE})", text):
        n, unit = _number(m[1]), m[2].rstrip("s")
        return *_units_back(now, -n, unit), _UNIT_PRECISION[unit]
    if m := re.fullmatch(rf"(?:in )?the (past|last|next|coming) ({_NUMBER_RE}) ({_UNIT_RE})", text):
        n, unit = _number(m[2]), m[3].rstrip("s")
        span = timedelta(days={"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n)
        if m[1] in ("next", "coming"):
            return now, now + span, _UNIT_PRECISION[unit]
        return now - span, now, _UNIT_PRECISION[unit]
    if m := re.fullmatch(r"the (week|weekend|month|year) before(?: (last))?", text):
        back = 2 if m[2] else 1
        if m[1] == "weekend":
            return *_weekend(now, back), "week"
        return *_units_back(now, back, m[1]), _UNIT_PRECISION[m[1]]
    if m := re.fullmatch(
        r"(earlier |later )?(this|last|past|the past|previous|next|this past|over the"
        r"|the coming|the following) (week|month|year|weekend)",
        text,
    ):
        n = _BACK.get(m[2], 1)
        if m[3] == "weekend":
            return *_weekend(now, n), "week"
        if m[3] == "year":
            return *_year(now.year - n), "year"
        return *_units_back(now, n, m[3]), _UNIT_PRECISION[m[3]]
    if m := re.fullmatch(rf"(last|on|this past|next|this|this coming) ({_WEEKDAY_RE})", text):
        weekday = _WEEKDAYS[m[2]]
        if m[1] in ("next", "this coming"):
            day = today + timedelta(days=(weekday - today.weekday()) % 7 or 7)
        elif m[1] == "this":
            day = week_start + timedelta(days=weekday)
        else:
            day = today - timedelta(days=(today.weekday() - weekday) % 7 or 7)
        return day, day + timedelta(days=1), "day"
    if m := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text):
        day = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
        return day, day + timedelta(days=1), "day"
    if m := re.fullmatch(r"(\d{4})-(\d{2})", text):
        return *_month(int(m[1]), int(m[2])), "month"
    if m := re.fullmatch(
        rf"(?:({_MONTH_RE})\.? (\d{{1,2}}){_ORDINAL}|(?:the )?(\d{{1,2}}){_ORDINAL} (?:of )?"
        rf"({_MONTH_RE})\.?)(?:,? (\d{{4}}))?",
        text,
    ):
        month, number = _MONTHS[m[1] or m[4]], int(m[2] or m[3])
        if m[5]:
            day = datetime(int(m[5]), month, number, tzinfo=UTC)
        else:  # the latest such day not after today
            day = datetime(now.year, month, number, tzinfo=UTC)
            if day > today:
                day = datetime(now.year - 1, month, number, tzinfo=UTC)
        return day, day + timedelta(days=1), "day"
    if m := re.fullmatch(rf"(?:(last|this|next) )?({_MONTH_RE})\.?(?:,? (?:of )?(\d{{4}}))?", text):
        month = _MONTHS[m[2]]
        if m[3]:
            return *_month(int(m[3]), month), "month"
        year = now.year if month <= now.month else now.year - 1
        if m[1] == "last" and month == now.month:
            year -= 1
        elif m[1] == "this":
            year = now.year
        elif m[1] == "next":
            year = now.year + (month <= now.month)
        return *_month(year, month), "month"
    if m := re.fullmatch(
        rf"(?:(last|this|next) )?(?:the )?({_SEASON_RE})(?:,? (?:of )?(\d{{4}}))?", text
    ):
        first = _SEASONS[m[2]]
        if m[3]:
            return *_season(first, int(m[3])), "season"
        year = now.year if first <= now.month else now.year - 1
        current = _season(first, year)
        if m[1] == "last" and current[0] <= now < current[1]:
            year -= 1
        elif m[1] == "next":
            year += 1
        return *_season(first, year), "season"
    if m := re.fullmatch(r"(\d{4})", text):
        year = int(m[1])
        if 1900 <= year <= 2200:
            return *_year(year), "year"
    return None


# Candidate phrases; where two start at the same place the first listed wins, so the
# longer of overlapping ones comes first. Each is resolved with _period.
_PHRASE_BODY = rf"""(
        the\ day\ before\ yesterday | the\ day\ after\ tomorrow
      | yesterday | tomorrow | today | tonight | last\ night
      | this\ (?:morning|afternoon|evening)
      | recently | lately
      | (?:{_NUMBER_RE})\ (?:{_UNIT_RE})\ (?:ago|from\ now)
      | (?:in\ )?the\ (?:past|last|next|coming)\ (?:{_NUMBER_RE})\ (?:{_UNIT_RE})
      | in\ (?:{_NUMBER_RE})\ (?:{_UNIT_RE})
      | the\ (?:week|weekend|month|year)\ before\ last
      # "the week before I moved" is the week before an event: left alone.
      | the\ (?:day|week|weekend|month|year)\ before
            (?!\ (?:the|a|an|my|our|your|his|her|their|we|i|he|she|they|it|that|this|last
                    |{_MONTH_RE}|{_WEEKDAY_RE}|\d)\b)
      | (?:(?:earlier|later)\ )?this\ (?:week|month|year|weekend)
      | (?:last|past|the\ past|previous|next|this\ past|over\ the|the\ coming|the\ following)
            \ (?:week|month|year|weekend)
      | (?:last|on|this\ past|next|this\ coming|this)\ (?:{_WEEKDAY_RE})
      | \d{{4}}-\d{{2}}-\d{{2}} | \d{{4}}-\d{{2}}
      | (?:{_PART})?(?:
            (?:{_MONTH_RE})\.?\ \d{{1,2}}{_ORDINAL}(?:,?\ \d{{4}})?
          | (?:the\ )?\d{{1,2}}{_ORDINAL}\ (?:of\ )?(?:{_MONTH_RE})\.?(?:,?\ \d{{4}})?
          | (?:(?:last|this|next)\ )?(?:{_MONTH_RE})\.?(?:,?\ (?:of\ )?\d{{4}})?
          | (?:(?:last|this|next)\ )?(?:the\ )?(?:{_SEASON_RE})(?:,?\ (?:of\ )?\d{{4}})?
        )
      # Not the year of a month ("2023-06") or of a date.
      | (?:in|of|during|since|before|after|until|from|between)\ \d{{4}}(?!-\d{{2}}\b)
    )\b"""
_PHRASE = re.compile(r"\b" + _PHRASE_BODY, re.VERBOSE)
# The words a phrase of ``_PHRASE`` can begin with (or a digit). Trying the whole
# pattern only where one of them starts is several times faster than searching
# with it: a search tries every alternative at every word. ``_STARTS`` finds those
# places in one pass (a word of ``_FIRST_WORDS``, whole, or a word that begins
# with a digit): an alternation of plain words, each tried once per place.
_FIRST_WORDS = frozenset(
    {"the", "yesterday", "tomorrow", "today", "tonight", "last", "this", "recently"}
    | {"lately", "in", "earlier", "later", "past", "previous", "next", "over", "on"}
    | {"early", "mid", "late", "of", "during", "since", "before", "after", "until"}
    | {"from", "between"}
    | {word.split(" ")[0] for word in _NUMBERS}
    | set(_MONTHS)
    | set(_SEASONS)
)
_STARTS = re.compile(
    r"\b(?:\d|(?:" + "|".join(sorted(map(re.escape, _FIRST_WORDS), key=len, reverse=True)) + r")\b)"
)
# Every phrase of ``_PHRASE`` holds a digit or, inside one of its words, one of these:
# a unit ("day" also in "yesterday", "today" and each weekday; "week" in "weekend"),
# a month or season name, or a word of a fixed phrase. A text with none of them names
# no time, and ``_matches`` returns at once: most of what users tell (about three
# quarters of LoCoMo's turns) has none, and checking costs a few plain substring
# searches. tests/test_time_scan.py checks that the grammar keeps to this.
_TIME_WORDS = tuple(
    sorted(
        {"day", "week", "month", "year", "tomorrow", "night", "morning", "afternoon"}
        | {"evening", "recently", "lately"}
        | set(_MONTHS)
        | set(_SEASONS)
    )
)
_DIGIT = re.compile(r"\d")
_YEAR_PREFIX = re.compile(r"^(?:in|of|during|since|before|after|until|from|between) (\d{4})$")
_RELATION = re.compile(r"\b(before|after|since|until|prior to|earlier than|later than)\s+$")
# A bare month or season name that is more likely a word ("may", "march", "fall")
# needs a preposition before it to count; in a memory's text, any bare one does.
_AMBIGUOUS = {"may", "march", "jan", "mar", "jun", "aug", "sep", "oct", "nov", "dec", "sat"}
_AMBIGUOUS |= {"fall", "spring", "sept"}
_MONTH_PREPOSITION = re.compile(
    r"\b(?:in|during|of|since|before|after|until|by|from|between|around)\s+$"
)
_NAME_ONLY = re.compile(rf"(?:the )?((?:{_MONTH_RE}|{_SEASON_RE})\.?)")
# Joins the two ends of a range ("from May to July", "between 2019 and 2021").
_RANGE_START = re.compile(r"\b(?:from|between)\s+$")
_RANGE_JOIN = re.compile(r" ?[-\u2013] ?| (?:to|until|till|through|and) ")
_BARE_YEAR = re.compile(r"(\d{4})\b")
_HAS_YEAR = re.compile(r"\d{4}")
_WHEN = re.compile(
    r"\b(?:when (?:did|was|were|is|will|does|do|has|have|had|are|am)"
    r"|(?:what|which|in which|in what) (?:date|day|year|month|week)|how long ago|since when)\b"
)


def _head(text: str, end: int) -> str:
    """The words right before ``end`` that a relation or a preposition can be made of
    (the longest, "earlier than ", is 13 characters), starting at a word. Bounded, so
    that a text of many candidate phrases costs time linear in its length."""
    start = max(0, end - 40)
    if start > 0:
        space = text.find(" ", start - 1, end)
        start = end if space == -1 else space + 1
    return text[start:end]


def _may_name_time(text: str) -> bool:
    """Whether normalized ``text`` holds a digit or a word of ``_TIME_WORDS``: ``False``
    means that no phrase of the grammar is in it."""
    return _DIGIT.search(text) is not None or any(word in text for word in _TIME_WORDS)


def _matches(text: str) -> Iterator[re.Match[str]]:
    """``_PHRASE.finditer(text)``: the same matches, tried only where a word that can
    begin one starts (``_STARTS``), and none in a text that names no time
    (``_may_name_time``)."""
    if not _may_name_time(text):
        return
    after = 0
    for start in _STARTS.finditer(text):
        if start.start() < after:
            continue
        match = _PHRASE.match(text, start.start())
        if match is not None:
            after = match.end()
            yield match


def _coarser(a: Precision | None, b: Precision | None) -> Precision | None:
    if a is None or b is None:
        return None
    return a if PRECISIONS.index(a) >= PRECISIONS.index(b) else b


def _range_end(
    text: str, at: int, first: str, period: Period, now: datetime
) -> tuple[int, Period] | None:
    """The range whose first phrase ``first`` (naming ``period``) ends at ``at``, and
    where the range ends; ``None`` if no second end follows. A first end without a
    year takes the second's ("May to July 2023")."""
    join = _RANGE_JOIN.match(text, at)
    if join is None:
        return None
    second = _PHRASE.match(text, join.end()) or _BARE_YEAR.match(text, join.end())
    if second is None:
        return None
    phrase = _YEAR_PREFIX.sub(r"\1", second[1])
    last = _period(phrase, now)
    if last is None:
        return None
    year = _HAS_YEAR.search(phrase)
    if year is not None and not _HAS_YEAR.search(first):
        period = _period(f"{first} {year[0]}", now) or period
    if last[1] <= period[0]:
        return None
    return second.end(), (period[0], last[1], _coarser(period[2], last[2]))


def _phrases(text: str, now: datetime, strict: bool) -> Iterator[tuple[TimeWindow, str | None]]:
    """Each time phrase of normalized ``text`` resolved against ``now``, in order, with
    the relation before it ("before", "since", ...; ``None``). ``strict``: a bare
    month or season name counts only after a preposition (module docstring)."""
    for match in _matches(text):
        phrase = match[1]
        head = _head(text, match.start())
        year = _YEAR_PREFIX.match(phrase)
        if year:
            head += phrase[: year.start(1)]
            phrase = year[1]
        name = _NAME_ONLY.fullmatch(phrase)
        if (
            name is not None
            and (strict or (name[1].rstrip(".") in _AMBIGUOUS and phrase == name[1]))
            and not _MONTH_PREPOSITION.search(head)
        ):
            continue
        period = _period(phrase, now)
        if period is None:
            continue
        words = match[1]
        if _RANGE_START.search(head):
            ranged = _range_end(text, match.end(), phrase, period, now)
            if ranged is not None:
                period = ranged[1]
                words = text[match.start() : ranged[0]]
        start, end, precision = period
        relation = _RELATION.search(head)
        yield TimeWindow(start, end, words, precision), relation[1] if relation else None


def _normalized(text: str) -> str:
    return " ".join(text.lower().replace("\u2019", "'").split())


def _related(relation: str, phrase: str) -> str:
    """``phrase`` with its relation before it ("since 2019"), once."""
    return phrase if phrase.startswith(relation + " ") else f"{relation} {phrase}"


def query_window(query: str, now: datetime) -> TimeWindow | None:
    """The period ``query`` names, relative to ``now`` (timezone-aware); ``None`` if none."""
    for window, relation in _phrases(_normalized(query), now, strict=False):
        start, end = window.start, window.end
        if relation is None:
            return window
        phrase = _related(relation, window.phrase)
        if relation in ("before", "prior to", "earlier than", "until"):
            return TimeWindow(start - _OPEN_SIDE, start, phrase)
        since = relation == "since"
        lower = start if since else end
        upper = max(now, lower) + timedelta(days=1) if since else lower + _OPEN_SIDE
        return TimeWindow(lower, upper, phrase)
    return None


def recall_window(query: str, now: datetime) -> TimeWindow | None:
    """``query_window``, or for a question that asks when ("when did I …?") and names
    no period, an ``asks_when`` window; ``None`` otherwise."""
    window = query_window(query, now)
    if window is None and _WHEN.search(_normalized(query[:EVENT_SCAN])):
        return TimeWindow(now, now, "when", asks_when=True)
    return window


def event_window(text: str, said_at: datetime) -> TimeWindow | None:
    """When what ``text`` tells happened, relative to ``said_at`` (timezone-aware): the
    first phrase that names a time with a precision, within its first ``EVENT_SCAN``
    characters; ``None`` if none (see the module docstring)."""
    for window, relation in _phrases(_normalized(text[:EVENT_SCAN]), said_at, strict=True):
        if window.precision is None or not 1900 <= window.start.year <= 2200:
            continue
        if relation is None:
            return window
        if relation == "since":  # holds from then until it was said
            end = max(said_at, window.end)
            return TimeWindow(window.start, end, _related("since", window.phrase), window.precision)
    return None


def given_window(value: str, now: datetime) -> TimeWindow | None:
    """The event interval a writer gave (``happened_at``): a timestamp or date (that
    UTC day), a month (``2023-07``), a year (``2021``), or any phrase of the grammar
    ("spring 2021", "last Friday") read against ``now``; ``None`` if it names none."""
    text = _normalized(value[:EVENT_SCAN])
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        period = _period(text, now)
    else:
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        day = _day(aware.astimezone(UTC))
        period = day, day + timedelta(days=1), "day"
    if period is not None and period[2] is not None:
        return TimeWindow(period[0], period[1], text, period[2])
    return event_window(text, now)
