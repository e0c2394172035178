"""Screening text for credentials before it becomes memory.

Facts that contain a credential are refused; episodes are stored with each
credential replaced by ``[REDACTED:<kind>]``. What is detected:

- PEM private key blocks (``-----BEGIN ... PRIVATE KEY-----``);
- JSON Web Tokens (three base64url segments, the first two starting ``eyJ``);
- ``Bearer <token>`` and ``Basic <token>`` authorization values;
- well-known API key shapes: OpenAI/Anthropic ``sk-...``, GitHub ``ghp_``/
  ``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab ``glpat-``,
  AWS access key IDs ``AKIA``/``ASIA``, Slack ``xox?-``, Google ``AIza``,
  Stripe ``sk_live_``/``rk_live_``, Hugging Face ``hf_``;
- passwords and secrets given as such: ``password is X``, ``api_key=X``,
  ``token: X`` and the like (only the value is redacted);
- credentials inside URLs (``scheme://user:password@host``).

Detection is pattern based: it catches credentials stated in the ordinary
ways, not every secret a person could type. Secret values belong in the
separate secret store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CredentialFinding", "find_credentials", "redact_credentials"]


@dataclass(frozen=True, slots=True)
class CredentialFinding:
    kind: str
    start: int
    end: int


# (kind, pattern, group holding the secret value: 0 for the whole match)
_PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        0,
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), 0),
    (
        "authorization",
        re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/-]{16,}=*)"),
        1,
    ),
    ("api_key", re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{20,}"), 0),
    ("api_key", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}"), 0),
    ("api_key", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), 0),
    ("api_key", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), 0),
    ("api_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("api_key", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), 0),
    ("api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), 0),
    ("api_key", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"), 0),
    ("api_key", re.compile(r"\bhf_[A-Za-z0-9]{30,}"), 0),
    (
        "url_password",
        re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:([^\s/@]+)@", re.IGNORECASE),
        1,
    ),
    (
        "password",
        re.compile(
            r"(?i)\b(?:password|passwd|passphrase|pass ?code|pin code|secret[ _-]?key|"
            r"api[ _-]?key|api[ _-]?token|access[ _-]?key|access[ _-]?token|auth[ _-]?token|"
            r"refresh[ _-]?token|client[ _-]?secret|private[ _-]?key)s?"
            r"(?:\s+(?:is|was|=|:)|\s*[:=])\s*[\"'`]?([^\s\"'`]{3,}[^\s\"'`.,;:!?)\]])"
        ),
        1,
    ),
)


def find_credentials(text: str) -> list[CredentialFinding]:
    """Every credential-looking span in ``text``, sorted, non-overlapping."""
    spans: list[CredentialFinding] = []
    for kind, pattern, group in _PATTERNS:
        for match in pattern.finditer(text):
            start, end = match.span(group)
            if start >= 0 and end > start:
                spans.append(CredentialFinding(kind, start, end))
    spans.sort(key=lambda f: (f.start, -f.end))
    merged: list[CredentialFinding] = []
    for finding in spans:
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            if finding.end > last.end:
                merged[-1] = CredentialFinding(last.kind, last.start, finding.end)
            continue
        merged.append(finding)
    return merged


def redact_credentials(text: str) -> tuple[str, int]:
    """``text`` with each credential replaced by ``[REDACTED:<kind>]``, and how many were."""
    findings = find_credentials(text)
    if not findings:
        return text, 0
    out: list[str] = []
    cursor = 0
    for finding in findings:
        out.append(text[cursor : finding.start])
        out.append(f"[REDACTED:{finding.kind}]")
        cursor = finding.end
    out.append(text[cursor:])
    return "".join(out), len(findings)
