"""Time-aware recall: the period a question names, and how well a memory's time fits it.

``query_window(query, now)`` reads the period a question names, relative to
``now`` when it is relative, as a half-open UTC interval ``[start, end)``:

* relative days: "today", "yesterday", "the day before yesterday",
  "N days/weeks/months/years ago" (that day, week, month or year),
  "recently" / "lately" (the last 14 days);
* calendar periods: "this/last/past week", "this/last month", "this/last year",
  "last weekend", "last <weekday>" / "on <weekday>" (the most recent one before
  ``now``), "in the past/last N days/weeks/months";
* named dates: "in May 2023", "May 2023", "May 8, 2023", "8 May 2023",
  "2023-05-08", "in 2022", "in May" (the latest May not after ``now``),
  "in spring 2023"/"last summer" (northern seasons);
* "before X" / "after X" / "since X" with X any of the above: everything
  before X's start, or from X's end (from its start, for "since"), bounded by
  a year on the open side so that the signal still prefers nearby times.

A question that names no time gives ``None`` and recall is unchanged. Phrases
that name a time only through an event ("before the trip") are not resolved
here: they need the event's own memory, which the lexical and semantic signals
already find.

``time_score(when, window)`` is 1 inside the window and halves for every
window-length (at least a day) outside it. Both are pure.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: Decays stop at this many half-lives (0.5 ** 1000 is about 9e-302): PostgreSQL's
#: ``power()`` raises an underflow error below the smallest double where Python
#: returns 0, and the SQL and Python rankings must agree (``store.ranked``). Without
#: it "what happened on 3 March 2020?" (a one-day scale, 2,000 days away) failed.
HALF_LIVES_CAP = 1000.0

__all__ = ["HALF_LIVES_CAP", "TimeWindow", "query_window", "time_score"]

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTHS.pop("may", None)
_MONTHS["may"] = 5
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2,
    "a few": 3, "few": 3, "several": 3,
}  # fmt: skip
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_NUMBER_RE = r"\d+|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True))
_UNIT_RE = r"days?|weeks?|months?|years?"
_OPEN_SIDE = timedelta(days=365)


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A half-open UTC interval ``[start, end)`` and the words that named it."""

    start: datetime
    end: datetime
    phrase: str

    @property
    def days(self) -> float:
        return (self.end - self.start).total_seconds() / 86_400.0


def time_score(when: datetime, window: TimeWindow) -> float:
    """1 inside ``window``; halves per window-length (at least one day) outside it."""
    if window.start <= when < window.end:
        return 1.0
    gap = (window.start - when) if when < window.start else (when - window.end)
    scale = max(window.days, 1.0)
    return float(0.5 ** min(gap.total_seconds() / 86_400.0 / scale, HALF_LIVES_CAP))


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


def _period(text: str, now: datetime) -> tuple[datetime, datetime] | None:
    """The period one time phrase names (no before/after), or None."""
    today = _day(now)
    week_start = today - timedelta(days=today.weekday())
    if re.fullmatch(r"today|tonight|this morning|this evening", text):
        return today, today + timedelta(days=1)
    if text in ("yesterday", "last night"):
        return today - timedelta(days=1), today
    if text == "the day before yesterday":
        return today - timedelta(days=2), today - timedelta(days=1)
    if text in ("recently", "lately"):
        return now - timedelta(days=14), now
    if m := re.fullmatch(rf"({_NUMBER_RE}) ({_UNIT_RE}) ago", text):
        n, unit = _number(m[1]), m[2].rstrip("s")
        if unit == "day":
            day = today - timedelta(days=n)
            return day, day + timedelta(days=1)
        if unit == "week":
            start = week_start - timedelta(weeks=n)
            return start, start + timedelta(weeks=1)
        if unit == "month":
            return _month(*_shift_months(now, n))
        return datetime(now.year - n, 1, 1, tzinfo=UTC), datetime(
            now.year - n + 1, 1, 1, tzinfo=UTC
        )
    if m := re.fullmatch(rf"(?:in )?the (?:past|last) ({_NUMBER_RE}) ({_UNIT_RE})", text):
        n, unit = _number(m[1]), m[2].rstrip("s")
        days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
        return now - timedelta(days=days), now
    if m := re.fullmatch(r"(this|last|past|the past|previous) (week|month|year|weekend)", text):
        last = m[1] != "this"
        if m[2] == "week":
            start = week_start - timedelta(weeks=1) if last else week_start
            return start, start + timedelta(weeks=1)
        if m[2] == "weekend":
            saturday = week_start + timedelta(days=5)
            if last or saturday > today:
                saturday -= timedelta(weeks=1)
            return saturday, saturday + timedelta(days=2)
        if m[2] == "month":
            return _month(*_shift_months(now, 1 if last else 0))
        year = now.year - 1 if last else now.year
        return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    if m := re.fullmatch(r"(?:last|on|this past) (\w+day)", text):
        if m[1] not in _WEEKDAYS:
            return None
        back = (today.weekday() - _WEEKDAYS[m[1]]) % 7 or 7
        day = today - timedelta(days=back)
        return day, day + timedelta(days=1)
    if m := re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text):
        day = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=UTC)
        return day, day + timedelta(days=1)
    if m := re.fullmatch(
        rf"(?:({_MONTH_RE})\.? (\d{{1,2}})(?:st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH_RE})\.?),? (\d{{4}})",
        text,
    ):
        month = _MONTHS[m[1] or m[4]]
        day = datetime(int(m[5]), month, int(m[2] or m[3]), tzinfo=UTC)
        return day, day + timedelta(days=1)
    if m := re.fullmatch(rf"(?:(last|this) )?({_MONTH_RE})\.?(?:,? (\d{{4}}))?", text):
        month = _MONTHS[m[2]]
        if m[3]:
            return _month(int(m[3]), month)
        year = now.year if month <= now.month else now.year - 1
        if m[1] == "last" and month == now.month:
            year -= 1
        return _month(year, month)
    if m := re.fullmatch(
        r"(?:(last|this) )?(spring|summer|autumn|fall|winter)(?:,? (\d{4}))?", text
    ):
        first = _SEASONS[m[2]]
        if m[3]:
            year = int(m[3])
        else:
            year = now.year if first <= now.month else now.year - 1
            if (
                m[1] == "last"
                and _month(year, first)[0]
                <= now
                < _month(*_shift_months(_month(year, first)[0], -3))[0]
            ):
                year -= 1
        start = _month(year, first)[0]
        return start, _month(*_shift_months(start, -3))[0]
    if m := re.fullmatch(r"(\d{4})", text):
        year = int(m[1])
        if 1900 <= year <= 2200:
            return datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    return None


# Candidate phrases, longest first where they overlap; each is tried with _period.
_PHRASE = re.compile(
    rf"""\b(
        (?:the\ day\ before\ )?yesterday | today | tonight | last\ night | this\ (?:morning|evening)
      | recently | lately
      | (?:{_NUMBER_RE})\ (?:{_UNIT_RE})\ ago
      | (?:in\ )?the\ (?:past|last)\ (?:{_NUMBER_RE})\ (?:{_UNIT_RE})
      | (?:this|last|past|the\ past|previous)\ (?:week|month|year|weekend)
      | (?:last|on|this\ past)\ \w+day
      | \d{{4}}-\d{{2}}-\d{{2}}
      | (?:{_MONTH_RE})\.?\ \d{{1,2}}(?:st|nd|rd|th)?,?\ \d{{4}}
      | \d{{1,2}}(?:st|nd|rd|th)?\ (?:of\ )?(?:{_MONTH_RE})\.?,?\ \d{{4}}
      | (?:(?:last|this)\ )?(?:{_MONTH_RE})\.?(?:,?\ \d{{4}})?
      | (?:(?:last|this)\ )?(?:spring|summer|autumn|fall|winter)(?:,?\ \d{{4}})?
      | (?:in|of|during|since|before|after|until)\ \d{{4}}
    )\b""",
    re.VERBOSE,
)
_YEAR_PREFIX = re.compile(r"^(?:in|of|during|since|before|after|until) (\d{4})$")
_RELATION = re.compile(r"\b(before|after|since|until|prior to|earlier than|later than)\s+$")
# A bare month name that is more likely a word ("may", "march", "sat") needs a
# year or a preposition before it to count.
_AMBIGUOUS = {"may", "march", "jan", "mar", "jun", "aug", "sep", "oct", "nov", "dec", "sat"}
_MONTH_PREPOSITION = re.compile(r"\b(?:in|during|of|since|before|after|until|by|from)\s+$")


def _head(text: str, end: int) -> str:
    """The words right before ``end`` that a relation or a preposition can be made of
    (the longest, "earlier than ", is 13 characters), starting at a word. Bounded, so
    that a query of many candidate phrases costs time linear in its length."""
    start = max(0, end - 40)
    if start > 0:
        space = text.find(" ", start - 1, end)
        start = end if space == -1 else space + 1
    return text[start:end]


def query_window(query: str, now: datetime) -> TimeWindow | None:
    """The period ``query`` names, relative to ``now`` (timezone-aware); ``None`` if none."""
    text = " ".join(query.lower().replace("\u2019", "'").split())
    for match in _PHRASE.finditer(text):
        phrase = match[1]
        head = _head(text, match.start())
        year = _YEAR_PREFIX.match(phrase)
        if year:
            head += phrase[: phrase.index(year[1])]
            phrase = year[1]
        bare = phrase.removeprefix("last ").removeprefix("this ").rstrip(".")
        if bare in _AMBIGUOUS and not _MONTH_PREPOSITION.search(head) and phrase == bare:
            continue
        period = _period(phrase, now)
        if period is None:
            continue
        start, end = period
        relation = _RELATION.search(head)
        if relation is None:
            return TimeWindow(start, end, match[1])
        if relation[1] in ("before", "prior to", "earlier than", "until"):
            return TimeWindow(start - _OPEN_SIDE, start, f"{relation[1]} {match[1]}")
        since = relation[1] == "since"
        lower = start if since else end
        return TimeWindow(
            lower,
            max(now, lower) + timedelta(days=1) if since else lower + _OPEN_SIDE,
            f"{relation[1]} {match[1]}",
        )
    return None
