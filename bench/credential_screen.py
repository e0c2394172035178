"""How often the credential screen fires on ordinary conversation, and how fast it is.

Runs ``popagent.credentials.find_credentials`` over every LoCoMo turn (its text
and image caption), every generated session summary and observation
(``locomo10.json``, read in place from ``../shared/benchdata``, never copied),
and reports the number of texts, characters, redactions (each with its kind
and the text around it) and the throughput. Ordinary conversation should give
(nearly) zero redactions; the image URLs' ``?token=`` JWTs, which LoCoMo does
hold, are counted apart as a check that the screen does fire on real tokens.

Usage: python bench/credential_screen.py [--data PATH] [--show N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from popagent.credentials import find_credentials

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/benchdata/locomo10.json"


def conversation_texts(data: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(source, text) for every turn text, caption, session summary and observation."""
    for conv in data:
        for key, session in conv["conversation"].items():
            if not (key.startswith("session_") and isinstance(session, list)):
                continue
            for turn in session:
                yield "turn", str(turn.get("text") or "")
                if turn.get("blip_caption"):
                    yield "caption", str(turn["blip_caption"])
        for summary in (conv.get("session_summary") or {}).values():
            yield "summary", str(summary)
        for observed in (conv.get("observation") or {}).values():
            for facts in observed.values():
                for fact in facts:
                    yield "observation", str(fact[0])


def image_urls(data: list[dict[str, Any]]) -> Iterator[str]:
    for conv in data:
        for key, session in conv["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                for turn in session:
                    yield from (str(u) for u in turn.get("img_url") or [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo10.json")
    parser.add_argument("--show", type=int, default=20, help="redactions to print")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(f"no LoCoMo data at {args.data}", file=sys.stderr)
        return 2
    data = json.loads(args.data.read_text())
    texts = list(conversation_texts(data))
    began = time.perf_counter()
    hits: list[tuple[str, str, str]] = []
    for source, text in texts:
        for finding in find_credentials(text):
            lo, hi = max(0, finding.start - 40), finding.end + 40
            hits.append((source, finding.kind, text[lo:hi]))
    seconds = time.perf_counter() - began
    chars = sum(len(t) for _, t in texts)
    by_source = Counter(source for source, _ in texts)
    print(f"texts: {len(texts)} ({', '.join(f'{k} {v}' for k, v in by_source.items())})")
    print(f"characters: {chars}; screened at {chars / seconds / 1e6:.2f} MB/s")
    print(f"redactions in ordinary conversation: {len(hits)}")
    for kind, count in Counter(kind for _, kind, _ in hits).most_common():
        print(f"  {kind}: {count}")
    for source, kind, around in hits[: args.show]:
        print(f"  [{source}] {kind}: {around!r}")
    urls = list(image_urls(data))
    with_token = [u for u in urls if "token=" in u]
    caught = sum(1 for u in with_token if find_credentials(u))
    print(f"image URLs with a ?token= JWT: {len(with_token)}, redacted: {caught}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
