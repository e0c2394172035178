"""The secret store: credentials an agent may use but must never remember.

Secrets live in ``popagent_secrets``, apart from long-term memory and with
their own retention; values are AES-256-GCM encrypted at rest under a key from
``POPAGENT_SECRET_KEY``, ``POPAGENT_SECRET_KEY_FILE`` or a default key file, and
are never written to memories, episodes, audit rows or logs::

    cipher = load_cipher(default_key_file=Path("~/.popagent/secret.key"))
    secrets = SecretStore(pool, cipher)
    await secrets.set("popagent-user", "GITHUB_TOKEN", token)
    token = await secrets.reveal("popagent-user", "GITHUB_TOKEN")

``scrub`` replaces known values in text with ``[secret:NAME]`` markers.
"""

from __future__ import annotations

from .cipher import (
    Sealed,
    SecretCipher,
    SecretDecryptError,
    SecretKeyError,
    generate_key,
    load_cipher,
)
from .store import SecretInfo, SecretStore, scrub

__all__ = [
    "Sealed",
    "SecretCipher",
    "SecretDecryptError",
    "SecretInfo",
    "SecretKeyError",
    "SecretStore",
    "generate_key",
    "load_cipher",
    "scrub",
]
