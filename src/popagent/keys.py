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
  migration 0017), spent by the same statement that authenticates the key (or,
  for a GUI login made with a key, by ``KeyStore.spend``): one UPDATE per
  request, shared by every server process. Once the database has found a key's
  bucket empty, the process refuses that key's requests itself until its next
  token is due (``_EmptyBuckets``: no round trip), and audits those refusals
  within ``REFUSALS_FLUSH_S``. A key revoked meanwhile gets 429, not 401, until
  then: refused either way. ``Limits`` holds the rate and the
  storage quotas, the same for every surface.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import re
import secrets
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

import psycopg

from .checks import check_id, check_no_credential
from .errors import ConflictError, NotFoundError, ValidationError
from .store import keys as sql
from .store.database import Pool
from .store.tenant import bypass

__all__ = [
    "BURST_SECONDS",
    "KEY_PREFIX",
    "PREFIX_CHARS",
    "SCOPES",
    "ApiKey",
    "KeyStore",
    "Limits",
    "Principal",
    "RateLimit",
    "Scope",
    "Usage",
    "hash_secret",
    "looks_like_key",
    "new_key",
    "pace_refusal",
]

Scope = Literal["read", "write", "admin"]
#: The scopes, weakest first.
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
KEY_PREFIX = "pak_"
#: How much of a key is stored in clear, to tell keys apart in a list.
PREFIX_CHARS = 12
#: A key's bucket holds this many seconds of its rate: the burst it may send at once.
BURST_SECONDS = 10
log = logging.getLogger("popagent.keys")
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
class Limits:
    """What one key and one resource may use in multi-resource mode, the same for
    every surface (the API and GUI, MCP over HTTP): a key's request rate, the
    memories a resource may store, and the bytes it may store: its memories'
    content and its chats' messages together (``Usage``). ``None``: no limit.
    A write that would add content to a resource at or past a quota (a memory, a
    message, a session item, a chat turn) is refused (429); a delete never is."""

    rate: RateLimit | None = None
    max_memories: int | None = None
    max_bytes: int | None = None

    @classmethod
    def of(
        cls,
        *,
        requests_per_minute: int | None = None,
        burst: int | None = None,
        max_memories: int | None = None,
        max_bytes: int | None = None,
    ) -> Limits:
        """Limits from the server's settings (``burst`` only with a rate)."""
        if burst is not None and not requests_per_minute:
            raise ValidationError("key_burst", "needs a request rate (--key-rate)")
        rate = RateLimit.of(requests_per_minute, burst) if requests_per_minute else None
        for name, value in (("quota_memories", max_memories), ("quota_bytes", max_bytes)):
            if value is not None and value < 1:
                raise ValidationError(name, f"must be at least 1, not {value}")
        return cls(rate, max_memories, max_bytes)

    @property
    def has_quota(self) -> bool:
        return self.max_memories is not None or self.max_bytes is not None

    def rate_message(self) -> str:
        """What a 429 for the rate says."""
        assert self.rate is not None
        return (
            f"this key may make {self.rate.per_minute:,} requests a minute, "
            f"in bursts of up to {self.rate.burst:,}"
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """What a resource stores, as its storage quotas count it: its memories, the bytes
    of their content, and the bytes of its sessions' messages (text, parts and the
    framework item, as JSON text: migration 0020). ``bytes`` is what
    ``Limits.max_bytes`` bounds."""

    resource_id: str
    memories: int
    memory_bytes: int
    thread_bytes: int

    @property
    def bytes(self) -> int:
        return self.memory_bytes + self.thread_bytes

    def to_json(self) -> dict[str, Any]:
        """Every field under its own name, then ``bytes``."""
        return {name: getattr(self, name) for name in Usage.__slots__} | {"bytes": self.bytes}

    def describe(self) -> str:
        """One line for a person: ``12 memories (3,400 bytes), chats 9,000 bytes``."""
        return (
            f"{self.memories:,} memories ({self.memory_bytes:,} bytes), "
            f"chats {self.thread_bytes:,} bytes"
        )


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
        """Every field under its own name, in order; times as ISO 8601 text."""
        values = ((name, getattr(self, name)) for name in ApiKey.__slots__)
        return {name: v.isoformat() if isinstance(v, datetime) else v for name, v in values}


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
    """A key's name: its characters, and no credential (it is listed in clear)."""
    if not _NAME.fullmatch(value):
        raise ValidationError(
            "name",
            "1 to 100 characters: a letter or digit, then letters, digits, spaces and . _ @ : -",
        )
    return check_no_credential("name", value)


#: Seconds a process keeps the refusals it answered itself before it audits them.
REFUSALS_FLUSH_S = 1.0
#: How long a 429 for the rate is held back (``pace_refusal``): at least the first,
#: at most the second.
REFUSAL_PACE_S = (0.5, 1.0)
#: The spread of held refusals: its own generator, so the process's shared one is
#: neither consumed nor reseeded by anyone's requests.
_JITTER = random.Random()


async def pace_refusal(principal: Principal) -> int:
    """Hold back the 429 of a key without a token until its next token is due or a
    little later (at least ``REFUSAL_PACE_S[0]``, at most ``REFUSAL_PACE_S[1]``
    seconds, spread at random between), then
    return the ``Retry-After`` seconds left (whole seconds, rounded up, at least 1).

    A client that ignores 429 and asks again at once would otherwise have a 429
    every few hundred microseconds, and fifty such connections keep a server
    process's one event loop answering them while other keys' requests queue
    behind (measured, bench/load.py --tenants: a quiet key's p95 25x its idle
    value with refusals answered at once, 5-6x with each costing a database
    round trip). Held back, each connection gets at most two refusals a second;
    a held answer costs a timer, no CPU. A client that waits Retry-After loses
    at most the hold.
    """
    wait = principal.retry_after_s or 0.0
    least, most = REFUSAL_PACE_S
    # Spread over what is left of the window: held refusals that all ended when the
    # token came would ask again at once, one UPDATE each on the key's row.
    paced = _JITTER.uniform(min(max(wait, least), most), most)
    await asyncio.sleep(paced)
    return max(1, math.ceil(wait - paced))


# (key id, resource, scope, method, route): the audit row of a refusal answered here.
_Refusal = tuple[int, str | None, str, str | None, str | None]


class _EmptyBuckets:
    """The keys this process found without a token, until their next token is due.

    A key whose bucket the database found empty cannot have a token before
    ``retry_after_s`` has passed (other processes only spend more), so until then
    this process refuses its requests itself, without a round trip: a client that
    ignores ``Retry-After`` costs a dictionary lookup per request instead of an
    UPDATE queued on its key's row lock, which held pool connections that other
    keys' requests waited for. These refusals are counted as uses and audited
    (one row each) by ``KeyStore.flush``, at most ``REFUSALS_FLUSH_S`` later.
    Keyed by the key's hash (``authenticate``) or its id (``spend``, a login's).
    """

    def __init__(self) -> None:
        self.until: dict[bytes | int, tuple[float, Principal]] = {}
        self.refused: Counter[_Refusal] = Counter()

    def refuse(self, which: bytes | int, method: str | None, path: str | None) -> Principal | None:
        """The principal with the seconds still to wait, when ``which`` is known to
        have no token now (the refusal is counted); else ``None``."""
        known = self.until.get(which)
        if known is None:
            return None
        until, principal = known
        left = until - time.monotonic()
        if left <= 0:
            del self.until[which]
            return None
        assert principal.key_id is not None
        self.refused[(principal.key_id, principal.resource_id, principal.scope, method, path)] += 1
        return replace(principal, retry_after_s=left)

    def note(self, which: bytes | int, principal: Principal) -> None:
        """Remember a refusal from the database: ``principal.retry_after_s`` from now."""
        if principal.retry_after_s is None:
            return
        now = time.monotonic()
        if len(self.until) >= _EMPTY_BUCKETS_KEPT:
            # Keys that never asked again: what is past is no longer worth keeping.
            self.until = {k: v for k, v in self.until.items() if v[0] > now}
        self.until[which] = (now + principal.retry_after_s, principal)


#: How many empty buckets a process remembers before it forgets those past their time.
_EMPTY_BUCKETS_KEPT = 10_000


class KeyStore:
    """Create, list, revoke and authenticate API keys on ``pool``.

    One per server process (or per MCP app): it holds the buckets this process
    found empty (``_EmptyBuckets``); ``aclose`` audits the refusals not yet audited.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._empty = _EmptyBuckets()
        self._flusher: asyncio.Task[None] | None = None

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
        taken from its bucket: ``Principal.retry_after_s`` is set when there was none,
        and that refusal is audited as ``rate_limited``), else ``None``; a refusal of
        a known key (revoked, expired) is audited with its reason."""
        if not looks_like_key(key):
            return None
        digest = hash_secret(key)
        if rate is not None and (known := self._refused_here(digest, method, path)):
            return known
        async with self.pool.connection() as conn:
            row = await sql.authenticate_key(
                conn,
                digest,
                rate_per_s=rate.per_second if rate else None,
                burst=rate.burst if rate else None,
                method=method,
                path=path,
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
        principal = Principal(
            row["resource_id"],
            row["scope"],
            row["id"],
            retry_after_s=None if row["allowed"] is not False else float(row["retry_after_s"]),
        )
        self._empty.note(digest, principal)
        return principal

    async def spend(
        self,
        principal: Principal,
        rate: RateLimit,
        *,
        method: str | None = None,
        path: str | None = None,
    ) -> Principal | None:
        """A request of ``principal`` that did not present its key (a GUI login made
        with it): its use counted and a token taken from the key's bucket, as
        ``authenticate`` does; ``None`` when the key is no longer live. Other
        principals are returned as they are."""
        if principal.key_id is None:
            return principal
        if known := self._refused_here(principal.key_id, method, path):
            return known
        async with self.pool.connection() as conn:
            row = await sql.spend_key(
                conn,
                principal.key_id,
                rate_per_s=rate.per_second,
                burst=rate.burst,
                method=method,
                path=path,
            )
        if row is None:
            return None
        if row["allowed"]:
            return principal
        limited = replace(principal, retry_after_s=float(row["retry_after_s"]))
        self._empty.note(principal.key_id, limited)
        return limited

    def _refused_here(
        self, which: bytes | int, method: str | None, path: str | None
    ) -> Principal | None:
        """``_EmptyBuckets.refuse``, with the audit of that refusal scheduled."""
        known = self._empty.refuse(which, method, path)
        if known is not None and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())
        return known

    async def _flush_later(self) -> None:
        await asyncio.sleep(REFUSALS_FLUSH_S)
        await self.flush()

    async def flush(self) -> None:
        """Audit the refusals this process answered itself (``_EmptyBuckets``), and
        count them as uses of their keys. A database error is logged, not raised:
        those refusals then go unaudited (a warning says how many)."""
        pending, self._empty.refused = self._empty.refused, Counter()
        if not pending:
            return
        try:
            # Credential tables are never a tenant's (store.tenant), whoever asked.
            with bypass("keys"):
                async with self.pool.connection() as conn:
                    for (key_id, resource_id, scope, method, path), n in sorted(
                        pending.items(), key=lambda item: item[0][0]
                    ):
                        await sql.record_refusals(
                            conn,
                            key_id=key_id,
                            resource_id=resource_id,
                            scope=scope,
                            method=method,
                            path=path,
                            n=n,
                        )
        except (psycopg.Error, OSError) as exc:
            log.warning("could not audit %d rate-limited requests: %s", sum(pending.values()), exc)

    async def aclose(self) -> None:
        """Stop the pending flush and audit what it would have (at shutdown)."""
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            with suppress(asyncio.CancelledError):
                await self._flusher
        await self.flush()

    async def usage(self, resource_id: str) -> Usage:
        """What ``resource_id`` stores (``Usage``): one row of recall's statistics."""
        async with self.pool.connection() as conn:
            return Usage(resource_id, *await sql.resource_usage(conn, resource_id))

    async def over_quota(self, resource_id: str, limits: Limits) -> str | None:
        """Why a write adding content to ``resource_id`` is refused (it is at or past a
        quota of ``limits``), else ``None``."""
        if not limits.has_quota:
            return None
        used = await self.usage(resource_id)
        if limits.max_memories is not None and used.memories >= limits.max_memories:
            return (
                f"this resource stores {used.memories:,} memories; "
                f"its quota is {limits.max_memories:,}"
            )
        if limits.max_bytes is not None and used.bytes >= limits.max_bytes:
            return (
                f"this resource stores {used.bytes:,} bytes ({used.describe()}); "
                f"its quota is {limits.max_bytes:,}"
            )
        return None

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
