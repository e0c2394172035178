"""``popagent settings show/set/reset`` through click's runner, on the real database."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result

from popagent.cli import main
from popagent.observe.settings import SETTINGS


@pytest.fixture
def res() -> str:
    return f"cli-settings-{uuid.uuid4().hex}"


def invoke(url: str, res: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        main,
        ["--database-url", url, "--resource-id", res, "settings", *args],
        input=input,
        catch_exceptions=False,
    )


def shown(url: str, res: str) -> dict[str, Any]:
    out = invoke(url, res, "show", "--json")
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.output)
    return data


def test_show_lists_every_setting_with_its_default(database_url: str, res: str) -> None:
    out = invoke(database_url, res, "show")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith(f"resource {res}  version 0  updated never")
    assert [line.split()[0] for line in lines[1:]] == [s.name for s in SETTINGS]
    assert re.search(r"^  observation_threshold_tokens +30000 tokens$", out.output, re.M)
    assert "20% of observation_threshold_tokens" in out.output
    assert not any(line.startswith("*") for line in lines)
    verbose = invoke(database_url, res, "show", "-v").output
    for s in SETTINGS:
        assert s.help in verbose
    data = shown(database_url, res)
    assert data["version"] == 0 and data["updated_at"] is None
    assert data["settings"]["forward_attachments"] == ["image/*", "application/pdf"]
    assert data["settings"]["observation_buffer_percent"] == 20


def test_set_validates_together_and_applies(database_url: str, res: str) -> None:
    out = invoke(
        database_url,
        res,
        "set",
        "observation_threshold_tokens=20,000",
        "retained_context_tokens=5000",
        "observation_activate_after_idle=5m",
        "forward_attachments=image/png,IMAGE/JPEG",
        "observer_guidance=Track deadlines.",
    )
    assert out.exit_code == 0, out.output
    assert "observation_activate_after_idle = 300" in out.output
    assert "version 1; applies from the next turn" in out.output
    data = shown(database_url, res)
    settings = data["settings"]
    assert data["version"] == 1
    assert settings["observation_threshold_tokens"] == 20_000
    assert (settings["retained_context_percent"], settings["retained_context_tokens"]) == (
        None,
        5_000,
    )
    assert settings["observation_activate_after_idle"] == 300
    assert settings["forward_attachments"] == ["image/png", "image/jpeg"]
    assert settings["observer_guidance"] == "Track deadlines."
    listing = invoke(database_url, res, "show").output
    assert re.search(
        r"^\* observation_threshold_tokens +20000 tokens  \[default 30000\]$", listing, re.M
    )
    # Turning buffering off and sharing the budget in one command.
    both = invoke(
        database_url, res, "set", "observation_buffer_percent=off", "shared_token_budget=true"
    )
    assert both.exit_code == 0, both.output
    assert shown(database_url, res)["settings"]["observation_block_after_percent"] is None


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["shared_token_budget=true"], "shared_token_budget"),
        (["observation_buffer_percent=lots"], "observation_buffer_percent"),
        (["observation_buffer_percent=100"], "observation_buffer_percent"),
        (["retained_context_tokens=30000"], "retained_context_tokens"),
        (["temporal_markers=true", "observation_treshold_tokens=5"], "observation_treshold_tokens"),
        (["temporal_markers"], "NAME=VALUE"),
        (["temporal_markers=true", "temporal_markers=false"], "given twice"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(
    database_url: str, res: str, args: list[str], field: str
) -> None:
    out = invoke(database_url, res, "set", *args)
    assert out.exit_code == 2
    assert field in out.output
    data = shown(database_url, res)
    assert data["version"] == 0 and data["settings"]["temporal_markers"] is False


def test_every_bad_value_is_reported_at_once(database_url: str, res: str) -> None:
    out = invoke(
        database_url,
        res,
        "set",
        "observation_threshold_tokens=lots",
        "temporal_markers=maybe",
        "retained_context_percent=20",
        "observation_treshold_tokens=5",
    )
    assert out.exit_code == 2
    assert "3 problems, nothing was written" in out.output
    for field in (
        "observation_threshold_tokens",
        "temporal_markers",
        "observation_treshold_tokens",
    ):
        assert f"  {field}" in out.output, out.output
    assert shown(database_url, res)["version"] == 0


def test_reset_asks_then_restores_the_defaults(database_url: str, res: str) -> None:
    assert invoke(database_url, res, "set", "temporal_markers=true").exit_code == 0
    refused = invoke(database_url, res, "reset", input="n\n")
    assert refused.exit_code == 1
    assert shown(database_url, res)["settings"]["temporal_markers"] is True
    out = invoke(database_url, res, "reset", input="y\n")
    assert out.exit_code == 0 and "reset to their defaults" in out.output
    data = shown(database_url, res)
    assert data["settings"]["temporal_markers"] is False and data["version"] == 2
    assert invoke(database_url, res, "reset", "--yes").exit_code == 0
    assert shown(database_url, res)["version"] == 3
