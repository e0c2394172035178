"""``LongTermMemory``: the service over ``popagent_memories``.

This is the layer that owns transactions: each public method validates its
input completely, then opens one transaction (or none, for a single
statement) on a pooled connection and calls the store functions. A call that
raises has changed nothing.

Every method takes ``resource_id`` first; nothing here reads or writes across
resources except ``maintain``, which applies the retention policy to all.

Writes never embed: a background worker writes each memory's vectors after it
commits (``memory.vector_worker``). With an ``embedder`` (``popagent.embed``),
recall fuses the vector index's candidates with the lexical ones
(``popagent.memory.ranking``); without one, recall is lexical, as the spec
describes.

The class is its state (``base.MemoryBase``: the pool, weights, embedder and
vector worker) and the table of operations below. Each operation is a plain
function of that state in the module of its concern: ``recall`` (recall and
its report), ``manage`` (retention, facts, episodes, cleanup, maintenance,
backfill) and ``history`` (versions, restore, a session's writes). There is no
stack of base classes: what a ``LongTermMemory`` can do is listed here, once.
"""

from __future__ import annotations

from . import caller_vectors as _caller_vectors
from . import derived as _derived
from . import history as _history
from . import manage as _manage
from . import recall as _recall
from .base import MemoryBase
from .manage import (
    EPISODE_CAP_PER_RESOURCE,
    EPISODE_IMPORTANCE,
    EPISODE_MAX_AGE,
    EpisodeDraft,
    sha256_hex,
)
from .recall import RecallMode, candidate_idfs, recall_pool

__all__ = [
    "EPISODE_CAP_PER_RESOURCE",
    "EPISODE_IMPORTANCE",
    "EPISODE_MAX_AGE",
    "EpisodeDraft",
    "LongTermMemory",
    "RecallMode",
    "candidate_idfs",
    "recall_pool",
    "sha256_hex",
]


class LongTermMemory(MemoryBase):
    """Facts and episodes of many resources, with recall, management and maintenance.

    Obtain one as ``popagent.connect()``'s ``app.memory``; it borrows connections from
    the pool for each call and holds none between calls.
    """

    # Recall (``memory.recall``).
    recall = _recall.recall
    recall_report = _recall.recall_report

    # Retention and writes (``memory.manage``).
    retain_episode = _manage.retain_episode
    retain_episodes = _manage.retain_episodes
    draft_episode = _manage.draft_episode
    write_episode = _manage.write_episode
    remember = _manage.remember
    create_fact = _manage.create_fact
    update_fact = _manage.update_fact

    # Derived memories' stale marks (``memory.derived``).
    stale = _derived.stale
    confirm = _derived.confirm

    # One verb per operation, for either kind (``memory.manage``).
    list = _manage.list_memories
    get = _manage.get_memory
    delete = _manage.delete_memory

    # Cleanup, purge, maintenance and backfill (``memory.manage``).
    cleanup = _manage.cleanup
    purge = _manage.purge
    maintain = _manage.maintain
    embed_missing = _manage.embed_missing

    # Fact versions and a session's writes (``memory.history``).
    fact_history = _history.fact_history
    restore_fact = _history.restore_fact
    session_writes = _history.session_writes
    revert_session = _history.revert_session

    # Vectors a caller made with its own model, and expiry a read extends
    # (``memory.caller_vectors``, for framework stores such as LangGraph's).
    write_caller_vectors = _caller_vectors.write_caller_vectors
    caller_vector_scores = _caller_vectors.caller_vector_scores
    extend_expiry = _caller_vectors.extend_expiry
