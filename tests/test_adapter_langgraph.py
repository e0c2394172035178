"""``popagent.adapters.langgraph``: the ``BaseStore`` on real facts, and an agent using it.

The store runs against the suite's PostgreSQL through a ``LocalBackend``. The
``test_lg_*`` tests are LangGraph's own store tests (``libs/checkpoint/tests/
test_store.py`` and ``libs/checkpoint-postgres/tests/test_store.py`` in the
LangGraph repository: batch order, batch get/put/search/list, basic ops,
namespaces, search, namespace validation), run as they are written there
against ``PopagentStore``: LangGraph's wheels ship no store conformance suite,
and ``langgraph-checkpoint-conformance`` covers checkpointers only. The agent
tests drive ``create_react_agent`` with langchain_core's fake chat model.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.config import get_store
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)

import popagent
from popagent import Popagent
from popagent.adapters.backend import LocalBackend
from popagent.adapters.langgraph import (
    CONCURRENCY,
    DEFAULT_PREFIX,
    PopagentStore,
    decode_fact,
    encode_item,
    fact_key,
    memory_tools,
)
from popagent.agent import AuditHook, AuditLog
from popagent.models import MemoryFilter
from tests.adapter_support import assert_import_hint, run_example
from tests.agent_support import audit_text
from tests.langchain_support import calls, react_agent, reply, script, tool_messages

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


@pytest.fixture
async def store(root: Popagent, memory: popagent.LongTermMemory, resource: str) -> PopagentStore:
    return PopagentStore(root, resource)


async def value_at(store: PopagentStore, namespace: tuple[str, ...], key: str) -> Any:
    item = await store.aget(namespace, key)
    assert item is not None
    return item.value


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A sync store call as LangGraph makes it: from a worker thread, not the loop's."""
    return await asyncio.to_thread(fn, *args, **kwargs)


# --- the mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "key", "value"),
    [
        (("users", "u1"), "Prefs", {"text": "I like green tea"}),
        (("Users", "U1"), "prefs", {"text": "line one\nline two\ttab  two  spaces "}),
        (("ns",), "e\u0301", {"t": "cafe\u0301 (not NFC)", "nbsp": "\u00a0x\u2028"}),
        (("a", "b", "c"), "k", {"n": 1.25, "big": 10**30, "l": [1, None, True, "x"], "o": {}}),
        (("x",), "k" * 500, {"emoji": "\U0001f600 ok", "zw": "a\u200bb"}),
    ],
)
async def test_put_get_returns_exactly_what_was_put(
    store: PopagentStore, namespace: tuple[str, ...], key: str, value: dict[str, Any]
) -> None:
    await store.aput(namespace, key, value)
    item = await store.aget(namespace, key)
    assert item is not None
    assert (item.namespace, item.key, item.value) == (namespace, key, value)


async def test_keys_and_namespaces_are_case_sensitive(store: PopagentStore) -> None:
    await store.aput(("ns",), "Key", {"v": 1})
    await store.aput(("ns",), "key", {"v": 2})
    await store.aput(("NS",), "key", {"v": 3})
    assert [
        await value_at(store, ns, k)
        for ns, k in [(("ns",), "Key"), (("ns",), "key"), (("NS",), "key")]
    ] == [
        {"v": 1},
        {"v": 2},
        {"v": 3},
    ]


async def test_the_fact_is_keyed_by_prefix_and_digest(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await store.aput(("memories", "u1"), "Editor", {"text": "Uses Helix, not Vim"})
    facts = await memory.list(resource, MemoryFilter(kind="fact"))
    assert len(facts) == 1
    fact = facts[0]
    assert fact.key == fact_key(DEFAULT_PREFIX, ("memories", "u1"), "Editor")
    assert fact.key is not None and fact.key.startswith("langgraph:") and len(fact.key) == 50
    assert decode_fact(DEFAULT_PREFIX, fact) == (
        ("memories", "u1"),
        "Editor",
        {"text": "Uses Helix, not Vim"},
    )
    # Recall works on the value's text.
    results = await memory.recall(resource, "which editor, Helix or Vim?")
    assert [r.memory.id for r in results] == [fact.id]


async def test_multiline_text_is_recalled_by_its_words(store: PopagentStore) -> None:
    await store.aput(("m",), "drinks", {"text": "Likes:\ntea\ncoffee"})
    hits = await store.asearch(("m",), query="coffee")
    assert [h.key for h in hits] == ["drinks"]


async def test_values_that_cannot_fit_are_refused_and_nothing_is_written(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    with pytest.raises(popagent.ValidationError, match=r"value: .*takes \d+ characters.*2000"):
        await store.aput(("ns",), "big", {"text": "x" * 2_000})
    with pytest.raises(popagent.ValidationError, match="object keys must be strings"):
        await store.aput(("ns",), "k", {1: "one"})  # type: ignore[dict-item]
    with pytest.raises(popagent.ValidationError, match="finite"):
        await store.aput(("ns",), "k", {"x": float("nan")})
    with pytest.raises(popagent.ValidationError, match="JSON object"):
        await store.aput(("ns",), "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be JSON"):
        await store.aput(("ns",), "k", {"x": object()})
    # A batch with one bad put writes none of its puts.
    with pytest.raises(popagent.ValidationError):
        await store.abatch(
            [PutOp(("ns",), "ok", {"text": "fine"}), PutOp(("ns",), "bad", {"t": "x" * 3000})]
        )
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


async def test_credentials_are_refused(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    with pytest.raises(popagent.SecretRefusedError, match="credential"):
        await store.aput(("ns",), "wifi", {"text": "the wifi password is Tr0ub4dor&3"})
    with pytest.raises(popagent.SecretRefusedError):
        await store.aput(("ns",), "cfg", {"api_key": "sk-proj-abcdefghijklmnopqrstuvwxyz123456"})
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


async def test_the_resource_is_the_backends(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    mine = PopagentStore(LocalBackend(root, resource))
    theirs = PopagentStore(root, other_resource)
    await mine.aput(("ns",), "k", {"text": "tea with lemon"})
    assert await theirs.aget(("ns",), "k") is None
    assert await theirs.asearch(("ns",), query="tea lemon") == []
    assert await theirs.asearch(("ns",)) == []
    assert await theirs.alist_namespaces() == []
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []
    with pytest.raises(TypeError, match="resource_id"):
        PopagentStore(LocalBackend(root, resource), other_resource)
    with pytest.raises(TypeError, match="resource_id"):
        PopagentStore(root)


async def test_other_facts_and_other_prefixes_are_not_items(
    store: PopagentStore, root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    await memory.remember(resource, "Likes green tea in the morning", key="drink")
    await memory.remember(resource, '{"namespace":["ns"],"key":"forged","value":{}}')
    other = PopagentStore(root, resource, prefix="other:")
    await other.aput(("ns",), "k", {"text": "green tea from the other store"})
    await store.aput(("ns",), "k", {"text": "green tea from this store"})
    assert [h.value["text"] for h in await store.asearch(("ns",), query="green tea")] == [
        "green tea from this store"
    ]
    assert [i.value["text"] for i in await store.asearch(("ns",))] == ["green tea from this store"]
    assert await store.alist_namespaces() == [("ns",)]
    with pytest.raises(popagent.ValidationError, match="prefix"):
        PopagentStore(root, resource, prefix="Upper:")


async def test_search_scores_are_popagents_recall_scores(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await store.aput(("docs", "a"), "1", {"text": "The user drinks green tea every morning"})
    await store.aput(("docs", "b"), "2", {"text": "Green tea gives the user a headache at night"})
    await store.aput(("docs", "a"), "3", {"text": "The user's cat is called Miso"})
    # Vectors are written in the background; rankings compared below must all see them.
    assert await memory.wait_for_vectors(resource) == 0
    expected = {
        r.memory.id: r.score
        for r in await memory.recall(resource, "green tea", limit=50, touch=False)
    }
    hits = await store.asearch(("docs",), query="green tea", limit=10)
    # Three memories fit in the answer: all come back, the two about tea first.
    assert {h.key for h in hits[:2]} == {"1", "2"} and [h.key for h in hits[2:]] == ["3"]
    assert all(isinstance(h, SearchItem) and h.score is not None for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    by_key = {
        decode_fact(DEFAULT_PREFIX, m)[1]: m.id  # type: ignore[index]
        for m in await memory.list(resource, MemoryFilter(kind="fact"))
    }
    for h in hits:
        assert h.score == pytest.approx(expected[by_key[h.key]], abs=1e-6)
    # Filtered to the namespace prefix, by value, and paged.
    assert [h.key for h in await store.asearch(("docs", "b"), query="green tea")] == ["2"]
    assert [
        h.key
        for h in await store.asearch(
            ("docs",), query="green tea", filter={"text": "The user drinks green tea every morning"}
        )
    ] == ["1"]
    assert [h.key for h in await store.asearch(("docs",), query="green tea", offset=1)] == [
        h.key for h in hits[1:]
    ]
    assert await store.asearch(("docs",), query="green tea", limit=0) == []
    with pytest.raises(popagent.ValidationError, match="query"):
        await store.asearch(("docs",), query="tea " * 1_001)  # over recall's 4,000 characters


async def test_search_without_query_filters_like_langgraph(store: PopagentStore) -> None:
    await store.aput(("t",), "a", {"n": 1, "tag": "x", "meta": {"lang": "en"}, "l": [1, 2]})
    await store.aput(("t",), "b", {"n": 5, "tag": "y", "meta": {"lang": "fr"}, "l": [1]})
    await store.aput(("t", "deep"), "c", {"n": 10, "tag": "x"})

    async def keys(**kw: Any) -> set[str]:
        return {i.key for i in await store.asearch(("t",), **kw)}

    assert await keys() == {"a", "b", "c"}
    assert await keys(filter={"tag": "x"}) == {"a", "c"}
    assert await keys(filter={"n": {"$gt": 1}}) == {"b", "c"}
    assert await keys(filter={"n": {"$gte": 5, "$lt": 10}}) == {"b"}
    assert await keys(filter={"n": {"$ne": 5}}) == {"a", "c"}
    assert await keys(filter={"meta": {"lang": "fr"}}) == {"b"}
    assert await keys(filter={"l": [1, 2]}) == {"a"}
    items = await store.asearch(("t",))
    assert all(i.score is None for i in items)
    # Newest first.
    assert [i.key for i in items] == ["c", "b", "a"]


# --- batch semantics (LangGraph's InMemoryStore / PostgresStore) ------------------------------


async def test_batch_reads_see_the_state_before_its_writes(store: PopagentStore) -> None:
    await store.aput(("ns",), "k", {"v": "old"})
    results = await store.abatch(
        [
            PutOp(("ns",), "k", {"v": "new"}),
            GetOp(("ns",), "k"),
            PutOp(("ns",), "fresh", {"v": 1}),
            GetOp(("ns",), "fresh"),
            SearchOp(("ns",)),
        ]
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], Item) and results[1].value == {"v": "old"}
    assert results[3] is None
    assert [i.key for i in cast(list[SearchItem], results[4])] == ["k"]
    assert (await store.aget(("ns",), "k")).value == {"v": "new"}  # type: ignore[union-attr]
    assert (await store.aget(("ns",), "fresh")).value == {"v": 1}  # type: ignore[union-attr]


async def test_batch_keeps_the_last_put_of_an_item(store: PopagentStore) -> None:
    await store.abatch(
        [
            PutOp(("ns",), "k", {"v": 1}),
            PutOp(("ns",), "gone", {"v": 1}),
            PutOp(("ns",), "k", {"v": 2}),
            PutOp(("ns",), "gone", None),
        ]
    )
    assert (await store.aget(("ns",), "k")).value == {"v": 2}  # type: ignore[union-attr]
    assert await store.aget(("ns",), "gone") is None
    await store.abatch([PutOp(("ns",), "k", None), PutOp(("ns",), "k", {"v": 3})])
    assert (await store.aget(("ns",), "k")).value == {"v": 3}  # type: ignore[union-attr]


async def test_batch_refuses_unknown_ops(store: PopagentStore) -> None:
    with pytest.raises(ValueError, match="Unknown operation"):
        await store.abatch(["not an op"])  # type: ignore[list-item]


async def test_sync_api_from_a_worker_thread(store: PopagentStore) -> None:
    await in_thread(store.put, ("sync",), "k", {"text": "sync green tea"})
    item = await in_thread(store.get, ("sync",), "k")
    assert item is not None and item.value == {"text": "sync green tea"}
    hits = await in_thread(store.search, ("sync",), query="green tea")
    assert [h.key for h in hits] == ["k"] and hits[0].score is not None
    assert await in_thread(store.list_namespaces) == [("sync",)]
    results = await in_thread(
        store.batch, [GetOp(("sync",), "k"), PutOp(("sync",), "k2", {"v": 2})]
    )
    assert isinstance(results[0], Item) and results[1] is None
    await in_thread(store.delete, ("sync",), "k")
    assert await in_thread(store.get, ("sync",), "k") is None


async def test_sync_api_on_the_loop_thread_says_what_to_use(store: PopagentStore) -> None:
    # asyncio.InvalidStateError, as LangGraph's own stores raise (test_no_running_loop).
    for call in (
        lambda: store.get(("ns",), "k"),
        lambda: store.put(("ns",), "k", {"v": 1}),
        lambda: store.search(("ns",)),
        lambda: store.delete(("ns",), "k"),
        lambda: store.list_namespaces(),
        lambda: store.batch([GetOp(("ns",), "k")]),
    ):
        with pytest.raises(asyncio.InvalidStateError, match="abatch"):
            call()


def test_sync_api_without_a_running_loop_says_what_to_use(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource)
    with pytest.raises(RuntimeError, match="not running"):
        store.get(("ns",), "k")


async def test_store_operations_are_audited_without_content(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    await store.aput(("private",), "diary", {"text": "Secretly adores pineapple pizza"})
    await store.aget(("private",), "diary")
    await store.asearch(("private",), query="pineapple pizza")
    await store.alist_namespaces()
    await store.adelete(("private",), "diary")
    rows = await AuditLog(memory.pool).list_audit(resource)
    after = [r for r in reversed(rows) if r.hook == "after_tool_call"]
    assert [r.tool for r in after] == [
        "store.put",
        "store.get",
        "store.search",
        "store.list_namespaces",
        "store.delete",
    ]
    assert all(r.outcome == "ok" for r in after)
    assert after[0].argument_names == ("namespace", "key", "value")
    assert after[2].argument_names == ("namespace_prefix", "query")
    text = await audit_text(memory, resource)
    for secret in ("pineapple", "pizza", "diary", "private", "adores"):
        assert secret not in text
    with pytest.raises(popagent.SecretRefusedError):
        await store.aput(("ns",), "k", {"text": "my password is Tr0ub4dor&3x"})


# --- LangGraph's own store tests, run against PopagentStore ------------------------------------


async def test_lg_batch_order(store: PopagentStore) -> None:
    await in_thread(store.put, ("test", "foo"), "key1", {"data": "value1"})
    await in_thread(store.put, ("test", "bar"), "key2", {"data": "value2"})
    ops: list[Op] = [
        GetOp(namespace=("test", "foo"), key="key1"),
        PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
        SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        GetOp(namespace=("test",), key="key3"),
    ]
    results = await in_thread(store.batch, ops)
    assert len(results) == 5
    assert isinstance(results[0], Item)
    assert isinstance(results[0].value, dict)
    assert results[0].value == {"data": "value1"}
    assert results[0].key == "key1"
    assert results[1] is None
    assert isinstance(results[2], list)
    assert len(results[2]) == 1
    assert isinstance(results[3], list)
    assert ("test", "foo") in results[3] and ("test", "bar") in results[3]
    assert results[4] is None

    ops_reordered: list[Op] = [
        SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
        GetOp(namespace=("test", "bar"), key="key2"),
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
        PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
        GetOp(namespace=("test", "foo"), key="key1"),
    ]
    results_reordered = await store.abatch(ops_reordered)
    assert len(results_reordered) == 5
    assert isinstance(results_reordered[0], list)
    assert len(results_reordered[0]) == 2
    assert isinstance(results_reordered[1], Item)
    assert results_reordered[1].value == {"data": "value2"}
    assert results_reordered[1].key == "key2"
    assert isinstance(results_reordered[2], list)
    assert len(results_reordered[2]) > 0
    assert results_reordered[3] is None
    assert isinstance(results_reordered[4], Item)
    assert results_reordered[4].value == {"data": "value1"}
    assert results_reordered[4].key == "key1"


async def test_lg_batch_get_ops(store: PopagentStore) -> None:
    await store.aput(("test",), "key1", {"data": "value1"})
    await store.aput(("test",), "key2", {"data": "value2"})
    results = await store.abatch(
        [
            GetOp(namespace=("test",), key="key1"),
            GetOp(namespace=("test",), key="key2"),
            GetOp(namespace=("test",), key="key3"),
        ]
    )
    assert len(results) == 3
    assert isinstance(results[0], Item) and results[0].key == "key1"
    assert isinstance(results[1], Item) and results[1].key == "key2"
    assert results[2] is None


async def test_lg_batch_put_ops(store: PopagentStore) -> None:
    results = await in_thread(
        store.batch,
        [
            PutOp(namespace=("test",), key="key1", value={"data": "value1"}),
            PutOp(namespace=("test",), key="key2", value={"data": "value2"}),
            PutOp(namespace=("test",), key="key3", value=None),
        ],
    )
    assert len(results) == 3
    assert all(result is None for result in results)
    item1 = await store.aget(("test",), "key1")
    item2 = await store.aget(("test",), "key2")
    assert item1 and item1.value == {"data": "value1"}
    assert item2 and item2.value == {"data": "value2"}
    assert await store.aget(("test",), "key3") is None


async def test_lg_batch_search_ops(store: PopagentStore) -> None:
    for namespace, key, value in [
        (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        await store.aput(namespace, key, value)
    results = await store.abatch(
        [
            SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
            SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
            SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0),
        ]
    )
    assert len(results) == 3
    first, second, third = (cast(list[SearchItem], r) for r in results)
    assert len(first) == 2 and all(item.value["tag"] == "a" for item in first)
    assert len(second) == 2
    assert len(third) == 1 and third[0].namespace == ("test", "foo")


async def test_lg_batch_list_namespaces_ops(store: PopagentStore) -> None:
    test_data = [
        (("test", "documents", "public"), "doc1", {"content": "public doc"}),
        (("test", "documents", "private"), "doc2", {"content": "private doc"}),
        (("test", "images", "public"), "img1", {"content": "public image"}),
        (("prod", "documents", "public"), "doc3", {"content": "prod doc"}),
    ]
    for namespace, key, value in test_data:
        await store.aput(namespace, key, value)
    results = await store.abatch(
        [
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
            ListNamespacesOp(
                match_conditions=(MatchCondition("suffix", ("public",)),),
                max_depth=None,
                limit=10,
                offset=0,
            ),
        ]
    )
    assert len(results) == 3
    everything, shallow, public = (cast(list[tuple[str, ...]], r) for r in results)
    assert len(everything) == len(test_data)
    assert all(len(ns) <= 2 for ns in shallow)
    assert sorted(shallow) == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    assert len(public) == 3 and all(ns[-1] == "public" for ns in public)


async def test_lg_basic_store_ops(store: PopagentStore) -> None:
    namespace = ("test", "documents")
    item_value = {"title": "Test Document", "content": "Hello, World!"}
    await in_thread(store.put, namespace, "doc1", item_value)
    item = await in_thread(store.get, namespace, "doc1")
    assert item
    assert item.namespace == namespace
    assert item.key == "doc1"
    assert item.value == item_value
    updated_value = {"title": "Updated Document", "content": "Hello, Updated!"}
    await in_thread(store.put, namespace, "doc1", updated_value)
    updated_item = await in_thread(store.get, namespace, "doc1")
    assert updated_item is not None
    assert updated_item.value == updated_value
    assert updated_item.updated_at > item.updated_at
    assert updated_item.created_at == item.created_at
    assert await in_thread(store.get, ("test", "other_documents"), "doc1") is None
    await in_thread(store.delete, namespace, "doc1")
    assert await in_thread(store.get, namespace, "doc1") is None


async def test_lg_list_namespaces(store: PopagentStore) -> None:
    test_namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]
    for namespace in test_namespaces:
        await store.aput(namespace, "dummy", {"content": "dummy"})
    assert len(await store.alist_namespaces()) == len(test_namespaces)
    test_prefix = await store.alist_namespaces(prefix=("test",))
    assert len(test_prefix) == 4 and all(ns[0] == "test" for ns in test_prefix)
    public = await store.alist_namespaces(suffix=("public",))
    assert len(public) == 3 and all(ns[-1] == "public" for ns in public)
    assert all(len(ns) <= 2 for ns in await store.alist_namespaces(max_depth=2))
    assert len(await store.alist_namespaces(limit=3)) == 3
    for namespace in test_namespaces:
        await store.adelete(namespace, "dummy")
    assert await store.alist_namespaces() == []


async def test_lg_list_namespaces_basic(store: PopagentStore) -> None:
    namespaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
    ]
    await store.abatch(
        [PutOp(ns, f"id_{i}", {"data": f"value_{i:02d}"}) for i, ns in enumerate(namespaces)]
    )
    ab = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(await store.alist_namespaces(prefix=("a", "b"))) == ab
    assert sorted(await store.alist_namespaces(suffix=("f",))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert sorted(await store.alist_namespaces(prefix=("a",), suffix=("f",))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert sorted(await store.alist_namespaces(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert await store.alist_namespaces(prefix=("a", "b"), limit=2) == ab[:2]
    assert await store.alist_namespaces(prefix=("a", "b"), offset=2) == ab[2:]
    assert sorted(await store.alist_namespaces(prefix=("a", "*", "f"))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert sorted(await store.alist_namespaces(suffix=("*", "f"))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert await store.alist_namespaces(prefix=("nonexistent",)) == []
    assert await store.alist_namespaces(prefix=("users", "123")) == [("users", "123")]


async def test_lg_search(store: PopagentStore) -> None:
    test_data = [
        (
            ("test", "docs"),
            "doc1",
            {"title": "First Doc", "author": "Alice", "tags": ["important"]},
        ),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
    ]
    for namespace, key, value in test_data:
        await store.aput(namespace, key, value)
    assert len(await store.asearch(("test",))) == 3
    docs_items = await store.asearch(("test", "docs"))
    assert len(docs_items) == 2 and all(i.namespace == ("test", "docs") for i in docs_items)
    alice = await store.asearch(("test",), filter={"author": "Alice"})
    assert len(alice) == 2 and all(i.value["author"] == "Alice" for i in alice)
    assert len(await store.asearch(("test",), limit=2)) == 2
    assert len(await store.asearch(("test",), offset=2)) == 1
    for namespace, key, _ in test_data:
        await store.adelete(namespace, key)
    assert await store.asearch(("test",)) == []


async def test_lg_cannot_put_empty_namespace(store: PopagentStore) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            await store.aput(bad, "foo", doc)
        with pytest.raises(InvalidNamespaceError):
            await in_thread(store.put, bad, "foo", doc)
    await store.aput(("foo", "langgraph", "foo"), "bar", doc)
    assert (await store.aget(("foo", "langgraph", "foo"), "bar")).value == doc  # type: ignore[union-attr]
    assert (await store.asearch(("foo", "langgraph", "foo")))[0].value == doc
    await store.adelete(("foo", "langgraph", "foo"), "bar")
    assert await store.aget(("foo", "langgraph", "foo"), "bar") is None
    # Past the public put API (as LangGraph's test does), a "langgraph" root is allowed...
    await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert (await store.aget(("langgraph", "foo"), "bar")).value == doc  # type: ignore[union-attr]
    await store.adelete(("langgraph", "foo"), "bar")
    assert await store.aget(("langgraph", "foo"), "bar") is None
    # ...but a label with a period never is (validate_op_namespace).
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([PutOp(("a.b",), "bar", doc)])


# --- an agent: create_react_agent with the memory tools and the store -------------------------


async def test_react_agent_remembers_recalls_and_uses_the_store(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, other_resource: str
) -> None:
    store = PopagentStore(root, resource)

    @tool
    async def save_note(topic: str, note: str) -> str:
        """Save a note about a topic in the graph's store."""
        await get_store().aput(("notes",), topic, {"text": note})
        return f"saved note {topic}"

    model = script(
        calls(("remember", {"content": "Prefers window seats", "resource_id": other_resource})),
        calls(
            ("remember", {"content": "Prefers window seats on long flights", "key": "travel.seat"})
        ),
        calls(("save_note", {"topic": "Trip", "note": "Lisbon in May, window seat booked"})),
        calls(("recall", {"query": "which seat does the user prefer?"})),
        reply("You prefer a window seat."),
    )
    agent = react_agent(model, [*memory_tools(store.backend), save_note], store=store)
    result = await agent.ainvoke(
        {"messages": [HumanMessage("Remember I like window seats")]},
        {"configurable": {"thread_id": "trip-planning"}},
    )
    results = [str(m.content) for m in tool_messages(result["messages"])]
    assert results[0].startswith("Refused, nothing was done: unknown argument 'resource_id'")
    assert results[1].startswith("Stored: created fact #")
    assert results[2] == "saved note Trip"
    assert "Prefers window seats on long flights" in results[3]
    assert result["messages"][-1].content == "You prefer a window seat."

    facts = {f.key: f for f in await memory.list(resource, MemoryFilter(kind="fact"))}
    assert facts["travel.seat"].content == "Prefers window seats on long flights"
    assert facts["travel.seat"].session_id == "trip-planning"
    assert (await store.aget(("notes",), "Trip")).value == {  # type: ignore[union-attr]
        "text": "Lisbon in May, window seat booked"
    }
    assert await memory.list(other_resource, MemoryFilter(kind="fact")) == []
    rows = await AuditLog(memory.pool).list_audit(resource)
    after = [(r.tool, r.outcome) for r in reversed(rows) if r.hook == "after_tool_call"]
    assert after == [
        ("remember", "refused"),  # the call naming a resource: audited, nothing written
        ("remember", "ok"),
        ("store.put", "ok"),
        ("recall", "ok"),
        ("store.get", "ok"),
    ]
    assert {r.session_id for r in rows if r.tool in ("remember", "recall")} == {"trip-planning"}
    assert "window" not in await audit_text(memory, resource)


async def test_react_agent_gets_a_readable_refusal_for_a_credential(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource)
    model = script(
        calls(
            (
                "remember",
                {"content": "My OpenAI API key is sk-proj-abcdefghijklmnopqrstuvwxyz123456"},
            )
        ),
        reply("I won't store secrets."),
    )
    agent = react_agent(model, memory_tools(store.backend), store=store)
    result = await agent.ainvoke({"messages": [HumanMessage("store my key")]})
    [refusal] = [str(m.content) for m in tool_messages(result["messages"])]
    assert refusal.startswith(
        "Refused, nothing was stored: content: looks like it contains a credential"
    )
    assert "sk-proj" not in refusal
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []
    rows = await AuditLog(memory.pool).list_audit(resource)
    after = [r for r in rows if r.hook == "after_tool_call"]
    assert [(r.tool, r.outcome, r.error_type) for r in after] == [
        ("remember", "refused", "SecretRefusedError")
    ]


async def test_sync_react_agent_in_a_worker_thread(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    store = PopagentStore(root, resource)

    @tool
    def save_note(topic: str, note: str) -> str:
        """Save a note about a topic in the graph's store (sync)."""
        get_store().put(("notes",), topic, {"text": note})
        return "saved"

    model = script(
        calls(("remember", {"content": "Allergic to peanuts", "importance": 0.9})),
        calls(("save_note", {"topic": "food", "note": "no peanuts"})),
        calls(("recall", {"query": "peanuts allergy"})),
        reply("Noted."),
    )
    agent = react_agent(model, [*memory_tools(store.backend), save_note], store=store)
    result = await asyncio.to_thread(agent.invoke, {"messages": [HumanMessage("hi")]})
    texts = [str(m.content) for m in tool_messages(result["messages"])]
    assert texts[0].startswith("Stored: created")
    assert texts[1] == "saved"
    assert "Allergic to peanuts" in texts[2]
    facts = await memory.list(resource, MemoryFilter(kind="fact", key=None))
    assert {f.importance for f in facts if f.key is None} == {0.9}
    assert (await store.aget(("notes",), "food")).value == {"text": "no peanuts"}  # type: ignore[union-attr]


# --- packaging and the example ----------------------------------------------------------------


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
        check=False,
    )


def test_popagent_does_not_import_the_frameworks() -> None:
    done = _python(
        "import sys, popagent, popagent.adapters.backend, popagent.adapters.toolkit\n"
        "print([m for m in ('langgraph', 'langchain_core') if m in sys.modules])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_langgraph_the_import_error_says_what_to_install() -> None:
    assert_import_hint(["langgraph"], "popagent.adapters.langgraph", "langgraph")


def test_example_runs_offline(tmp_path: Path) -> None:
    summary = run_example("langgraph_memory.py", tmp_path)
    assert summary["stored"] is True
    assert summary["store_item"] == {"text": "Prefers aisle seats on short flights"}
    assert summary["search_keys"] == ["seat"]
    assert summary["refused_credential"] is True
    assert summary["other_resource_facts"] == 0


def test_encode_is_stable() -> None:
    # The same item always gives the same fact content (so a re-put is "unchanged").
    one = encode_item(("a",), "k", {"x": "y", "n": [1, 2]})
    assert one == encode_item(("a",), "k", {"x": "y", "n": (1, 2)})
    assert one == '{"namespace":["a"],"key":"k","value":{"x":"y","n":[1,2]}}'


async def test_a_put_of_the_same_value_changes_nothing(store: PopagentStore) -> None:
    await store.aput(("ns",), "k", {"v": [1, 2]})
    first = await store.aget(("ns",), "k")
    await store.aput(("ns",), "k", {"v": (1, 2)})
    again = await store.aget(("ns",), "k")
    assert first is not None and again is not None
    assert again.updated_at == first.updated_at and again.value == {"v": [1, 2]}


async def test_an_item_of_exactly_the_cap_keeps_its_json_whole(store: PopagentStore) -> None:
    # The JSON alone fills the fact; the recall text that multi-line strings add is dropped.
    body = encode_item(("ns",), "k", {"a": "x\ny", "pad": ""})
    value = {"a": "x\ny", "pad": "p" * (2_000 - len(body.split(" ")[0]))}
    content = encode_item(("ns",), "k", value)
    assert len(content) == 2_000 and not content.endswith(" x y")
    await store.aput(("ns",), "k", value)
    assert await value_at(store, ("ns",), "k") == value


async def test_a_failed_read_stops_the_batch_before_its_writes(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    with pytest.raises(popagent.ValidationError, match="query"):
        await store.abatch(
            [
                PutOp(("ns",), "k", {"v": 1}),
                SearchOp(("ns",), query="tea " * 1_001),
                GetOp(("ns",), "k"),
            ]
        )
    assert await memory.list(resource, MemoryFilter(kind="fact")) == []


# --- concurrency: merged batches, bounded connections, any event loop -------------------------


class CountingBackend:
    """A ``LocalBackend`` that counts the backend calls in flight at once."""

    def __init__(self, inner: LocalBackend) -> None:
        self.inner = inner
        self.in_flight = 0
        self.most = 0
        self.calls = 0

    @property
    def resource_id(self) -> str:
        return self.inner.resource_id

    async def _counted(self, work: Awaitable[T]) -> T:
        self.in_flight += 1
        self.calls += 1
        self.most = max(self.most, self.in_flight)
        try:
            return await work
        finally:
            self.in_flight -= 1

    async def remember(self, content: str, **kw: Any) -> Any:
        return await self._counted(self.inner.remember(content, **kw))

    async def recall(self, query: str, *, limit: int = 8) -> Any:
        return await self._counted(self.inner.recall(query, limit=limit))

    async def list(self, where: MemoryFilter) -> Any:
        return await self._counted(self.inner.list(where))

    async def get(self, id: int) -> Any:
        return await self._counted(self.inner.get(id))

    async def delete(self, id: int) -> None:
        await self._counted(self.inner.delete(id))


async def _audit_count(memory: popagent.LongTermMemory, resource: str, tool: str) -> int:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM popagent_audit WHERE resource_id = %s AND tool = %s",
            (resource, tool),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_concurrent_calls_are_merged_with_bounded_connections(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    backend = CountingBackend(LocalBackend(root, resource, "langgraph"))
    store = PopagentStore(backend, hooks=[AuditHook(memory.pool)])
    outcomes = await asyncio.gather(
        *(store.aput(("burst",), f"k{i}", {"text": f"burst item {i}"}) for i in range(600)),
        return_exceptions=True,
    )
    assert [o for o in outcomes if o is not None] == []
    got = await asyncio.gather(*(store.aget(("burst",), f"k{i}") for i in range(600)))
    assert [g.value["text"] if g else None for g in got] == [f"burst item {i}" for i in range(600)]
    assert backend.most <= CONCURRENCY  # at most 4 pooled connections at once
    # Every call audited (before and after rows), none dropped.
    assert await _audit_count(memory, resource, "store.put") == 1_200
    assert await _audit_count(memory, resource, "store.get") == 1_200


async def test_identical_concurrent_reads_are_made_once(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    backend = CountingBackend(LocalBackend(root, resource, "langgraph"))
    store = PopagentStore(backend, hooks=[])
    await store.aput(("docs",), "a", {"text": "green tea"})
    backend.calls = 0
    found = await asyncio.gather(*(store.asearch(("docs",)) for _ in range(50)))
    assert all([item.key for item in f] == ["a"] for f in found)
    assert backend.calls == 1  # one scan page for all fifty


async def test_langgraphs_large_batches_async(
    root: Popagent, memory: popagent.LongTermMemory, resource: str
) -> None:
    """LangGraph's ``test_large_batches_async`` (checkpoint-postgres and -sqlite), with
    200 keys where it has 1,000: 12,000 concurrent calls of every kind."""
    store = PopagentStore(root, resource)
    coros: list[Awaitable[Any]] = []
    for m in range(10):
        for i in range(200):
            namespace = ("test", "foo", "bar", "baz", str(m % 2))
            coros += [
                store.aput(namespace, f"key{i}", value={"foo": "bar" + str(i)}),
                store.aget(namespace, f"key{i}"),
                store.alist_namespaces(prefix=None, max_depth=m + 1),
                store.asearch(("test",)),
                store.aput(namespace, f"key{i}", value={"foo": "bar" + str(i)}),
                store.adelete(namespace, f"key{i}"),
            ]
    async with asyncio.timeout(120):
        results = await asyncio.gather(*coros)
    assert len(results) == 10 * 200 * 6
    assert await store.asearch(("test",)) == []  # each key's last call was its delete


async def test_calls_merged_into_one_batch_stay_independent(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    outcomes = await asyncio.gather(
        store.aput(("ns",), "ok", {"text": "fine"}),
        store.aput(("ns",), "long", {"text": "x" * 3_000}),
        store.aput(("ns",), "secret", {"text": "the wifi password is Tr0ub4dor&3"}),
        store.abatch([GetOp(("ns",), "ok"), SearchOp(("ns",), query="tea " * 1_001)]),
        store.aget(("ns",), "ok"),
        return_exceptions=True,
    )
    assert outcomes[0] is None
    assert isinstance(outcomes[1], popagent.ValidationError)
    assert isinstance(outcomes[2], popagent.SecretRefusedError)
    assert isinstance(outcomes[3], popagent.ValidationError)  # its own failed read
    assert outcomes[4] is None  # read before the batch's writes
    assert await value_at(store, ("ns",), "ok") == {"text": "fine"}
    assert [
        f.content.split('"key":')[1][:5]
        for f in await memory.list(resource, MemoryFilter(kind="fact"))
    ] == ['"ok",']


async def test_a_blank_query_lists_the_namespace_as_langgraph_does(store: PopagentStore) -> None:
    await store.aput(("docs",), "a", {"text": "green tea"})
    await store.aput(("docs",), "b", {"text": "black coffee"})
    await store.aput(("other",), "c", {"text": "water"})
    for query in ("", "   "):
        found = await store.asearch(("docs",), query=query)
        assert [item.key for item in found] == ["b", "a"] and all(i.score is None for i in found)


async def test_without_an_index_a_puts_index_is_ignored_as_langgraph_does(
    store: PopagentStore,
) -> None:
    for index in (["text"], False, None):
        await store.aput(("ns",), "k", {"text": "green tea"}, index=index)
        assert [i.key for i in await store.asearch(("ns",), query="green tea")] == ["k"]
    await store.abatch([PutOp(("ns",), "j", {"text": "tea"}, index=False)])
    assert await value_at(store, ("ns",), "j") == {"text": "tea"}


async def test_async_calls_from_threads_running_their_own_loops(
    store: PopagentStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    results: list[object] = []

    def work(n: int) -> None:
        async def go() -> object:
            await store.aput(("threads",), f"k{n}", {"n": n})
            return await store.aget(("threads",), f"k{n}")

        try:
            results.append(asyncio.run(go()))
        except BaseException as exc:
            results.append(exc)

    # The owner loop (this one) is blocked while they run, as LangGraph's own
    # thread tests block it; nothing may wait for it.
    workers = [threading.Thread(target=work, args=(n,), daemon=True) for n in range(5)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert sorted(r.value["n"] for r in results if isinstance(r, Item)) == list(range(5)), results
    assert await _audit_count(memory, resource, "store.put") == 10
