"""SQL over ``popagent_api_keys``, ``popagent_logins``, ``popagent_login_failures`` and
``popagent_access_audit`` (migration 0017): named statements and the functions that run them.

Invariants:
- Functions take the caller's connection and never open a transaction or commit.
- Keys and logins are looked up by the SHA-256 of what the client presents, never
  by resource: these are the tables a request is authenticated against before
  its resource is known (reference tables under Citus, docs/scaling.md).
- ``AUTHENTICATE_KEY`` checks revocation and expiry, counts the use and spends
  from the key's rate bucket in the same statement (``SPEND_KEY`` for a GUI
  login's key): a revoked key is refused by the next request in any process,
  and every process spends from one bucket.
- Nothing here stores or returns a key, a login cookie or memory content.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .database import Conn

__all__ = [
    "AUTHENTICATE_KEY",
    "CHECK_FAILURES",
    "CLEAR_FAILURES",
    "DELETE_EXPIRED_LOGINS",
    "DELETE_LOGIN",
    "INSERT_ACCESS_AUDIT",
    "INSERT_KEY",
    "INSERT_LOGIN",
    "LIST_ACCESS_AUDIT",
    "LIST_KEYS",
    "LOOKUP_LOGIN",
    "RECORD_FAILURE",
    "RECORD_REFUSALS",
    "RESOURCE_USAGE",
    "REVOKE_KEY",
    "SPEND_KEY",
    "audit_access",
    "authenticate_key",
    "check_failures",
    "clear_failures",
    "delete_login",
    "insert_key",
    "insert_login",
    "list_access_audit",
    "list_keys",
    "lookup_login",
    "record_failure",
    "record_refusals",
    "resource_usage",
    "revoke_key",
    "spend_key",
]

KEY_COLUMNS = (
    "id, resource_id, name, scope, prefix, created_at, expires_at, last_used_at, use_count,"
    " revoked_at"
)

INSERT_KEY = f"""
INSERT INTO popagent_api_keys (resource_id, name, scope, key_sha256, prefix, expires_at)
VALUES (%(resource_id)s, %(name)s, %(scope)s, %(key_sha256)s, %(prefix)s, %(expires_at)s)
RETURNING {KEY_COLUMNS}
"""

LIST_KEYS = f"""
SELECT {KEY_COLUMNS} FROM popagent_api_keys
WHERE (%(resource_id)s::text IS NULL OR resource_id = %(resource_id)s)
  AND (%(include_revoked)s OR revoked_at IS NULL)
ORDER BY resource_id, id
"""

# Revoking also ends the key's GUI logins (the lookup joins on the key, but a
# deleted row cannot come back by a clock change or a bug in that join).
REVOKE_KEY = f"""
WITH revoked AS (
    UPDATE popagent_api_keys SET revoked_at = now()
    WHERE id = %(id)s AND revoked_at IS NULL
      AND (%(resource_id)s::text IS NULL OR resource_id = %(resource_id)s)
    RETURNING {KEY_COLUMNS}
), ended AS (
    DELETE FROM popagent_logins WHERE key_id IN (SELECT id FROM revoked)
)
SELECT * FROM revoked
"""


# The use is counted with synchronous_commit off for this statement's own
# transaction: a counter lost in a crash costs nothing, a WAL flush per request would.
# The rate limit is a token bucket on the key's row (migration 0017): ``found``
# locks the row and refills its bucket to now (at most ``burst``; NULL, a full
# bucket), ``used`` takes a token when there is one. After waiting on the lock the
# row is read again, so concurrent requests of one key, in any process, spend
# tokens one after another. ``now()`` of a request that waited may precede the
# bucket's time; the bucket then neither refills nor goes back in time. A request
# that found no token is audited (``rate_limited``) by the same statement: a
# refusal costs one round trip, which matters when a client ignores Retry-After.
# Every use of ``now()`` inside CASE or COALESCE is in ``found``, a SELECT: Citus
# refuses a function that is not immutable inside CASE or COALESCE of an UPDATE,
# reference tables included (docs/scaling.md), so ``used`` only copies the values
# ``found`` computed.
def _spend(where: str) -> str:
    """The CTEs ``found``, ``used`` and ``limited`` for the live key that ``where``
    (over ``popagent_api_keys``) selects; ``used`` returns ``id``, ``allowed`` and
    ``retry_after_s``."""
    return f"""found AS (
    SELECT id, resource_id, scope,
           CASE WHEN %(rate)s::float8 IS NULL THEN NULL
                ELSE least(%(burst)s::float8, coalesce(
                    rate_tokens + %(rate)s::float8
                        * greatest(0, extract(epoch FROM now() - rate_at))::float8,
                    %(burst)s::float8)) END AS tokens,
           CASE WHEN %(rate)s::float8 IS NULL THEN NULL
                ELSE greatest(now(), rate_at) END AS bucket_at
    FROM popagent_api_keys
    WHERE {where}
      AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
    FOR UPDATE
), used AS (
    UPDATE popagent_api_keys k SET
        use_count = k.use_count + 1,
        last_used_at = now(),
        rate_tokens = CASE WHEN f.tokens >= 1 THEN f.tokens - 1 ELSE f.tokens END,
        rate_at = f.bucket_at
    FROM found f
    WHERE k.id = f.id
      AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
    RETURNING k.id, f.tokens >= 1 AS allowed,
              (1 - f.tokens) / %(rate)s::float8 AS retry_after_s
), limited AS (
    INSERT INTO popagent_access_audit (event, resource_id, key_id, scope, reason, method, path)
    SELECT 'refused', f.resource_id, f.id, f.scope, 'rate_limited', %(method)s, %(path)s
    FROM found f JOIN used u ON u.id = f.id
    WHERE NOT u.allowed
)"""


AUTHENTICATE_KEY = f"""
WITH {_spend("key_sha256 = %(key_sha256)s")}
SELECT k.id, k.resource_id, k.scope, u.id IS NOT NULL AS live,
       k.revoked_at IS NOT NULL AS revoked, u.allowed, u.retry_after_s
FROM popagent_api_keys k LEFT JOIN used u ON true
WHERE k.key_sha256 = %(key_sha256)s
"""

#: A request of a GUI login made with a key spends from that key's bucket, as the
#: key's own requests do (no row: the key is no longer live).
SPEND_KEY = f"""
WITH {_spend("id = %(key_id)s")}
SELECT allowed, retry_after_s FROM used
"""

#: Refusals a server process answered itself, from a bucket it knew to be empty
#: (``popagent.keys``): counted as uses of the key and audited, one row each, in
#: one statement per key, method and route.
RECORD_REFUSALS = """
WITH counted AS (
    UPDATE popagent_api_keys SET use_count = use_count + %(n)s WHERE id = %(key_id)s
)
INSERT INTO popagent_access_audit (event, resource_id, key_id, scope, reason, method, path)
SELECT 'refused', %(resource_id)s, %(key_id)s, %(scope)s, 'rate_limited', %(method)s, %(path)s
FROM generate_series(1, %(n)s)
"""

#: The resource's stored memories, the bytes of their content and the bytes of its
#: chats' messages, for the storage quotas: recall's statistics keep all three
#: (store/recall_stats.py, migrations 0004, 0019 and 0020), so this is one
#: primary-key lookup however large the resource.
RESOURCE_USAGE = """
SELECT documents AS memories, content_bytes AS memory_bytes, thread_bytes
FROM popagent_resource_stats WHERE resource_id = %(resource_id)s
"""

INSERT_LOGIN = """
INSERT INTO popagent_logins (login_sha256, resource_id, key_id, scope, expires_at)
VALUES (%(login_sha256)s, %(resource_id)s, %(key_id)s, %(scope)s, %(expires_at)s)
"""

# A login made with a key lives only as long as the key does.
LOOKUP_LOGIN = """
SELECT l.resource_id, l.key_id, l.scope, l.expires_at
FROM popagent_logins l
LEFT JOIN popagent_api_keys k ON k.id = l.key_id
WHERE l.login_sha256 = %(login_sha256)s AND l.expires_at > now()
  AND (l.key_id IS NULL
       OR (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())))
"""

DELETE_LOGIN = """
DELETE FROM popagent_logins WHERE login_sha256 = %(login_sha256)s
RETURNING resource_id, key_id, scope
"""

DELETE_EXPIRED_LOGINS = "DELETE FROM popagent_logins WHERE expires_at <= now()"

# Fixed windows per client: the first failure opens one, and a failure after it
# closed opens the next. The window's age is ``timestamptz - timestamptz`` (an
# immutable operator), never ``timestamptz - interval`` (a stable one, as it
# depends on the time zone): Citus refuses anything not immutable in DO UPDATE SET.
RECORD_FAILURE = """
INSERT INTO popagent_login_failures AS f (client, window_started, failures)
VALUES (%(client)s, now(), 1)
ON CONFLICT (client) DO UPDATE SET
    window_started = CASE WHEN EXCLUDED.window_started - f.window_started >= %(window)s::interval
                          THEN EXCLUDED.window_started ELSE f.window_started END,
    failures = CASE WHEN EXCLUDED.window_started - f.window_started >= %(window)s::interval
                    THEN 1 ELSE f.failures + 1 END
RETURNING failures
"""

# Seconds until the client may try again, when it has used up its window.
CHECK_FAILURES = """
SELECT ceil(extract(epoch FROM window_started + %(window)s::interval - now()))::integer
       AS retry_after_s
FROM popagent_login_failures
WHERE client = %(client)s AND failures >= %(limit)s
  AND window_started > now() - %(window)s::interval
"""

CLEAR_FAILURES = "DELETE FROM popagent_login_failures WHERE client = %(client)s"

INSERT_ACCESS_AUDIT = """
INSERT INTO popagent_access_audit (event, resource_id, key_id, scope, reason, method, path)
VALUES (%(event)s, %(resource_id)s, %(key_id)s, %(scope)s, %(reason)s, %(method)s, %(path)s)
"""

LIST_ACCESS_AUDIT = """
SELECT id, at, event, resource_id, key_id, scope, reason, method, path
FROM popagent_access_audit
WHERE (%(resource_id)s::text IS NULL OR resource_id = %(resource_id)s)
ORDER BY id DESC
LIMIT %(limit)s
"""


async def insert_key(
    conn: Conn,
    *,
    resource_id: str,
    name: str,
    scope: str,
    key_sha256: bytes,
    prefix: str,
    expires_at: datetime | None,
) -> dict[str, Any]:
    """Insert a key; the row as ``list_keys`` returns it. Raises ``UniqueViolation`` when
    the resource already has a live key of that name."""
    cur = await conn.execute(
        INSERT_KEY,
        {
            "resource_id": resource_id,
            "name": name,
            "scope": scope,
            "key_sha256": key_sha256,
            "prefix": prefix,
            "expires_at": expires_at,
        },
    )
    row = await cur.fetchone()
    assert row is not None
    return row


async def list_keys(
    conn: Conn, resource_id: str | None, *, include_revoked: bool
) -> list[dict[str, Any]]:
    """The keys of ``resource_id`` (of every resource for ``None``), oldest first."""
    cur = await conn.execute(
        LIST_KEYS, {"resource_id": resource_id, "include_revoked": include_revoked}
    )
    return await cur.fetchall()


async def revoke_key(conn: Conn, key_id: int, resource_id: str | None) -> dict[str, Any] | None:
    """Revoke a live key (of ``resource_id`` when given) and end its logins; ``None``
    when there is no such live key."""
    cur = await conn.execute(REVOKE_KEY, {"id": key_id, "resource_id": resource_id})
    return await cur.fetchone()


async def authenticate_key(
    conn: Conn,
    key_sha256: bytes,
    *,
    rate_per_s: float | None = None,
    burst: int | None = None,
    method: str | None = None,
    path: str | None = None,
) -> dict[str, Any] | None:
    """The key with this hash (``id``, ``resource_id``, ``scope``, ``live``, ``revoked``),
    its use counted when live; ``None`` when no key has it. With ``rate_per_s`` and
    ``burst``, a live key's request also takes a token from its bucket: ``allowed``
    says whether there was one, ``retry_after_s`` how long until there is (both
    ``None`` without a rate); a request without one is audited as ``rate_limited``
    with ``method`` and ``path``."""
    cur = await conn.execute(
        AUTHENTICATE_KEY, _bucket(rate_per_s, burst, method, path, key_sha256=key_sha256)
    )
    return await cur.fetchone()


async def spend_key(
    conn: Conn,
    key_id: int,
    *,
    rate_per_s: float,
    burst: int,
    method: str | None = None,
    path: str | None = None,
) -> dict[str, Any] | None:
    """Count a use of live key ``key_id`` and take a token from its bucket, as
    ``authenticate_key`` does (``allowed``, ``retry_after_s``); ``None`` when the
    key is not live."""
    cur = await conn.execute(SPEND_KEY, _bucket(rate_per_s, burst, method, path, key_id=key_id))
    return await cur.fetchone()


def _bucket(
    rate_per_s: float | None,
    burst: int | None,
    method: str | None,
    path: str | None,
    **key: Any,
) -> dict[str, Any]:
    if (rate_per_s is None) != (burst is None):
        raise ValueError("give both rate_per_s and burst, or neither")
    return {"rate": rate_per_s, "burst": burst, "method": method, "path": path, **key}


async def record_refusals(
    conn: Conn,
    *,
    key_id: int,
    resource_id: str | None,
    scope: str,
    method: str | None,
    path: str | None,
    n: int,
) -> None:
    """Count ``n`` uses of key ``key_id`` and audit each as refused (``rate_limited``)."""
    await conn.execute(
        RECORD_REFUSALS,
        {
            "key_id": key_id,
            "resource_id": resource_id,
            "scope": scope,
            "method": method,
            "path": path,
            "n": n,
        },
    )


async def resource_usage(conn: Conn, resource_id: str) -> tuple[int, int, int]:
    """How many memories ``resource_id`` stores, the bytes of their content and the
    bytes of its messages (``(0, 0, 0)`` for a resource with none)."""
    cur = await conn.execute(RESOURCE_USAGE, {"resource_id": resource_id})
    row = await cur.fetchone()
    if row is None:
        return (0, 0, 0)
    return (int(row["memories"]), int(row["memory_bytes"]), int(row["thread_bytes"]))


async def insert_login(
    conn: Conn,
    *,
    login_sha256: bytes,
    resource_id: str | None,
    key_id: int | None,
    scope: str,
    expires_at: datetime,
) -> None:
    await conn.execute(
        INSERT_LOGIN,
        {
            "login_sha256": login_sha256,
            "resource_id": resource_id,
            "key_id": key_id,
            "scope": scope,
            "expires_at": expires_at,
        },
    )


async def lookup_login(conn: Conn, login_sha256: bytes) -> dict[str, Any] | None:
    """The live login with this hash, else ``None`` (expired, logged out, key revoked)."""
    cur = await conn.execute(LOOKUP_LOGIN, {"login_sha256": login_sha256})
    return await cur.fetchone()


async def delete_login(conn: Conn, login_sha256: bytes) -> dict[str, Any] | None:
    cur = await conn.execute(DELETE_LOGIN, {"login_sha256": login_sha256})
    return await cur.fetchone()


async def record_failure(conn: Conn, client: str, window_s: float) -> int:
    """Count one failed login of ``client``; how many its current window holds."""
    cur = await conn.execute(RECORD_FAILURE, {"client": client, "window": f"{window_s} seconds"})
    row = await cur.fetchone()
    assert row is not None
    return int(row["failures"])


async def check_failures(conn: Conn, client: str, *, limit: int, window_s: float) -> int | None:
    """Seconds ``client`` must wait before its next login attempt, or ``None``."""
    cur = await conn.execute(
        CHECK_FAILURES, {"client": client, "limit": limit, "window": f"{window_s} seconds"}
    )
    row = await cur.fetchone()
    return None if row is None else max(1, int(row["retry_after_s"]))


async def clear_failures(conn: Conn, client: str) -> None:
    await conn.execute(CLEAR_FAILURES, {"client": client})


async def audit_access(
    conn: Conn,
    event: str,
    *,
    resource_id: str | None = None,
    key_id: int | None = None,
    scope: str | None = None,
    reason: str | None = None,
    method: str | None = None,
    path: str | None = None,
) -> None:
    """One row of the access audit: names, ids and fixed reasons only."""
    await conn.execute(
        INSERT_ACCESS_AUDIT,
        {
            "event": event,
            "resource_id": resource_id,
            "key_id": key_id,
            "scope": scope,
            "reason": reason,
            "method": method,
            "path": path,
        },
    )


async def list_access_audit(
    conn: Conn, resource_id: str | None, *, limit: int
) -> list[dict[str, Any]]:
    """The newest ``limit`` access events (of ``resource_id`` when given), newest first."""
    cur = await conn.execute(LIST_ACCESS_AUDIT, {"resource_id": resource_id, "limit": limit})
    return await cur.fetchall()
