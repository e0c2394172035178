"""Credential screening for long-term memory: the package's one screen, re-exported.

The detectors live in ``popagent.credentials`` (the bottom layer), so thread
storage and observational memory apply exactly the same screen as facts and
episodes; see that module for what is detected.
"""

from __future__ import annotations

from ..credentials import (
    CredentialFinding,
    find_credentials,
    redact_credentials,
    redact_json,
    redact_json_text,
)

__all__ = [
    "CredentialFinding",
    "find_credentials",
    "redact_credentials",
    "redact_json",
    "redact_json_text",
]
