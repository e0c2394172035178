"""Recall in the past: as of a moment, and a fact's earlier values for a question
about a past period.

``as_of`` answers from the world as it was at a moment, by the event clock
where it is known (docs/time.md, "Recall as of a date"): a fact's value (current,
or earlier from migration 0012's history, which keeps its event clock since
0025) began to hold at its event start, else when it was written; of the values
that had begun to hold by then, the one told last is the one that held, unless
it had been deleted or had expired by then. Episodes are those told by then and
those about what had happened by then. ``known_at`` answers from what the store
knew at a moment: the record clock alone (when each value was written and
replaced). Given both, ``as_of`` reads the world as the store knew it at
``known_at``. A date means the end of that day (UTC).

Without either, a question that names a past period ("where did I live in
2021?") or an earlier value ("what was my job before this one?") lets the
values that held then compete with everything else, each labelled as a past
value with its span (``RecallResult.until``); a question in the present tense
never sees an earlier value at all, so none can rank above the current one.

Earlier values share their fact's id, and ranking counts one candidate per id
(``ranking._merge``): they are ranked under stand-in ids (negative, never a
row's) and given their own back afterwards (``Relabelled``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time

from ..checks import check_time
from ..errors import ValidationError
from ..models import Candidate, Memory, RecallResult
from ..store.past import PastCandidate
from .temporal import TimeWindow

__all__ = ["EARLIEST", "Moment", "Relabelled", "check_moment", "moment_of", "past_period"]

#: The start of time for "any earlier value" (a span that overlaps it is every span).
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)

# Words that ask for an earlier value whatever the period; bounded, linear.
_EARLIER = re.compile(
    r"\b(?:before\s+(?:this|that|now|the\s+current|the\s+new)\b|previous(?:ly)?\b|"
    r"used\s+to\b|did\s+(?:i|you|we|they|he|she)\s+use\s+to\b|former(?:ly)?\b|earlier\b|"
    r"prior\b|originally\b|at\s+first\b|"
    r"any\s+more\b|anymore\b|no\s+longer\b)",
    re.IGNORECASE,
)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def check_moment(field: str, value: object) -> datetime | None:
    """``None``, or the moment ``value`` names: a timezone-aware ``datetime``; a ``date``
    (the end of that day, UTC); or ISO 8601 text of either (``2021-06-01``,
    ``2021-06-01T12:00:00+02:00``). A ``ValidationError`` naming ``field`` otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 64:
            raise ValidationError(
                field, "must be a date or an ISO 8601 time, at most 64 characters"
            )
        if _DATE.fullmatch(text):
            try:
                value = date.fromisoformat(text)
            except ValueError as exc:
                raise ValidationError(field, f"is not a valid date: {text!r}") from exc
        else:
            try:
                value = datetime.fromisoformat(text)
            except ValueError as exc:
                raise ValidationError(
                    field, "must be a date (2021-06-01) or an ISO 8601 time with a time zone"
                ) from exc
    if isinstance(value, datetime):
        return check_time(field, value)
    if isinstance(value, date):
        return datetime.combine(value, time.max, tzinfo=UTC)
    raise ValidationError(field, f"must be a date or a time, not {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class Moment:
    """The moment a recall answers from: the world at ``as_of`` (the event clock
    where known), as the store knew it at ``known_at`` (the record clock); at least
    one is set."""

    as_of: datetime | None
    known_at: datetime | None

    @property
    def at(self) -> datetime:
        """The earlier of the two: what recency and a period the query names
        ("last week") are relative to."""
        return min(m for m in (self.as_of, self.known_at) if m is not None)


def moment_of(as_of: object, known_at: object) -> Moment | None:
    """The moment a recall answers from (both checked, each error naming its
    field); ``None`` for the present."""
    moment = Moment(check_moment("as_of", as_of), check_moment("known_at", known_at))
    return None if moment.as_of is None and moment.known_at is None else moment


def past_period(
    query: str, window: TimeWindow | None, now: datetime
) -> tuple[datetime, datetime] | None:
    """The span whose earlier values may answer ``query``: the period it names when
    that period is over by ``now``; all time before ``now`` when it asks for an
    earlier value ("before this one", "used to", "previously"); else ``None``."""
    if window is not None and window.end <= now:
        return window.start, window.end
    if _EARLIER.search(query):
        return EARLIEST, now
    return None


@dataclass(slots=True)
class Relabelled:
    """Earlier values under stand-in ids for ranking, and the way back."""

    candidates: list[Candidate] = field(default_factory=list)
    _back: dict[int, tuple[int, datetime]] = field(default_factory=dict)

    @classmethod
    def of(cls, found: list[PastCandidate]) -> Relabelled:
        out = cls()
        for candidate, until in found:
            if until is None:
                out.candidates.append(candidate)
                continue
            stand_in = -1 - len(out._back)
            out._back[stand_in] = (candidate.memory.id, until)
            memory = replace(candidate.memory, id=stand_in)
            out.candidates.append(replace(candidate, memory=memory))
        return out

    def restore(
        self, results: list[RecallResult], period: tuple[datetime, datetime] | None = None
    ) -> list[RecallResult]:
        """``results`` with each earlier value's own id and its ``until``; with the
        ``period`` a question names, see ``held_first``."""
        if not self._back:
            return results
        out = []
        for r in results:
            back = self._back.get(r.memory.id)
            if back is None:
                out.append(r)
            else:
                out.append(replace(r, memory=replace(r.memory, id=back[0]), until=back[1]))
        return held_first(out, period) if period is not None else out


def _held_from(memory: Memory) -> datetime:
    """When a fact's value began to hold: its event start, else when it was written."""
    return memory.happened_start or memory.updated_at


def held_first(
    results: list[RecallResult], period: tuple[datetime, datetime]
) -> list[RecallResult]:
    """For a question about ``period``: the value a fact held then goes right before
    its current value when that one only began after the period.

    The current value keeps the fact's first ``created_at``, which the time signal
    reads, so on its own it could outrank the value that actually held then. Scores
    stay as ranked (each still explains itself); only such pairs change places.
    A value began to hold at its event start when it has one, else when written."""
    out = list(results)
    for past in [r for r in results if r.until is not None]:
        if not (_held_from(past.memory) < period[1] and past.until > period[0]):  # type: ignore[operator]
            continue
        at = out.index(past)
        for i, current in enumerate(out[:at]):
            if (
                current.until is None
                and current.memory.id == past.memory.id
                and _held_from(current.memory) >= period[1]
            ):
                out.insert(i, out.pop(at))
                break
    return out
