"""``MemorySettings`` without a database: defaults, every range and exclusion, text forms, docs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic
import pytest

from popagent.errors import ValidationError
from popagent.observe.settings import (
    SETTINGS,
    SETTINGS_BY_NAME,
    MemorySettings,
    format_setting,
    merge_changes,
    parse_setting,
    settings_markdown_table,
)
from popagent.store.settings import COLUMNS

DOCS = Path(__file__).parents[1] / "docs" / "observational-memory.md"
OFF = {"observation_buffer_percent": None}


def make(**values: Any) -> MemorySettings:
    return MemorySettings(**values)


def test_defaults_are_the_references() -> None:
    assert MemorySettings().model_dump() == {
        "observation_threshold_tokens": 30_000,
        "reflection_threshold_tokens": 40_000,
        "retained_context_percent": 20,  # bufferActivation 0.8
        "retained_context_tokens": None,
        "observation_buffer_percent": 20,  # bufferTokens 0.2
        "observation_buffer_tokens": None,
        "reflection_buffer_start_percent": 50,  # reflection.bufferActivation 0.5
        "observation_block_after_percent": 120,  # blockAfter 1.2
        "observation_block_after_tokens": None,
        "reflection_block_after_percent": 120,
        "reflection_block_after_tokens": None,
        "observation_activate_after_idle": None,
        "observation_activate_on_provider_change": False,
        "reflection_activate_after_idle": None,
        "reflection_activate_on_provider_change": False,
        "shared_token_budget": False,
        "temporal_markers": False,
        "forward_attachments": ("image/*", "application/pdf"),
        "previous_observation_tokens": 2_000,
        "retrieval_scope": None,
        "observer_guidance": None,
        "reflector_guidance": None,
    }


def test_the_table_the_model_and_the_columns_name_the_same_settings() -> None:
    assert [s.name for s in SETTINGS] == list(MemorySettings.model_fields) == list(COLUMNS)


def test_every_setting_has_help_and_is_in_the_docs() -> None:
    for s in SETTINGS:
        assert s.help.strip() and s.accepts.strip() and s.mastra.strip(), s.name
        assert "|" not in s.help + s.accepts + s.mastra + s.unit, s.name
    docs = DOCS.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", docs, re.S
    )
    assert match, "docs/observational-memory.md lost its settings-table markers"
    assert match.group(1) == settings_markdown_table(), (
        "the docs' settings table is stale; paste settings_markdown_table() between the markers"
    )
    for s in SETTINGS:
        assert f"| `{s.name}` |" in match.group(1)


@pytest.mark.parametrize(
    ("values", "field", "fragment"),
    [
        ({"observation_threshold_tokens": 99}, "observation_threshold_tokens", "from 100"),
        (
            {"observation_threshold_tokens": 10_000_001},
            "observation_threshold_tokens",
            "10,000,000",
        ),
        ({"observation_threshold_tokens": True}, "observation_threshold_tokens", "whole number"),
        ({"observation_threshold_tokens": 30_000.0}, "observation_threshold_tokens", "whole"),
        ({"reflection_threshold_tokens": float("nan")}, "reflection_threshold_tokens", "whole"),
        ({"reflection_threshold_tokens": "40000"}, "reflection_threshold_tokens", "whole"),
        ({"retained_context_percent": 100}, "retained_context_percent", "0 to 99"),
        ({"retained_context_percent": -1}, "retained_context_percent", "0 to 99"),
        ({"retained_context_tokens": 999}, "retained_context_tokens", "1,000"),
        (
            {"retained_context_tokens": 30_000},
            "retained_context_tokens",
            "below observation_threshold",
        ),
        ({"retained_context_percent": None}, "retained_context_percent", "one of"),
        (
            {"retained_context_percent": 20, "retained_context_tokens": 5_000},
            "retained_context_tokens",
            "only one",
        ),
        ({"observation_buffer_percent": 0}, "observation_buffer_percent", "1 to 99"),
        ({"observation_buffer_percent": 100}, "observation_buffer_percent", "1 to 99"),
        ({"observation_buffer_tokens": 30_000}, "observation_buffer_tokens", "resolve below"),
        (
            {"observation_buffer_percent": 10, "observation_buffer_tokens": 1_000},
            "observation_buffer_tokens",
            "only one",
        ),
        ({"shared_token_budget": True}, "shared_token_budget", "observation_buffer_percent"),
        (
            {**OFF, "observation_block_after_percent": 150},
            "observation_block_after_percent",
            "requires async buffering",
        ),
        (
            {**OFF, "reflection_block_after_tokens": 50_000},
            "reflection_block_after_tokens",
            "requires async buffering",
        ),
        (
            {**OFF, "reflection_buffer_start_percent": 50},
            "reflection_buffer_start_percent",
            "requires async buffering",
        ),
        (
            {"reflection_buffer_start_percent": None},
            "reflection_buffer_start_percent",
            "must be set",
        ),
        ({"reflection_buffer_start_percent": 101}, "reflection_buffer_start_percent", "1 to 100"),
        (
            {"observation_block_after_percent": 99},
            "observation_block_after_percent",
            "100 to 9,999",
        ),
        ({"observation_block_after_percent": None}, "observation_block_after_percent", "one of"),
        (
            {"observation_block_after_tokens": 29_999},
            "observation_block_after_tokens",
            "at least observation_threshold_tokens (30000)",
        ),
        (
            {"reflection_block_after_tokens": 39_999},
            "reflection_block_after_tokens",
            "at least reflection_threshold_tokens (40000)",
        ),
        ({"observation_activate_after_idle": 0}, "observation_activate_after_idle", "from 1"),
        ({"reflection_activate_after_idle": 604_801}, "reflection_activate_after_idle", "604,800"),
        ({"observation_activate_after_idle": "5m"}, "observation_activate_after_idle", "auto"),
        ({"temporal_markers": 1}, "temporal_markers", "true or false"),
        ({"forward_attachments": ["image"]}, "forward_attachments", "not a MIME pattern"),
        ({"forward_attachments": ["*/*"]}, "forward_attachments", "not a MIME pattern"),
        ({"forward_attachments": "image/*"}, "forward_attachments", "comma-separated"),
        (
            {"forward_attachments": [f"image/x{i}" for i in range(33)]},
            "forward_attachments",
            "at most 32",
        ),
        ({"previous_observation_tokens": -1}, "previous_observation_tokens", "from 0"),
        ({"previous_observation_tokens": float("inf")}, "previous_observation_tokens", "whole"),
        ({"retrieval_scope": "global"}, "retrieval_scope", "off, thread or resource"),
        ({"observer_guidance": "x" * 4_001}, "observer_guidance", "4,000"),
        ({"reflector_guidance": "a\x00b"}, "reflector_guidance", "NUL"),
        ({"observer_guidance": 7}, "observer_guidance", "4,000 characters"),
        ({"observation_threshold": 30_000}, "observation_threshold", "not a memory setting"),
    ],
)
def test_each_range_and_exclusion_names_the_field_and_the_limit(
    values: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        make(**values)
    assert caught.value.field == field
    assert fragment in caught.value.message


def test_the_shared_budget_error_names_both_settings() -> None:
    with pytest.raises(ValidationError) as caught:
        MemorySettings().with_changes(shared_token_budget=True)
    assert "shared_token_budget" in str(caught.value)
    assert "observation_buffer_percent" in caught.value.message
    assert "mutually exclusive" in caught.value.message


@pytest.mark.parametrize(
    "values",
    [
        {"retained_context_percent": 0},
        {"retained_context_percent": 99},
        {"retained_context_tokens": 1_000},
        {"retained_context_tokens": 29_999},
        {"observation_buffer_percent": 1},
        {"observation_buffer_percent": 99},
        {"observation_buffer_tokens": 1},
        {"observation_buffer_tokens": 29_999},
        {"reflection_buffer_start_percent": 1},
        {"reflection_buffer_start_percent": 100},
        {"observation_block_after_percent": 100},
        {"observation_block_after_percent": 9_999},
        {"observation_block_after_tokens": 30_000},
        {"reflection_block_after_tokens": 40_000},
        {"observation_threshold_tokens": 100, "retained_context_percent": 0},
        {"observation_activate_after_idle": 1, "reflection_activate_after_idle": 604_800},
        {"observation_activate_after_idle": "auto", "reflection_activate_on_provider_change": True},
        {"previous_observation_tokens": 0},
        {"previous_observation_tokens": None},
        {"observer_guidance": "x" * 4_000},
        {"retrieval_scope": "resource"},
        {"shared_token_budget": True, **OFF},
    ],
)
def test_boundary_values_are_accepted(values: dict[str, Any]) -> None:
    settings = make(**values)
    for name, value in values.items():
        assert getattr(settings, name) == value


def test_either_or_pairs_clear_the_other_side() -> None:
    tokens = make(retained_context_tokens=5_000)
    assert (tokens.retained_context_percent, tokens.retained_context_tokens) == (None, 5_000)
    back = tokens.with_changes(retained_context_percent=30)
    assert (back.retained_context_percent, back.retained_context_tokens) == (30, None)
    absolute = make(observation_buffer_tokens=4_000, reflection_block_after_tokens=60_000)
    assert absolute.observation_buffer_percent is None
    assert absolute.reflection_block_after_percent is None
    assert absolute.observation_block_after_percent == 120  # untouched: another pair


def test_turning_buffering_off_and_on_carries_its_dependent_settings() -> None:
    changed = make(reflection_buffer_start_percent=70, observation_block_after_tokens=50_000)
    off = changed.with_changes(observation_buffer_percent=None)
    assert off.reflection_buffer_start_percent is None
    assert off.observation_block_after_tokens is None
    assert off.reflection_block_after_percent is None
    shared = off.with_changes(shared_token_budget=True)
    on = shared.with_changes(shared_token_budget=False, observation_buffer_percent=10)
    assert on.reflection_buffer_start_percent == 50
    assert on.observation_block_after_percent == on.reflection_block_after_percent == 120
    # Naming a dependent while turning buffering off keeps it, and then it is refused.
    with pytest.raises(ValidationError) as caught:
        changed.with_changes(observation_buffer_percent=None, reflection_buffer_start_percent=70)
    assert caught.value.field == "reflection_buffer_start_percent"
    # An absolute interval instead of a percent keeps buffering on: nothing is cleared.
    swapped = changed.with_changes(observation_buffer_tokens=3_000)
    assert swapped.observation_buffer_percent is None
    assert swapped.reflection_buffer_start_percent == 70


def test_a_threshold_change_is_checked_against_the_absolute_values() -> None:
    settings = make(retained_context_tokens=5_000)
    with pytest.raises(ValidationError) as caught:
        settings.with_changes(observation_threshold_tokens=3_000)
    assert caught.value.field == "retained_context_tokens"
    assert "observation_threshold_tokens (3000)" in caught.value.message


def test_merge_changes_leaves_a_complete_mapping_alone() -> None:
    full = MemorySettings().model_dump()
    assert merge_changes(MemorySettings().model_dump(), full) == full


def test_the_model_is_frozen_and_normalizes_attachments_and_guidance() -> None:
    settings = make(forward_attachments=["Image/PNG", "image/png", "*"], observer_guidance="  ")
    assert settings.forward_attachments == ("image/png", "*")
    assert settings.observer_guidance is None
    assert make(forward_attachments=True).forward_attachments == ("*",)
    assert make(forward_attachments=False).forward_attachments == ()
    with pytest.raises(pydantic.ValidationError):
        settings.__setattr__("temporal_markers", True)
    assert settings.to_json()["forward_attachments"] == ["image/png", "*"]
    assert hash(MemorySettings()) == hash(MemorySettings())


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("observation_threshold_tokens", "20,000", 20_000),
        ("observation_threshold_tokens", "20_000", 20_000),
        ("retained_context_percent", "25%", 25),
        ("retained_context_tokens", "off", None),
        ("observation_activate_after_idle", "5m", 300),
        ("observation_activate_after_idle", "1h", 3_600),
        ("observation_activate_after_idle", "90", 90),
        ("reflection_activate_after_idle", "AUTO", "auto"),
        ("temporal_markers", "yes", True),
        ("shared_token_budget", "off", False),
        ("forward_attachments", "true", True),
        ("forward_attachments", "none", False),
        ("forward_attachments", "image/png, application/pdf", ("image/png", "application/pdf")),
        ("retrieval_scope", "thread", "thread"),
        ("retrieval_scope", "off", None),
        ("observer_guidance", "Note deadlines.", "Note deadlines."),
        ("observer_guidance", "", None),
    ],
)
def test_parse_setting(name: str, text: str, value: object) -> None:
    assert parse_setting(name, text) == value


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("observation_threshold_tokens", "lots"),
        ("observation_threshold_tokens", "off"),
        ("observation_threshold_tokens", "1,5"),
        ("temporal_markers", "maybe"),
        ("retrieval_scope", "global"),
        ("observation_activate_after_idle", "5 weeks"),
    ],
)
def test_parse_setting_refuses_what_it_cannot_read(name: str, text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_setting(name, text)
    assert caught.value.field == name
    assert SETTINGS_BY_NAME[name].accepts in caught.value.message


def test_parse_setting_refuses_unknown_names() -> None:
    with pytest.raises(ValidationError, match="not a memory setting"):
        parse_setting("observation_treshold_tokens", "1000")


def test_format_and_parse_round_trip() -> None:
    samples = [
        MemorySettings(),
        make(
            retained_context_tokens=5_000,
            observation_buffer_tokens=2_000,
            observation_block_after_tokens=45_000,
            observation_activate_after_idle="auto",
            reflection_activate_after_idle=600,
            forward_attachments=["image/png", "text/*"],
            previous_observation_tokens=None,
            retrieval_scope="resource",
            observer_guidance="Keep every deadline.",
        ),
        make(forward_attachments=True, **OFF, shared_token_budget=True),
        make(forward_attachments=False),
    ]
    for settings in samples:
        parsed = {
            s.name: parse_setting(s.name, format_setting(s.name, getattr(settings, s.name)))
            for s in SETTINGS
        }
        assert MemorySettings(**parsed) == settings


@pytest.mark.parametrize("blank", ["\u200b" * 4_000, "\ufeff\u2060 \u200c", "\u00ad\u180e\t"])
def test_guidance_of_invisible_characters_alone_is_off(blank: str) -> None:
    """Zero-width characters show nothing: guidance made of them alone is off, as
    blank guidance is (and as a fact's content made of them is refused as empty);
    guidance with visible text keeps them."""
    settings = make(observer_guidance=blank, reflector_guidance=blank)
    assert (settings.observer_guidance, settings.reflector_guidance) == (None, None)
    visible = f"be brief{blank[:100]}"
    assert make(observer_guidance=visible).observer_guidance == visible
