"""The notes a memory's label carries in the rendered block: a past value's span,
and a derived memory's stale mark.

``- [fact, past value 2021-03-01 to 2023-05-02] Lives in Paris`` is a value the
fact held then (recall as of a date, or a question about a past period);
``- [fact, may be stale: based on home.city (changed 2024-01-02)] ...`` is a
memory whose source changed after it was written. Both are built from stored
dates and keys (no whitespace, validated), never from content, so stored text
cannot forge them.
"""

from __future__ import annotations

from ..models import RecallResult

__all__ = ["notes"]


def notes(result: RecallResult) -> list[str]:
    """The notes for ``result``'s label, in order (none for most memories)."""
    out: list[str] = []
    memory = result.memory
    if result.until is not None:
        # From when it began to hold: its event start where it has one (``until`` is
        # the event clock's too, store.past), else when it was written.
        began = memory.happened_start
        if began is None or began >= result.until:
            began = memory.updated_at
        start = began.date().isoformat()
        out.append(f"past value {start} to {result.until.date().isoformat()}")
    if memory.stale_since is not None and memory.stale_source is not None:
        changed = memory.stale_since.date().isoformat()
        out.append(f"may be stale: based on {memory.stale_source} (changed {changed})")
    return out
