"""SQL over ``popagent_secrets``: named statements and the functions that run them.

Invariants:
- Every function takes the caller's connection and never opens a transaction
  or commits: the service layer owns transactions.
- Every statement but the purge filters on ``resource_id`` first; the purge is
  the secret store's own retention and spans all resources by design.
- Only ``select_secret`` and ``select_live_sealed`` read ciphertext; listing
  returns names and times.
- An expired row is treated as absent by every read and delete, until the
  purge removes it. ``now`` is the caller's clock, ``None`` meaning the server's.
- Nothing here touches ``popagent_memories`` or the thread tables.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .database import Conn

__all__ = [
    "INFO_COLUMNS",
    "delete_expired_secrets",
    "delete_secret",
    "list_secrets",
    "select_live_sealed",
    "select_secret",
    "touch_secret",
    "upsert_secret",
]

INFO_COLUMNS = "name, created_at, updated_at, last_used_at, expires_at"

# "Live at %(now)s, or now": without coalesce(%(now)s, now()), which a distributed
# table (Citus) refuses in a write's conditions (no function but immutable ones in a
# CASE or COALESCE there); NULL is no match, so each alternative stands alone.
_LIVE = """(expires_at IS NULL OR expires_at > %(now)s::timestamptz
     OR (%(now)s::timestamptz IS NULL AND expires_at > now()))"""

# Setting over an expired (not yet purged) row starts a new secret: it gets a
# fresh created_at and no last use, as if the old row had already been purged.
# The time is the proposed row's, EXCLUDED.updated_at (its default, now()): a
# distributed table (Citus) refuses any function that is not immutable in DO UPDATE.
UPSERT_SECRET = f"""
INSERT INTO popagent_secrets AS s
    (resource_id, name, ciphertext, nonce, key_id, expires_at)
VALUES (%(resource_id)s, %(name)s, %(ciphertext)s, %(nonce)s, %(key_id)s,
        now() + %(ttl)s::interval)
ON CONFLICT (resource_id, name) DO UPDATE
SET ciphertext = EXCLUDED.ciphertext,
    nonce = EXCLUDED.nonce,
    key_id = EXCLUDED.key_id,
    expires_at = EXCLUDED.expires_at,
    updated_at = EXCLUDED.updated_at,
    created_at = CASE WHEN s.expires_at <= EXCLUDED.updated_at
                      THEN EXCLUDED.created_at ELSE s.created_at END,
    last_used_at = CASE WHEN s.expires_at <= EXCLUDED.updated_at
                        THEN NULL ELSE s.last_used_at END
RETURNING {INFO_COLUMNS}
"""

SELECT_SECRET = f"""
SELECT ciphertext, nonce, key_id FROM popagent_secrets
WHERE resource_id = %(resource_id)s AND name = %(name)s AND {_LIVE}
"""

SELECT_LIVE_SEALED = f"""
SELECT name, ciphertext, nonce, key_id FROM popagent_secrets
WHERE resource_id = %(resource_id)s AND {_LIVE}
ORDER BY name
"""

LIST_SECRETS = f"""
SELECT {INFO_COLUMNS} FROM popagent_secrets
WHERE resource_id = %(resource_id)s AND {_LIVE}
ORDER BY name
"""

DELETE_SECRET = f"""
DELETE FROM popagent_secrets
WHERE resource_id = %(resource_id)s AND name = %(name)s AND {_LIVE}
"""

# At the caller's time, or at the server's (two statements: see _LIVE).
TOUCH_SECRET = """
UPDATE popagent_secrets
SET last_used_at = %(now)s
WHERE resource_id = %(resource_id)s AND name = %(name)s
"""

TOUCH_SECRET_NOW = """
UPDATE popagent_secrets
SET last_used_at = now()
WHERE resource_id = %(resource_id)s AND name = %(name)s
"""

DELETE_EXPIRED_SECRETS = """
DELETE FROM popagent_secrets
WHERE expires_at <= %(now)s::timestamptz
   OR (%(now)s::timestamptz IS NULL AND expires_at <= now())
"""


async def upsert_secret(
    conn: Conn,
    *,
    resource_id: str,
    name: str,
    ciphertext: bytes,
    nonce: bytes,
    key_id: str,
    ttl: timedelta | None,
) -> dict[str, Any]:
    """Create or replace the secret ``name``; return its info columns (never ciphertext)."""
    cur = await conn.execute(
        UPSERT_SECRET,
        {
            "resource_id": resource_id,
            "name": name,
            "ciphertext": ciphertext,
            "nonce": nonce,
            "key_id": key_id,
            "ttl": ttl,
        },
    )
    row = await cur.fetchone()
    assert row is not None, "an upsert always returns its row"
    return row


async def select_secret(
    conn: Conn, resource_id: str, name: str, *, now: datetime | None
) -> dict[str, Any] | None:
    """The live row's ``ciphertext``, ``nonce`` and ``key_id``; ``None`` if absent or expired."""
    cur = await conn.execute(SELECT_SECRET, {"resource_id": resource_id, "name": name, "now": now})
    return await cur.fetchone()


async def select_live_sealed(
    conn: Conn, resource_id: str, *, now: datetime | None
) -> list[dict[str, Any]]:
    """Every live row's ``name``, ``ciphertext``, ``nonce`` and ``key_id``, by name."""
    cur = await conn.execute(SELECT_LIVE_SEALED, {"resource_id": resource_id, "now": now})
    return await cur.fetchall()


async def list_secrets(
    conn: Conn, resource_id: str, *, now: datetime | None
) -> list[dict[str, Any]]:
    """Names and timestamps of the live secrets, by name."""
    cur = await conn.execute(LIST_SECRETS, {"resource_id": resource_id, "now": now})
    return await cur.fetchall()


async def delete_secret(conn: Conn, resource_id: str, name: str, *, now: datetime | None) -> bool:
    """Delete a live secret; ``False`` if there was none (an expired one is left to the purge)."""
    cur = await conn.execute(DELETE_SECRET, {"resource_id": resource_id, "name": name, "now": now})
    return cur.rowcount > 0


async def touch_secret(conn: Conn, resource_id: str, name: str, *, now: datetime | None) -> None:
    """Record a use of the secret ``name``."""
    statement = TOUCH_SECRET_NOW if now is None else TOUCH_SECRET
    await conn.execute(statement, {"resource_id": resource_id, "name": name, "now": now})


async def delete_expired_secrets(conn: Conn, *, now: datetime | None) -> int:
    """Purge every resource's expired secrets; return how many rows went."""
    cur = await conn.execute(DELETE_EXPIRED_SECRETS, {"now": now})
    return cur.rowcount
