"""``LongTermMemory``: the service over ``popagent_memories``.

This is the layer that owns transactions: each public method validates its
input completely, then opens one transaction (or none, for a single
statement) on a pooled connection and calls the store functions. A call that
raises has changed nothing.

Every method takes ``resource_id`` first; nothing here reads or writes across
resources except ``maintain``, which applies the retention policy to all.

With an ``embedder`` (``popagent.embed``), every write also stores the
memory's vectors in the same transaction (embedded before it opens; when the
model fails, the memory is stored without them and ``embed_missing`` fills
them in later), and recall fuses the vector index's candidates with the
lexical ones (``popagent.memory.ranking``). Without one, recall is lexical, as
the spec describes.

The methods live in the modules beside this one, by concern: ``recall``
(``Recalling``), ``manage`` (``Management``: retention, facts, episodes,
cleanup, maintenance, backfill) and ``history`` (``FactHistory``: versions,
restore, a session's writes); ``base`` holds what they share.
"""

from __future__ import annotations

from .history import FactHistory
from .manage import (
    EPISODE_CAP_PER_RESOURCE,
    EPISODE_IMPORTANCE,
    EPISODE_MAX_AGE,
    LIST_LIMIT_CAP,
    EpisodeDraft,
    Management,
    sha256_hex,
)
from .recall import Recalling, RecallMode, candidate_idfs, recall_pool

__all__ = [
    "EPISODE_CAP_PER_RESOURCE",
    "EPISODE_IMPORTANCE",
    "EPISODE_MAX_AGE",
    "LIST_LIMIT_CAP",
    "EpisodeDraft",
    "LongTermMemory",
    "RecallMode",
    "candidate_idfs",
    "recall_pool",
    "sha256_hex",
]


class LongTermMemory(Recalling, Management, FactHistory):
    """Facts and episodes of many resources, with recall, management and maintenance.

    Obtain one with ``popagent.connect()``; it borrows connections from the pool
    for each call and holds none between calls.
    """
