"""Database helpers shared by the fixtures: a scratch database of its own on a server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["RESOURCE_DIGESTS", "scratch_database"]

#: One row of digests of a resource's memories, sessions, messages and settings (parameter
#: ``r``): equal before and after exactly when a refused request changed none of them.
RESOURCE_DIGESTS = """
SELECT
  (SELECT coalesce(md5(string_agg(concat_ws('|', id, kind, key, content, importance, updated_at), ',' ORDER BY id)), '')
     FROM popagent_memories WHERE resource_id = %(r)s) AS memories,
  (SELECT coalesce(md5(string_agg(concat_ws('|', session_id, title, updated_at), ',' ORDER BY session_id)), '')
     FROM popagent_sessions WHERE resource_id = %(r)s) AS sessions,
  (SELECT coalesce(md5(string_agg(concat_ws('|', id, content), ',' ORDER BY id)), '')
     FROM popagent_messages WHERE resource_id = %(r)s) AS messages,
  (SELECT coalesce(md5(string_agg(concat_ws('|', version, updated_at), ',')), '')
     FROM popagent_memory_settings WHERE resource_id = %(r)s) AS settings
"""


@contextmanager
def scratch_database(server_url: str, prefix: str = "popagent_scratch") -> Iterator[str]:
    """A fresh database on the server of ``server_url``; yields its URL, drops it afterwards
    (``WITH (FORCE)``, so connections a failed test left open cannot keep it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)  # type: ignore[arg-type]
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
