"""Pure text helpers of observational memory: parsing, loop detection, trimming, gaps.

Nothing here does I/O. Token counts come from ``popagent.observe.tokens``, the
same estimate the engine compares against its thresholds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence

from .tokens import TokenCounter, count_text

__all__ = [
    "GAP_SECONDS",
    "LINE_CAP",
    "gap_text",
    "is_degenerate",
    "parse_observations",
    "trim_previous",
]

#: A temporal marker is due when two messages are at least this far apart (10 minutes).
GAP_SECONDS = 600
#: Observation lines longer than this are cut (a runaway line cannot flood the log).
LINE_CAP = 10_000

_OPEN = re.compile(r"^<observations>[ \t]*\n?", re.MULTILINE)
_CLOSE = re.compile(r"^</observations>", re.MULTILINE)
_LIST_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+\S")
_IMPORTANT = re.compile(r"^\s*(?:[-*•]\s*)?(?:🔴|✅)")

_UNITS = (
    ("year", 365 * 86_400),
    ("month", 30 * 86_400),
    ("week", 7 * 86_400),
    ("day", 86_400),
    ("hour", 3_600),
    ("minute", 60),
)


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def gap_text(seconds: float) -> str:
    """Words for a gap, as the reference words them: minutes under an hour, else
    two units (hours and minutes, days and hours, weeks and days, months and
    weeks, years and months; a month is 30 days, a year 365), e.g.
    ``'2 hours 5 minutes later'``. A zero second unit is left out."""
    total = max(0, int(seconds))
    if total < 3_600:
        return _plural(max(1, total // 60), "minute") + " later"
    for i, (unit, size) in enumerate(_UNITS[:-1]):
        if total >= size:
            big, rest = divmod(total, size)
            small_unit, small_size = _UNITS[i + 1]
            small = rest // small_size
            text = _plural(big, unit)
            if small:
                text += " " + _plural(small, small_unit)
            return text + " later"
    raise AssertionError("unreachable")  # pragma: no cover


def _blocks(text: str) -> Iterator[str]:
    """The text of each ``<observations>`` block whose tags start a line. Once an
    opening tag has no closing tag after it, no later one has: the search stops
    there rather than reading the rest again from every later opening tag."""
    pos = 0
    while (opening := _OPEN.search(text, pos)) is not None:
        closing = _CLOSE.search(text, opening.end())
        if closing is None:
            return
        yield text[opening.end() : closing.start()]
        pos = closing.end()


def parse_observations(text: str) -> str:
    """The observation text of a model's answer; '' when it holds none.

    Every ``<observations>`` block whose tags start a line, joined; without
    one, only list lines (a model that forgot the tags). Lines over
    ``LINE_CAP`` characters are cut and marked; blank runs collapse.
    """
    blocks = list(_blocks(text))
    if blocks:
        lines = "\n".join(blocks).splitlines()
    else:
        lines = [line for line in text.splitlines() if _LIST_LINE.match(line)]
    out: list[str] = []
    for line in lines:
        line = line.rstrip()
        if len(line) > LINE_CAP:
            line = line[:LINE_CAP] + "… [truncated]"
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip("\n")


def is_degenerate(text: str) -> bool:
    """Whether ``text`` looks like a repetition loop rather than observations.

    Fires on any of: at least 10 substantial lines (24+ characters) of which
    more than half repeat an earlier one; on 2,000+ characters, more than 40%
    duplicates among ~50 evenly spaced 200-character windows; on 200+ words,
    fewer than 30% distinct word 8-grams (a long-period loop); or repeated
    short lines (a line seen before) adding up to more than 10,000 characters.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    long_lines = [line for line in lines if len(line) >= 24]
    if len(long_lines) >= 10:
        duplicates = len(long_lines) - len(set(long_lines))
        if duplicates * 2 > len(long_lines):
            return True
    if len(text) >= 2_000:
        step = max(1, (len(text) - 200) // 50)
        windows = [text[i : i + 200] for i in range(0, len(text) - 199, step)][:50]
        if windows and (len(windows) - len(set(windows))) / len(windows) > 0.4:
            return True
    words = text.split()
    if len(words) >= 200:
        grams = [tuple(words[i : i + 8]) for i in range(len(words) - 7)]
        if len(set(grams)) < 0.3 * len(grams):
            return True
    seen: Counter[str] = Counter()
    repeated_chars = 0
    for line in lines:
        if len(line) < 24:
            if seen[line]:
                repeated_chars += len(line) + 1
            seen[line] += 1
    return repeated_chars > 10_000


def _marker(hidden: int) -> str:
    return f"[{hidden} observations truncated here]"


def _render(lines: Sequence[str], keep: set[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(lines):
        if i in keep:
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and j not in keep:
            j += 1
        # A hidden run of exactly one line is shown as it is: the marker would cost as much.
        out.extend(lines[i:j] if j - i == 1 else [_marker(j - i)])
        i = j
    return "\n".join(out)


def trim_previous(
    observations: str, budget: int | None, counter: TokenCounter | None = None
) -> tuple[str, bool]:
    """The previous observations to show the Observer within ``budget`` tokens,
    and whether anything was left out.

    ``None`` shows everything; 0 shows nothing (truncated). Otherwise, when the
    text is over budget: a tail of the newest lines plus as many older 🔴/✅
    lines as fit, newest first and never more of them than tail lines; each
    hidden run becomes ``[N observations truncated here]``. Among the
    candidates that fit, the one with the most important lines wins, then the
    one with the longest tail.
    """
    if budget is None or not observations:
        return observations, False
    if budget == 0:
        return "", True
    if count_text(observations, counter) <= budget:
        return observations, False
    lines = observations.splitlines()
    n = len(lines)
    cost = [count_text(line, counter) + 1 for line in lines]
    marker_cost = count_text(_marker(n), counter) + 1
    important = [i for i, line in enumerate(lines) if _IMPORTANT.match(line)]
    best: tuple[int, int, set[int]] | None = None
    suffix = 0
    for tail in range(0, n + 1):
        if tail:
            suffix += cost[n - tail]
        # At most one marker per gap: before, between and after the kept important lines.
        room = budget - suffix
        if room < marker_cost:
            break
        keep = set(range(n - tail, n))
        used = 0
        picked = 0
        for i in reversed([i for i in important if i < n - tail]):
            if picked >= tail:
                break
            if used + cost[i] + marker_cost * (picked + 2) > room:
                break
            keep.add(i)
            used += cost[i]
            picked += 1
        candidate = (picked, tail, keep)
        if best is None or (picked, tail) > best[:2]:
            best = candidate
    if best is None:
        return "", True
    text = _render(lines, best[2])
    # The per-line sums are an estimate of the joined text: drop tail lines until it fits.
    keep = set(best[2])
    while keep and count_text(text, counter) > budget:
        keep.discard(min(keep))
        text = _render(lines, keep)
    return text, True
