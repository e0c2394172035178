"""The database side of multi-resource mode: whose rows a pooled connection may touch.

``serving(resource_id)`` marks the current task (and the tasks it starts) as
serving one resource. While it is in force, ``Pool.connection()`` hands out
connections that run as the role ``popagent_tenant`` with the setting
``popagent.resource_id`` set to that resource, and migration 0018's policies
let them see and write only that resource's rows. The server's token gate
enters it for every request that a key authenticated.

The bypass, named here and nowhere else: ``bypass(reason)`` leaves the current
task's resource unset, so its connections run as the owner, which row-level
security does not restrict (0018 enables it without forcing it). It is for work
that spans resources or needs the owner (maintenance's schedule, a purge's
``VACUUM``, key management before a resource is known). Code that never
enters ``serving`` (the library, the CLI, single-resource mode) is the owner.

Invariants:
- ``confine`` runs on every checkout, before the caller sees the connection: it
  makes the connection serve exactly the caller's resource, or be the owner's
  again for a caller outside ``serving``. Each connection's state is recorded
  here; switching costs one round trip, and a checkout for the resource the
  connection already serves costs none (the common case in multi-resource
  mode). A connection whose switch fails is closed, never handed out.
- The role and the setting are session-level (``set_config(..., false)``, run
  outside any transaction), not per transaction: every statement of the
  checkout, in or out of a transaction, is confined.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ..errors import DatabaseError

__all__ = [
    "ENTER_TENANT",
    "LEAVE_TENANT",
    "TENANT_ROLE",
    "boundary_problem",
    "bypass",
    "confine",
    "current_tenant",
    "require_boundary",
    "serving",
]

#: The role a connection serving one resource runs as (migration 0018).
TENANT_ROLE = "popagent_tenant"

ENTER_TENANT = """
SELECT set_config('role', 'popagent_tenant', false),
       set_config('popagent.resource_id', %(resource_id)s, false)
"""

LEAVE_TENANT = """
SELECT set_config('role', 'none', false), set_config('popagent.resource_id', '', false)
"""

_TENANT: ContextVar[str | None] = ContextVar("popagent_tenant", default=None)


def current_tenant() -> str | None:
    """The resource the current task serves (multi-resource mode), else ``None``."""
    return _TENANT.get()


@contextmanager
def serving(resource_id: str) -> Iterator[None]:
    """Confine this task's (and its children's) database connections to ``resource_id``."""
    token = _TENANT.set(resource_id)
    try:
        yield
    finally:
        _TENANT.reset(token)


@contextmanager
def bypass(reason: str) -> Iterator[None]:
    """Run as the owner, unconfined, for ``reason`` (maintenance, purge, keys): the one
    way around row-level security (module doc)."""
    del reason  # named at the call site, for the reader and for grep
    token = _TENANT.set(None)
    try:
        yield
    finally:
        _TENANT.reset(token)


# The resource each pooled connection serves now (absent: the owner's, as opened).
_STATE: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], str] = weakref.WeakKeyDictionary()


async def confine(conn: psycopg.AsyncConnection[Any], resource_id: str | None) -> None:
    """Make ``conn`` serve ``resource_id`` only, or be the owner's for ``None``; no
    round trip when it already does. Closes ``conn`` and raises when that fails."""
    if _STATE.get(conn) == resource_id:
        return
    try:
        if resource_id is None:
            await conn.execute(LEAVE_TENANT)
            del _STATE[conn]
        else:
            await conn.execute(ENTER_TENANT, {"resource_id": resource_id})
            _STATE[conn] = resource_id
    except BaseException:
        _STATE.pop(conn, None)
        await conn.close()  # its role is unknown: the pool replaces a closed connection
        raise


# Whether this connection's user may become the tenant role, and whether the
# resource tables are distributed by Citus (``to_regclass`` keeps the query valid
# where Citus is not installed).
_BOUNDARY = """
SELECT (SELECT pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER')
          FROM pg_catalog.pg_roles r WHERE r.rolname = %(role)s) AS member,
       pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL AS has_citus,
       current_user AS "user"
"""

_DISTRIBUTED = """
SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition
               WHERE logicalrelid = pg_catalog.to_regclass('popagent_memories')) AS distributed
"""


async def boundary_problem(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """Why this database cannot keep multi-resource mode's boundary, in one sentence
    that says what to do; ``None`` when it can. The server asks once, at startup,
    so that it refuses to start rather than answer every request with an error.

    - The role must exist and the connecting user must be a member (migration 0018
      creates and grants it where it may).
    - Citus runs a statement on a distributed table through its own connections to
      the nodes, opened as the current role: ``popagent_tenant`` cannot log in, and
      the session setting that names the resource does not travel with them, so the
      policy on each shard could not see the resource. On Citus, serve one resource
      per server (the default mode) instead.
    """
    async with conn.cursor(row_factory=dict_row) as cur:  # whatever the pool's rows are
        await cur.execute(_BOUNDARY, {"role": TENANT_ROLE})
        row = await cur.fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        member, user = row["member"], row["user"]
        distributed = False
        if row["has_citus"]:
            await cur.execute(_DISTRIBUTED)
            found = await cur.fetchone()
            distributed = found is not None and bool(found["distributed"])
    if member is None:
        return (
            f"the role {TENANT_ROLE} does not exist (migration 0018 could not create it "
            f"as {user}): a superuser can run CREATE ROLE {TENANT_ROLE} NOLOGIN, then "
            "popagent migrate again"
        )
    if not member:
        return (
            f"the database user {user} may not act as the role {TENANT_ROLE}: a superuser "
            f"can run GRANT {TENANT_ROLE} TO {user}"
        )
    if distributed:
        return (
            "the tables are distributed by Citus, whose connections to its nodes "
            "carry neither the tenant role nor the resource setting that row-level "
            "security needs; on Citus, run one server per resource (without "
            "--multi-resource)"
        )
    return None


async def require_boundary(pool: AsyncConnectionPool[Any]) -> None:
    """``DatabaseError`` naming the ``boundary_problem`` of ``pool``'s database, if
    there is one: what every multi-resource server (``serve --multi-resource``,
    ``mcp --transport http --multi-resource``) runs before it serves anything, as
    the owner."""
    async with pool.connection() as conn:
        problem = await boundary_problem(conn)
    if problem is not None:
        raise DatabaseError(f"multi-resource mode cannot start: {problem}")
