"""``SecretCipher``: AES-256-GCM sealing of secret values, and loading its key.

Invariants:
- Every encryption draws a fresh random 12-byte nonce; a (key, nonce) pair is
  never reused in practice (2**-96 collision odds per pair).
- The associated data is ``resource_id + NUL + name``: a ciphertext decrypts
  only in the row it was sealed for. Neither part can contain NUL (resource
  IDs reject it, names are ``[A-Za-z0-9_.-]``), so the encoding is unambiguous.
- ``key_id`` is the first 16 hex digits of SHA-256 of the key: enough to tell
  keys apart in an error message, useless for recovering the key.
- Key material and plaintext never appear in a ``repr``, an exception message
  or a log line.

Key sources, first match wins: ``POPAGENT_SECRET_KEY`` (urlsafe base64 of 32
bytes), ``POPAGENT_SECRET_KEY_FILE`` (a file holding that text), then the
caller's ``default_key_file``, created with mode 0600 on first use. A key file
that group or others can access is refused.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..defaults import SECRET_KEY_ENV, SECRET_KEY_FILE_ENV
from ..errors import SecretDecryptError, SecretKeyError

__all__ = [
    "KEY_SIZE",
    "NONCE_SIZE",
    "Sealed",
    "SecretCipher",
    "SecretDecryptError",
    "SecretKeyError",
    "generate_key",
    "load_cipher",
]

KEY_SIZE = 32
NONCE_SIZE = 12

# 32 bytes are 43 base64 characters plus one '=' of padding, which is optional here.
_KEY_TEXT_RE = re.compile(r"[A-Za-z0-9_-]{43}=?")
_GENERATE_HINT = (
    'generate one with: python -c "from popagent.secrets import generate_key; '
    'print(generate_key())"'
)


@dataclass(frozen=True, slots=True)
class Sealed:
    """One encrypted value as stored: ciphertext (with the GCM tag), nonce, key fingerprint."""

    ciphertext: bytes
    nonce: bytes
    key_id: str

    def __repr__(self) -> str:
        return f"Sealed(key_id={self.key_id!r}, ciphertext=<{len(self.ciphertext)} bytes>)"


def generate_key() -> str:
    """A new random key as the urlsafe base64 text that ``POPAGENT_SECRET_KEY`` expects."""
    return base64.urlsafe_b64encode(os.urandom(KEY_SIZE)).decode("ascii")


def _associated_data(resource_id: str, name: str) -> bytes:
    return f"{resource_id}\x00{name}".encode()


class SecretCipher:
    """Encrypts and decrypts secret values under one 32-byte key."""

    __slots__ = ("_aead", "_key_id")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != KEY_SIZE:
            raise SecretKeyError(f"a secret key must be exactly {KEY_SIZE} bytes")
        # Only the AEAD object keeps the key; no attribute of ours holds it.
        self._aead = AESGCM(key)
        self._key_id = hashlib.sha256(key).hexdigest()[:16]

    @classmethod
    def from_text(cls, text: str, *, source: str = "the key") -> SecretCipher:
        """A cipher from urlsafe base64 text; ``source`` names where it came from in errors."""
        return cls(_decode_key(text, source))

    @property
    def key_id(self) -> str:
        return self._key_id

    def __repr__(self) -> str:
        return f"SecretCipher(key_id={self._key_id!r})"

    def encrypt(self, resource_id: str, name: str, value: str) -> Sealed:
        nonce = os.urandom(NONCE_SIZE)
        ciphertext = self._aead.encrypt(
            nonce, value.encode("utf-8"), _associated_data(resource_id, name)
        )
        return Sealed(ciphertext=ciphertext, nonce=nonce, key_id=self._key_id)

    def decrypt(self, resource_id: str, name: str, sealed: Sealed) -> str:
        """The plaintext of ``sealed``, which must have been sealed for this exact row."""
        if sealed.key_id != self._key_id:
            raise SecretDecryptError(
                f"secret {name!r} was encrypted with key {sealed.key_id}, but the configured "
                f"key is {self._key_id}: configure the original key ({SECRET_KEY_ENV} or "
                f"{SECRET_KEY_FILE_ENV}) or set the secret again"
            )
        try:
            plaintext = self._aead.decrypt(
                sealed.nonce, sealed.ciphertext, _associated_data(resource_id, name)
            )
        except InvalidTag:
            # The key matches, so the ciphertext was made for another row or altered.
            raise SecretDecryptError(
                f"secret {name!r} failed authentication under key {self._key_id}: its "
                "ciphertext was not sealed for this resource and name, or was altered"
            ) from None
        return plaintext.decode("utf-8")


def _decode_key(text: str, source: str) -> bytes:
    stripped = text.strip()
    # Never quote the text: a near-miss key is still most of a key.
    if not _KEY_TEXT_RE.fullmatch(stripped):
        raise SecretKeyError(
            f"{source} is not a valid secret key: expected the urlsafe base64 text of "
            f"{KEY_SIZE} random bytes (43 characters, optionally '=' padded); {_GENERATE_HINT}"
        )
    return base64.urlsafe_b64decode(stripped.rstrip("=") + "=")


def _check_private(path: Path, mode: int) -> None:
    if os.name != "posix":  # mode bits mean nothing elsewhere
        return
    mode &= 0o777
    if mode & 0o077:
        raise SecretKeyError(
            f"refusing to use key file {path}: it is accessible by group or others "
            f"(mode {mode:04o}); restrict it with: chmod 600 {path}"
        )


def _read_key_file(path: Path, origin: str) -> SecretCipher:
    where = f"key file {path} ({origin})"
    try:
        with path.open("rb") as handle:
            # Check the file actually opened, not whatever the path named a moment ago.
            _check_private(path, os.fstat(handle.fileno()).st_mode)
            raw = handle.read(1024)
    except FileNotFoundError:
        raise SecretKeyError(f"{where} does not exist") from None
    except OSError as exc:
        raise SecretKeyError(f"cannot read {where}: {exc.strerror or type(exc).__name__}") from None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        # The codec's message quotes the offending byte; say only what is wrong.
        raise SecretKeyError(f"{where} is not a valid secret key: it is not ASCII text") from None
    return SecretCipher.from_text(text, source=where)


def _create_key_file(path: Path) -> None:
    """Write a new key to ``path`` unless one appears there first (then keep that one)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Write a private temporary file, then hard-link it into place: the key file
    # appears complete or not at all, and two processes racing to create it both
    # end up using whichever key landed first.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            os.fchmod(handle.fileno(), 0o600)  # whatever the umask allowed
            handle.write(generate_key() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_cipher(
    environ: Mapping[str, str] = os.environ, *, default_key_file: Path | None = None
) -> SecretCipher:
    """The cipher for the configured key (see the module docstring for the order).

    Raises ``SecretKeyError`` naming what to fix; the message never holds key text.
    """
    key_text = environ.get(SECRET_KEY_ENV)
    if key_text:
        return SecretCipher.from_text(key_text, source=SECRET_KEY_ENV)
    key_file = environ.get(SECRET_KEY_FILE_ENV)
    if key_file:
        return _read_key_file(Path(key_file).expanduser(), f"from {SECRET_KEY_FILE_ENV}")
    if default_key_file is not None:
        path = Path(default_key_file).expanduser()
        if not path.exists():
            try:
                _create_key_file(path)
            except OSError as exc:
                raise SecretKeyError(
                    f"cannot create the default key file {path}: {exc.strerror or exc}"
                ) from None
        return _read_key_file(path, "the default key file")
    raise SecretKeyError(
        f"no secret key is configured: set {SECRET_KEY_ENV} to a key, or {SECRET_KEY_FILE_ENV} to the path "
        f"of a file (mode 0600) holding one; {_GENERATE_HINT}"
    )
