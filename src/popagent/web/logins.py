"""GUI login sessions kept in the database, and the failed-login limit.

A successful ``/login`` stores a login (migration 0017): a random id, sent to
the browser as the ``popagent_login`` cookie, of which only the SHA-256 is
kept, with an expiry, the resource and the scope it was made for (and the key,
in multi-resource mode). The cookie never holds the server's token or a key.

Invariants:
- Every request with the cookie reads the login from the database: ``/logout``
  (which deletes it), revoking the key it was made with, or its expiry end it at
  once in every server process (``serve --workers``).
- Failed logins are counted in the database, in fixed windows of
  ``LOGIN_WINDOW_S``, so the limits hold across processes, under two keys: the
  client address with the credential tried (its SHA-256, never the credential),
  ``LOGIN_FAILURES`` per window; and the address alone, any credential,
  ``LOGIN_ADDRESS_FAILURES``. Past either, ``/login`` answers 429 with
  ``Retry-After`` before the credential is even compared. So wrong logins made
  from (or claiming, through a trusted proxy) a victim's address do not lock out
  the victim's own credential until the address's larger bound, and no address
  gets more guesses than that bound. The address is the peer's, or the one a
  proxy named with ``--trusted-proxy`` forwarded (``web.edge``); a forwarded
  header from anyone else is ignored. A success clears both counts.
- Expired logins are deleted when a new login is made (no schedule needed).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..keys import Principal, hash_secret
from ..store import keys as sql
from ..store.database import Pool
from .config import LOGIN_ADDRESS_FAILURES, LOGIN_FAILURES, LOGIN_TTL_S, LOGIN_WINDOW_S

__all__ = [
    "LOGIN_ADDRESS_FAILURES",
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
    """How long a login lasts, and how many failed logins an address may make per
    window with one credential (``failures``) and with any (``address_failures``)."""

    ttl_s: float = LOGIN_TTL_S
    failures: int = LOGIN_FAILURES
    window_s: float = LOGIN_WINDOW_S
    address_failures: int = LOGIN_ADDRESS_FAILURES


def _counters(address: str, credential: str) -> tuple[str, str]:
    """The failure counters' keys (at most 64 characters, the column's bound): the
    address with the credential's fingerprint, and the address alone."""
    fingerprint = hash_secret(credential).hex()[:16]
    return f"{address[:47]}#{fingerprint}", address[:64]


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

    async def retry_after(self, address: str, credential: str) -> int | None:
        """Seconds a login from ``address`` with ``credential`` must wait, or ``None``."""
        tried, anything = _counters(address, credential)
        window = self.limits.window_s
        async with self.pool.connection() as conn:
            waits = [
                await sql.check_failures(conn, tried, limit=self.limits.failures, window_s=window),
                await sql.check_failures(
                    conn, anything, limit=self.limits.address_failures, window_s=window
                ),
            ]
        found = [wait for wait in waits if wait is not None]
        return max(found) if found else None

    async def failed(self, address: str, credential: str) -> None:
        """Count a failed login from ``address`` with ``credential`` and audit it."""
        async with self.pool.connection() as conn, conn.transaction():
            for counter in _counters(address, credential):
                await sql.record_failure(conn, counter, self.limits.window_s)
            await sql.audit_access(conn, "login_failed", method="POST", path="/login")

    async def succeeded(self, address: str, credential: str) -> None:
        async with self.pool.connection() as conn:
            for counter in _counters(address, credential):
                await sql.clear_failures(conn, counter)
