"""Observational memory: runtime settings, the execution snapshot, the Observer,
the Reflector, the per-thread engine and exact-history retrieval.

``MemorySettings`` is one resource's validated settings, stored in
``popagent_memory_settings`` as percents and token counts; ``SETTINGS`` documents
each of them once; ``ExecutionSnapshot`` is the engine's frozen view, in Mastra's
ratios, taken once per turn::

    store = app.settings  # a MemorySettingsStore; app: popagent.connect()'s
    await store.update("popagent-user", observation_threshold_tokens=20_000)
    snapshot = await store.snapshot("popagent-user")   # applies from the next turn

Layout of the engine's steps: ``engine`` (the per-thread facade and pipeline)
uses ``buffering`` and ``reflection``, which never import ``engine`` or each
other; every observations text any of them stores goes through ``writes`` (the
credential screen).
"""

from .engine import ObservationalMemory, ObservedContext
from .observer import ObservationFailed
from .reflector import MAX_REFLECTION_ATTEMPTS, Reflection
from .retrieval import UNTRUSTED_LABEL, HistoryPage, read_history
from .settings import SETTINGS, MemorySettings, Setting
from .settings_store import MemorySettingsStore, StoredSettings
from .snapshot import ExecutionSnapshot, auto_idle_seconds, execution_snapshot

__all__ = [
    "MAX_REFLECTION_ATTEMPTS",
    "SETTINGS",
    "UNTRUSTED_LABEL",
    "ExecutionSnapshot",
    "HistoryPage",
    "MemorySettings",
    "MemorySettingsStore",
    "ObservationFailed",
    "ObservationalMemory",
    "ObservedContext",
    "Reflection",
    "Setting",
    "StoredSettings",
    "auto_idle_seconds",
    "execution_snapshot",
    "read_history",
]
