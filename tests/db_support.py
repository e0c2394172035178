"""Database helpers shared by the fixtures: the suite's database, and scratch databases.

The suite runs on a disposable embedded server by default. With
``POPAGENT_TEST_DATABASE_URL`` it runs on that server instead, in a database it
creates for the run. With ``POPAGENT_TEST_NO_CREATE_DATABASE=1`` as well, it
runs in the given database itself and creates none there (a Citus cluster, or a
managed server, whose databases are made by their operator): the fixtures apply
the migrations to it, then run ``POPAGENT_TEST_AFTER_MIGRATE``, the hook that
distributes the tables (docs/scaling.md, "Running the suite on a cluster").
Parallel test processes (pytest-xdist) each need a database of their own there,
since tests count rows across whole tables: ``{worker}`` in the URL becomes the
process's name (``gw0``, ``gw1``, ...; ``main`` without xdist). The few tests
that need a second, fresh database get one on an embedded server of their own
in that mode.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from popagent import defaults
from popagent.store.embedded import EmbeddedServer
from popagent.store.migrate import apply_migrations

__all__ = [
    "AFTER_MIGRATE_ENV",
    "DATABASE_URL_ENV",
    "NO_CREATE_DATABASE_ENV",
    "RESOURCE_DIGESTS",
    "creates_databases",
    "given_database_url",
    "prepare_given_database",
    "runs_on_citus",
    "scratch_database",
]

#: The server (and, with ``NO_CREATE_DATABASE_ENV``, the database) the suite runs on.
DATABASE_URL_ENV = defaults.TEST_DATABASE_URL_ENV
#: ``1``: run in the database of ``DATABASE_URL_ENV`` itself; never ``CREATE DATABASE`` there.
NO_CREATE_DATABASE_ENV = defaults.TEST_NO_CREATE_DATABASE_ENV
#: What to run once the suite's migrations are applied to the given database: an ``.sql``
#: file (run as one script) or a shell command (with ``DATABASE_URL_ENV`` in its environment).
AFTER_MIGRATE_ENV = defaults.TEST_AFTER_MIGRATE_ENV

# Held while one test process migrates the given database and runs the hook, so that
# the other processes of a parallel run (pytest-xdist) start on distributed tables.
_SETUP_LOCK_ID = 7_312_104_118_900

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


def creates_databases() -> bool:
    """Whether the suite may create databases on the given server (see the module doc)."""
    return not (os.environ.get(DATABASE_URL_ENV) and os.environ.get(NO_CREATE_DATABASE_ENV) == "1")


def given_database_url() -> str | None:
    """``DATABASE_URL_ENV`` with ``{worker}`` replaced by this test process's name.

    ``RuntimeError`` when parallel processes would share the one database they may not
    create databases beside (see the module doc).
    """
    url = os.environ.get(DATABASE_URL_ENV)
    if not url:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if "{worker}" not in url and worker and not creates_databases():
        raise RuntimeError(
            f"parallel test processes would share the database of {DATABASE_URL_ENV}: "
            "put {worker} in it (one database per process: gw0, gw1, ...) or run one "
            "process (-n 0)"
        )
    return url.replace("{worker}", worker or "main")


def runs_on_citus() -> bool:
    """Whether this is the suite's Citus mode: it runs in a given database (never one
    it creates) that has the ``citus`` extension, whose tables its
    ``AFTER_MIGRATE_ENV`` hook distributes. Asked once per test process, at collection."""
    url = given_database_url()
    if url is None or creates_databases():
        return False
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')")
        found = row.fetchone()
    return found is not None and bool(found[0])


def prepare_given_database(url: str) -> list[int]:
    """Migrate the given database and, when this process applied migrations, run the
    ``AFTER_MIGRATE_ENV`` hook; the versions applied. One process at a time."""
    hook = os.environ.get(AFTER_MIGRATE_ENV, "").strip()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SETUP_LOCK_ID,))
        try:
            applied = asyncio.run(_migrate(url))
            if applied and hook:
                _run_hook(url, hook)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_ID,))
    return applied


async def _migrate(url: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        return await apply_migrations(conn)


def _run_hook(url: str, hook: str) -> None:
    path = Path(hook)
    if hook.endswith(".sql") and path.is_file():
        # One script, as psql -f would send it; a statement that fails stops it.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(path.read_bytes())
        return
    done = subprocess.run(
        hook,
        shell=True,
        env={**os.environ, DATABASE_URL_ENV: url},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{AFTER_MIGRATE_ENV} exited with {done.returncode}:\n{done.stdout}{done.stderr}"
        )


_scratch_lock = threading.Lock()
_scratch_server: EmbeddedServer | None = None


def _scratch_server_url() -> str:
    """An embedded server of this process for scratch databases, started on first use."""
    global _scratch_server
    with _scratch_lock:
        if _scratch_server is None:
            folder = tempfile.mkdtemp(prefix="popagent-scratch-")
            server = _scratch_server = EmbeddedServer(folder, delete=True)

            def stop() -> None:
                server.stop()
                shutil.rmtree(folder, ignore_errors=True)

            atexit.register(stop)
        return _scratch_server.url


@contextmanager
def scratch_database(server_url: str, prefix: str = "popagent_scratch") -> Iterator[str]:
    """A fresh database on the server of ``server_url``; yields its URL, drops it afterwards
    (``WITH (FORCE)``, so connections a failed test left open cannot keep it).

    When the suite may not create databases on the given server (``creates_databases``),
    a scratch database asked of that server is made on an embedded server instead.
    """
    if not creates_databases() and server_url == given_database_url():
        server_url = _scratch_server_url()
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
