"""How to reach a chat model: one frozen value, read from the environment.

Any server that speaks the OpenAI Chat Completions API works: OpenAI itself
(``https://api.openai.com/v1``, the default), vLLM (``http://HOST:8000/v1``),
Ollama (``http://localhost:11434/v1``) and the llama.cpp server
(``http://HOST:8080/v1``). Local servers ignore the API key, so it may be
unset.

Environment variables::

    POPAGENT_MODEL_BASE_URL     base URL of the API (default: OpenAI's)
    POPAGENT_MODEL              model name, e.g. gpt-4o-mini, llama3.1
    POPAGENT_MODEL_API_KEY      API key; falls back to OPENAI_API_KEY
    POPAGENT_MODEL_TIMEOUT      seconds to wait for data (default 60)
    POPAGENT_MODEL_MAX_RETRIES  retries of a transient failure (default 3)

Invariants: a ``ModelSettings`` always holds a usable base URL, a model name,
positive timeouts and a non-negative retry count; the API key never appears
in its ``repr`` (and so never in a log line or a traceback that prints it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from popagent.defaults import (
    MODEL_API_KEY_ENV,
    MODEL_BASE_URL_ENV,
    MODEL_ENV,
    MODEL_MAX_RETRIES_ENV,
    MODEL_TIMEOUT_ENV,
    OPENAI_API_KEY_ENV,
)
from popagent.errors import ValidationError

__all__ = ["DEFAULT_BASE_URL", "ModelSettings"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True, slots=True, repr=False)
class ModelSettings:
    """Where the model is, how long to wait for it and how often to retry.

    ``timeout_s`` bounds each wait for data (for a stream, the gap between
    chunks, not the whole reply); ``connect_timeout_s`` bounds opening the
    connection. A call makes at most ``1 + max_retries`` requests, sleeping
    ``backoff_initial_s * 2**n`` (jittered, at most ``backoff_max_s``) between
    them.
    """

    base_url: str
    api_key: str | None
    model: str
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    max_retries: int = 3
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 8.0
    temperature: float | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError("base_url", f"must be an http(s) URL: {self.base_url!r}")
        if not self.model.strip():
            raise ValidationError("model", "must name the model")
        for name, value in (
            ("timeout_s", self.timeout_s),
            ("connect_timeout_s", self.connect_timeout_s),
        ):
            if not (math.isfinite(value) and value > 0):
                raise ValidationError(name, f"must be a positive number of seconds: {value!r}")
        for name, value in (
            ("backoff_initial_s", self.backoff_initial_s),
            ("backoff_max_s", self.backoff_max_s),
        ):
            if not (math.isfinite(value) and value >= 0):
                raise ValidationError(name, f"must be a non-negative number of seconds: {value!r}")
        if self.max_retries < 0:
            raise ValidationError("max_retries", f"must not be negative: {self.max_retries}")
        if self.temperature is not None and not (0 <= self.temperature <= 2):
            raise ValidationError("temperature", f"must be between 0 and 2: {self.temperature}")

    def __repr__(self) -> str:
        key = None if self.api_key is None else "'***'"
        return (
            f"ModelSettings(base_url={self.base_url!r}, api_key={key}, model={self.model!r}, "
            f"timeout_s={self.timeout_s!r}, connect_timeout_s={self.connect_timeout_s!r}, "
            f"max_retries={self.max_retries!r}, backoff_initial_s={self.backoff_initial_s!r}, "
            f"backoff_max_s={self.backoff_max_s!r}, temperature={self.temperature!r})"
        )

    @property
    def provider(self) -> str:
        """The base URL's host and port: a short name of where requests go."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        # Bracket IPv6 literals again so "host:port" stays unambiguous.
        if ":" in host:
            host = f"[{host}]"
        return host if parts.port is None else f"{host}:{parts.port}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ModelSettings | None:
        """Settings from the environment; ``None`` when no model is configured.

        No model is configured when neither a base URL nor a model name is
        set. A base URL without a model name is an error rather than a guess,
        because servers disagree on which name they accept.
        """

        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        base_url = get(MODEL_BASE_URL_ENV)
        model = get(MODEL_ENV)
        if base_url is None and model is None:
            return None
        if model is None:
            raise ValidationError(
                MODEL_ENV, f"must name the model when {MODEL_BASE_URL_ENV} is set"
            )
        api_key = get(MODEL_API_KEY_ENV) or get(OPENAI_API_KEY_ENV)
        timeout_s = _seconds(MODEL_TIMEOUT_ENV, get(MODEL_TIMEOUT_ENV), default=60.0)
        max_retries = _count(MODEL_MAX_RETRIES_ENV, get(MODEL_MAX_RETRIES_ENV), default=3)
        try:
            return cls(
                base_url=(base_url or DEFAULT_BASE_URL).rstrip("/"),
                api_key=api_key,
                model=model,
                timeout_s=timeout_s,
                max_retries=max_retries,
            )
        except ValidationError as exc:
            # Name the variable the user set, not the dataclass field.
            if exc.field == "base_url":
                raise ValidationError(MODEL_BASE_URL_ENV, exc.message) from None
            raise


def _seconds(variable: str, raw: str | None, *, default: float) -> float:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError(variable, f"must be a number of seconds: {raw!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValidationError(variable, f"must be a positive number of seconds: {raw!r}")
    return value


def _count(variable: str, raw: str | None, *, default: int) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError(variable, f"must be a whole number: {raw!r}") from None
    if value < 0:
        raise ValidationError(variable, f"must not be negative: {raw!r}")
    return value
