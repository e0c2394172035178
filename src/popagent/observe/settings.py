"""Observational-memory settings: the validated model and the one table that describes it.

``MemorySettings`` holds one resource's runtime settings of observational memory
the way ``popagent_memory_settings`` stores them: thresholds and absolute sizes
in tokens, relative sizes in whole percents, ``None`` for "off". ``SETTINGS``
describes every setting once (name, unit, what it accepts, help, the Mastra
option it maps to); the docs, ``popagent settings show`` and later the GUI all
read it. ``popagent.observe.snapshot`` converts the percents to the engine's
ratios.

Invariants:
- An instance satisfies every range and every exclusion of the reference
  (§2.4): it is frozen, strictly typed (no bool or float where a whole number
  is due, so no NaN or infinity), and unknown names are refused.
- Every failure is popagent's ``ValidationError`` naming one setting and what
  it accepts; pydantic's own error never escapes.
- Either-or pairs (a percent or an absolute token count) and the settings that
  exist only while async buffering is on follow the companion rules of
  ``merge_changes``, so that ``MemorySettings(**changes)`` equals the defaults
  updated with ``changes``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self, get_args

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..checks import check_text, is_blank
from ..credentials import redacted
from ..errors import ValidationError

__all__ = [
    "ATTACHMENT_PATTERNS_CAP",
    "GUIDANCE_CAP",
    "IDLE_SECONDS_MAX",
    "MIME_PATTERN",
    "RETAINED_TOKENS_MIN",
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "THRESHOLD_MIN",
    "TOKEN_CAP",
    "MemorySettings",
    "Setting",
    "SettingKind",
    "buffering_on",
    "format_setting",
    "merge_changes",
    "parse_setting",
    "settings_markdown_table",
]

#: The largest token count any setting accepts.
TOKEN_CAP = 10_000_000
#: Thresholds below this are not useful; it also keeps every resolved interval ≥ 1 token.
THRESHOLD_MIN = 100
#: Mastra reads a retention value in (1, 1000) as neither ratio nor count and throws.
RETAINED_TOKENS_MIN = 1_000
#: Seven days; 'auto' never exceeds 24 hours.
IDLE_SECONDS_MAX = 604_800
GUIDANCE_CAP = 4_000
ATTACHMENT_PATTERNS_CAP = 32
#: ``*``, ``type/*`` or ``type/subtype`` (RFC 6838 names), lower case. The migration repeats it.
MIME_PATTERN = re.compile(
    r"\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/(\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,126})"
)

_OBS_BUFFER = ("observation_buffer_percent", "observation_buffer_tokens")
_OBS_BLOCK = ("observation_block_after_percent", "observation_block_after_tokens")
_REF_BLOCK = ("reflection_block_after_percent", "reflection_block_after_tokens")
_RETAINED = ("retained_context_percent", "retained_context_tokens")
#: Either-or pairs: giving one side a value clears the other unless both are named.
_PAIRS = (_RETAINED, _OBS_BUFFER, _OBS_BLOCK, _REF_BLOCK)
#: Settings that exist only while async buffering is on (Mastra: ``bufferTokens: false``
#: turns off both phases' buffering, and ``blockAfter`` requires buffering).
_BUFFERING_DEPENDENTS = ("reflection_buffer_start_percent", *_OBS_BLOCK, *_REF_BLOCK)

IdleActivation = Annotated[int, Field(ge=1, le=IDLE_SECONDS_MAX)] | Literal["auto"] | None


class MemorySettings(BaseModel):
    """One resource's observational-memory settings; the defaults are Mastra's.

    Construct with keyword arguments (the rest take their defaults, see
    ``merge_changes``) and change with ``with_changes``; never with
    ``model_copy(update=...)``, which skips validation. Raises
    ``ValidationError`` naming the setting.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    observation_threshold_tokens: Annotated[int, Field(ge=THRESHOLD_MIN, le=TOKEN_CAP)] = 30_000
    reflection_threshold_tokens: Annotated[int, Field(ge=THRESHOLD_MIN, le=TOKEN_CAP)] = 40_000
    retained_context_percent: Annotated[int, Field(ge=0, le=99)] | None = 20
    retained_context_tokens: Annotated[int, Field(ge=RETAINED_TOKENS_MIN, le=TOKEN_CAP)] | None = (
        None
    )
    observation_buffer_percent: Annotated[int, Field(ge=1, le=99)] | None = 20
    observation_buffer_tokens: Annotated[int, Field(ge=1, le=TOKEN_CAP)] | None = None
    reflection_buffer_start_percent: Annotated[int, Field(ge=1, le=100)] | None = 50
    observation_block_after_percent: Annotated[int, Field(ge=100, le=9_999)] | None = 120
    observation_block_after_tokens: Annotated[int, Field(ge=THRESHOLD_MIN, le=TOKEN_CAP)] | None = (
        None
    )
    reflection_block_after_percent: Annotated[int, Field(ge=100, le=9_999)] | None = 120
    reflection_block_after_tokens: Annotated[int, Field(ge=THRESHOLD_MIN, le=TOKEN_CAP)] | None = (
        None
    )
    observation_activate_after_idle: IdleActivation = None
    observation_activate_on_provider_change: bool = False
    reflection_activate_after_idle: IdleActivation = None
    reflection_activate_on_provider_change: bool = False
    shared_token_budget: bool = False
    temporal_markers: bool = False
    forward_attachments: tuple[str, ...] = ("image/*", "application/pdf")
    previous_observation_tokens: Annotated[int, Field(ge=0, le=TOKEN_CAP)] | None = 2_000
    retrieval_scope: Literal["thread", "resource"] | None = None
    observer_guidance: str | None = None
    reflector_guidance: str | None = None

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except pydantic.ValidationError as exc:
            raise _popagent_error(exc) from None

    def with_changes(self, **changes: Any) -> MemorySettings:
        """These settings with ``changes`` applied (see ``merge_changes``), validated as a whole."""
        return MemorySettings(**merge_changes(self.model_dump(), changes))

    def to_json(self) -> dict[str, Any]:
        """Every setting by name; the attachment patterns as a list."""
        return self.model_dump(mode="json")

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        defaults = {name: field.default for name, field in cls.model_fields.items()}
        return merge_changes(defaults, data)

    @field_validator("forward_attachments", mode="before")
    @classmethod
    def _patterns(cls, value: Any) -> Any:
        return _check_patterns(value)

    @field_validator("observer_guidance", "reflector_guidance", mode="before")
    @classmethod
    def _guidance(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value  # None, or a type error reported by the field itself
        field = info.field_name or "guidance"
        text = check_text(field, value)
        if len(text) > GUIDANCE_CAP:
            raise ValidationError(field, f"must be at most {GUIDANCE_CAP:,} characters")
        # The credential screen, as for every other text popagent keeps: guidance is
        # stored, exported and sent to the Observer/Reflector, so a key typed into it
        # is redacted. Applied on every read as well (rows written before the screen).
        # Blank is off: whitespace, and invisible characters alone (4,000 zero-width
        # spaces show nothing, as for a fact's content, which refuses them as empty).
        return None if is_blank(text) else redacted(text)

    @model_validator(mode="after")
    def _rules(self) -> Self:
        _check_rules(self)
        return self


def buffering_on(values: Mapping[str, Any]) -> bool:
    """Whether async buffering is on: an interval is set, as a percent or in tokens."""
    return any(values.get(name) is not None for name in _OBS_BUFFER)


def merge_changes(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``changes`` and the companion rules; nothing is validated here.

    - Either-or pairs (``retained_context_*``, ``observation_buffer_*``, each
      phase's ``*_block_after_*``): giving one side a value clears the other,
      unless ``changes`` names both (then validation refuses two values).
    - Turning async buffering off clears the reflection buffer start and both
      safety bounds, unless ``changes`` names them (then validation says they
      require buffering). Turning it on restores their defaults where they are
      off and not named.
    """
    merged = {**base, **changes}
    for pair in _PAIRS:
        for one, other in (pair, pair[::-1]):
            if changes.get(one) is not None and other not in changes:
                merged[other] = None
    was_on, now_on = buffering_on(base), buffering_on(merged)
    if was_on and not now_on:
        for name in _BUFFERING_DEPENDENTS:
            if name not in changes:
                merged[name] = None
    elif now_on and not was_on:
        defaults = MemorySettings.model_fields
        start = "reflection_buffer_start_percent"
        if start not in changes and merged.get(start) is None:
            merged[start] = defaults[start].default
        for percent, tokens in (_OBS_BLOCK, _REF_BLOCK):
            unnamed = not {percent, tokens} & changes.keys()
            if unnamed and merged.get(percent) is None and merged.get(tokens) is None:
                merged[percent] = defaults[percent].default
    return merged


def _check_patterns(value: Any) -> Any:
    if value is True:
        return ("*",)
    if value is False:
        return ()
    if not isinstance(value, list | tuple):
        return value  # a type error, reported by the field
    field = "forward_attachments"
    patterns: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise ValidationError(field, f"patterns must be strings, not {type(item).__name__}")
        pattern = item.strip().lower()
        if not MIME_PATTERN.fullmatch(pattern):
            raise ValidationError(
                field, f"{item[:80]!r} is not a MIME pattern: type/subtype, type/* or *"
            )
        if pattern not in patterns:
            patterns.append(pattern)
    if len(patterns) > ATTACHMENT_PATTERNS_CAP:
        raise ValidationError(field, f"must be at most {ATTACHMENT_PATTERNS_CAP} patterns")
    return tuple(patterns)


def _check_rules(s: MemorySettings) -> None:
    """The rules across settings (reference §2.4), in the order a reader would fix them."""
    threshold = s.observation_threshold_tokens
    both = "retained_context_percent and retained_context_tokens"
    if s.retained_context_percent is None and s.retained_context_tokens is None:
        raise ValidationError("retained_context_percent", f"one of {both} must be set")
    if s.retained_context_percent is not None and s.retained_context_tokens is not None:
        raise ValidationError("retained_context_tokens", f"set only one of {both}")
    if s.retained_context_tokens is not None and s.retained_context_tokens >= threshold:
        raise ValidationError(
            "retained_context_tokens",
            f"{s.retained_context_tokens} must be below observation_threshold_tokens ({threshold})",
        )
    if s.observation_buffer_percent is not None and s.observation_buffer_tokens is not None:
        raise ValidationError(
            "observation_buffer_tokens",
            "set only one of observation_buffer_percent and observation_buffer_tokens",
        )
    if s.observation_buffer_tokens is not None and s.observation_buffer_tokens >= threshold:
        raise ValidationError(
            "observation_buffer_tokens",
            f"{s.observation_buffer_tokens} must resolve below observation_threshold_tokens "
            f"({threshold})",
        )
    on = buffering_on(s.__dict__)
    if s.shared_token_budget and on:
        raise ValidationError(
            "shared_token_budget",
            "shared_token_budget and async buffering (observation_buffer_percent / "
            "observation_buffer_tokens) are mutually exclusive: turn buffering off with "
            "observation_buffer_percent=off in the same change",
        )
    if not on:
        for name in _BUFFERING_DEPENDENTS:
            if getattr(s, name) is not None:
                raise ValidationError(
                    name,
                    "requires async buffering (observation_buffer_percent or "
                    "observation_buffer_tokens); set it to off while buffering is off",
                )
        return
    if s.reflection_buffer_start_percent is None:
        raise ValidationError(
            "reflection_buffer_start_percent", "must be set while async buffering is on"
        )
    for (percent, tokens), limit, limit_name in (
        (_OBS_BLOCK, threshold, "observation_threshold_tokens"),
        (_REF_BLOCK, s.reflection_threshold_tokens, "reflection_threshold_tokens"),
    ):
        p, t = getattr(s, percent), getattr(s, tokens)
        if p is None and t is None:
            raise ValidationError(
                percent, f"one of {percent} and {tokens} must be set while async buffering is on"
            )
        if p is not None and t is not None:
            raise ValidationError(tokens, f"set only one of {percent} and {tokens}")
        if t is not None and t < limit:
            raise ValidationError(tokens, f"{t} must be at least {limit_name} ({limit})")


def _popagent_error(exc: pydantic.ValidationError) -> ValidationError:
    """The first of pydantic's errors as popagent's, naming the setting and what it accepts."""
    error = exc.errors(include_url=False)[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ValidationError):
        return cause
    loc = error["loc"]
    name = str(loc[0])[:80] if loc else "settings"
    if error["type"] == "extra_forbidden":
        return ValidationError(
            name, "is not a memory setting (`popagent settings show` lists them)"
        )
    setting = SETTINGS_BY_NAME.get(name)
    if setting is None:
        return ValidationError(name, str(error["msg"]))
    value = error.get("input")
    got = ""
    if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 40):
        got = f" (got {value!r})"
    elif value is not None and setting.kind != "text":
        got = f" (got {type(value).__name__})"
    return ValidationError(name, f"must be {setting.accepts}{got}")


# --- the declarative table -------------------------------------------------------------------

SettingKind = Literal["tokens", "percent", "idle", "bool", "attachments", "scope", "text"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting as documented and shown: the table row the docs, CLI and GUI share."""

    name: str
    kind: SettingKind
    unit: str
    #: What the setting accepts, limits included; error messages read "must be <accepts>".
    accepts: str
    help: str
    #: The Mastra option it maps to, and how.
    mastra: str

    @property
    def default(self) -> Any:
        return MemorySettings.model_fields[self.name].default

    @property
    def nullable(self) -> bool:
        """Whether ``off`` (``None``) is a value of this setting."""
        return _accepts_none(self.name)


def _accepts_none(name: str) -> bool:
    return type(None) in get_args(MemorySettings.model_fields[name].annotation)


def _tokens(low: str) -> str:
    return f"a whole number of tokens from {low} to {TOKEN_CAP:,}"


_NEEDS_BUFFERING = "; off while async buffering is off"

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "observation_threshold_tokens",
        "tokens",
        "tokens",
        _tokens(f"{THRESHOLD_MIN:,}"),
        "Observation is due when a thread's unobserved message tokens reach this many.",
        "`observation.messageTokens`",
    ),
    Setting(
        "reflection_threshold_tokens",
        "tokens",
        "tokens",
        _tokens(f"{THRESHOLD_MIN:,}"),
        "Reflection is due when the thread's observations reach this many tokens.",
        "`reflection.observationTokens`",
    ),
    Setting(
        "retained_context_percent",
        "percent",
        "% of observation_threshold_tokens",
        "a whole percent from 0 to 99, or off while retained_context_tokens is set",
        "Recent raw context kept after observation, as a share of the observation threshold "
        "(20% keeps 6,000 of 30,000 tokens). Setting it turns retained_context_tokens off.",
        "`observation.bufferActivation` = 1 - p/100 (the share removed)",
    ),
    Setting(
        "retained_context_tokens",
        "tokens",
        "tokens",
        f"off, or a whole number of tokens from {RETAINED_TOKENS_MIN:,} to below "
        "observation_threshold_tokens",
        "Recent raw context kept, as a token count instead of a percent. Setting it turns "
        "retained_context_percent off.",
        "`observation.bufferActivation` as an absolute count (≥ 1000)",
    ),
    Setting(
        "observation_buffer_percent",
        "percent",
        "% of observation_threshold_tokens",
        "off, or a whole percent from 1 to 99",
        "Async buffering interval: the Observer runs in the background each time this share of "
        "the threshold accumulates. With observation_buffer_tokens also off, async buffering is "
        "off for observations and reflections.",
        "`observation.bufferTokens` = p/100; off = `false`",
    ),
    Setting(
        "observation_buffer_tokens",
        "tokens",
        "tokens",
        "off, or a whole number of tokens from 1 to below observation_threshold_tokens",
        "Async buffering interval as a token count instead of a percent. Setting it turns "
        "observation_buffer_percent off.",
        "`observation.bufferTokens` as an absolute count",
    ),
    Setting(
        "reflection_buffer_start_percent",
        "percent",
        "% of reflection_threshold_tokens",
        "a whole percent from 1 to 100" + _NEEDS_BUFFERING,
        "A background reflection starts when observations reach this share of the reflection "
        "threshold (50% starts at 20,000 of 40,000 tokens).",
        "`reflection.bufferActivation` = p/100",
    ),
    Setting(
        "observation_block_after_percent",
        "percent",
        "% of observation_threshold_tokens",
        "a whole percent from 100 to 9,999, or off while observation_block_after_tokens is set"
        + _NEEDS_BUFFERING,
        "Safety bound: above this many pending message tokens the turn observes synchronously "
        "when buffered observations cannot cover them.",
        "`observation.blockAfter` = p/100 (120% → 1.2)",
    ),
    Setting(
        "observation_block_after_tokens",
        "tokens",
        "tokens",
        f"off, or a whole number of tokens from observation_threshold_tokens to {TOKEN_CAP:,}"
        + _NEEDS_BUFFERING,
        "The observation safety bound as a token count instead of a percent.",
        "`observation.blockAfter` as an absolute count",
    ),
    Setting(
        "reflection_block_after_percent",
        "percent",
        "% of reflection_threshold_tokens",
        "a whole percent from 100 to 9,999, or off while reflection_block_after_tokens is set"
        + _NEEDS_BUFFERING,
        "Safety bound: above this many observation tokens reflection runs synchronously when no "
        "buffered reflection is ready.",
        "`reflection.blockAfter` = p/100 (120% → 1.2)",
    ),
    Setting(
        "reflection_block_after_tokens",
        "tokens",
        "tokens",
        f"off, or a whole number of tokens from reflection_threshold_tokens to {TOKEN_CAP:,}"
        + _NEEDS_BUFFERING,
        "The reflection safety bound as a token count instead of a percent.",
        "`reflection.blockAfter` as an absolute count",
    ),
    Setting(
        "observation_activate_after_idle",
        "idle",
        "seconds",
        f"off, auto, or a whole number of seconds from 1 to {IDLE_SECONDS_MAX:,} (7 days)",
        "Activate buffered observations early once the thread has been idle this long since the "
        "last assistant activity (the prompt cache has expired anyway); auto uses the provider's "
        "cache lifetime.",
        "`observation.activateAfterIdle` (milliseconds there)",
    ),
    Setting(
        "observation_activate_on_provider_change",
        "bool",
        "",
        "true or false",
        "Activate buffered observations early when the next step uses another provider/model "
        "than the last assistant step (a changed model has no prompt cache).",
        "`observation.activateOnProviderChange`",
    ),
    Setting(
        "reflection_activate_after_idle",
        "idle",
        "seconds",
        f"off, auto, or a whole number of seconds from 1 to {IDLE_SECONDS_MAX:,} (7 days)",
        "Reflections opt in separately: activate a buffered reflection early after this idle time.",
        "`reflection.activateAfterIdle` (never inherited)",
    ),
    Setting(
        "reflection_activate_on_provider_change",
        "bool",
        "",
        "true or false",
        "Reflections opt in separately: activate a buffered reflection early on a provider change.",
        "`reflection.activateOnProviderChange` (never inherited)",
    ),
    Setting(
        "shared_token_budget",
        "bool",
        "",
        "true or false; true only while async buffering is off",
        "One budget of observation_threshold_tokens + reflection_threshold_tokens: raw messages "
        "may use what observations do not. Excludes async buffering.",
        "`shareTokenBudget`",
    ),
    Setting(
        "temporal_markers",
        "bool",
        "",
        "true or false",
        "Before a user message that follows a gap of 10 minutes or more, store a marker such as "
        "'2 hours 5 minutes later'.",
        "`temporalMarkers`",
    ),
    Setting(
        "forward_attachments",
        "attachments",
        "MIME patterns",
        f"true (all), false (none), or up to {ATTACHMENT_PATTERNS_CAP} comma-separated MIME "
        "patterns: type/subtype, type/* or *",
        "Which image and file attachments go to the Observer beside their placeholders; "
        "matching ignores case.",
        "`observation.observeAttachments` (true = `*`, false = none)",
    ),
    Setting(
        "previous_observation_tokens",
        "tokens",
        "tokens",
        "off, or " + _tokens("0"),
        "Token budget for the previous observations shown to the Observer: 0 omits them, off "
        "shows them all untruncated.",
        "`observation.previousObserverTokens`; off = `false`",
    ),
    Setting(
        "retrieval_scope",
        "scope",
        "",
        "off, thread or resource",
        "Exact-history retrieval through observation-group pointers: off, this thread only, or "
        "every chat of the same resource (never another resource's).",
        "`retrieval` with `scope`; off = `false`",
    ),
    Setting(
        "observer_guidance",
        "text",
        "characters",
        f"off, or text of at most {GUIDANCE_CAP:,} characters without NUL (blank text, "
        "zero-width characters alone included, is off)",
        "Custom guidance appended to the Observer's instructions (credentials in it are "
        "redacted, as in every text popagent keeps).",
        "`observation.instruction`",
    ),
    Setting(
        "reflector_guidance",
        "text",
        "characters",
        f"off, or text of at most {GUIDANCE_CAP:,} characters without NUL (blank text, "
        "zero-width characters alone included, is off)",
        "Custom guidance appended to the Reflector's instructions (credentials in it are "
        "redacted, as in every text popagent keeps).",
        "`reflection.instruction`",
    ),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


# --- text forms, for the CLI, the docs and later the GUI -------------------------------------

_OFF = frozenset({"off", "none", "null"})
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_INT = re.compile(r"\d{1,3}(?:[_,]?\d{3})*|\d+")
_DURATION = re.compile(r"(\d+)\s*(s|sec|m|min|h|hr|d)?")
_SECONDS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400}


def parse_setting(name: str, text: str) -> Any:
    """The value that ``text`` (as typed after ``NAME=``) means for setting ``name``.

    ``off`` means ``None`` where that is a value; whole numbers may group digits
    with ``_`` or ``,``; percents may end in ``%``; idle times may end in ``s``,
    ``m``, ``h`` or ``d``. Ranges and rules are left to ``MemorySettings``.
    """
    setting = SETTINGS_BY_NAME.get(name)
    if setting is None:
        raise ValidationError(
            name[:80] or "name", "is not a memory setting (`popagent settings show` lists them)"
        )
    raw = text.strip()
    word = raw.lower()
    if setting.nullable and (word in _OFF or (setting.kind == "text" and not word)):
        return None
    if setting.kind == "text":
        return text
    if setting.kind in ("tokens", "percent"):
        digits = word.removesuffix("%").strip() if setting.kind == "percent" else word
        if _INT.fullmatch(digits):
            return int(digits.replace("_", "").replace(",", ""))
    elif setting.kind == "idle":
        if word == "auto":
            return "auto"
        match = _DURATION.fullmatch(word)
        if match:
            return int(match.group(1)) * _SECONDS[match.group(2)]
    elif setting.kind == "bool":
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
    elif setting.kind == "attachments":
        if word in _TRUE or word in {"all", "*"}:
            return True
        if word in _FALSE or word in {"", "none"}:
            return False
        return tuple(p.strip() for p in raw.split(","))
    elif setting.kind == "scope" and word in ("thread", "resource"):
        return word
    raise ValidationError(name, f"must be {setting.accepts} (got {raw[:40]!r})")


def format_setting(name: str, value: Any) -> str:
    """``value`` as ``popagent settings set`` would take it back (``parse_setting``)."""
    if value is None:
        return "off"
    if isinstance(value, bool):
        return "true" if value else "false"
    if name == "forward_attachments":
        return "false" if value == () else "true" if value == ("*",) else ",".join(value)
    return str(value)


def settings_markdown_table() -> str:
    """The settings table of ``docs/observational-memory.md`` (a test keeps them equal)."""
    lines = [
        "| setting | default | unit | accepts | meaning | Mastra |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        default = f"`{format_setting(s.name, s.default)}`"
        lines.append(
            f"| `{s.name}` | {default} | {s.unit or '-'} | {s.accepts} | {s.help} | {s.mastra} |"
        )
    return "\n".join(lines) + "\n"
