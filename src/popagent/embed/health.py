"""Whether an embedding model works in this process, and one warning when it does not.

Recall and the vector worker report every embedding's outcome here, by model
name. When a model fails (the local weights are missing, an endpoint is down)
recall falls back to lexical and the worker waits; the failure is logged once,
as a warning, when the model goes from working (or untried) to failing, not at
every recall. A success after a failure logs that the model is back.

Invariants: the state is per process and per model name; it never raises and
never blocks.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Literal

from .protocol import Embedder

__all__ = ["ModelHealth", "ModelState", "model_health", "record_failure", "record_success"]

log = logging.getLogger("popagent.embed")

#: ``not loaded``: not used yet in this process; ``loaded``: its last use worked;
#: ``unavailable``: its last use failed (``ModelHealth.error`` says why).
ModelState = Literal["not loaded", "loaded", "unavailable"]


@dataclass(frozen=True, slots=True)
class ModelHealth:
    """The state of one model in this process."""

    model: str
    state: ModelState
    error: str | None = None


_lock = threading.Lock()
_health: dict[str, ModelHealth] = {}


def model_health(embedder: Embedder | None) -> ModelHealth | None:
    """The state of ``embedder``'s model (``None`` without an embedder)."""
    if embedder is None:
        return None
    with _lock:
        return _health.get(embedder.model) or ModelHealth(embedder.model, "not loaded")


def record_success(model: str) -> None:
    with _lock:
        before = _health.get(model)
        if before is not None and before.state == "loaded":
            return
        _health[model] = ModelHealth(model, "loaded")
    if before is not None and before.state == "unavailable":
        log.warning("embedding model %s works again: semantic recall is back", model)


def record_failure(model: str, error: BaseException) -> None:
    """Note that ``model`` failed; warns only when it was not already failing."""
    reason = " ".join(str(error).split()) or type(error).__name__
    with _lock:
        before = _health.get(model)
        _health[model] = ModelHealth(model, "unavailable", reason)
    if before is None or before.state != "unavailable":
        log.warning(
            "embedding model %s is unavailable (%s): recall is lexical (words only) and "
            "new memories wait for their vectors until it works; set POPAGENT_EMBEDDER=none "
            "to turn semantic recall off",
            model,
            reason,
        )
