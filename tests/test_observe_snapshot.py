"""``ExecutionSnapshot``: §2.5's conversions, the resolved token numbers, pure and frozen."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from popagent.errors import ValidationError
from popagent.observe.settings import MemorySettings
from popagent.observe.snapshot import auto_idle_seconds, execution_snapshot, percent_of


def test_defaults_convert_to_mastras_defaults() -> None:
    snap = execution_snapshot(MemorySettings())
    assert snap.version == 0
    assert snap.observation_message_tokens == 30_000
    assert snap.reflection_observation_tokens == 40_000
    assert snap.observation_buffer_tokens == 0.2
    assert snap.observation_buffer_activation == 0.8
    assert snap.observation_block_after == 1.2
    assert snap.reflection_buffer_activation == 0.5
    assert snap.reflection_block_after == 1.2
    assert snap.observation_previous_observer_tokens == 2_000
    assert snap.observation_observe_attachments == ("image/*", "application/pdf")
    assert not snap.share_token_budget and not snap.temporal_markers
    assert snap.retrieval_scope is None
    assert snap.buffer_interval_tokens == 6_000
    assert snap.retained_floor_tokens == 6_000
    assert snap.observation_block_after_tokens == 36_000
    assert snap.reflection_buffer_start_tokens == 20_000  # "i.e. 20k with defaults"
    assert snap.reflection_block_after_tokens == 48_000
    assert snap.total_budget_tokens is None


@pytest.mark.parametrize("percent", range(100))
def test_retained_context_inverts_to_the_share_removed(percent: int) -> None:
    snap = execution_snapshot(MemorySettings(retained_context_percent=percent))
    removed = snap.observation_buffer_activation
    assert isinstance(removed, float)
    # The nearest float to 1 - p/100, which naive float arithmetic misses (1 - 0.7).
    assert removed == float(1 - Fraction(percent, 100))
    assert 0 < removed <= 1
    assert snap.retained_floor_tokens == percent_of(30_000, percent)


def test_retained_context_boundaries_and_absolute_counts() -> None:
    assert (
        execution_snapshot(
            MemorySettings(retained_context_percent=70)
        ).observation_buffer_activation
        == 0.3
    )
    everything = execution_snapshot(MemorySettings(retained_context_percent=0))
    assert (everything.observation_buffer_activation, everything.retained_floor_tokens) == (1.0, 0)
    most = execution_snapshot(MemorySettings(retained_context_percent=99))
    assert (most.observation_buffer_activation, most.retained_floor_tokens) == (0.01, 29_700)
    absolute = execution_snapshot(MemorySettings(retained_context_tokens=5_000))
    assert absolute.observation_buffer_activation == 5_000
    assert isinstance(absolute.observation_buffer_activation, int)
    assert absolute.retained_floor_tokens == 5_000


def test_safety_bounds_are_multipliers_never_raw_percents() -> None:
    snap = execution_snapshot(
        MemorySettings(observation_block_after_percent=100, reflection_block_after_percent=9_999)
    )
    assert snap.observation_block_after == 1.0
    assert snap.observation_block_after_tokens == 30_000
    assert snap.reflection_block_after == 99.99
    assert snap.reflection_block_after_tokens == 3_999_600
    absolute = execution_snapshot(
        MemorySettings(observation_block_after_tokens=45_000, reflection_block_after_tokens=40_000)
    )
    assert absolute.observation_block_after == absolute.observation_block_after_tokens == 45_000
    assert absolute.reflection_block_after == absolute.reflection_block_after_tokens == 40_000


def test_buffer_intervals_as_ratio_or_count_resolve_below_the_threshold() -> None:
    for percent in (1, 50, 99):
        snap = execution_snapshot(MemorySettings(observation_buffer_percent=percent))
        assert snap.observation_buffer_tokens == percent / 100
        assert snap.buffer_interval_tokens is not None
        assert 0 < snap.buffer_interval_tokens < snap.observation_message_tokens
    smallest = execution_snapshot(
        MemorySettings(observation_threshold_tokens=100, observation_buffer_percent=1)
    )
    assert smallest.buffer_interval_tokens == 1
    absolute = execution_snapshot(MemorySettings(observation_buffer_tokens=4_321))
    assert absolute.observation_buffer_tokens == absolute.buffer_interval_tokens == 4_321
    start = execution_snapshot(MemorySettings(reflection_buffer_start_percent=100))
    assert start.reflection_buffer_activation == 1.0
    assert start.reflection_buffer_start_tokens == 40_000


def test_rounding_is_half_up_like_mastra() -> None:
    assert round(100.5) == 100  # Python's banker's rounding, which Mastra does not use
    assert percent_of(1_005, 10) == 101
    snap = execution_snapshot(
        MemorySettings(observation_threshold_tokens=1_005, observation_buffer_percent=10)
    )
    assert snap.buffer_interval_tokens == 101


def test_without_buffering_the_buffering_options_are_false() -> None:
    snap = execution_snapshot(MemorySettings(observation_buffer_percent=None))
    assert snap.observation_buffer_tokens is None
    assert snap.buffer_interval_tokens is None
    assert snap.observation_block_after is snap.observation_block_after_tokens is None
    assert snap.reflection_buffer_activation is snap.reflection_buffer_start_tokens is None
    assert snap.reflection_block_after is snap.reflection_block_after_tokens is None
    assert snap.observation_buffer_activation == 0.8  # retention is not a buffering option


def test_shared_budget_thresholds_follow_the_observations() -> None:
    snap = execution_snapshot(
        MemorySettings(shared_token_budget=True, observation_buffer_percent=None)
    )
    assert snap.share_token_budget and snap.total_budget_tokens == 70_000
    assert [snap.message_threshold(o) for o in (0, 10_000, 40_000, 55_000)] == [
        70_000,
        60_000,
        30_000,
        30_000,
    ]
    assert [snap.shown_reflection_threshold(o) for o in (0, 10_000, 40_000, 55_000)] == [
        1_000,
        10_000,
        40_000,
        40_000,
    ]
    separate = execution_snapshot(MemorySettings())
    assert separate.message_threshold(39_000) == 30_000
    assert separate.shown_reflection_threshold(39_000) == 40_000
    for bad in (-1, True, 1.5):
        with pytest.raises(ValidationError, match="observation_tokens"):
            snap.message_threshold(bad)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="observation_tokens"):
            separate.shown_reflection_threshold(bad)  # type: ignore[arg-type]


def test_the_other_settings_pass_through() -> None:
    settings = MemorySettings(
        observation_activate_after_idle="auto",
        observation_activate_on_provider_change=True,
        reflection_activate_after_idle=900,
        temporal_markers=True,
        forward_attachments=False,
        previous_observation_tokens=None,
        retrieval_scope="thread",
        observer_guidance="Track deadlines.",
        reflector_guidance="Keep names.",
    )
    snap = execution_snapshot(settings, version=7)
    assert snap.version == 7
    assert snap.observation_activate_after_idle == "auto"
    assert snap.observation_activate_on_provider_change is True
    assert snap.reflection_activate_after_idle == 900
    assert snap.reflection_activate_on_provider_change is False
    assert snap.temporal_markers is True
    assert snap.observation_observe_attachments == ()
    assert snap.observation_previous_observer_tokens is None
    assert snap.retrieval_scope == "thread"
    assert snap.observation_instruction == "Track deadlines."
    assert snap.reflection_instruction == "Keep names."


def test_a_snapshot_is_frozen() -> None:
    snap = execution_snapshot(MemorySettings())
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.__setattr__("observation_message_tokens", 1)
    assert snap == execution_snapshot(MemorySettings())


@pytest.mark.parametrize(
    ("provider", "model", "retention", "seconds"),
    [
        ("anthropic", "claude-sonnet-4", None, 300),
        ("openrouter", "x", None, 300),
        ("xai", "grok-4", None, 300),
        ("somebody", "x", None, 300),
        ("deepseek", "deepseek-chat", None, 3_600),
        ("google", "gemini-2.5-flash", None, 86_400),
        ("groq", "llama", None, 7_200),
        ("openai", "gpt-4o-mini", None, 300),
        ("openai", "gpt-5", None, 300),
        ("openai", "gpt-5.4", None, 300),
        ("openai", "gpt-5.5", None, 3_600),
        ("openai", "o3", None, 3_600),
        ("openai", "gpt-4o", "24h", 3_600),
        ("OpenAI", "o3", "in_memory", 300),
    ],
)
def test_auto_idle_follows_the_providers_cache_lifetime(
    provider: str, model: str, retention: str | None, seconds: int
) -> None:
    assert auto_idle_seconds(provider, model, prompt_cache_retention=retention) == seconds
