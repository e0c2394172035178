"""``RecallReport``: a recall's results with which mode ran and why.

The recall preview (GUI and ``POST /api/recall``), ``popagent recall
--explain`` and MCP's ``recall`` show it, so a user can tell semantic recall
from lexical and see what holds semantic recall back: no model, a model that
failed to load, or memories whose vectors are still being written.
``describe`` is pure: the sentence it writes depends only on its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..embed.health import ModelState
from ..models import RecallResult

__all__ = ["RecallMode", "RecallReport", "describe"]

#: ``lexical``: the spec's ranking; ``vector``: the vector index alone;
#: ``fused``: both (the default when there is an embedder).
RecallMode = Literal["lexical", "vector", "fused"]


@dataclass(frozen=True, slots=True)
class RecallReport:
    """What ``recall_report`` found and how.

    ``mode`` is the mode that ran; ``requested`` the one asked for (``None``:
    the default). ``model`` and ``model_state`` describe the embedding model
    (``None`` without one); ``pending`` counts the resource's memories whose
    vectors are not written yet (found by their words only until they are);
    ``reason`` says all of it in one sentence.
    """

    results: list[RecallResult]
    mode: RecallMode
    requested: RecallMode | None
    model: str | None
    model_state: ModelState | None
    model_error: str | None
    pending: int
    reason: str

    def to_json(self) -> dict[str, object]:
        """Everything but the results, as the API and ``--json`` show it."""
        return {
            "mode": self.mode,
            "requested": self.requested,
            "model": self.model,
            "model_state": self.model_state,
            "model_error": self.model_error,
            "pending_vectors": self.pending,
            "reason": self.reason,
        }


def describe(
    mode: RecallMode,
    requested: RecallMode | None,
    model: str | None,
    model_state: ModelState | None,
    model_error: str | None,
    pending: int,
) -> str:
    """One sentence: which mode ran, and why."""
    if model is None:
        return (
            "lexical (words only): semantic recall is off, there is no embedding model "
            "(POPAGENT_EMBEDDER=none, or connect(embedder=None))"
        )
    if mode == "lexical" and requested == "lexical":
        return f"lexical (words only), as asked; the embedding model is {model}"
    if mode == "lexical":
        why = f": {model_error}" if model_error else ""
        return (
            f"lexical (words only): the embedding model {model} is unavailable{why}; "
            "memories are found by their words until it works"
        )
    what = "words and meaning" if mode == "fused" else "meaning only (the vector index)"
    text = f"{mode} ({what}) with the embedding model {model}"
    if pending:
        many = "memory waits" if pending == 1 else "memories wait"
        text += (
            f"; {pending:,} {many} for vectors (written in the background) and "
            "can be found by words only until then"
        )
    else:
        text += "; every memory has its vectors"
    return text
