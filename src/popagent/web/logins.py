"""GUI login sessions kept in the database, and the failed-login limit.

A successful ``/login`` stores a login (migration 0017): a random id, sent to
the browser as the ``popagent_login`` cookie, of which only the SHA-256 is
kept, with an expiry, the resource and the scope it was made for (and the key,
in multi-resource mode). The cookie never holds the server's token or a key.

Invariants:
- Every request with the cookie reads the login from the database: ``/logout``
  (which deletes it), revoking the key it was made with, or its expiry end it at
  once in every server process (``serve --workers``).
- Failed logins are counted per client address in the database, in fixed
  windows (``LOGIN_FAILURES`` per ``LOGIN_WINDOW_S``), so the limit holds across
  processes; past it, ``/login`` answers 429 with ``Retry-After`` before the
  credential is even compared. A success clears the client's count.
- Expired logins are deleted when a new login is made (no schedule needed).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..keys import Principal, hash_secret
from ..store import keys as sql
from ..store.database import Pool
from .config import LOGIN_FAILURES, LOGIN_TTL_S, LOGIN_WINDOW_S

__all__ = [
    "LOGIN_COOKIE",
    "LOGIN_FAILURES",
    "LOGIN_TTL_S",
    "LOGIN_WINDOW_S",
    "LoginLimits",
    "LoginStore",
]

LOGIN_COOKIE = "popagent_login"


@dataclass(frozen=True, slots=True)
class LoginLimits:
    """How long a login lasts and how many failed logins a client may make per window."""

    ttl_s: float = LOGIN_TTL_S
    failures: int = LOGIN_FAILURES
    window_s: float = LOGIN_WINDOW_S


class LoginStore:
    """Logins and failed-login counts on ``pool``."""

    def __init__(self, pool: Pool, limits: LoginLimits | None = None) -> None:
        self.pool = pool
        self.limits = limits or LoginLimits()

    async def open(self, principal: Principal) -> tuple[str, datetime]:
        """A new login for ``principal``: the cookie's value (random, 256 bits) and when
        it expires."""
        login = secrets.token_urlsafe(32)
        expires_at = datetime.now(UTC) + timedelta(seconds=self.limits.ttl_s)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(sql.DELETE_EXPIRED_LOGINS)
            await sql.insert_login(
                conn,
                login_sha256=hash_secret(login),
                resource_id=principal.resource_id,
                key_id=principal.key_id,
                scope=principal.scope,
                expires_at=expires_at,
            )
            await sql.audit_access(
                conn,
                "login",
                resource_id=principal.resource_id,
                key_id=principal.key_id,
                scope=principal.scope,
            )
        return login, expires_at

    async def lookup(self, login: str) -> Principal | None:
        """The principal of a live login, else ``None``."""
        if not login or len(login) > 100:
            return None
        async with self.pool.connection() as conn:
            row = await sql.lookup_login(conn, hash_secret(login))
        if row is None:
            return None
        return Principal(row["resource_id"], row["scope"], row["key_id"])

    async def close(self, login: str) -> None:
        """End a login (logout); nothing happens for an unknown one."""
        if not login or len(login) > 100:
            return
        async with self.pool.connection() as conn, conn.transaction():
            row = await sql.delete_login(conn, hash_secret(login))
            if row is not None:
                await sql.audit_access(
                    conn,
                    "logout",
                    resource_id=row["resource_id"],
                    key_id=row["key_id"],
                    scope=row["scope"],
                )

    async def retry_after(self, client: str) -> int | None:
        """Seconds ``client`` must wait before trying again, or ``None``."""
        async with self.pool.connection() as conn:
            return await sql.check_failures(
                conn, client[:64], limit=self.limits.failures, window_s=self.limits.window_s
            )

    async def failed(self, client: str) -> None:
        """Count a failed login of ``client`` and audit it."""
        async with self.pool.connection() as conn, conn.transaction():
            await sql.record_failure(conn, client[:64], self.limits.window_s)
            await sql.audit_access(conn, "login_failed", method="POST", path="/login")

    async def succeeded(self, client: str) -> None:
        async with self.pool.connection() as conn:
            await sql.clear_failures(conn, client[:64])
