"""Recall's statistics, counted by the statements that insert and delete memories.

``popagent_resource_stats`` and ``popagent_lexeme_stats`` (migration 0004) hold
what BM25 needs to know of a resource: its memories and their summed lengths,
and per lexeme how many of its memories hold it; since migration 0019 also the
bytes of the resource's memory content, and since 0020 the bytes of its messages
(``thread_bytes``: the storage quota's one-row lookup). Invariant: after every
statement of ``store/`` both equal a full count of ``popagent_memories`` (a
lexeme whose count fell to 0 may remain with 0); ``tests/test_recall_statistics.py``
checks every write path against a recount.

Migration 0015 dropped the statement-level triggers that counted inserted and
deleted rows: they read transition tables, which a distributed table (Citus)
cannot have, and row-level triggers instead made a bulk insert cost twice as
much and a cleanup a hundred times as much. So each statement that inserts or
deletes memories returns the rows it wrote from a data-modifying CTE and
follows it with ``counted``: two more CTEs that add the rows' aggregated
counts, one upsert per resource and one per (resource, lexeme), as the
triggers did. A content change (a fact's update) is still counted by 0004's
row trigger. SQL of one's own that inserts or deletes memories must do the
same (or recount: docs/scaling.md).

Lock order, as before: a writer upserts the resource's row first and its
lexemes' rows in lexeme order, so concurrent writers of one resource queue on
that row and never deadlock. The lexeme CTE reads the resource CTE's row count
before it writes anything, which makes PostgreSQL run the resource upserts
first (Citus runs the CTEs one after another in that order anyway).
"""

from __future__ import annotations

__all__ = ["MESSAGE_BYTES", "counted", "thread_counted"]

#: A message's size in the storage quota (migration 0020): its text, parts and item
#: as JSON text. ``{m}`` is the alias of the message row.
MESSAGE_BYTES = "popagent_message_bytes({m}.content, {m}.parts, {m}.item)"


def counted(rows: str, sign: int, *, where: str = "true", name: str = "counted") -> str:
    """Two CTEs (to follow ``rows`` in a ``WITH`` list) that count the rows of CTE ``rows``
    in the statistics: ``sign`` 1 for rows inserted, -1 for rows deleted.

    ``rows`` must return ``resource_id``, ``search_vector`` and ``content``; ``where`` (over its
    alias ``r``) selects the rows to count, e.g. the inserted ones of an upsert. The
    CTEs are named ``{name}_resources`` and ``{name}_lexemes``.
    """
    if sign not in (1, -1):
        raise ValueError("sign is 1 (inserted rows) or -1 (deleted rows)")
    minus = "-" if sign < 0 else ""
    return f"""{name}_resources AS (
    INSERT INTO popagent_resource_stats AS s (resource_id, documents, total_length, content_bytes)
    SELECT r.resource_id, {minus}count(*), {minus}coalesce(sum(length(r.search_vector)), 0),
           {minus}coalesce(sum(octet_length(r.content)), 0)
    FROM {rows} r
    WHERE {where}
    GROUP BY r.resource_id ORDER BY r.resource_id
    ON CONFLICT (resource_id) DO UPDATE
    SET documents = s.documents + EXCLUDED.documents,
        total_length = s.total_length + EXCLUDED.total_length,
        content_bytes = s.content_bytes + EXCLUDED.content_bytes
    RETURNING s.resource_id
), {name}_lexemes AS (
    INSERT INTO popagent_lexeme_stats AS s (resource_id, lexeme, documents)
    SELECT r.resource_id, l.lexeme, {minus}count(*)
    FROM {rows} r CROSS JOIN LATERAL unnest(r.search_vector) AS l
    WHERE {where} AND (SELECT count(*) FROM {name}_resources) >= 0
    GROUP BY r.resource_id, l.lexeme ORDER BY r.resource_id, l.lexeme
    ON CONFLICT (resource_id, lexeme) DO UPDATE SET documents = s.documents + EXCLUDED.documents
)"""


def thread_counted(rows: str, *, name: str = "thread_counted") -> str:
    """A CTE (to follow ``rows`` in a ``WITH`` list) that adds the ``bytes`` of CTE
    ``rows`` to their resources' ``thread_bytes`` (migration 0020): positive for
    messages written, negative for messages deleted, a difference for messages
    rewritten. ``rows`` must return ``resource_id`` and ``bytes``; a statement that
    writes messages of a session locks the session's row before this CTE runs (its
    insert reads the session's CTE), so a writer of a session queues on that row
    before the resource's and never deadlocks with a session's delete."""
    return f"""{name} AS (
    INSERT INTO popagent_resource_stats AS s (resource_id, thread_bytes)
    SELECT r.resource_id, coalesce(sum(r.bytes), 0)
    FROM {rows} r
    GROUP BY r.resource_id ORDER BY r.resource_id
    ON CONFLICT (resource_id) DO UPDATE SET thread_bytes = s.thread_bytes + EXCLUDED.thread_bytes
    RETURNING s.resource_id
)"""
