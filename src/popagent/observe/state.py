"""The one read-only view of a session's observational state.

The engine, the web services (API and GUI) and ``popagent chat`` read the
stored observation log through these functions and nothing else::

    state = await read_state(pool, "popagent-user", "session-1")
    state.head, state.generations, state.groups

Invariants:
- Read-only: nothing here writes, locks or opens a transaction.
- ``generations`` are every stored generation, oldest first; ``head`` is the
  last of them (the active one), ``None`` before the first observation;
  ``groups`` are the head's active groups in order (their text joined is the
  head's ``observations``), empty without a head.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import ObservationGroup, ObservationLog
from ..store import observations as obs_sql
from ..store.database import Pool

__all__ = ["ObservationState", "read_generations", "read_groups", "read_state"]


@dataclass(frozen=True, slots=True)
class ObservationState:
    """Every generation of one session's observation log and the head's active groups."""

    generations: tuple[ObservationLog, ...]
    groups: tuple[ObservationGroup, ...]

    @property
    def head(self) -> ObservationLog | None:
        """The active (newest) generation, ``None`` when the session has no log yet."""
        return self.generations[-1] if self.generations else None


async def read_generations(pool: Pool, resource_id: str, session_id: str) -> list[ObservationLog]:
    """Every stored generation of the session's log, oldest first."""
    async with pool.connection() as conn:
        return await obs_sql.list_logs(conn, resource_id, session_id)


async def read_groups(pool: Pool, log: ObservationLog | None) -> list[ObservationGroup]:
    """The active groups of generation ``log``, in order; none for ``None``."""
    if log is None:
        return []
    async with pool.connection() as conn:
        return await obs_sql.groups_of_log(conn, log)


async def read_state(pool: Pool, resource_id: str, session_id: str) -> ObservationState:
    """The session's generations and the active groups of the last one, on one connection."""
    async with pool.connection() as conn:
        logs = await obs_sql.list_logs(conn, resource_id, session_id)
        groups = await obs_sql.groups_of_log(conn, logs[-1]) if logs else []
    return ObservationState(tuple(logs), tuple(groups))
