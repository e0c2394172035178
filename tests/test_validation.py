"""Validation rules and credential screening, without a database."""

from __future__ import annotations

import pytest

from popagent import SecretRefusedError, ValidationError
from popagent.credentials import find_credentials, redact_credentials
from popagent.memory.validation import (
    cap_text,
    check_importance,
    episode_content,
    normalize_fact_content,
    normalize_key,
)


def test_fact_content_is_normalized() -> None:
    assert normalize_fact_content("  Likes\n\n  green\ttea  ") == "Likes green tea"
    assert normalize_fact_content("Cafe\u0301") == "Café"


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b", "\ud800x", 5, None])
def test_bad_content_is_rejected(bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        normalize_fact_content(bad)
    assert err.value.field == "content"


def test_fact_limit_is_named_in_the_error() -> None:
    assert normalize_fact_content("a" * 2000) == "a" * 2000
    with pytest.raises(ValidationError, match="2000"):
        normalize_fact_content("a" * 2001)


def test_keys() -> None:
    assert normalize_key(" UI.Theme ") == "ui.theme"
    assert normalize_key(None) is None
    for bad in ["", "  ", "a b", "k" * 129, "a\x00"]:
        with pytest.raises(ValidationError):
            normalize_key(bad)
    assert normalize_key("k" * 128) == "k" * 128


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan"), float("inf"), True, "0.5", None])
def test_importance_must_be_a_finite_number_in_unit_interval(bad: object) -> None:
    with pytest.raises(ValidationError, match="importance"):
        check_importance(bad)


def test_importance_accepts_bounds() -> None:
    assert check_importance(0) == 0.0
    assert check_importance(1) == 1.0


def test_cap_text_marks_truncation_within_the_cap() -> None:
    text = "z" * 10_000
    capped = cap_text(text, 4_000)
    assert len(capped) == 4_000
    assert capped.endswith("more characters]")
    assert "[truncated: " in capped
    dropped = int(capped.rsplit("[truncated: ", 1)[1].split()[0])
    assert capped.index(" [truncated") + dropped == len(text)
    assert cap_text("short", 4_000) == "short"


def test_episode_content_caps_each_side_and_skips_empty_turns() -> None:
    content, redacted = episode_content("u" * 5_000, "a" * 9_000) or ("", -1)
    user, assistant = content.split("\n", 1)
    assert len(user) == len("User: ") + 4_000
    assert len(assistant) == len("Assistant: ") + 8_000
    assert redacted == 0
    assert episode_content("", "reply") is None
    assert episode_content("hello", "   ") is None


SECRETS = [
    "my key is sk-proj-abcdefghijklmnopqrstuvwxyz123456",
    "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "Authorization: Bearer abcdefghijklmnop1234567890",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "AWS AKIAIOSFODNN7EXAMPLE",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    "my password is hunter22",
    "api_key=abcd1234efgh",
    "connect with postgres://admin:s3cretpw@db.example.com/app",
    "slack xoxb-1234567890-abcdefghij",
]


@pytest.mark.parametrize("text", SECRETS)
def test_credentials_are_found_refused_and_redacted(text: str) -> None:
    assert find_credentials(text)
    with pytest.raises(SecretRefusedError, match="secret store"):
        normalize_fact_content(text)
    redacted, count = redact_credentials(text)
    assert count >= 1
    assert "[REDACTED:" in redacted


@pytest.mark.parametrize(
    "text",
    [
        "I forgot my password yesterday",
        "Prefers tokens of appreciation over gifts",
        "The bearer of good news",
        "My sister's birthday is on 3 May",
        "Uses https://example.com/docs for reference",
    ],
)
def test_ordinary_text_is_not_a_credential(text: str) -> None:
    assert find_credentials(text) == []


def test_redaction_keeps_the_words_around_the_secret() -> None:
    redacted, _ = redact_credentials("my password is hunter22, remember it")
    assert redacted == "my password is [REDACTED:password], remember it"
