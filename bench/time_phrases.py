"""The event-clock resolver (``popagent.memory.temporal.event_window``) on a phrase set
written by the team (``bench/time/phrases.tsv``: sentences a user tells, when they
were said, and the interval and precision a careful reader gives them).

Printed: accuracy by class (an answer counts when its first and last day and its
precision all match; for a distractor, when it names no time), then the time per
memory (µs, median and p95 over the phrase set, and over LoCoMo's user turns when
``../shared/benchdata/locomo10.json`` is there), then the time on hostile text of
growing length, which must grow linearly. The baseline in the same run is
``dateparser``'s ``search_dates`` on the same sentences, when it is installed (it
is not a dependency: see docs/time.md for why).

    python bench/time_phrases.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path

from popagent.memory.temporal import event_window

ROOT = Path(__file__).resolve().parent
PHRASES = ROOT / "time" / "phrases.tsv"
# ``../shared`` beside the repository; a worktree under ``wt/`` finds it one level up.
LOCOMO = (
    next(
        (p for p in (ROOT.parents[1] / "shared", ROOT.parents[2] / "shared") if p.is_dir()),
        ROOT.parents[1] / "shared",
    )
    / "benchdata"
    / "locomo10.json"
)
SAID = {
    "S": datetime(2023, 7, 30, 14, 0, tzinfo=UTC),
    "W": datetime(2023, 8, 16, 15, 0, tzinfo=UTC),
    "M": datetime(2024, 1, 8, 10, 0, tzinfo=UTC),
}
Expected = tuple[date, date, str] | None


def load() -> list[tuple[str, datetime, str, Expected]]:
    rows: list[tuple[str, datetime, str, Expected]] = []
    for line in PHRASES.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, said, text, expected = line.split("\t")
        if expected == "-":
            rows.append((kind, SAID[said], text, None))
            continue
        span, precision = expected.split(" ")
        first, after = (date.fromisoformat(d) for d in span.split(".."))
        rows.append((kind, SAID[said], text, (first, after, precision)))
    return rows


def answer(text: str, said: datetime) -> Expected:
    window = event_window(text, said)
    if window is None or window.precision is None:
        return None
    return window.start.date(), window.end.date(), window.precision


def timed(call: Callable[[], object], repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def per_text_us(texts: list[tuple[str, datetime]], repeat: int) -> tuple[float, float]:
    samples = [timed(partial(event_window, text, said), repeat) * 1e6 for text, said in texts]
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def locomo_turns() -> list[tuple[str, datetime]]:
    if not LOCOMO.exists():
        return []
    turns = []
    for sample in json.loads(LOCOMO.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        for n in range(1, 40):
            session = conversation.get(f"session_{n}")
            if not session:
                continue
            for turn in session:
                turns.append((turn["text"], SAID["S"]))
    return turns


def dateparser_us(texts: list[tuple[str, datetime]]) -> tuple[float, float] | None:
    try:
        search_dates = importlib.import_module("dateparser.search").search_dates
    except ImportError:
        return None
    samples = []
    for text, said in texts:
        settings = {"RELATIVE_BASE": said.replace(tzinfo=None)}
        call = partial(search_dates, text, languages=["en"], settings=settings)
        samples.append(timed(call) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = load()
    right: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    misses = []
    for kind, said, text, expected in rows:
        got = answer(text, said)
        total[kind] += 1
        if got == expected:
            right[kind] += 1
        else:
            misses.append((kind, text, expected, got))
    print(f"Event-clock resolver on {len(rows)} phrases written by the team ({PHRASES.name})\n")
    print(f"{'class':<16} {'phrases':>8} {'right':>6} {'accuracy':>9}")
    for kind in total:
        print(f"{kind:<16} {total[kind]:>8} {right[kind]:>6} {right[kind] / total[kind]:>9.1%}")
    all_right = sum(right.values())
    print(f"{'all':<16} {len(rows):>8} {all_right:>6} {all_right / len(rows):>9.1%}")
    if misses:
        print("\nMisses (class, text, expected, got):")
        for kind, text, expected, got in misses:
            print(f"  {kind:<15} {text!r}: {expected} -> {got}")

    texts = [(text, said) for _, said, text, _ in rows]
    print(f"\n{'µs per memory':<40} {'median':>9} {'p95':>9}")
    median, p95 = per_text_us(texts, args.repeat)
    print(f"{'phrase set (event_window)':<40} {median:>9.1f} {p95:>9.1f}")
    turns = locomo_turns()
    if turns:
        median, p95 = per_text_us(turns, args.repeat)
        print(f"{f'LoCoMo turns, {len(turns)} (event_window)':<40} {median:>9.1f} {p95:>9.1f}")
    baseline = dateparser_us(texts)
    if baseline is None:
        print(f"{'phrase set (dateparser.search_dates)':<40} {'not installed':>19}")
    else:
        print(
            f"{'phrase set (dateparser.search_dates)':<40} {baseline[0]:>9.1f} {baseline[1]:>9.1f}"
        )

    # Hostile text: many near-candidates ("in may", "last", digits) with no date. Each
    # doubling of the length should about double the time (linear), not quadruple it.
    said = SAID["S"]
    units = (
        "may I march on the week before I fall of 99999 days ago jan in 12345678 years "
        "from monday to and last sat on weekdays spring summerhouse 2020s "
    )
    print(f"\n{'hostile text (chars)':<24} {'ms':>9} {'ms per 1k chars':>16} {'in 1k pieces':>13}")
    from popagent.memory import temporal

    for size in (2_000, 20_000, 200_000):
        text = (units * (size // len(units) + 1))[:size]
        # Past event_window's scan cap: the grammar itself, as a question reads it.
        assert temporal.query_window(text, said) is None
        seconds = timed(partial(temporal.query_window, text, said), 3)
        # The same text read as 1k pieces: linear time means the two columns agree
        # (on a shared machine both move with its load).
        pieces = [text[i : i + 1_000] for i in range(0, size, 1_000)]
        apart = timed(partial(lambda ps: [temporal.query_window(p, said) for p in ps], pieces), 3)
        print(
            f"{size:<24} {seconds * 1e3:>9.2f} {seconds * 1e6 / size:>16.3f} "
            f"{apart * 1e6 / size:>13.3f}"
        )
    long = "word " * 100_000
    seconds = timed(partial(event_window, long, said), 3)
    print(f"{'500,000 (event_window)':<24} {seconds * 1e3:>9.2f}")


if __name__ == "__main__":
    main()
