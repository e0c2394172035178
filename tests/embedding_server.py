"""A scripted OpenAI-compatible ``POST /v1/embeddings`` server for tests.

Serves on 127.0.0.1 from a background thread, in the real wire format, so the
real ``OpenAIEmbedder`` runs against it. Vectors are deterministic and
meaningful enough to test semantic recall: each word (lower-cased ``\\w+``) is
mapped through ``concepts`` (``{"wedding": "marriage", "married":
"marriage"}``) and hashed to one of ``dimensions`` axes; a text's vector is
its words' axes counted, left unnormalized (the client must normalize).
Texts sharing a concept are therefore similar without sharing a word.

``fail_next(status)`` makes the next requests fail with that HTTP status;
every request body is kept in ``requests``. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from tests.background_server import BackgroundServer, OwnedHTTPServer, QuietHandler

__all__ = ["EmbeddingServer", "concept_vector"]

WORD = re.compile(r"\w+")


def concept_vector(text: str, dimensions: int, concepts: Mapping[str, str]) -> list[float]:
    """The server's vector for ``text`` (see the module docstring)."""
    vector = [0.0] * dimensions
    for word in WORD.findall(text.lower()):
        concept = concepts.get(word, word)
        axis = int.from_bytes(hashlib.sha256(concept.encode()).digest()[:4], "big") % dimensions
        vector[axis] += 1.0
    if not any(vector):
        vector[0] = 1.0
    return vector


class EmbeddingServer(BackgroundServer):
    """``with EmbeddingServer(dimensions=64) as server: OpenAIEmbedder("m", base_url=server.base_url)``."""

    def __init__(self, *, dimensions: int = 64, concepts: Mapping[str, str] | None = None) -> None:
        self.dimensions = dimensions
        self.concepts = dict(concepts or {})
        self.requests: list[dict[str, Any]] = []
        self._failures: list[int] = []
        self._lock = threading.Lock()
        super().__init__(OwnedHTTPServer(self, _Handler, join_handlers=False))

    def fail_next(self, status: int, times: int = 1) -> None:
        with self._lock:
            self._failures.extend([status] * times)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            if self._failures:
                status = self._failures.pop(0)
                return status, {"error": {"message": "scripted failure", "type": "server_error"}}
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dimensions = int(body.get("dimensions") or self.dimensions)
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": concept_vector(text, dimensions, self.concepts),
            }
            for i, text in enumerate(texts)
        ]
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return 200, {"object": "list", "model": body["model"], "data": data, "usage": usage}


class _Handler(QuietHandler):
    server: OwnedHTTPServer[EmbeddingServer]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/") != "/v1/embeddings":
            status, answer = 404, {"error": {"message": "not found"}}
        else:
            status, answer = self.server.owner.answer(body)
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
