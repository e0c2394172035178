"""``ImportReport``: what an import added, left unchanged or skipped, per record type."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["OUTCOMES", "ImportReport", "Tally"]

#: ``added``: written; ``updated``: settings replaced by the file's; ``unchanged``:
#: already there, equal; ``skipped``: left out (see docs/export-format.md, "Import").
OUTCOMES = ("added", "updated", "unchanged", "skipped")


@dataclass
class Tally:
    """The counts an import builds up as it goes (mutable; frozen into the report)."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped_sessions: list[str] = field(default_factory=list)

    def add(self, record_type: str, outcome: str, n: int = 1) -> None:
        by_outcome = self.counts.setdefault(record_type, dict.fromkeys(OUTCOMES, 0))
        by_outcome[outcome] += n


@dataclass(frozen=True, slots=True)
class ImportReport:
    """The outcome of one import (or of a dry run, which wrote nothing).

    ``counts[type][outcome]`` for every record type the file held; a second
    import of the same file reports everything ``unchanged`` (or ``skipped``).
    """

    resource_ids: tuple[str, ...]
    counts: dict[str, dict[str, int]]
    skipped_sessions: tuple[str, ...] = ()
    dry_run: bool = False

    @classmethod
    def of(cls, resource_ids: tuple[str, ...], tally: Tally, *, dry_run: bool) -> ImportReport:
        return cls(
            resource_ids=resource_ids,
            counts={t: dict(c) for t, c in tally.counts.items()},
            skipped_sessions=tuple(tally.skipped_sessions),
            dry_run=dry_run,
        )

    def total(self, outcome: str) -> int:
        return sum(c.get(outcome, 0) for c in self.counts.values())

    def to_json(self) -> dict[str, object]:
        return {
            "resource_ids": list(self.resource_ids),
            "counts": self.counts,
            "skipped_sessions": list(self.skipped_sessions),
            "dry_run": self.dry_run,
        }
