"""Moving one resource between resources and databases: ``popagent export`` / ``import``.

The format is JSON Lines, documented in docs/export-format.md: a header line,
then one record per line (facts with their versions and provenance, episodes,
sessions, turns, messages, observations, settings, the vectors callers made
with their own models and, only when asked, the secrets' ciphertext).
``import_mem0`` reads Mem0's exported memories.

Layering: this package sits above ``memory``, ``threads`` and ``observe``
(whose checks it applies) and below the CLI; its SQL is in
``popagent.store.portable`` (export) and ``popagent.store.portable_import``
(import). ``reading`` reads hostile files: lines, UTF-8 and JSON within limits.
"""

from __future__ import annotations

from .exporter import export_resource
from .importer import import_resource
from .mem0 import import_mem0
from .records import FORMAT, FORMAT_VERSION, RECORD_TYPES
from .report import ImportReport

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "RECORD_TYPES",
    "ImportReport",
    "export_resource",
    "import_mem0",
    "import_resource",
]
