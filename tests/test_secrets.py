"""The secret store: encryption at rest, row binding, keys, retention, isolation, scrub."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import popagent
from popagent.defaults import SECRET_KEY_ENV, SECRET_KEY_FILE_ENV
from popagent.errors import NotFoundError, ValidationError
from popagent.secrets import (
    SecretCipher,
    SecretDecryptError,
    SecretKeyError,
    SecretStore,
    generate_key,
    load_cipher,
    scrub,
)

VALUE = "ghp_s3cr3t-VALUE-0123456789abcdef"


@pytest.fixture
def cipher() -> SecretCipher:
    return SecretCipher(os.urandom(32))


@pytest.fixture
def secrets(memory: popagent.LongTermMemory, cipher: SecretCipher) -> SecretStore:
    return SecretStore(memory.pool, cipher)


async def _raw_row(
    memory: popagent.LongTermMemory, resource_id: str, name: str
) -> dict[str, object]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT ciphertext, nonce, key_id FROM popagent_secrets "
            "WHERE resource_id = %s AND name = %s",
            (resource_id, name),
        )
        row = await cur.fetchone()
    assert row is not None
    return row


# --- the service against the database -------------------------------------------------------


async def test_set_reveal_list_delete(secrets: SecretStore, resource: str) -> None:
    info = await secrets.set(resource, "GITHUB_TOKEN", VALUE)
    assert info.name == "GITHUB_TOKEN"
    assert info.last_used_at is None and info.expires_at is None
    assert info.created_at == info.updated_at

    assert await secrets.reveal(resource, "GITHUB_TOKEN") == VALUE
    listed = await secrets.list(resource)
    assert [s.name for s in listed] == ["GITHUB_TOKEN"]
    assert listed[0].last_used_at is not None  # reveal records the use
    assert VALUE not in repr(listed)

    await secrets.delete(resource, "GITHUB_TOKEN")
    assert await secrets.list(resource) == []
    with pytest.raises(NotFoundError):
        await secrets.reveal(resource, "GITHUB_TOKEN")
    with pytest.raises(NotFoundError):
        await secrets.delete(resource, "GITHUB_TOKEN")


async def test_list_is_sorted_and_names_are_case_sensitive(
    secrets: SecretStore, resource: str
) -> None:
    for name in ("b.key", "A-key", "a_key"):
        await secrets.set(resource, name, f"value of {name}")
    assert [s.name for s in await secrets.list(resource)] == ["A-key", "a_key", "b.key"]
    assert await secrets.reveal(resource, "a_key") == "value of a_key"


async def test_upsert_replaces_the_value(secrets: SecretStore, resource: str) -> None:
    first = await secrets.set(resource, "API_KEY", "old-value-1234")
    second = await secrets.set(resource, "API_KEY", "new-value-5678")
    assert await secrets.reveal(resource, "API_KEY") == "new-value-5678"
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert len(await secrets.list(resource)) == 1


async def test_values_are_kept_exactly(secrets: SecretStore, resource: str) -> None:
    value = "  spaced\tvalue with ünïcödé and a newline\n"
    await secrets.set(resource, "EXACT", value)
    assert await secrets.reveal(resource, "EXACT") == value


async def test_ciphertext_does_not_hold_the_plaintext_and_uses_a_fresh_nonce(
    secrets: SecretStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await secrets.set(resource, "TOKEN", VALUE)
    first = await _raw_row(memory, resource, "TOKEN")
    ciphertext = first["ciphertext"]
    assert isinstance(ciphertext, bytes)
    assert VALUE.encode() not in ciphertext
    assert VALUE[:8].encode() not in ciphertext
    assert first["key_id"] == secrets.key_id

    await secrets.set(resource, "TOKEN", VALUE)
    second = await _raw_row(memory, resource, "TOKEN")
    assert second["nonce"] != first["nonce"]
    assert second["ciphertext"] != first["ciphertext"]
    assert await secrets.reveal(resource, "TOKEN") == VALUE


@pytest.mark.parametrize("target", ["other resource", "other name"])
async def test_a_ciphertext_copied_to_another_row_fails_to_decrypt(
    secrets: SecretStore,
    memory: popagent.LongTermMemory,
    resource: str,
    other_resource: str,
    target: str,
) -> None:
    to_resource, to_name = (
        (other_resource, "TOKEN") if target == "other resource" else (resource, "OTHER")
    )
    await secrets.set(resource, "TOKEN", VALUE)
    await secrets.set(to_resource, to_name, "the row's own value")
    async with memory.pool.connection() as conn:
        # Read, then written: one statement over two resources' rows would be a
        # cross-shard update on a distributed database (docs/scaling.md).
        cur = await conn.execute(
            "SELECT ciphertext, nonce FROM popagent_secrets WHERE resource_id = %s AND name = %s",
            (resource, "TOKEN"),
        )
        sealed = await cur.fetchone()
        assert sealed is not None
        await conn.execute(
            "UPDATE popagent_secrets SET ciphertext = %s, nonce = %s"
            " WHERE resource_id = %s AND name = %s",
            (sealed["ciphertext"], sealed["nonce"], to_resource, to_name),
        )
    with pytest.raises(SecretDecryptError, match="not sealed for this resource and name") as info:
        await secrets.reveal(to_resource, to_name)
    assert VALUE not in str(info.value)
    assert await secrets.reveal(resource, "TOKEN") == VALUE  # the original is untouched
    # A failed decryption is not a use.
    (listed,) = [s for s in await secrets.list(to_resource) if s.name == to_name]
    assert listed.last_used_at is None


async def test_an_altered_ciphertext_fails_to_decrypt(
    secrets: SecretStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await secrets.set(resource, "TOKEN", VALUE)
    async with memory.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_secrets SET ciphertext = set_byte(ciphertext, 0, "
            "get_byte(ciphertext, 0) # 1) WHERE resource_id = %s AND name = 'TOKEN'",
            (resource,),
        )
    with pytest.raises(SecretDecryptError, match="altered"):
        await secrets.reveal(resource, "TOKEN")


async def test_a_different_key_fails_clearly(
    secrets: SecretStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await secrets.set(resource, "TOKEN", VALUE)
    other = SecretStore(memory.pool, SecretCipher(os.urandom(32)))
    with pytest.raises(SecretDecryptError) as info:
        await other.reveal(resource, "TOKEN")
    message = str(info.value)
    assert secrets.key_id in message and other.key_id in message
    assert "configure the original key" in message
    assert VALUE not in message
    # Listing names needs no key at all.
    assert [s.name for s in await other.list(resource)] == ["TOKEN"]


async def test_ttl_hides_the_secret_and_purge_deletes_it(
    secrets: SecretStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    info = await secrets.set(resource, "SHORT", "short-lived-value", ttl=timedelta(hours=1))
    await secrets.set(resource, "FOREVER", "long-lived-value")
    assert info.expires_at is not None
    assert info.expires_at - info.created_at == timedelta(hours=1)

    soon = datetime.now(UTC) + timedelta(minutes=30)
    assert await secrets.reveal(resource, "SHORT", now=soon) == "short-lived-value"

    later = datetime.now(UTC) + timedelta(hours=2)
    with pytest.raises(NotFoundError):
        await secrets.reveal(resource, "SHORT", now=later)
    assert [s.name for s in await secrets.list(resource, now=later)] == ["FOREVER"]
    with pytest.raises(NotFoundError):
        await secrets.delete(resource, "SHORT", now=later)

    assert await secrets.purge_expired(now=later) >= 1
    assert await secrets.purge_expired(now=later) == 0
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT name FROM popagent_secrets WHERE resource_id = %s ORDER BY name", (resource,)
        )
        assert [r["name"] for r in await cur.fetchall()] == ["FOREVER"]


async def test_setting_without_ttl_clears_the_expiry(secrets: SecretStore, resource: str) -> None:
    await secrets.set(resource, "TOKEN", "first-value", ttl=timedelta(minutes=5))
    info = await secrets.set(resource, "TOKEN", "second-value")
    assert info.expires_at is None
    later = datetime.now(UTC) + timedelta(days=1)
    assert await secrets.reveal(resource, "TOKEN", now=later) == "second-value"


async def test_resource_isolation(secrets: SecretStore, resource: str, other_resource: str) -> None:
    await secrets.set(resource, "TOKEN", VALUE)
    with pytest.raises(NotFoundError):
        await secrets.reveal(other_resource, "TOKEN")
    assert await secrets.list(other_resource) == []
    with pytest.raises(NotFoundError):
        await secrets.delete(other_resource, "TOKEN")
    # The same name in another resource is another secret.
    await secrets.set(other_resource, "TOKEN", "theirs-value")
    assert await secrets.reveal(resource, "TOKEN") == VALUE
    assert await secrets.reveal(other_resource, "TOKEN") == "theirs-value"


async def test_memory_cleanup_leaves_secrets_alone(
    secrets: SecretStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await secrets.set(resource, "TOKEN", VALUE)
    await memory.remember(resource, "Prefers dark mode", key="ui.theme")
    assert await memory.cleanup(resource) == 1
    await memory.maintain()
    assert await secrets.reveal(resource, "TOKEN") == VALUE


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "1starts_with_digit"}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"name": "TOKEN\n"}, "name"),
        ({"name": 7}, "name"),
        ({"value": ""}, "value"),
        ({"value": "abc\x00def"}, "value"),
        ({"value": "x" * (16 * 1024 + 1)}, "value"),
        ({"value": "é" * (8 * 1024 + 1)}, "value"),  # the cap counts UTF-8 bytes
        ({"value": b"bytes"}, "value"),
        ({"resource_id": ""}, "resource_id"),
        ({"ttl": timedelta(0)}, "ttl"),
        ({"ttl": 60}, "ttl"),
    ],
)
async def test_validation_names_the_field(
    secrets: SecretStore, resource: str, kwargs: Mapping[str, object], field: str
) -> None:
    args: dict[str, object] = {"resource_id": resource, "name": "TOKEN", "value": VALUE}
    args.update(kwargs)
    ttl = args.pop("ttl", None)
    with pytest.raises(ValidationError) as info:
        await secrets.set(**args, ttl=ttl)  # type: ignore[arg-type]
    assert info.value.field == field
    assert VALUE not in str(info.value)
    assert await secrets.list(resource) == []


async def test_largest_value_is_accepted(secrets: SecretStore, resource: str) -> None:
    value = "x" * (16 * 1024)
    await secrets.set(resource, "BIG", value)
    assert await secrets.reveal(resource, "BIG") == value


async def test_now_must_be_timezone_aware(secrets: SecretStore, resource: str) -> None:
    with pytest.raises(ValidationError) as info:
        await secrets.purge_expired(now=datetime(2026, 1, 1))
    assert info.value.field == "now"


# --- the cipher and its key -----------------------------------------------------------------


def test_cipher_round_trip_and_row_binding(cipher: SecretCipher) -> None:
    sealed = cipher.encrypt("res", "NAME", VALUE)
    assert cipher.decrypt("res", "NAME", sealed) == VALUE
    assert len(sealed.nonce) == 12
    with pytest.raises(SecretDecryptError):
        cipher.decrypt("res", "OTHER", sealed)
    with pytest.raises(SecretDecryptError):
        cipher.decrypt("other", "NAME", sealed)
    # NUL separates the parts: shifting characters across the boundary is another row.
    with pytest.raises(SecretDecryptError):
        cipher.decrypt("resN", "AME", cipher.encrypt("res", "NAME", VALUE))


def test_key_id_is_a_short_fingerprint_and_repr_hides_the_key() -> None:
    key = bytes(range(32))
    cipher = SecretCipher(key)
    assert cipher.key_id == "630dcd2966c43366"  # sha256(bytes(range(32)))[:16]
    text = repr(cipher) + repr(cipher.encrypt("r", "N", VALUE))
    assert cipher.key_id in text
    assert key.hex() not in text and VALUE not in text
    with pytest.raises(SecretKeyError):
        SecretCipher(b"short")


def test_key_from_environment() -> None:
    key = generate_key()
    from_env = load_cipher({SECRET_KEY_ENV: key})
    assert from_env.key_id == SecretCipher.from_text(key).key_id
    # Unpadded text and surrounding whitespace are accepted too.
    assert load_cipher({SECRET_KEY_ENV: f" {key.rstrip('=')}\n"}).key_id == from_env.key_id


def test_environment_key_wins_over_files(tmp_path: Path) -> None:
    key = generate_key()
    cipher = load_cipher(
        {SECRET_KEY_ENV: key, SECRET_KEY_FILE_ENV: str(tmp_path / "missing")},
        default_key_file=tmp_path / "default.key",
    )
    assert cipher.key_id == SecretCipher.from_text(key).key_id
    assert not (tmp_path / "default.key").exists()


def test_malformed_environment_key_is_refused_without_echoing_it() -> None:
    bad = generate_key()[:40]
    with pytest.raises(SecretKeyError, match=SECRET_KEY_ENV) as info:
        load_cipher({SECRET_KEY_ENV: bad})
    assert bad not in str(info.value)


def test_key_from_key_file(tmp_path: Path) -> None:
    key = generate_key()
    path = tmp_path / "secret.key"
    path.write_text(key + "\n")
    path.chmod(0o600)
    cipher = load_cipher({SECRET_KEY_FILE_ENV: str(path)}, default_key_file=tmp_path / "unused.key")
    assert cipher.key_id == SecretCipher.from_text(key).key_id
    assert not (tmp_path / "unused.key").exists()


def test_missing_key_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SecretKeyError, match="does not exist"):
        load_cipher({SECRET_KEY_FILE_ENV: str(tmp_path / "missing.key")})


def test_default_key_file_is_created_private_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "secret.key"
    first = load_cipher({}, default_key_file=path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.key_id == SecretCipher.from_text(path.read_text()).key_id
    assert load_cipher({}, default_key_file=path).key_id == first.key_id
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]  # no temporary left


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
@pytest.mark.parametrize("via", ["env", "default"])
def test_a_key_file_others_can_read_is_refused(tmp_path: Path, mode: int, via: str) -> None:
    path = tmp_path / "secret.key"
    path.write_text(generate_key())
    path.chmod(mode)
    environ = {SECRET_KEY_FILE_ENV: str(path)} if via == "env" else {}
    with pytest.raises(SecretKeyError, match=f"chmod 600 {path}"):
        load_cipher(environ, default_key_file=path)


def test_nothing_configured_says_how_to_configure() -> None:
    with pytest.raises(SecretKeyError) as info:
        load_cipher({})
    message = str(info.value)
    assert (
        SECRET_KEY_ENV in message and SECRET_KEY_FILE_ENV in message and "generate_key" in message
    )


def test_empty_environment_values_count_as_unset(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    cipher = load_cipher({SECRET_KEY_ENV: "", SECRET_KEY_FILE_ENV: ""}, default_key_file=path)
    assert path.exists() and cipher.key_id == load_cipher({}, default_key_file=path).key_id


# --- scrub ----------------------------------------------------------------------------------


def test_scrub_replaces_every_occurrence() -> None:
    text = f"token={VALUE}; again {VALUE}; pass=hunter22"
    assert scrub(text, {"GITHUB_TOKEN": VALUE, "PASSWORD": "hunter22"}) == (
        "token=[secret:GITHUB_TOKEN]; again [secret:GITHUB_TOKEN]; pass=[secret:PASSWORD]"
    )


def test_scrub_leaves_short_values_alone() -> None:
    assert scrub("pin 123 and abc", {"PIN": "123", "ABC": "abc", "EMPTY": ""}) == (
        "pin 123 and abc"
    )
    assert scrub("code abcd", {"CODE": "abcd"}) == "code [secret:CODE]"


def test_scrub_prefers_the_longest_value_and_never_rewrites_a_marker() -> None:
    values = {"SHORT": "secret", "LONG": "secret-long-value", "NAME": "[secret:SHORT]"}
    assert scrub("a secret-long-value and a secret", values) == (
        "a [secret:LONG] and a [secret:SHORT]"
    )
    assert scrub("", values) == ""
    assert scrub("nothing here", {}) == "nothing here"


def test_scrub_escapes_regex_characters() -> None:
    assert scrub("x a.b*c+ y", {"RE": "a.b*c+"}) == "x [secret:RE] y"
    assert scrub("x aXbbc y", {"RE": "a.b*c"}) == "x aXbbc y"
