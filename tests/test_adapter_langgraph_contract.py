"""LangGraph's store contract beyond the basics on ``PopagentStore``: TTL and ``index=``
with the caller's embeddings (and its vectors through export and import), on the
suite's PostgreSQL.

Expiry is moved with SQL where a test needs an item already expired or about to
expire, so no test waits on the clock; the sweeper's test waits for a removal with
a generous deadline. ``LetterEmbeddings`` is a deterministic embedding model (the
count of each letter and digit), so every score can be computed here and
compared with the store's.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import IndexConfig, PutOp, TTLConfig

import popagent
from popagent import Popagent
from popagent.adapters.backend import LocalBackend, StoreBackend
from popagent.adapters.langgraph import PopagentStore, fact_key
from popagent.models import Memory, MemoryFilter, RecallResult, RememberResult
from popagent.portable import export_resource, import_resource
from popagent.store import vectors as vector_sql
from popagent.web.gui.pages_facts import expiry_text

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
DIMS = len(ALPHABET)


def letters(text: str) -> list[float]:
    """How often each letter and digit occurs in ``text`` (case-insensitive)."""
    lowered = text.lower()
    return [float(lowered.count(ch)) for ch in ALPHABET]


class LetterEmbeddings(Embeddings):
    """A deterministic embedding model: ``letters`` of each text; counts its calls."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [letters(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return letters(text)


def index(**config: Any) -> IndexConfig:
    """An ``index=`` config as a caller writes it (``distance_type`` is ``PostgresStore``'s)."""
    return cast(IndexConfig, config)


def ttl_config(**config: Any) -> TTLConfig:
    return cast(TTLConfig, config)


def expiry(fact: Memory) -> datetime:
    assert fact.expires_at is not None
    return fact.expires_at


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


@pytest.fixture
def embeddings() -> LetterEmbeddings:
    return LetterEmbeddings()


@pytest.fixture
async def indexed(root: Popagent, resource: str, embeddings: LetterEmbeddings) -> PopagentStore:
    return PopagentStore(root, resource, index={"dims": DIMS, "embed": embeddings})


async def _fact(
    memory: popagent.LongTermMemory, resource: str, ns: tuple[str, ...], key: str
) -> Memory:
    facts = await memory.list(
        resource, MemoryFilter(kind="fact", key=fact_key("langgraph:", ns, key))
    )
    assert len(facts) == 1
    return facts[0]


async def _set_expiry(root: Popagent, resource: str, memory_id: int, at: str) -> None:
    """Move a fact's expiry with SQL (``at``: an SQL expression), as time passing would."""
    async with root.pool.connection() as conn:
        await conn.execute(
            f"UPDATE popagent_memories SET expires_at = {at} WHERE resource_id = %s AND id = %s",
            (resource, memory_id),
        )


async def _vector_rows(root: Popagent, resource: str) -> list[dict[str, Any]]:
    async with root.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT memory_id, model, chunk, dimensions FROM popagent_memory_embeddings "
            "WHERE resource_id = %s AND model LIKE 'caller:%%' ORDER BY memory_id, chunk",
            (resource,),
        )
        return list(await cur.fetchall())


# --- TTL -------------------------------------------------------------------------------------


async def test_ttl_sets_the_facts_expiry_and_a_read_refreshes_it(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource)
    assert store.supports_ttl
    before = datetime.now(UTC)
    await store.aput(("ns",), "k", {"text": "short lived"}, ttl=60)
    fact = await _fact(memory, resource, ("ns",), "k")
    assert fact.expires_at is not None
    assert (
        before + timedelta(minutes=60)
        <= fact.expires_at
        <= datetime.now(UTC) + timedelta(minutes=60)
    )
    assert fact.content.endswith(',"ttl":60.0}')  # the TTL travels with the item
    await store.aput(("ns",), "forever", {"text": "no ttl"})
    assert (await _fact(memory, resource, ("ns",), "forever")).expires_at is None

    # Time passes: it expires in a minute. A read without refresh leaves that.
    await _set_expiry(root, resource, fact.id, "now() + interval '1 minute'")
    assert await store.aget(("ns",), "k", refresh_ttl=False) is not None
    fact = await _fact(memory, resource, ("ns",), "k")
    assert expiry(fact) < before + timedelta(minutes=30)
    # A read with refresh moves it to 60 minutes from now; no new version, same value.
    item = await store.aget(("ns",), "k", refresh_ttl=True)
    assert item is not None and item.value == {"text": "short lived"}
    refreshed = await _fact(memory, resource, ("ns",), "k")
    assert refreshed.expires_at is not None and refreshed.expires_at > before + timedelta(
        minutes=59
    )
    assert refreshed.version == fact.version and refreshed.updated_at == fact.updated_at
    # A search refreshes what it returns too (LangGraph's default: refresh on read).
    await _set_expiry(root, resource, fact.id, "now() + interval '1 minute'")
    assert [i.key for i in await store.asearch(("ns",), filter={"text": "short lived"})] == ["k"]
    searched = await _fact(memory, resource, ("ns",), "k")
    assert searched.expires_at is not None and searched.expires_at > before + timedelta(minutes=59)
    # A refresh never gives an item without TTL an expiry.
    assert (await _fact(memory, resource, ("ns",), "forever")).expires_at is None


async def test_the_ttl_config_gives_the_default_and_refresh_on_read(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource, ttl={"default_ttl": 30, "refresh_on_read": False})
    assert store.ttl_config == {"default_ttl": 30, "refresh_on_read": False}
    before = datetime.now(UTC)
    await store.aput(("ns",), "default", {"v": 1})
    await store.aput(("ns",), "none", {"v": 2}, ttl=None)  # None: never expires
    default = await _fact(memory, resource, ("ns",), "default")
    assert default.expires_at is not None
    assert before + timedelta(minutes=30) <= default.expires_at < before + timedelta(minutes=31)
    assert (await _fact(memory, resource, ("ns",), "none")).expires_at is None
    # In a worker thread, through LangGraph's sync API: same defaults.
    await asyncio.to_thread(store.put, ("ns",), "sync", {"v": 3})
    assert (await _fact(memory, resource, ("ns",), "sync")).expires_at is not None

    await _set_expiry(root, resource, default.id, "now() + interval '1 minute'")
    assert await store.aget(("ns",), "default") is not None  # refresh_on_read is off
    assert expiry(await _fact(memory, resource, ("ns",), "default")) < before + timedelta(minutes=5)
    assert await store.aget(("ns",), "default", refresh_ttl=True) is not None  # asked for
    assert expiry(await _fact(memory, resource, ("ns",), "default")) > before + timedelta(
        minutes=29
    )


async def test_an_expired_item_is_never_returned_and_maintenance_removes_it(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource)
    await store.aput(("docs", "a"), "gone", {"text": "green tea"}, ttl=5)
    await store.aput(("docs", "b"), "kept", {"text": "green tea too"}, ttl=5)
    gone = await _fact(memory, resource, ("docs", "a"), "gone")
    await _set_expiry(root, resource, gone.id, "now() - interval '1 second'")

    assert await store.aget(("docs", "a"), "gone", refresh_ttl=True) is None
    assert [i.key for i in await store.asearch(("docs",))] == ["kept"]
    assert [i.key for i in await store.asearch(("docs",), query="green tea")] == ["kept"]
    assert await store.alist_namespaces() == [("docs", "b")]
    # A refresh did not revive it.
    assert expiry(await memory.get(resource, gone.id)) < datetime.now(UTC)

    report = await memory.maintain(resource_id=resource)
    assert report.expired_facts == 1
    history = await memory.fact_history(resource, gone.id)
    assert history[0].ended == "expired"
    # A put after expiry is a new item.
    await store.aput(("docs", "a"), "gone", {"text": "back"})
    assert await store.aget(("docs", "a"), "gone") is not None


async def test_the_sweeper_runs_popagents_maintenance(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource, ttl=ttl_config(sweep_interval_minutes=0.01))
    await store.aput(("ns",), "k", {"v": 1}, ttl=5)
    fact = await _fact(memory, resource, ("ns",), "k")
    await _set_expiry(root, resource, fact.id, "now() - interval '1 second'")
    sweeper = store.start_ttl_sweeper()
    assert store.start_ttl_sweeper() is sweeper  # one at a time
    for _ in range(600):  # up to 60 s; a sweep comes every 0.6 s
        if not await memory.list(resource, MemoryFilter(kind="fact")):
            break
        await asyncio.sleep(0.1)
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    assert store.stop_ttl_sweeper()
    await asyncio.sleep(0)
    assert sweeper.cancelled()
    assert await store.asweep_ttl() == 0


async def test_expiry_shows_in_the_gui_like_any_facts(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, gui: httpx.AsyncClient
) -> None:
    store = PopagentStore(root, resource)
    await store.aput(("ns",), "k", {"text": "with an end"}, ttl=90)
    fact = await _fact(memory, resource, ("ns",), "k")
    page = await gui.get(f"/facts/{fact.id}/edit")
    assert page.status_code == 200
    assert f'value="{expiry_text(fact.expires_at)}"' in page.text


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "5", True])
async def test_a_bad_ttl_is_refused_before_anything_is_written(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, ttl: object
) -> None:
    store = PopagentStore(root, resource)
    with pytest.raises(popagent.ValidationError, match="ttl"):
        await store.abatch([PutOp(("ns",), "a", {"v": 1}), PutOp(("ns",), "b", {"v": 2}, ttl=ttl)])  # type: ignore[arg-type]
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    with pytest.raises(popagent.ValidationError, match="ttl"):
        PopagentStore(root, resource, ttl=ttl_config(default_ttl=ttl))


# --- index= ----------------------------------------------------------------------------------


async def test_index_keeps_the_callers_vectors_under_a_model_of_their_own(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, embeddings: LetterEmbeddings
) -> None:
    store = PopagentStore(
        root, resource, index={"dims": DIMS, "embed": embeddings, "fields": ["title", "tags[*]"]}
    )
    assert store.index_config is not None and store.index_config["embed"] is embeddings
    assert store.embeddings is embeddings
    await store.aput(("docs",), "a", {"title": "Tea", "tags": ["green", "hot"], "body": "x"})
    fact = await _fact(memory, resource, ("docs",), "a")
    rows = await _vector_rows(root, resource)
    model = "caller:langgraph:langgraph:LetterEmbeddings:36"
    assert rows == [
        {"memory_id": fact.id, "model": model, "chunk": chunk, "dimensions": DIMS}
        for chunk in range(3)
    ]
    assert embeddings.texts == ["Tea", "green", "hot"]
    # A new value replaces them; the same value again keeps one set.
    await store.aput(("docs",), "a", {"title": "Coffee", "tags": [], "body": "x"})
    await store.aput(("docs",), "a", {"title": "Coffee", "tags": [], "body": "x"})
    assert [r["chunk"] for r in await _vector_rows(root, resource)] == [0]
    # popagent's own vector maintenance (prune other models) leaves them; deleting the
    # item deletes them; a purge of the resource too.
    async with root.pool.connection() as conn:
        await vector_sql.delete_other_models(conn, [resource], "popagent-model")
    assert len(await _vector_rows(root, resource)) == 1
    await store.adelete(("docs",), "a")
    assert await _vector_rows(root, resource) == []
    await store.aput(("docs",), "b", {"title": "Tea"})
    await memory.purge(resource, vacuum=False)
    assert await _vector_rows(root, resource) == []


async def test_search_ranks_every_item_in_scope_with_langgraphs_scores(
    indexed: PopagentStore,
) -> None:
    values = {
        "tea": {"text": "green tea", "kind": "drink"},
        "coffee": {"text": "black coffee", "kind": "drink"},
        "nothing": {"text": "zzz", "kind": "drink"},  # shares no letter with the query
        "cake": {"text": "green cake", "kind": "food"},
    }
    for key, value in values.items():
        await indexed.aput(("menu",), key, value)
    await indexed.aput(("other",), "tea", {"text": "green tea", "kind": "drink"})

    query = "green tea"
    found = await indexed.asearch(("menu",), query=query, filter={"kind": "drink"})
    expected = sorted(
        (k for k, v in values.items() if v["kind"] == "drink"),
        key=lambda k: cosine(letters(query), letters(values[k]["text"] + "")),
        reverse=True,
    )
    # The whole value is embedded ("$", the default): its JSON, as LangGraph does.
    assert [i.key for i in found] == ["tea", "coffee", "nothing"] == expected
    for item in found:
        assert item.namespace == ("menu",)
        assert item.score is not None
    assert found[0].score == pytest.approx(
        cosine(letters(query), letters('{"kind": "drink", "text": "green tea"}')), abs=1e-4
    )
    scores = [cast(float, i.score) for i in found]
    assert scores[0] > scores[1] > scores[2]
    # Pages of the same ranking.
    page = await indexed.asearch(
        ("menu",), query=query, filter={"kind": "drink"}, limit=1, offset=1
    )
    assert [i.key for i in page] == ["coffee"]
    # Every item in scope, even with a limit above the count.
    assert len(await indexed.asearch(("menu",), query="q", limit=100)) == 4
    # Without a query: listed, newest first, no score.
    listed = await indexed.asearch(("menu",))
    assert [i.key for i in listed] == ["cake", "nothing", "coffee", "tea"]
    assert all(i.score is None for i in listed)


async def test_index_false_is_stored_and_never_scored(
    indexed: PopagentStore, root: Popagent, resource: str
) -> None:
    await indexed.aput(("ns",), "hidden", {"text": "green tea"}, index=False)
    await indexed.aput(("ns",), "indexed", {"text": "green tea"})
    await indexed.aput(("ns",), "far", {"text": "zzz"})
    # Every item in scope: the scored ones first (even one sharing nothing with the
    # query), then the one without vectors, with no score, as InMemoryStore lists it.
    found = await indexed.asearch(("ns",), query="green tea", limit=10)
    assert [i.key for i in found] == ["indexed", "far", "hidden"]
    assert found[1].score is not None and found[2].score is None
    # A page that the scored items fill leaves it out.
    assert [i.key for i in await indexed.asearch(("ns",), query="green tea", limit=2)] == [
        "indexed",
        "far",
    ]
    item = await indexed.aget(("ns",), "hidden")
    assert item is not None and item.value == {"text": "green tea"}
    # index=False on an item that had vectors drops them.
    await indexed.aput(("ns",), "indexed", {"text": "green tea"}, index=False)
    await indexed.adelete(("ns",), "far")
    assert [(i.key, i.score) for i in await indexed.asearch(("ns",), query="green tea")] == [
        ("indexed", None),
        ("hidden", None),
    ]
    assert await _vector_rows(root, resource) == []


async def test_a_puts_own_fields_and_json_paths(
    root: Popagent, resource: str, embeddings: LetterEmbeddings
) -> None:
    store = PopagentStore(
        root, resource, index={"dims": DIMS, "embed": embeddings, "fields": ["meta.title"]}
    )
    await store.aput(("ns",), "a", {"meta": {"title": "aaaa"}, "body": "bbbb"})
    await store.aput(("ns",), "b", {"meta": {"title": "bbbb"}, "body": "aaaa"})
    await store.aput(
        ("ns",), "c", {"meta": {"title": "cccc"}, "notes": ["aaaa", "dddd"]}, index=["notes[*]"]
    )
    found = await store.asearch(("ns",), query="aaaa")
    # a by its title; c by its first note (its best vector); b's body is not embedded.
    assert [i.key for i in found[:2]] in (["a", "c"], ["c", "a"])
    assert found[0].score == pytest.approx(1.0, abs=1e-4)
    assert found[1].score == pytest.approx(1.0, abs=1e-4)
    assert found[2].key == "b" and found[2].score == pytest.approx(0.0, abs=1e-4)
    assert embeddings.texts == ["aaaa", "bbbb", "aaaa", "dddd"]
    # A path that is not in the value embeds nothing: stored, never scored.
    await store.aput(("ns",), "d", {"other": "aaaa"})
    found = await store.asearch(("ns",), query="aaaa")
    assert found[-1].key == "d" and found[-1].score is None


@pytest.mark.parametrize(
    ("distance", "score"),
    [
        ("inner_product", lambda q, d: sum(x * y for x, y in zip(q, d, strict=True))),
        ("l2", lambda q, d: -math.sqrt(sum((x - y) ** 2 for x, y in zip(q, d, strict=True)))),
        ("cosine", cosine),
    ],
)
async def test_scores_are_as_langgraph_reports_them(
    root: Popagent, resource: str, embeddings: LetterEmbeddings, distance: str, score: Any
) -> None:
    store = PopagentStore(
        root,
        resource,
        index=index(dims=DIMS, embed=embeddings, fields=["t"], distance_type=distance),
    )
    await store.aput(("ns",), "doc", {"t": "aab"})
    for query in ("aab", "abc", "zzz"):
        [item] = await store.asearch((), query=query)
        assert item.score == pytest.approx(score(letters(query), letters("aab")), abs=1e-4)


async def test_embed_as_a_sync_or_async_function(root: Popagent, resource: str) -> None:
    def sync_embed(texts: list[str]) -> list[list[float]]:
        return [letters(t) for t in texts]

    async def async_embed(texts: list[str]) -> list[list[float]]:
        return [letters(t) for t in texts]

    for n, embed in enumerate((sync_embed, async_embed)):
        store = PopagentStore(
            root, resource, prefix=f"lg{n}:", index=index(dims=DIMS, embed=embed, fields=["t"])
        )
        await store.aput(("ns",), "x", {"t": "xxyy"})
        await store.aput(("ns",), "y", {"t": "yyyy"})
        assert [i.key for i in await store.asearch(("ns",), query="yyyy")] == ["y", "x"]
    models = {r["model"] for r in await _vector_rows(root, resource)}
    assert models == {
        "caller:langgraph:lg0:test_embed_as_a_sync_or_async_function.<locals>.sync_embed:36",
        "caller:langgraph:lg1:test_embed_as_a_sync_or_async_function.<locals>.async_embed:36",
    }


async def test_a_failing_or_wrong_model_writes_nothing(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    def broken(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("the model is down")

    def short(texts: list[str]) -> list[list[float]]:
        return [[1.0, 2.0] for _t in texts]

    store = PopagentStore(root, resource, index=index(dims=DIMS, embed=broken))
    with pytest.raises(RuntimeError, match="the model is down"):
        await store.aput(("ns",), "k", {"t": "x"})
    store = PopagentStore(root, resource, index=index(dims=DIMS, embed=short))
    with pytest.raises(popagent.ValidationError, match="2 dimensions"):
        await store.aput(("ns",), "k", {"t": "x"})
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    for bad in (
        {"dims": 0, "embed": short},
        {"dims": 4},
        {"dims": 4, "embed": short, "distance_type": "x"},
    ):
        with pytest.raises(popagent.ValidationError, match="index"):
            PopagentStore(root, resource, index=bad)  # type: ignore[arg-type]


class PlainBackend:
    """A ``MemoryBackend`` that is not a ``StoreBackend`` (as a remote one is not)."""

    def __init__(self, inner: LocalBackend) -> None:
        self.inner = inner

    @property
    def resource_id(self) -> str:
        return self.inner.resource_id

    async def remember(self, content: str, **options: Any) -> RememberResult:
        return await self.inner.remember(content, **options)

    async def recall(self, query: str, *, limit: int = 8) -> list[RecallResult]:
        return await self.inner.recall(query, limit=limit)

    async def list(self, where: MemoryFilter) -> list[Memory]:
        return await self.inner.list(where)

    async def get(self, id: int) -> Memory:
        return await self.inner.get(id)

    async def delete(self, id: int) -> None:
        await self.inner.delete(id)


async def test_vectors_and_ttl_need_a_store_backend(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    assert isinstance(LocalBackend(root, resource), StoreBackend)
    plain = PlainBackend(LocalBackend(root, resource))
    assert not isinstance(plain, StoreBackend)
    with pytest.raises(NotImplementedError, match="StoreBackend"):
        PopagentStore(plain, index={"dims": DIMS, "embed": LetterEmbeddings()})
    store = PopagentStore(plain)
    with pytest.raises(NotImplementedError, match="StoreBackend"):
        await store.aput(("ns",), "k", {"v": 1}, ttl=5)
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    await store.aput(("ns",), "k", {"v": 1})  # the rest works as before
    assert (await store.asearch(("ns",)))[0].key == "k"


@pytest.fixture
async def two_stores(
    root: Popagent, resource: str, embeddings: LetterEmbeddings
) -> AsyncIterator[tuple[PopagentStore, PopagentStore]]:
    yield (
        PopagentStore(root, resource, index={"dims": DIMS, "embed": embeddings}),
        PopagentStore(root, resource),
    )


async def test_a_store_without_index_keeps_popagents_recall(
    two_stores: tuple[PopagentStore, PopagentStore],
) -> None:
    indexed, plain = two_stores
    await plain.aput(("ns",), "tea", {"text": "green tea"})
    await plain.aput(("ns",), "zzz", {"text": "zzz"})
    # Recall: only what shares words with the query, scores recall's.
    assert [i.key for i in await plain.asearch(("ns",), query="green tea")] == ["tea"]
    # The same items, put without vectors, are listed by the indexed store's query
    # without a score.
    found = await indexed.asearch(("ns",), query="green tea")
    assert {i.key for i in found} == {"tea", "zzz"} and {i.score for i in found} == {None}


# --- export, import and backup carry the caller's vectors -------------------------------------


MENU = {
    "tea": {"text": "green tea", "kind": "drink"},
    "coffee": {"text": "black coffee", "kind": "drink"},
    "cake": {"text": "green cake", "kind": "food"},
    "soup": {"text": "miso soup", "kind": "food"},
}


async def _ranking(store: PopagentStore, query: str) -> list[tuple[str, float | None]]:
    return [(i.key, i.score) for i in await store.asearch(("menu",), query=query, limit=10)]


async def test_export_and_import_carry_the_callers_vectors(
    root: Popagent,
    resource: str,
    other_resource: str,
    scratch_root: Popagent,
    embeddings: LetterEmbeddings,
) -> None:
    config = index(dims=DIMS, embed=embeddings, fields=["text", "notes[*]"])
    store = PopagentStore(root, resource, index=config)
    for key, value in MENU.items():
        await store.aput(("menu",), key, value)
    await store.aput(("menu",), "bread", {"text": "rye", "notes": ["dark", "sour"]})
    await store.aput(("menu",), "secret", {"text": "green tea"}, index=False)
    queries = ("green tea", "dark bread", "soup")
    before = {q: await _ranking(store, q) for q in queries}
    assert before["green tea"][0][0] == "tea"
    assert before["green tea"][0][1] == pytest.approx(1.0, abs=1e-6)
    assert before["green tea"][-1] == ("secret", None)
    embedded = len(embeddings.texts)

    out = io.StringIO()
    await export_resource(root.pool, resource, out)
    lines = out.getvalue().splitlines()
    vectors = [json.loads(x) for x in lines if '"type":"caller_vector"' in x]
    assert len(vectors) == embedded == 7  # a vector per text embedded, none for "secret"
    assert {v["model"] for v in vectors} == {"caller:langgraph:langgraph:LetterEmbeddings:36"}

    # Into another database: a store with the same config ranks every item exactly
    # as before, its model never asked to embed a stored item again (only the query).
    report = await import_resource(scratch_root.pool, lines)
    assert report.counts["caller_vector"]["added"] == 7
    fresh = LetterEmbeddings()
    moved = PopagentStore(scratch_root, resource, index=index(**{**config, "embed": fresh}))
    assert {q: await _ranking(moved, q) for q in queries} == before
    assert fresh.texts == []
    # A second import changes nothing.
    again = await import_resource(scratch_root.pool, lines)
    assert again.counts["caller_vector"] == {
        "added": 0,
        "updated": 0,
        "unchanged": 7,
        "skipped": 0,
    }
    assert {q: await _ranking(moved, q) for q in queries} == before

    # Into another resource of the same database, and a store there with the same config.
    await import_resource(root.pool, lines, resource_id=other_resource)
    there = PopagentStore(root, other_resource, index=index(**{**config, "embed": fresh}))
    assert {q: await _ranking(there, q) for q in queries} == before
    assert fresh.texts == []

    # Without the vectors (a file from before they were exported), the items are
    # there but none is scored: the vectors are what the ranking rests on.
    plain = [x for x in lines if '"type":"caller_vector"' not in x]
    elsewhere = f"{other_resource}-plain"
    await import_resource(root.pool, plain, resource_id=elsewhere)
    bare = PopagentStore(root, elsewhere, index=index(**{**config, "embed": fresh}))
    assert {score for _key, score in await _ranking(bare, "green tea")} == {None}

    # A purge of the resource takes the imported vectors with it.
    await root.memory.purge(other_resource, vacuum=False)
    assert await _vector_rows(root, other_resource) == []
