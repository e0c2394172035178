"""Observational memory: runtime settings and the execution snapshot (the Observer and
Reflector will live here too).

``MemorySettings`` is one resource's validated settings, stored in
``popagent_memory_settings`` as percents and token counts; ``SETTINGS`` documents
each of them once; ``ExecutionSnapshot`` is the engine's frozen view, in Mastra's
ratios, taken once per turn::

    store = MemorySettingsStore(memory.pool)
    await store.update("popagent-user", observation_threshold_tokens=20_000)
    snapshot = await store.snapshot("popagent-user")   # applies from the next turn
"""

from .settings import SETTINGS, MemorySettings, Setting
from .settings_store import MemorySettingsStore, StoredSettings
from .snapshot import ExecutionSnapshot, auto_idle_seconds, execution_snapshot

__all__ = [
    "SETTINGS",
    "ExecutionSnapshot",
    "MemorySettings",
    "MemorySettingsStore",
    "Setting",
    "StoredSettings",
    "auto_idle_seconds",
    "execution_snapshot",
]
