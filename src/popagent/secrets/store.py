"""``SecretStore``: the service over ``popagent_secrets``, and ``scrub``.

Secrets and memories are separate stores with separate retention: a secret
leaves only by ``delete`` or, once its TTL has passed, by ``purge_expired``;
long-term memory cleanup and maintenance, and session deletion, never touch it.

Invariants:
- Each method validates all of its input before it borrows a connection; a
  call that raises has changed nothing.
- A value is encrypted before it leaves this process and is decrypted only by
  ``reveal``, the runtime's "use" path, and by ``values_for_scrubbing``, whose
  values serve only to find and replace secrets in text about to be stored or
  shown (``scrub``). No other method returns, logs or puts a value (or any part
  of one) in an exception message.
- An expired secret is absent to ``reveal``, ``list`` and ``delete``.
- Every method but ``purge_expired`` acts within one ``resource_id``.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..checks import check_id, check_no_credential, check_text, check_time
from ..errors import NotFoundError, SecretDecryptError, ValidationError
from ..store import secrets as sql
from ..store._rows import from_row
from ..store.database import Pool
from .cipher import Sealed, SecretCipher

__all__ = [
    "MAX_TTL",
    "NAME_PATTERN",
    "SCRUB_MIN_LENGTH",
    "VALUE_CAP_BYTES",
    "SecretInfo",
    "SecretStore",
    "scrub",
]

#: The same rule as the table's CHECK constraint.
NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
VALUE_CAP_BYTES = 16 * 1024
#: Far beyond any sensible TTL, and far inside PostgreSQL's timestamp range.
MAX_TTL = timedelta(days=36_500)
#: Shorter values are too likely to occur by chance in ordinary text.
SCRUB_MIN_LENGTH = 4


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """What may be shown about a secret: its name and times, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None


def _info(row: dict[str, Any]) -> SecretInfo:
    return from_row(SecretInfo, row)


def _check_name(value: object) -> str:
    # The name is not secret, but it is never echoed either: a value pasted into
    # the name argument by mistake must not end up in an error message.
    if not isinstance(value, str):
        raise ValidationError("name", f"must be a string, not {type(value).__name__}")
    if not NAME_PATTERN.fullmatch(value):
        raise ValidationError(
            "name",
            "must be 1 to 64 characters: a letter, then letters, digits, '_', '.' or '-'",
        )
    return value


def _check_value(value: object) -> str:
    # check_text's messages describe the problem, never the text.
    text = check_text("value", value)
    if not text:
        raise ValidationError("value", "must not be empty")
    size = len(text.encode("utf-8"))
    if size > VALUE_CAP_BYTES:
        raise ValidationError(
            "value", f"is {size} bytes in UTF-8; a secret is limited to {VALUE_CAP_BYTES} bytes"
        )
    return text


def _check_ttl(value: object) -> timedelta | None:
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise ValidationError("ttl", "must be a timedelta or None")
    if value <= timedelta(0):
        raise ValidationError("ttl", "must be positive")
    if value > MAX_TTL:
        raise ValidationError("ttl", f"must be at most {MAX_TTL.days} days")
    return value


class SecretStore:
    """Encrypted secrets of many resources: set, reveal (use), list names, delete, purge.

    Borrows a connection from the pool for each call and holds none between calls.
    """

    def __init__(self, pool: Pool, cipher: SecretCipher) -> None:
        self._pool = pool
        self._cipher = cipher

    def __repr__(self) -> str:
        return f"SecretStore(key_id={self._cipher.key_id!r})"

    @property
    def key_id(self) -> str:
        """The fingerprint of the key this store encrypts with."""
        return self._cipher.key_id

    async def set(
        self, resource_id: str, name: str, value: str, *, ttl: timedelta | None = None
    ) -> SecretInfo:
        """Create or replace the secret ``name``; with ``ttl`` it expires that long from now.

        ``value`` is a non-empty string of at most 16 KiB in UTF-8, without NUL;
        it is stored exactly as given (never trimmed or normalized). Replacing a
        secret also replaces (or clears) its expiry.
        """
        resource_id = check_id("resource_id", resource_id)
        # The name is shown and stored in clear: a credential in it is refused.
        name = check_no_credential("name", _check_name(name))
        value = _check_value(value)
        ttl = _check_ttl(ttl)
        sealed = self._cipher.encrypt(resource_id, name, value)
        async with self._pool.connection() as conn:
            row = await sql.upsert_secret(
                conn,
                resource_id=resource_id,
                name=name,
                ciphertext=sealed.ciphertext,
                nonce=sealed.nonce,
                key_id=sealed.key_id,
                ttl=ttl,
            )
        return _info(row)

    async def reveal(self, resource_id: str, name: str, *, now: datetime | None = None) -> str:
        """The value of ``name``, for the runtime to use; records the use.

        ``NotFoundError`` if there is no such secret in this resource or it has
        expired; ``SecretDecryptError`` if it was sealed under another key or its
        ciphertext does not belong to this row.
        """
        resource_id = check_id("resource_id", resource_id)
        name = _check_name(name)
        now = check_time("now", now)
        async with self._pool.connection() as conn:
            row = await sql.select_secret(conn, resource_id, name, now=now)
            if row is None:
                raise NotFoundError(f"no secret {name!r} in this resource")
            # Decrypt before recording the use: a secret that cannot be
            # decrypted has not been used.
            value = self._cipher.decrypt(
                resource_id,
                name,
                Sealed(
                    ciphertext=bytes(row["ciphertext"]),
                    nonce=bytes(row["nonce"]),
                    key_id=row["key_id"],
                ),
            )
            await sql.touch_secret(conn, resource_id, name, now=now)
        return value

    async def values_for_scrubbing(
        self, resource_id: str, *, now: datetime | None = None
    ) -> dict[str, str]:
        """Names and values of this resource's live secrets, for ``scrub`` and nothing else.

        One query; an empty dict when the resource has no secrets. This is not a
        use: ``last_used_at`` is left alone. A secret that does not decrypt (sealed
        under another key) is left out, since it cannot be revealed either.
        """
        resource_id = check_id("resource_id", resource_id)
        now = check_time("now", now)
        async with self._pool.connection() as conn:
            rows = await sql.select_live_sealed(conn, resource_id, now=now)
        values: dict[str, str] = {}
        for row in rows:
            sealed = Sealed(
                ciphertext=bytes(row["ciphertext"]), nonce=bytes(row["nonce"]), key_id=row["key_id"]
            )
            try:
                values[row["name"]] = self._cipher.decrypt(resource_id, row["name"], sealed)
            except SecretDecryptError:
                continue
        return values

    async def list(
        self, resource_id: str, *, now: datetime | None = None
    ) -> builtins.list[SecretInfo]:
        """Names and times of this resource's live secrets, by name; never values."""
        resource_id = check_id("resource_id", resource_id)
        now = check_time("now", now)
        async with self._pool.connection() as conn:
            rows = await sql.list_secrets(conn, resource_id, now=now)
        return [_info(r) for r in rows]

    async def delete(self, resource_id: str, name: str, *, now: datetime | None = None) -> None:
        """Delete the secret ``name``; ``NotFoundError`` if absent (or already expired)."""
        resource_id = check_id("resource_id", resource_id, screen=False)
        name = _check_name(name)
        now = check_time("now", now)
        async with self._pool.connection() as conn:
            deleted = await sql.delete_secret(conn, resource_id, name, now=now)
        if not deleted:
            raise NotFoundError(f"no secret {name!r} in this resource")

    async def purge_expired(self, *, now: datetime | None = None) -> int:
        """The secret store's retention: delete every resource's expired secrets; return how many."""
        now = check_time("now", now)
        async with self._pool.connection() as conn:
            return await sql.delete_expired_secrets(conn, now=now)


def scrub(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every occurrence of each secret value replaced by ``[secret:NAME]``.

    ``values`` maps names to values. Values shorter than 4 characters are left
    alone (they match ordinary text too often). Longer values win where two
    overlap, and the text is scanned once, so a marker is never itself rewritten.
    When two names share a value, the first name in sorted order is used.
    """
    by_value: dict[str, str] = {}
    for name in sorted(values):
        value = values[name]
        if len(value) >= SCRUB_MIN_LENGTH:
            by_value.setdefault(value, name)
    if not by_value:
        return text
    # Alternation tries left to right, so longest-first makes the longest value
    # win at any position where several start.
    ordered = sorted(by_value, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(v) for v in ordered))
    return pattern.sub(lambda m: f"[secret:{by_value[m.group(0)]}]", text)
