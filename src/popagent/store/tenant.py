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

__all__ = [
    "ENTER_TENANT",
    "LEAVE_TENANT",
    "TENANT_ROLE",
    "bypass",
    "confine",
    "current_tenant",
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
