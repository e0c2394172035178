"""API keys per resource: random, shown once, stored only as a hash (migration 0017).

A key belongs to exactly one resource and has a name, a scope, a created and a
last-used time, a use count and an optional expiry. In multi-resource mode
(``popagent serve --multi-resource``) every request takes its resource from the
key it presents; no request names one (docs/server.md).

Scopes, each including the one before:
- ``read``: safe methods only (GET, HEAD), chat excluded (a turn writes).
- ``write``: everything on the resource's memory, sessions and chat.
- ``admin``: also the resource's keys (list, create, revoke) and its purge.

Invariants:
- A key is ``pak_`` and 43 characters of ``secrets.token_urlsafe(32)``: 256 bits.
  Only its SHA-256 and its first ``PREFIX_CHARS`` characters are stored; the key
  itself is returned once, by ``KeyStore.create``, and never logged.
- ``KeyStore.authenticate`` reads the database every time: a revoked or expired
  key is refused by the next request, in every server process.
- Creation, revocation and refusals are written to ``popagent_access_audit``;
  uses are counted on the key's row. Neither holds memory content.
- The per-key request rate is a token bucket on the key's row (``RateLimit``,
  migration 0017), spent by the same statement that authenticates the key: one
  UPDATE per request, shared by every server process.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import psycopg

from .checks import check_id
from .errors import ConflictError, NotFoundError, ValidationError
from .store import keys as sql
from .store.database import Pool

__all__ = [
    "BURST_SECONDS",
    "KEY_PREFIX",
    "PREFIX_CHARS",
    "SCOPES",
    "ApiKey",
    "KeyStore",
    "Principal",
    "RateLimit",
    "Scope",
    "hash_secret",
    "looks_like_key",
    "new_key",
]

Scope = Literal["read", "write", "admin"]
#: The scopes, weakest first.
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
KEY_PREFIX = "pak_"
#: How much of a key is stored in clear, to tell keys apart in a list.
PREFIX_CHARS = 12
#: A key's bucket holds this many seconds of its rate: the burst it may send at once.
BURST_SECONDS = 10
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._@:-]{0,99}")
_KEY = re.compile(r"pak_[A-Za-z0-9_-]{43}")


def new_key() -> str:
    """A fresh random key (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_secret(value: str) -> bytes:
    """The SHA-256 stored for a key or a login cookie. A random 256-bit value needs
    no salt and no slow hash: nothing smaller than the value can be guessed."""
    return hashlib.sha256(value.encode("utf-8")).digest()


def looks_like_key(value: str) -> bool:
    """Whether ``value`` has the shape of an API key (not whether it is one)."""
    return _KEY.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A key's request rate as a token bucket: it holds at most ``burst`` tokens,
    refills at ``per_minute / 60`` tokens a second, and each request takes one. A
    key may send ``burst`` requests at once, then ``per_minute`` a minute; a request
    that finds less than one token gets 429 with the seconds until one is there."""

    per_minute: int
    burst: int

    @classmethod
    def of(cls, per_minute: int, burst: int | None = None) -> RateLimit:
        """The limit of ``per_minute`` requests a minute, with a bucket of ``burst``
        (default: ``BURST_SECONDS`` of the rate, at least 1)."""
        if per_minute < 1:
            raise ValidationError("key_rate", f"must be at least 1 a minute, not {per_minute}")
        if burst is None:
            burst = max(1, math.ceil(per_minute * BURST_SECONDS / 60))
        if burst < 1:
            raise ValidationError("key_burst", f"must be at least 1, not {burst}")
        return cls(per_minute, burst)

    @property
    def per_second(self) -> float:
        return self.per_minute / 60


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as listed: everything but the key itself."""

    id: int
    resource_id: str
    name: str
    scope: Scope
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    use_count: int
    revoked_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "resource_id": self.resource_id,
            "name": self.name,
            "scope": self.scope,
            "prefix": self.prefix,
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "use_count": self.use_count,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: a key of one resource, the server's token (single-resource
    mode, ``key_id`` ``None``), or the operator (multi-resource mode: ``resource_id``
    ``None``, scope ``operator``; it manages keys and reads no memory)."""

    resource_id: str | None
    scope: str
    key_id: int | None = None
    #: Set when the key's bucket had no token for this request (``RateLimit``): the
    #: seconds until it has one. ``None``: within its rate, or no rate limit.
    retry_after_s: float | None = None

    @property
    def is_operator(self) -> bool:
        return self.scope == "operator"

    def allows(self, needed: Scope) -> bool:
        """Whether this principal's scope includes ``needed`` (the operator's never does)."""
        if self.scope not in SCOPES:
            return False
        return SCOPES.index(self.scope) >= SCOPES.index(needed)


def _api_key(row: dict[str, Any]) -> ApiKey:
    return ApiKey(**{name: row[name] for name in ApiKey.__slots__})


def check_scope(value: str) -> Scope:
    if value not in SCOPES:
        raise ValidationError("scope", f"must be one of {', '.join(SCOPES)}, not {value[:40]!r}")
    return value


def check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValidationError(
            "name",
            "1 to 100 characters: a letter or digit, then letters, digits, spaces and . _ @ : -",
        )
    return value


class KeyStore:
    """Create, list, revoke and authenticate API keys on ``pool``."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def create(
        self,
        resource_id: str,
        name: str,
        scope: str = "write",
        *,
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key of ``resource_id``: its row, and the key itself (shown once, never
        stored). Raises ``ValidationError`` for a bad field or a past expiry and
        ``ConflictError`` when the resource has a live key of that name."""
        resource_id = check_id("resource_id", resource_id)
        name = check_name(name)
        checked = check_scope(scope)
        if expires_at is not None:
            if expires_at.tzinfo is None:
                expires_at = expires_at.replace(tzinfo=UTC)
            if expires_at <= datetime.now(UTC):
                raise ValidationError("expires_at", "the expiry is in the past")
        key = new_key()
        try:
            async with self.pool.connection() as conn, conn.transaction():
                row = await sql.insert_key(
                    conn,
                    resource_id=resource_id,
                    name=name,
                    scope=checked,
                    key_sha256=hash_secret(key),
                    prefix=key[:PREFIX_CHARS],
                    expires_at=expires_at,
                )
                await sql.audit_access(
                    conn, "key_created", resource_id=resource_id, key_id=row["id"], scope=checked
                )
        except psycopg.errors.UniqueViolation as exc:
            raise ConflictError(
                f"name: {resource_id} already has a live key named {name!r}"
            ) from exc
        return _api_key(row), key

    async def list_keys(
        self, resource_id: str | None = None, *, include_revoked: bool = False
    ) -> list[ApiKey]:
        """The keys of ``resource_id`` (every resource's for ``None``), oldest first."""
        async with self.pool.connection() as conn:
            rows = await sql.list_keys(conn, resource_id, include_revoked=include_revoked)
        return [_api_key(r) for r in rows]

    async def revoke(self, key_id: int, *, resource_id: str | None = None) -> ApiKey:
        """Revoke a live key (only one of ``resource_id`` when given) and end its GUI
        logins, at once for every process. Raises ``NotFoundError``."""
        async with self.pool.connection() as conn, conn.transaction():
            row = await sql.revoke_key(conn, key_id, resource_id)
            if row is None:
                raise NotFoundError(f"key {key_id}: no such live key")
            await sql.audit_access(
                conn, "key_revoked", resource_id=row["resource_id"], key_id=key_id
            )
        return _api_key(row)

    async def authenticate(
        self,
        key: str,
        *,
        method: str | None = None,
        path: str | None = None,
        rate: RateLimit | None = None,
    ) -> Principal | None:
        """The principal of a live ``key`` (its use counted, and with ``rate`` a token
        taken from its bucket: ``Principal.retry_after_s`` is set when there was none),
        else ``None``; a refusal of a known key (revoked, expired) is audited with its
        reason."""
        if not looks_like_key(key):
            return None
        async with self.pool.connection() as conn:
            row = await sql.authenticate_key(
                conn,
                hash_secret(key),
                rate_per_s=rate.per_second if rate else None,
                burst=rate.burst if rate else None,
            )
            if row is None:
                return None
            if not row["live"]:
                await sql.audit_access(
                    conn,
                    "refused",
                    resource_id=row["resource_id"],
                    key_id=row["id"],
                    scope=row["scope"],
                    reason="revoked" if row["revoked"] else "expired",
                    method=method,
                    path=path,
                )
                return None
        return Principal(
            row["resource_id"],
            row["scope"],
            row["id"],
            retry_after_s=None if row["allowed"] is not False else float(row["retry_after_s"]),
        )

    async def memories(self, resource_id: str) -> int:
        """How many memories ``resource_id`` stores: one row of recall's statistics."""
        async with self.pool.connection() as conn:
            return await sql.resource_memories(conn, resource_id)

    async def content_bytes(self, resource_id: str) -> int:
        """The bytes of ``resource_id``'s memory content: a scan of its memories."""
        async with self.pool.connection() as conn:
            return await sql.resource_bytes(conn, resource_id)

    async def audit_refusal(
        self, principal: Principal | None, reason: str, *, method: str, path: str
    ) -> None:
        """Record a refused request (no content: the reason, method and path's route)."""
        async with self.pool.connection() as conn:
            await sql.audit_access(
                conn,
                "refused",
                resource_id=principal.resource_id if principal else None,
                key_id=principal.key_id if principal else None,
                scope=principal.scope if principal else None,
                reason=reason,
                method=method,
                path=path,
            )

    async def audit(self, limit: int = 100, *, resource_id: str | None = None) -> list[Any]:
        """The newest access events (of ``resource_id`` when given), newest first."""
        async with self.pool.connection() as conn:
            return await sql.list_access_audit(conn, resource_id, limit=limit)
