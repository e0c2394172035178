"""The bind rule and the bearer token shared by ``popagent serve`` and ``popagent mcp``."""

from __future__ import annotations

from pathlib import Path

import pytest

from popagent.access import (
    MIN_TOKEN_LENGTH,
    bearer_matches,
    is_loopback,
    load_token,
    require_token_for,
)
from popagent.errors import ValidationError

TOKEN = "a-long-enough-token-123"


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"]
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    require_token_for(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.com", "10.0.0.1"])
def test_other_hosts_need_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ValidationError, match="needs a bearer token"):
        require_token_for(host, None)
    require_token_for(host, TOKEN)


def test_token_from_env_then_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPAGENT_TOKEN", raising=False)
    monkeypatch.delenv("POPAGENT_TOKEN_FILE", raising=False)
    assert load_token() is None
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}  \nsecond line ignored\n")
    assert load_token(token_file) == TOKEN
    monkeypatch.setenv("POPAGENT_TOKEN_FILE", str(token_file))
    assert load_token() == TOKEN
    monkeypatch.setenv("POPAGENT_TOKEN", "env-token-wins-0123456")
    assert load_token(token_file) == "env-token-wins-0123456"


def test_bad_tokens_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPAGENT_TOKEN", raising=False)
    short = tmp_path / "short"
    short.write_text("x" * (MIN_TOKEN_LENGTH - 1))
    with pytest.raises(ValidationError, match=f"at least {MIN_TOKEN_LENGTH}"):
        load_token(short)
    with pytest.raises(ValidationError, match="cannot read"):
        load_token(tmp_path / "missing")
    monkeypatch.setenv("POPAGENT_TOKEN", "short")
    with pytest.raises(ValidationError, match="POPAGENT_TOKEN"):
        load_token()


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),
        (f"Bearer  {TOKEN} ", True),
        (f"Bearer {TOKEN}x", False),
        (f"Basic {TOKEN}", False),
        (TOKEN, False),
        ("", False),
        (None, False),
    ],
)
def test_bearer_matches(header: str | None, ok: bool) -> None:
    assert bearer_matches(header, TOKEN) is ok
