"""``ExecutionSnapshot``: the settings as the observational-memory engine reads them.

Stored settings are whole percents and token counts; the engine thinks in
Mastra's terms (reference §2.2, §2.3), where a value's magnitude decides its
meaning (a ratio below 1, a multiplier from 1, an absolute count from 100 or
1000). The conversion is §2.5's, exactly:

- buffer interval %        → ``observation_buffer_tokens`` = p/100
- **retained** context %   → ``observation_buffer_activation`` = 1 - p/100 (the share
  *removed*; computed as (100 - p)/100 so that it is the nearest float)
- reflection buffer start % → ``reflection_buffer_activation`` = p/100
- safety bound %           → ``*_block_after`` = p/100 (120% → 1.2, never 120)

Absolute token settings pass through as counts, and every value is also
resolved to the token numbers the engine compares against, rounding half up
as Mastra's ``Math.round`` does, in integer arithmetic.

Invariant: "applies on the next turn, never mid-turn". A turn takes one
snapshot when it starts and reads nothing else for its whole run; a snapshot is
a frozen value that holds no connection and no reference to stored state, so
a settings update made meanwhile cannot change it. The next turn's snapshot
sees the update.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..errors import ValidationError
from .settings import MemorySettings

__all__ = [
    "SHARED_REFLECTION_MIN",
    "ExecutionSnapshot",
    "auto_idle_seconds",
    "execution_snapshot",
    "percent_of",
]

#: Under a shared budget the reflection threshold shown never drops below this (§2.1).
SHARED_REFLECTION_MIN = 1_000


def percent_of(tokens: int, percent: int) -> int:
    """``tokens * percent / 100`` rounded half up, without floating point."""
    return (tokens * percent + 50) // 100


@dataclass(frozen=True, slots=True)
class ExecutionSnapshot:
    """One resource's settings for one turn: Mastra's option values and the resolved tokens.

    The ``observation_*`` and ``reflection_*`` option fields are named after the
    Mastra options they stand for (``observation.bufferTokens`` →
    ``observation_buffer_tokens``); ``None`` is Mastra's ``false`` or "unset".
    Idle times are in seconds (Mastra takes milliseconds).
    """

    #: The settings version it was taken from; 0 when the resource has no stored row.
    version: int
    # -- Mastra's options ------------------------------------------------------------------
    observation_message_tokens: int
    #: A ratio in (0, 1) of the threshold, or an absolute count; ``None``: buffering off.
    observation_buffer_tokens: float | int | None
    #: The share of the threshold removed at activation, in (0, 1], or the count kept (≥ 1000).
    observation_buffer_activation: float | int
    #: A multiplier of the threshold (≥ 1), or an absolute count; ``None`` without buffering.
    observation_block_after: float | int | None
    observation_activate_after_idle: int | Literal["auto"] | None
    observation_activate_on_provider_change: bool
    observation_observe_attachments: tuple[str, ...]
    #: ``None`` disables truncation (Mastra's ``false``); 0 omits previous observations.
    observation_previous_observer_tokens: int | None
    observation_instruction: str | None
    reflection_observation_tokens: int
    #: A ratio in (0, 1]; ``None`` without buffering.
    reflection_buffer_activation: float | None
    reflection_block_after: float | int | None
    reflection_activate_after_idle: int | Literal["auto"] | None
    reflection_activate_on_provider_change: bool
    reflection_instruction: str | None
    share_token_budget: bool
    temporal_markers: bool
    #: ``None``: retrieval off; else the scope of the recall tool.
    retrieval_scope: Literal["thread", "resource"] | None
    # -- resolved token numbers --------------------------------------------------------------
    #: Tokens between background observations; ``None`` without buffering.
    buffer_interval_tokens: int | None
    #: Raw context kept after activation: threshold * (1 - activation), or the count.
    retained_floor_tokens: int
    observation_block_after_tokens: int | None
    #: Observation tokens at which a background reflection starts.
    reflection_buffer_start_tokens: int | None
    reflection_block_after_tokens: int | None
    #: observation + reflection threshold under a shared budget, else ``None``.
    total_budget_tokens: int | None

    def message_threshold(self, observation_tokens: int) -> int:
        """Pending message tokens at which observation is due, given the current observations.

        The observation threshold; under a shared budget
        ``max(total - observation_tokens, observation threshold)`` (§2.1), so
        raw messages may use what observations leave free.
        """
        _check_count(observation_tokens)
        if self.total_budget_tokens is None:
            return self.observation_message_tokens
        return max(self.total_budget_tokens - observation_tokens, self.observation_message_tokens)

    def shown_reflection_threshold(self, observation_tokens: int) -> int:
        """The reflection threshold to display, given the current observations.

        The reflection threshold; under a shared budget
        ``max(total - message_threshold(observation_tokens), 1000)`` (§2.1).
        Reflection itself is still due at ``reflection_observation_tokens``.
        """
        if self.total_budget_tokens is None:
            _check_count(observation_tokens)
            return self.reflection_observation_tokens
        return max(
            self.total_budget_tokens - self.message_threshold(observation_tokens),
            SHARED_REFLECTION_MIN,
        )


def execution_snapshot(settings: MemorySettings, *, version: int = 0) -> ExecutionSnapshot:
    """Convert ``settings`` (percents, counts, off) to the engine's view; pure."""
    s = settings
    threshold = s.observation_threshold_tokens
    reflect = s.reflection_threshold_tokens

    buffer_tokens: float | int | None = None
    interval: int | None = None
    if s.observation_buffer_percent is not None:
        buffer_tokens = s.observation_buffer_percent / 100
        interval = percent_of(threshold, s.observation_buffer_percent)
    elif s.observation_buffer_tokens is not None:
        buffer_tokens = interval = s.observation_buffer_tokens

    activation: float | int
    if s.retained_context_percent is not None:
        activation = (100 - s.retained_context_percent) / 100
        floor = percent_of(threshold, s.retained_context_percent)
    else:
        assert s.retained_context_tokens is not None, "validation sets exactly one"
        activation = floor = s.retained_context_tokens

    obs_block, obs_block_tokens = _block_after(
        threshold, s.observation_block_after_percent, s.observation_block_after_tokens
    )
    ref_block, ref_block_tokens = _block_after(
        reflect, s.reflection_block_after_percent, s.reflection_block_after_tokens
    )
    start = s.reflection_buffer_start_percent
    return ExecutionSnapshot(
        version=version,
        observation_message_tokens=threshold,
        observation_buffer_tokens=buffer_tokens,
        observation_buffer_activation=activation,
        observation_block_after=obs_block,
        observation_activate_after_idle=s.observation_activate_after_idle,
        observation_activate_on_provider_change=s.observation_activate_on_provider_change,
        observation_observe_attachments=s.forward_attachments,
        observation_previous_observer_tokens=s.previous_observation_tokens,
        observation_instruction=s.observer_guidance,
        reflection_observation_tokens=reflect,
        reflection_buffer_activation=None if start is None else start / 100,
        reflection_block_after=ref_block,
        reflection_activate_after_idle=s.reflection_activate_after_idle,
        reflection_activate_on_provider_change=s.reflection_activate_on_provider_change,
        reflection_instruction=s.reflector_guidance,
        share_token_budget=s.shared_token_budget,
        temporal_markers=s.temporal_markers,
        retrieval_scope=s.retrieval_scope,
        buffer_interval_tokens=interval,
        retained_floor_tokens=floor,
        observation_block_after_tokens=obs_block_tokens,
        reflection_buffer_start_tokens=None if start is None else percent_of(reflect, start),
        reflection_block_after_tokens=ref_block_tokens,
        total_budget_tokens=threshold + reflect if s.shared_token_budget else None,
    )


def _block_after(
    threshold: int, percent: int | None, tokens: int | None
) -> tuple[float | int | None, int | None]:
    if percent is not None:
        return percent / 100, percent_of(threshold, percent)
    return tokens, tokens


def _check_count(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError("observation_tokens", "must be a whole number ≥ 0")


# Mastra's 'auto' idle TTLs (reference §2.1): the provider's prompt-cache lifetime.
_AUTO_TTL_BY_PROVIDER = {"deepseek": 3_600, "google": 86_400, "gemini": 86_400, "groq": 7_200}
_DEFAULT_TTL = 300
_OPENAI_SHORT_CACHE = re.compile(r"gpt-4.*|gpt-5(\.[1-4])?(-.*)?")


def auto_idle_seconds(
    provider: str, model: str, *, prompt_cache_retention: str | None = None
) -> int:
    """The idle time ``'auto'`` stands for with this provider and model, in seconds.

    Anthropic, OpenRouter, xAI and unknown providers 5 min; DeepSeek 1 h;
    Gemini 24 h; Groq 2 h; OpenAI 5 min for gpt-4*, gpt-5 and 5.1-5.4 and 1 h
    for its other models, unless ``prompt_cache_retention`` says ``"24h"``
    (1 h) or ``"in_memory"`` (5 min).
    """
    name = provider.strip().lower()
    if name == "openai":
        if prompt_cache_retention == "24h":
            return 3_600
        if prompt_cache_retention == "in_memory":
            return _DEFAULT_TTL
        return _DEFAULT_TTL if _OPENAI_SHORT_CACHE.fullmatch(model.strip().lower()) else 3_600
    return _AUTO_TTL_BY_PROVIDER.get(name, _DEFAULT_TTL)
