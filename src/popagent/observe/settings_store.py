"""``MemorySettingsStore``: the service over ``popagent_memory_settings``.

Invariants:
- A resource without a row has every setting at its default (version 0).
- ``update`` validates the merged result as a whole, inside the transaction
  that holds the row lock, and writes all of it or nothing; ``version`` grows
  by one with every write and never goes back (``reset`` is a write too).
- Settings apply on the next turn, never mid-turn: a turn calls ``snapshot``
  once when it starts and uses that frozen value throughout, so an update made
  meanwhile is seen only by the turns that start after it.
- Every method acts within one ``resource_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..checks import check_id
from ..errors import ValidationError
from ..store import settings as sql
from ..store.database import Pool
from .settings import SETTINGS_BY_NAME, MemorySettings
from .snapshot import ExecutionSnapshot, execution_snapshot

__all__ = ["MemorySettingsStore", "StoredSettings", "settings_from_row", "settings_to_row"]

_IDLE = ("observation_activate_after_idle", "reflection_activate_after_idle")


@dataclass(frozen=True, slots=True)
class StoredSettings:
    """A resource's settings with their bookkeeping."""

    resource_id: str
    settings: MemorySettings
    #: 0 while the resource has no row (all defaults); one more with every write.
    version: int
    #: ``None`` while the resource has no row.
    updated_at: datetime | None


def settings_to_row(settings: MemorySettings) -> dict[str, Any]:
    """``settings`` as the column values of a ``popagent_memory_settings`` row
    (``store.settings.write_settings``); ``settings_from_row`` reads them back."""
    values = settings.model_dump()
    for name in _IDLE:
        if isinstance(values[name], int):
            values[name] = str(values[name])
    values["forward_attachments"] = list(values["forward_attachments"])
    return values


def settings_from_row(resource_id: str, row: dict[str, Any]) -> StoredSettings:
    """A ``popagent_memory_settings`` row of ``resource_id`` as ``StoredSettings``."""
    values = {name: row[name] for name in sql.COLUMNS}
    for name in _IDLE:
        if values[name] is not None and values[name] != "auto":
            values[name] = int(values[name])
    return StoredSettings(
        resource_id=resource_id,
        settings=MemorySettings(**values),
        version=row["version"],
        updated_at=row["updated_at"],
    )


def _check_changes(changes: Mapping[str, object]) -> None:
    if not changes:
        raise ValidationError("changes", "name at least one setting to change")
    for name in changes:
        if name not in SETTINGS_BY_NAME:
            raise ValidationError(
                name[:80], "is not a memory setting (`popagent settings show` lists them)"
            )


class MemorySettingsStore:
    """Read, update, reset and snapshot each resource's observational-memory settings.

    Borrows a connection from the pool for each call and holds none between calls.
    """

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def read(self, resource_id: str) -> StoredSettings:
        """The settings with their version and update time; defaults (version 0) without a row."""
        resource_id = check_id("resource_id", resource_id)
        async with self._pool.connection() as conn:
            row = await sql.select_settings(conn, resource_id)
        if row is None:
            return StoredSettings(resource_id, MemorySettings(), 0, None)
        return settings_from_row(resource_id, row)

    async def get(self, resource_id: str) -> MemorySettings:
        """The resource's settings; every default when it has none stored."""
        return (await self.read(resource_id)).settings

    async def update(self, resource_id: str, /, **changes: Any) -> MemorySettings:
        """Change the named settings; return the whole new settings.

        The current settings updated with ``changes`` (see
        ``popagent.observe.settings.merge_changes`` for the either-or pairs and
        the settings that follow async buffering) must be valid as a whole;
        otherwise ``ValidationError`` names the setting and nothing is written.
        Concurrent updates of one resource serialize on its row.
        """
        return (await self.update_stored(resource_id, changes)).settings

    async def update_stored(self, resource_id: str, changes: Mapping[str, Any]) -> StoredSettings:
        """``update``, returning the new version and update time as well."""
        resource_id = check_id("resource_id", resource_id)
        _check_changes(changes)
        async with self._pool.connection() as conn, conn.transaction():
            await sql.insert_default_row(conn, resource_id)
            row = await sql.select_settings(conn, resource_id, for_update=True)
            assert row is not None, "the row was just ensured"
            current = settings_from_row(resource_id, row).settings
            # Raises before anything is written; the transaction then also
            # removes a default row inserted above.
            new = current.with_changes(**changes)
            written = await sql.write_settings(conn, resource_id, settings_to_row(new))
        return settings_from_row(resource_id, written)

    async def reset(self, resource_id: str) -> MemorySettings:
        """Every setting back to its default; the version still grows. No row: nothing to do."""
        resource_id = check_id("resource_id", resource_id)
        defaults = MemorySettings()
        async with self._pool.connection() as conn, conn.transaction():
            row = await sql.select_settings(conn, resource_id, for_update=True)
            if row is not None:
                await sql.write_settings(conn, resource_id, settings_to_row(defaults))
        return defaults

    async def snapshot(self, resource_id: str) -> ExecutionSnapshot:
        """The engine's frozen view of the settings, for the turn that is starting.

        Take it once at the start of a turn and use only it until the turn ends:
        that is what makes a settings change apply on the next turn, never mid-turn.
        """
        stored = await self.read(resource_id)
        return execution_snapshot(stored.settings, version=stored.version)
