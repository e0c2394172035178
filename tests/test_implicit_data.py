"""The implicit-question development set (bench/implicit/) loads and keeps its shape.

``bench/implicit.py`` and ``bench/quality.py`` choose and report ranking on this
data, so a broken file (an answer naming no memory, a user in both splits)
must fail here rather than skew a benchmark.
"""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def implicit() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        module = importlib.import_module("implicit")
    finally:
        sys.path.remove(str(BENCH))
    return module


def test_both_splits_load_with_every_part(implicit: ModuleType) -> None:
    stores = implicit.load()
    parts = Counter((s.split, q.part) for s in stores for q in s.questions)
    for split in ("dev", "check"):
        assert parts[(split, "facts")] >= 100
        assert parts[(split, "episodes")] >= 50
        assert parts[(split, "few")] >= 40
        assert parts[(split, "unrelated")] >= 5
    assert sum(parts.values()) >= 400
    # Full stores hold about 100 memories; the few part 3 to 10.
    sizes = [len(s.items) for s in stores]
    assert all(90 <= n <= 110 or n <= implicit.FEW_MAX for n in sizes)


def test_splits_share_no_user_and_answers_name_stored_memories(implicit: ModuleType) -> None:
    stores = implicit.load()
    users = {split: {s.user for s in stores if s.split == split} for split in ("dev", "check")}
    assert not users["dev"] & users["check"]
    for store in stores:
        ids = {i.id for i in store.items}
        assert all(set(q.answers) <= ids for q in store.questions)
        contents = [(i.kind, i.content) for i in store.items]
        assert len(contents) == len(set(contents)), store.user  # one stored memory each


def test_first_rank_scores_the_first_answer(implicit: ModuleType) -> None:
    assert implicit.first_rank(("b", "c"), ["a", "c", "b"]) == 2
    assert implicit.first_rank(("z",), ["a", "b"]) == 0
