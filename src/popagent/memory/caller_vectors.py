"""Vectors a caller made with its own model, and expiry extended by a read.

For framework stores that bring their own embeddings (LangGraph's ``index=``):
the caller embeds, popagent keeps the vectors (``store.caller_vectors``) under a
model name of the caller's (``caller:...``) and scores a query vector against
them. Part of ``LongTermMemory`` (``memory.longterm``); each function checks its
input completely, then runs in one transaction, so a call that raises changed
nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..checks import check_text
from ..errors import ValidationError
from ..store import caller_vectors as store
from ..store.caller_vectors import CALLER_MODEL_PREFIX, DISTANCES, Distance
from .base import MemoryBase, check_memory_id
from .validation import check_id

__all__ = [
    "MAX_CALLER_VECTORS",
    "MAX_DIMENSIONS",
    "MAX_MODEL_CHARS",
    "caller_vector_scores",
    "check_model",
    "check_vector",
    "extend_expiry",
    "write_caller_vectors",
]

#: Vectors of one memory (one per embedded field); the chunk column is a smallint.
MAX_CALLER_VECTORS = 1_000
#: pgvector's (and migration 0009's) largest dimension.
MAX_DIMENSIONS = 16_000
MAX_MODEL_CHARS = 200
#: pgvector keeps float32: a magnitude from here up rounds to infinity there, and is
#: refused (below it, a number rounds to float32's largest, 3.4028235e38, at most).
FLOAT32_LIMIT = 2.0**128 - 2.0**103


def check_model(model: object, field: str = "model") -> str:
    """A caller's model name: ``caller:`` and at least one more character, at most
    ``MAX_MODEL_CHARS``, text PostgreSQL can store."""
    if (
        not isinstance(model, str)
        or not model.startswith(CALLER_MODEL_PREFIX)
        or len(model) <= len(CALLER_MODEL_PREFIX)
        or len(model) > MAX_MODEL_CHARS
    ):
        raise ValidationError(
            field,
            f"must start with {CALLER_MODEL_PREFIX!r} and be at most {MAX_MODEL_CHARS} characters",
        )
    return check_text(field, model)


def check_vector(vector: object, field: str, dimensions: int | None = None) -> list[float]:
    """``vector`` as floats: 1 to ``MAX_DIMENSIONS`` finite numbers that float32 holds
    (``dimensions`` of them when given); ``ValidationError`` naming ``field``."""
    if isinstance(vector, str | bytes) or not isinstance(vector, Sequence):
        raise ValidationError(field, "must be a list of numbers")
    if len(vector) > MAX_DIMENSIONS:
        raise ValidationError(field, f"must have 1 to {MAX_DIMENSIONS} dimensions")
    values: list[float] = []
    for x in vector:
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise ValidationError(field, "must hold finite numbers only")
        try:
            value = float(x)
        except OverflowError:  # an integer beyond a double
            value = math.inf
        if not abs(value) < FLOAT32_LIMIT:  # also NaN and the infinities
            raise ValidationError(
                field, f"must hold finite numbers of magnitude below {FLOAT32_LIMIT:.8g}"
            )
        values.append(value)
    if not 1 <= len(values) <= MAX_DIMENSIONS:
        raise ValidationError(field, f"must have 1 to {MAX_DIMENSIONS} dimensions")
    if dimensions is not None and len(values) != dimensions:
        raise ValidationError(
            field, f"has {len(values)} dimensions where {dimensions} are expected"
        )
    return values


async def write_caller_vectors(
    self: MemoryBase,
    resource_id: str,
    memory_id: int,
    content_sha256: str,
    model: str,
    vectors: Sequence[Sequence[float]],
) -> int:
    """Make ``vectors`` the fact's vectors of ``model`` (a ``caller:`` name); an empty
    list deletes them. They are written only while the fact still holds the content
    whose SHA-256 is ``content_sha256``; how many were written."""
    resource_id = check_id("resource_id", resource_id)
    memory_id = check_memory_id(memory_id, "memory_id")
    model = check_model(model)
    if len(vectors) > MAX_CALLER_VECTORS:
        raise ValidationError("vectors", f"at most {MAX_CALLER_VECTORS} per memory")
    checked = [check_vector(v, "vectors") for v in vectors]
    if len({len(v) for v in checked}) > 1:
        raise ValidationError("vectors", "must all have the same dimensions")
    async with self._pool.connection() as conn, conn.transaction():
        return await store.replace_caller_vectors(
            conn, resource_id, memory_id, content_sha256, model, checked
        )


async def caller_vector_scores(
    self: MemoryBase,
    resource_id: str,
    model: str,
    query: Sequence[float],
    *,
    distance: Distance = "cosine",
    ids: Sequence[int],
) -> dict[int, float]:
    """Each of the memories ``ids`` that has ``model`` vectors, with the similarity of
    its nearest to ``query`` (``distance``: ``cosine``, ``inner_product``, or ``l2``,
    reported as the negative distance); higher is nearer."""
    resource_id = check_id("resource_id", resource_id)
    model = check_model(model)
    if distance not in DISTANCES:
        raise ValidationError("distance", f"must be one of {sorted(DISTANCES)}")
    vector = check_vector(query, "query")
    async with self._pool.connection() as conn:
        return await store.vector_scores(
            conn, resource_id, model, vector, distance, [check_memory_id(i) for i in ids]
        )


async def extend_expiry(self: MemoryBase, resource_id: str, minutes: Mapping[int, float]) -> int:
    """Move the expiry of each fact ``id`` in ``minutes`` to that many minutes from now,
    where the fact still lives and has an expiry; how many moved. The fact's value
    and version stay as they are (a read that refreshes a TTL is not an edit)."""
    resource_id = check_id("resource_id", resource_id)
    checked: dict[int, float] = {}
    for memory_id, span in minutes.items():
        if isinstance(span, bool) or not isinstance(span, int | float) or not span > 0:
            raise ValidationError("minutes", "must be positive numbers")
        if not math.isfinite(span):
            raise ValidationError("minutes", "must be finite")
        checked[check_memory_id(memory_id)] = float(span)
    async with self._pool.connection() as conn, conn.transaction():
        return await store.extend_expiry(conn, resource_id, checked)
