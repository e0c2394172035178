"""Recall quality on both kinds of data, side by side: LoCoMo and the implicit questions.

LoCoMo (``bench/locomo.py``) asks questions that repeat the conversation's
words; the implicit set (``bench/implicit.py``) asks questions that need a
memory without naming it. A ranking change can win on one and lose on the
other, so this program reports both in one table.

Two modes:

``python bench/quality.py [--embedder local|e5|none|openai]``
    Runs both benchmarks through the library (``recall`` as a user calls it),
    in one disposable cluster, and prints one table: per system (BM25 in the
    same run, lexical, vector, fused), the implicit set's top-8 hit rate per
    split and part and LoCoMo's evidence R@8 per category, with recall latency.

``python bench/quality.py --sweep [--captures PATH]``
    Tunes ranking offline. Recall's candidates (the lexical statistics, the
    lexical candidates and the vector index's nearest, as ``memory.recall``
    fetches them) are captured once per question; every variant in
    ``VARIANTS`` then re-ranks the same candidates with the pure ``rank``, so a
    grid of parameters costs seconds. ``--captures`` keeps the capture in a file
    (pickle, made by this program) for later runs. Dev data chooses parameters:
    the implicit ``dev`` split and LoCoMo's first three conversations; the
    implicit ``check`` split and the other seven conversations are reported
    beside them and chose nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import implicit
import locomo
import popagent
import relevance
from embedders import CHOICES, embedder_named
from popagent import LongTermMemory
from popagent.embed import Embedder
from popagent.memory.ranking import DEFAULT_WEIGHTS, RankingWeights, emphasised_lexemes, rank
from popagent.memory.recall import candidate_idfs, recall_pool
from popagent.memory.temporal import TimeWindow, query_window
from popagent.models import Candidate, CorpusStats, Memory, MemoryFilter, RecallResult
from popagent.store import recall as recall_sql
from popagent.store import vectors as vector_store
from popagent.store.embedded import EmbeddedServer

LOCOMO_DEV = 3  # LoCoMo's first three conversations are its dev part


# --- the library run --------------------------------------------------------------------


async def run_both(
    url: str,
    embedder: Embedder | None,
    stores: list[implicit.Store],
    conversations: list[locomo.Conversation],
) -> tuple[dict[str, Any], dict[str, Any]]:
    implicit_out = await implicit.evaluate(url, stores, embedder)
    locomo_out = await locomo.evaluate(url, conversations, embedder)
    return implicit_out, locomo_out


def combined_table(implicit_out: dict[str, Any], locomo_out: dict[str, Any]) -> str:
    """One row per system: implicit top-8 per split and part, LoCoMo R@8 per category."""
    parts = [
        (e["split"], e["part"])
        for e in implicit_out["summary"]
        if e["part"] in implicit.PARTS or e["part"] == "all"
    ]
    head = ["system", *(f"{split} {part}" for split, part in parts)]
    head += [f"LoCoMo {c['category']}" for c in locomo_out["summary"]]
    head += ["implicit p50/p95 ms", "LoCoMo p50/p95 ms"]
    by_part = {(e["split"], e["part"]): e for e in implicit_out["summary"]}
    cells = []
    for system in implicit_out["systems"]:
        row = [system]
        row += [f"{by_part[p][system]['hit@8']:.3f}" for p in parts]
        row += [f"{c[system][8]:.3f}" for c in locomo_out["summary"]]
        for out in (implicit_out, locomo_out):
            lat = out["recall_ms"].get(system)
            row.append(f"{lat['p50']:.1f}/{lat['p95']:.1f}" if lat else "")
        cells.append(row)
    return implicit.table(head, cells)


# --- capture and replay -----------------------------------------------------------------


@dataclass
class Capture:
    """One question's recall candidates and how to judge a ranking of them."""

    dataset: str  # "implicit" or "locomo"
    split: str  # "dev" or "check"
    group: str  # implicit part, or LoCoMo category
    query: str
    now: datetime
    limit: int
    stats: CorpusStats
    window: TimeWindow | None
    lexical: list[Candidate]
    vector: list[Candidate]
    answers: frozenset[int]  # implicit: the memories that answer
    evidence: frozenset[str]  # LoCoMo: the dia_ids to cover
    covers: dict[int, frozenset[str]]  # LoCoMo: memory id -> dia_ids
    #: LoCoMo: memory id -> the episodes before and after it in its session.
    adjacent: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: The query's cosines to the resource's newest memories (``vector_store.background``).
    background: list[float] = field(default_factory=list)
    #: Relevance set: the memories a result may be without counting as unrelated.
    allowed: frozenset[int] = frozenset()


async def capture_one(
    memory: LongTermMemory, resource: str, query: str, now: datetime, pool: int
) -> tuple[CorpusStats, TimeWindow | None, list[Candidate], list[Candidate], list[float]]:
    """The candidates ``recall`` ranks for ``query`` (as ``memory.recall`` fetches them)."""
    embedder = memory.embedder
    async with memory.pool.connection() as conn:
        stats = await recall_sql.corpus_stats(conn, resource, query)
        lexical = await recall_sql.candidates(
            conn, resource, stats, idfs=candidate_idfs(stats), pool=pool
        )
        vector: list[Candidate] = []
        background: list[float] = []
        if embedder is not None:
            query_vector = (await embedder.embed([query], kind="query"))[0]
            vector = await vector_store.nearest(
                conn,
                resource,
                model=embedder.model,
                query=query_vector,
                limit=pool,
                lexemes=recall_sql.scored_lexemes(stats),
                resource_size=stats.documents,
            )
            background = await vector_store.background(
                conn, resource, model=embedder.model, query=query_vector
            )
    return stats, query_window(query, now), lexical, vector, background


async def capture_all(
    url: str,
    embedder: Embedder | None,
    stores: list[implicit.Store],
    conversations: list[locomo.Conversation],
    pool: int,
) -> list[Capture]:
    out: list[Capture] = []
    now = datetime.now(UTC)
    async with popagent.connect(url, embedder=embedder) as root:
        memory = root.memory
        await implicit.ingest(memory, stores, now)
        await locomo.ingest(memory, conversations)
        for store in stores:
            ids = await implicit.stored_ids(memory, store)
            by_item = {item: mid for mid, item in ids.items()}
            stored: list[Memory] = []
            while page := await memory.list(
                store.resource, MemoryFilter(kind="episode", limit=1000, offset=len(stored))
            ):
                stored += page
            store_adjacent = neighbours(stored)
            for q in store.questions:
                stats, window, lexical, vector, background = await capture_one(
                    memory, store.resource, q.text, now, pool
                )
                parts = (stats, window, lexical, vector)
                answers = frozenset(by_item[a] for a in q.answers)
                out.append(
                    Capture(
                        "implicit", store.split, q.part, q.text, now, implicit.LIMIT, *parts,
                        answers, frozenset(), {}, store_adjacent, background,
                    )
                )  # fmt: skip
        for index, conv in enumerate(conversations):
            covers: dict[int, frozenset[str]] = {}
            episodes: list[Memory] = []
            while page := await memory.list(
                conv.resource, MemoryFilter(kind="episode", limit=1000, offset=len(episodes))
            ):
                episodes += page
                covers |= {m.id: conv.covers[m.content] for m in page}
            adjacent = neighbours(episodes)
            split = "dev" if index < LOCOMO_DEV else "check"
            for lq in conv.questions:
                stats, window, lexical, vector, background = await capture_one(
                    memory, conv.resource, lq.text, conv.now, pool
                )
                parts = (stats, window, lexical, vector)
                out.append(
                    Capture(
                        "locomo", split, locomo.CATEGORIES[lq.category], lq.text, conv.now,
                        max(locomo.KS), *parts, frozenset(), lq.evidence, covers, adjacent,
                        background,
                    )
                )  # fmt: skip
        users = relevance.load()
        stored_ids = await relevance.ingest(memory, users, now)
        for user in users:
            rid = relevance.resource(user)
            mine = {item: mid for mid, item in stored_ids[user["user"]].items()}
            for q in user["questions"]:
                stats, window, lexical, vector, background = await capture_one(
                    memory, rid, q["q"], now, pool
                )
                parts = (stats, window, lexical, vector)
                answers = frozenset(mine[a] for a in q["answers"])
                allowed = answers | frozenset(mine[a] for a in q.get("related", ()))
                out.append(
                    Capture(
                        "relevance", user["split"], q["kind"], q["q"], now, 8, *parts,
                        answers, frozenset(), {}, {}, background, allowed,
                    )
                )  # fmt: skip
    return out


def neighbours(episodes: Sequence[Memory]) -> dict[int, tuple[int, int]]:
    """Each episode's previous and next episode of the same session, by time then id
    (0: none), as ``memory.recall`` finds the next (``store.neighbours``)."""
    by_session: dict[str, list[Memory]] = {}
    for m in episodes:
        by_session.setdefault(m.session_id or "", []).append(m)
    out: dict[int, tuple[int, int]] = {}
    for items in by_session.values():
        items.sort(key=lambda m: (m.created_at, m.id))
        ids = [0, *(m.id for m in items), 0]
        for i, m in enumerate(items, start=1):
            out[m.id] = (ids[i - 1], ids[i + 1])
    return out


#: A way to rank a capture: the ids of its results, best first.
Ranker = Callable[[Capture], list[int]]


def fused(weights: RankingWeights = DEFAULT_WEIGHTS) -> Ranker:
    """Recall's ranking, with the next turns of its first ``weights.next_turns`` results."""
    ranked = _fused(replace(weights, next_turns=0))
    return with_neighbours(ranked, weights.next_turns, (1,)) if weights.next_turns else ranked


def _fused(weights: RankingWeights) -> Ranker:
    def run(c: Capture) -> list[int]:
        emphasised = (
            emphasised_lexemes(c.query, c.stats.document_frequency)
            if weights.emphasis > 0
            else frozenset()
        )
        return ids(
            rank(
                [*c.lexical, *c.vector],
                c.stats,
                now=c.now,
                limit=c.limit,
                weights=weights,
                semantic=True,
                window=c.window,
                emphasis=emphasised,
                background=c.background,
            )
        )

    return run


def with_neighbours(ranker: Ranker, top: int, sides: tuple[int, ...] = (0, 1)) -> Ranker:
    """``ranker``'s results with the episodes beside each of its first ``top`` results
    inserted after it (``sides``: 0 the one before, 1 the one after), within the limit."""

    def run(c: Capture) -> list[int]:
        found = ranker(c)
        out: list[int] = []
        for position, memory_id in enumerate(found):
            if memory_id not in out:
                out.append(memory_id)
            if position < top:
                beside = c.adjacent.get(memory_id, (0, 0))
                for side in sides:
                    if beside[side] and beside[side] not in out:
                        out.append(beside[side])
        return out[: c.limit]

    return run


def ids(results: Sequence[RecallResult]) -> list[int]:
    return [r.memory.id for r in results]


def vector_only(weights: RankingWeights = DEFAULT_WEIGHTS) -> Ranker:
    """Recall's ``vector`` mode: the vector signal alone, and the next turns too."""
    only = replace(weights, fusion="blend", semantic_share=1.0, next_turns=0)
    ranked = _vector_only(only)
    return with_neighbours(ranked, weights.next_turns, (1,)) if weights.next_turns else ranked


def _vector_only(only: RankingWeights) -> Ranker:

    def run(c: Capture) -> list[int]:
        return ids(
            rank(
                c.vector,
                c.stats,
                now=c.now,
                limit=c.limit,
                weights=only,
                semantic=True,
                window=c.window,
            )
        )

    return run


def lexical_only(weights: RankingWeights = DEFAULT_WEIGHTS) -> Ranker:
    def run(c: Capture) -> list[int]:
        return ids(
            rank(c.lexical, c.stats, now=c.now, limit=c.limit, weights=weights, window=c.window)
        )

    return run


def judge(c: Capture, found: Sequence[int]) -> float:
    """Implicit: 1 when an answer is in the top 8. LoCoMo: evidence R@8."""
    if c.dataset == "implicit":
        return float(any(i in c.answers for i in found[: implicit.LIMIT]))
    return locomo.recall_at(c.evidence, [c.covers[i] for i in found], 8)


COLUMNS = (
    ("implicit", "dev", ("facts", "episodes", "few")),
    ("locomo", "dev", ("all",)),
    ("implicit", "check", ("facts", "episodes", "few")),
    ("locomo", "check", ("all",)),
)
LOCOMO_GROUPS = tuple(locomo.CATEGORIES.values())


def replay(captures: list[Capture], variants: dict[str, Ranker]) -> str:
    """The sweep's table: one row per variant, dev columns first."""
    head = ["variant"]
    keys: list[tuple[str, str, str]] = []
    for dataset, split, groups in COLUMNS:
        for group in groups:
            keys.append((dataset, split, group))
            head.append(f"{'impl' if dataset == 'implicit' else 'LoCoMo'} {split} {group}")
    keys += [("locomo", "all", g) for g in LOCOMO_GROUPS]
    head += [f"LoCoMo {g}" for g in LOCOMO_GROUPS]
    keys.append(("locomo", "all", "all"))
    head.append("LoCoMo all")
    cells = []
    for name, ranker in variants.items():
        values: dict[tuple[str, str, str], list[float]] = {}
        for c in captures:
            if (c.dataset == "implicit" and c.group == "unrelated") or c.dataset == "relevance":
                continue
            v = judge(c, ranker(c))
            for key in ((c.dataset, c.split, c.group), (c.dataset, c.split, "all")):
                values.setdefault(key, []).append(v)
            if c.dataset == "locomo":
                values.setdefault(("locomo", "all", c.group), []).append(v)
                values.setdefault(("locomo", "all", "all"), []).append(v)
        cells.append(
            [name, *(f"{statistics.fmean(values[k]):.3f}" if k in values else "-" for k in keys)]
        )
    return implicit.table(head, cells)


def unrelated_answered(captures: list[Capture], variants: dict[str, Ranker]) -> str:
    head = ["variant", "unrelated answered (of n)"]
    group = [c for c in captures if c.dataset == "implicit" and c.group == "unrelated"]
    cells = [
        [name, f"{sum(bool(ranker(c)) for c in group)} of {len(group)}"]
        for name, ranker in variants.items()
    ]
    return implicit.table(head, cells)


def relevance_table(captures: list[Capture], variants: dict[str, Ranker]) -> str:
    """The relevance set (``bench/relevance.py``) per variant and split: hit@1 of the
    answerable questions, unrelated results per question, and what the unanswerable
    questions return."""
    head = ["variant"]
    for split in ("dev", "check"):
        head += [f"{split} hit@1", f"{split} unrel/q", f"{split} unans ret/q"]
    cells = []
    for name, ranker in variants.items():
        row = [name]
        for split in ("dev", "check"):
            group = [c for c in captures if c.dataset == "relevance" and c.split == split]
            if not group:
                row += ["", "", ""]
                continue
            found = {id(c): ranker(c)[: c.limit] for c in group}
            answerable = [c for c in group if c.answers]
            unanswerable = [c for c in group if not c.answers]
            hit = statistics.fmean(
                bool(found[id(c)]) and found[id(c)][0] in c.answers for c in answerable
            )
            unrelated = statistics.fmean(
                sum(i not in c.allowed for i in found[id(c)]) for c in group
            )
            returned = statistics.fmean(len(found[id(c)]) for c in unanswerable)
            row += [f"{hit:.3f}", f"{unrelated:.2f}", f"{returned:.2f}"]
        cells.append(row)
    return implicit.table(head, cells)


def variants() -> dict[str, Ranker]:
    """The experiments of ``--sweep`` (docs/embeddings.md reports them)."""
    w = DEFAULT_WEIGHTS
    # The ranking before issue 23's second round: no next turn, near-best floor 0.1,
    # no emphasis.
    before = replace(w, next_turns=0, min_nearest_similarity=0.1, emphasis=0.0)
    out: dict[str, Ranker] = {
        "lexical": lexical_only(w),
        "vector": vector_only(w),
        "fused (default)": fused(w),
        "fused before (no next turn, near best >= 0.1)": fused(before),
        "no next turn": fused(replace(w, next_turns=0)),
        "near best >= 0.1": fused(replace(w, min_nearest_similarity=0.1)),
        "floor 0.2 only (no near best)": fused(replace(w, min_nearest_similarity=1.0)),
    }
    for turns in (2, 3):
        out[f"next turns of top {turns}"] = fused(replace(w, next_turns=turns))
    out["next and previous turn of top 1"] = with_neighbours(
        fused(replace(w, next_turns=0)), 1, (0, 1)
    )
    for share in (0.15, 0.25, 0.3, 0.4):
        out[f"blend share {share}"] = fused(replace(w, semantic_share=share))
    for k in (5.0, 20.0):
        out[f"rrf k={k:g}"] = fused(replace(w, fusion="rrf", rrf_k=k))
    for floor in (0.15, 0.25, 0.3):
        out[f"floor {floor}"] = fused(replace(w, min_similarity=floor))
    for margin in (0.03, 0.1):
        out[f"near best -{margin}"] = fused(replace(w, similarity_margin=margin))
    for boost in (0.0, 1.0, 2.0):
        out[f"emphasis {boost:g}"] = fused(replace(w, emphasis=boost))
    return out


def calibrated_variants() -> dict[str, Ranker]:
    """``--sweep calibrated``: the calibrated fusion (``memory.evidence``) beside the
    blend it replaced, and each of its parameters moved (docs/embeddings.md)."""
    w = DEFAULT_WEIGHTS
    out: dict[str, Ranker] = {
        "blend (before)": fused(replace(w, fusion="blend")),
        "calibrated (default)": fused(w),
        "no whole store": fused(replace(w, whole_store=False)),
        "one common word counts fully": fused(replace(w, single_word=1.0, weak_words_z=0.0)),
        "no rare words": fused(replace(w, rare_word=0.0)),
        "no gap to the nearest": fused(replace(w, meaning_gap=0.0)),
    }
    for share in (0.1, 0.3, 0.5):
        out[f"meaning share {share}"] = fused(replace(w, meaning_share=share))
    for z in (1.5, 2.5):
        out[f"nearest at z {z}"] = fused(replace(w, min_meaning_z=z))
    for z in (0.8, 1.2):
        out[f"others at {z} sqrt(2 ln n)"] = fused(replace(w, extreme_z=z))
    for z in (0.5, 2.0):
        out[f"one common word at z {z}"] = fused(replace(w, weak_words_z=z))
    for single in (0.1, 0.6):
        out[f"one common word counts {single}"] = fused(replace(w, single_word=single))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--embedder", choices=CHOICES, default="local")
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--conversations", type=int, metavar="N", help="only LoCoMo's first N")
    parser.add_argument(
        "--sweep",
        nargs="?",
        const="all",
        choices=("all", "calibrated"),
        help="re-rank captured candidates (calibrated: only the calibrated fusion's grid)",
    )
    parser.add_argument("--captures", type=Path, metavar="PATH", help="capture file (--sweep)")
    parser.add_argument("--pool", type=int, default=recall_pool(8), help="candidates (--sweep)")
    args = parser.parse_args()
    started = time.perf_counter()
    embedder = embedder_named(args.embedder)
    captures: list[Capture] | None = None
    if args.sweep and args.captures is not None and args.captures.exists():
        with args.captures.open("rb") as f:
            captures = pickle.load(f)  # a file this program wrote
    if captures is None or not args.sweep:
        stores = implicit.load()
        conversations = locomo.load(args.data, args.conversations)
        tmp = tempfile.mkdtemp(prefix="popagent-quality-")
        server = None
        try:
            server = EmbeddedServer(tmp, delete=True)
            if args.sweep:
                captures = asyncio.run(
                    capture_all(server.url, embedder, stores, conversations, args.pool)
                )
            else:
                implicit_out, locomo_out = asyncio.run(
                    run_both(server.url, embedder, stores, conversations)
                )
        finally:
            if server is not None:
                server.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        if args.sweep and args.captures is not None:
            with args.captures.open("wb") as f:
                pickle.dump(captures, f)
    model = embedder.model if embedder is not None else None
    if args.sweep:
        assert captures is not None
        print(f"Sweep over {len(captures):,} captured questions, embedder {model}\n")
        chosen = calibrated_variants() if args.sweep == "calibrated" else variants()
        print(replay(captures, chosen))
        print()
        print(unrelated_answered(captures, chosen))
        print()
        print(relevance_table(captures, chosen))
    else:
        print(f"Recall quality, embedder {model}: top-8 hit rate (implicit), R@8 (LoCoMo)\n")
        print(combined_table(implicit_out, locomo_out))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
