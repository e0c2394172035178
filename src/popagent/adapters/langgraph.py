"""LangGraph: a ``BaseStore`` on popagent's facts, and memory tools for ``create_react_agent``.

::

    from popagent.adapters.langgraph import PopagentStore, memory_tools

    store = PopagentStore(app, "user-42")           # or PopagentStore(backend)
    await store.aput(("memories", "prefs"), "editor", {"text": "Uses Helix, not Vim"})
    hits = await store.asearch(("memories",), query="which editor?")   # popagent recall
    agent = create_react_agent(model, memory_tools(store.backend), store=store)

    # LangGraph's semantic search and TTL, with the caller's embeddings:
    store = PopagentStore(app, "user-42", index={"dims": 1536, "embed": "openai:text-embedding-3-small",
                                                 "fields": ["text"]},
                          ttl={"default_ttl": 60 * 24, "refresh_on_read": True})

Each item is one popagent fact (``popagent.adapters.langgraph_items``: the key is
``prefix`` plus a digest of namespace and key, the content the item as JSON that
``get`` parses back exactly, within popagent's 2,000-character fact; a value
holding a credential is refused with ``SecretRefusedError`` and nothing is
written).

Semantics (those of LangGraph's own stores, ``InMemoryStore`` and ``PostgresStore``,
unless said otherwise):

- ``batch``/``abatch`` validate every operation (namespace labels as
  ``validate_op_namespace`` does, every put's encoding, TTL and ``index``) before
  anything is written; reads see the state before the batch's writes; several
  puts of one item keep the last; results come back in the operations' order.
  Each put is atomic; a batch as a whole is not a transaction.
- Concurrent calls are merged, as LangGraph's ``AsyncBatchedBaseStore`` does: one
  batch at a time serves every call queued on that event loop, with at most
  ``concurrency`` backend calls at once and identical reads made once; one call's
  invalid operation or failed read or write fails that call only.
- **TTL** (``supports_ttl``): ``put(..., ttl=minutes)``, or the store's
  ``ttl={"default_ttl", "refresh_on_read", "sweep_interval_minutes"}``, sets the
  fact's ``expires_at``; the minutes are kept in the item's JSON (``"ttl"``), so a
  read with ``refresh_ttl`` (default: the config's ``refresh_on_read``, else true)
  moves ``expires_at`` to that many minutes from now, without a new version. An
  item past its ``expires_at`` is never returned (nor listed), and popagent's
  maintenance removes it (its last value kept as a version), as does the store's
  sweeper (``start_ttl_sweeper``). Expiry shows in the GUI and CLI as any fact's.
- **index=** (``popagent.adapters.langgraph_index``): with the store's ``index=``
  config, a put embeds the config's ``fields`` (or the put's own ``index=[paths]``)
  with the caller's model and keeps the vectors in popagent's vector table under a
  model name of their own; ``index=False`` stores the item without vectors.
  ``search(prefix, query=...)`` then ranks every item in scope, after ``filter``, by
  that model's similarity (the best field's; ``SearchItem.score`` as LangGraph's
  stores report it); items without vectors follow every scored one, with no
  score, as ``InMemoryStore`` lists them.
- Without ``index=``, ``search`` with a ``query`` is popagent's recall (lexical,
  or fused with vectors when the memory has an embedder), limited to the
  namespace prefix and ``filter``; ``SearchItem.score`` is recall's score, and an
  item sharing nothing with the query may be missing. A put's ``index=`` is then
  ignored, as LangGraph's stores ignore it without an index config.
- A blank query (``""``) is no query: the items newest first, as without one.
  ``filter`` matches values like ``InMemoryStore`` (equality, nested objects,
  ``$eq $ne $gt $gte $lt $lte``; a dotted key that is not a key of the value names
  a nested field). ``updated_at`` moves when a put changes the value.
- Listing (search without a query or with ``index=``, ``list_namespaces``) pages
  through the resource's facts, at most ``scan_limit`` of them (default 100,000;
  more is a ``ValidationError`` naming ``scan_limit``).
- Vectors and TTL refresh need the backend to keep them (``StoreBackend``: an
  in-process ``LocalBackend``); on another backend ``index=`` and TTL raise
  ``NotImplementedError`` before anything is written.

Every store operation is hooked and audited as a call named ``store.get``,
``store.put``, ``store.delete``, ``store.search`` or ``store.list_namespaces``
(argument names and sizes only), and the tools as ``remember``/``recall``; a
call returns once its rows are committed. Sync methods work from threads other
than the one running the backend's event loop (LangGraph runs sync graphs'
nodes so); on that thread they raise ``asyncio.InvalidStateError`` (use the
async ones). Async methods work on any event loop.

LangGraph is an optional extra: ``pip install "popagent[langgraph]"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

try:
    from langgraph.store.base import (
        NOT_PROVIDED,
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        NamespacePath,
        NotProvided,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised by the import test in a subprocess
    raise ImportError(
        'popagent.adapters.langgraph needs LangGraph: pip install "popagent[langgraph]"'
    ) from exc

from ..agent.hooks import Hook
from ..agent.tools import ToolOutcome
from ..errors import NotFoundError, ValidationError
from ..memory.validation import check_importance, normalize_key
from ..models import MemoryFilter
from ..root import Popagent
from . import sweeper
from .backend import MemoryBackend, StoreBackend
from .batching import Queue, Request, gated, settled
from .langchain import memory_tools
from .langgraph_index import StoreIndex
from .langgraph_items import (
    DEFAULT_PREFIX,
    DIGEST_CHARS,
    Decoded,
    check_count,
    check_ttl,
    check_ttl_config,
    decode_fact,
    decode_item,
    encode_item,
    fact_key,
    filtered,
    live,
    matches,
    prefix_pattern,
)
from .toolkit import LoopBridge, MemoryToolkit, as_backend

__all__ = [
    "DEFAULT_PREFIX",
    "SCAN_LIMIT",
    "PopagentStore",
    "decode_fact",
    "encode_item",
    "fact_key",
    "memory_tools",
]

SCAN_LIMIT = 100_000
#: Facts per ``MemoryBackend.list`` page while scanning (popagent's list cap).
PAGE = 1_000
#: Recall's own cap on ``limit``.
RECALL_CAP = 1_000
#: Backend calls one store makes at once on an event loop (each borrows a pooled connection).
CONCURRENCY = 4
#: The sweeper's interval when neither the call nor the TTL config names one.
SWEEP_MINUTES = 5.0

NEEDS_STORE_BACKEND = (
    "{what} needs a backend that keeps a store's vectors and extends expiry "
    "(popagent.adapters.backend.StoreBackend: an in-process LocalBackend, "
    "PopagentStore(app, resource_id)); this backend is a {backend}"
)


# --- the store ---------------------------------------------------------------------------


#: The scans of one batch, by namespace prefix, shared by the reads that need them.
_Scans = dict[tuple[str, ...], "asyncio.Future[list[Decoded]]"]


@dataclass(frozen=True, slots=True)
class _Write:
    """One put, checked: the fact's content, its TTL in minutes, and the texts to
    embed (``None``: the store has no index; empty: no vectors)."""

    content: str
    ttl: float | None
    texts: list[str] | None


@dataclass(eq=False)
class _Plan:
    """One call's operations, checked: its reads (by position) and its puts' contents."""

    ops: list[Op]
    reads: list[tuple[int, GetOp | SearchOp | ListNamespacesOp]]
    writes: dict[tuple[tuple[str, ...], str], _Write | None]
    results: list[Result]
    failed: BaseException | None = None


def _read_key(op: GetOp | SearchOp | ListNamespacesOp) -> tuple[Any, ...] | None:
    """Equal for reads that must give the same result (made once per batch); ``None``
    when the op cannot be compared so (a filter that is not JSON)."""
    try:
        if isinstance(op, GetOp):
            return ("get", tuple(op.namespace), op.key, op.refresh_ttl)
        if isinstance(op, SearchOp):
            return (
                "search",
                tuple(op.namespace_prefix),
                json.dumps(op.filter, sort_keys=True),
                op.limit,
                op.offset,
                op.query,
                op.refresh_ttl,
            )
        conditions = tuple((c.match_type, tuple(c.path)) for c in (op.match_conditions or ()))
        return ("list", conditions, op.max_depth, op.limit, op.offset)
    except (TypeError, ValueError):
        return None


def _check_put_namespace(namespace: tuple[str, ...]) -> None:
    """What LangGraph's ``put``/``aput`` check before a put is batched (``abatch`` does not)."""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    validate_op_namespace(PutOp(namespace, "", None))
    if namespace[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {namespace}'
        )


class PopagentStore(BaseStore):
    """LangGraph's long-term memory store on popagent's facts of one resource.

    ``backend`` is a ``MemoryBackend``, or a ``Popagent`` with the
    ``resource_id`` it acts for. ``prefix`` (lower case, like every fact key)
    sets this store's items apart from the resource's other facts; two stores
    with different prefixes on one resource do not see each other's items.
    ``importance`` is given to every item's fact. ``hooks`` default to an
    ``AuditHook`` for an in-process backend; ``session_id`` is the audit session.
    ``concurrency`` bounds the backend calls the store makes at once on an
    event loop. ``index`` is LangGraph's ``IndexConfig`` (the caller's
    embeddings, ``popagent.adapters.langgraph_index``) and ``ttl`` its
    ``TTLConfig``; both need a ``StoreBackend`` (module doc).

    A local backend's event loop is its pool's; for a remote one, make the
    store inside the event loop that owns its client (or pass ``loop``).
    """

    supports_ttl = True

    def __init__(
        self,
        backend: MemoryBackend | Popagent,
        resource_id: str | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        importance: float = 0.5,
        scan_limit: int = SCAN_LIMIT,
        hooks: Sequence[Hook] | None = None,
        session_id: str | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        concurrency: int = CONCURRENCY,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        self.backend = as_backend(backend, resource_id, origin="langgraph")
        checked = normalize_key(prefix + "0" * DIGEST_CHARS, "prefix")
        if checked != prefix + "0" * DIGEST_CHARS or len(prefix) > 64:
            raise ValidationError(
                "prefix", "must be lower case, at most 64 characters, without whitespace"
            )
        self.prefix = prefix
        self.ttl_config: TTLConfig | None = check_ttl_config(ttl)  # type: ignore[assignment]
        self.index = None if index is None else StoreIndex.of(index, prefix)
        #: The ``index=`` config as given (LangGraph's stores expose it so).
        self.index_config: dict[str, Any] | None = None if self.index is None else self.index.config
        #: The index's LangChain ``Embeddings`` (LangGraph's stores expose it so), else None.
        self.embeddings: Any = None if self.index is None else self.index.embeddings
        if self.index is not None:
            self._store_backend("index=")
        self._sweeper: sweeper.Sweeper | None = None
        self.importance = check_importance(importance)
        if isinstance(scan_limit, bool) or not isinstance(scan_limit, int) or scan_limit < 1:
            raise ValidationError("scan_limit", "must be a positive integer")
        self.scan_limit = scan_limit
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValidationError("concurrency", "must be a positive integer")
        self.concurrency = concurrency
        self.toolkit = MemoryToolkit(self.backend, hooks=hooks, session_id=session_id)
        self._bridge = LoopBridge.of(self.backend, loop)
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Queue[Op, Result]] = (
            weakref.WeakKeyDictionary()
        )

    def _store_backend(self, what: str) -> StoreBackend:
        """The backend, where it keeps vectors and extends expiry; else the refusal."""
        if not isinstance(self.backend, StoreBackend):
            raise NotImplementedError(
                NEEDS_STORE_BACKEND.format(what=what, backend=type(self.backend).__name__)
            )
        return self.backend

    # --- TTL: the sweeper ---

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> sweeper.Sweeper:
        """Run popagent's maintenance of this resource every ``sweep_interval_minutes``
        (default: the TTL config's ``sweep_interval_minutes``, else 5) on the backend's
        event loop, so expired items are removed (reads never return them anyway).
        Returns a concurrent future, done once ``stop_ttl_sweeper`` stops it, that
        ``await`` also accepts (as LangGraph's async stores' is awaited); callable from
        any thread. A second call while one runs returns the running one."""
        backend = self._store_backend("the TTL sweeper")
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        minutes = check_ttl(
            sweep_interval_minutes
            or (self.ttl_config or {}).get("sweep_interval_minutes")
            or SWEEP_MINUTES
        )
        loop = self._bridge.loop
        if loop is None:
            raise RuntimeError("the sweeper needs popagent's event loop; make the store in it")
        self._sweeper = sweeper.start(loop, backend.maintain, 60 * (minutes or SWEEP_MINUTES))
        return self._sweeper

    def stop_ttl_sweeper(self, timeout: float | None = None) -> sweeper.Stopped:
        """Stop the sweeper; true once it has stopped (or none ran), and awaitable to
        that bool. From a thread other than the event loop's it waits up to
        ``timeout`` seconds for the sweeper to end."""
        running, self._sweeper = self._sweeper, None
        return sweeper.stop(running, self._bridge.loop, timeout)

    async def asweep_ttl(self) -> int:
        """One sweep now: popagent's maintenance of this resource; how many expired
        facts it removed."""
        report = await self._bridge.arun(self._store_backend("the TTL sweeper").maintain())
        return report.expired_facts

    # --- LangGraph's entry points: every call joins the queue ---

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """``abatch`` from synchronous code in another thread than the backend's loop."""
        return self._bridge.run(self._enqueue(ops), use="abatch (aget, aput, asearch, ...)")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._bridge.arun(self._enqueue(ops))

    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        validate_op_namespace(GetOp(namespace, ""))
        op = GetOp(namespace, str(key), self._refresh(refresh_ttl))
        item: Item | None = (await self.abatch([op]))[0]  # type: ignore[assignment]
        return item

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        op = SearchOp(namespace_prefix, filter, limit, offset, query, self._refresh(refresh_ttl))
        validate_op_namespace(op)
        found: list[SearchItem] = (await self.abatch([op]))[0]  # type: ignore[assignment]
        return found

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | NotProvided | None = NOT_PROVIDED,
    ) -> None:
        _check_put_namespace(namespace)
        if ttl is NOT_PROVIDED:
            ttl = (self.ttl_config or {}).get("default_ttl")
        await self.abatch([PutOp(namespace, str(key), value, index=index, ttl=ttl)])  # type: ignore[arg-type]

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        validate_op_namespace(GetOp(namespace, ""))
        await self.abatch([PutOp(namespace, str(key), None)])

    async def alist_namespaces(
        self,
        *,
        prefix: NamespacePath | None = None,
        suffix: NamespacePath | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        conditions = []
        if prefix:
            conditions.append(MatchCondition(match_type="prefix", path=prefix))
        if suffix:
            conditions.append(MatchCondition(match_type="suffix", path=suffix))
        op = ListNamespacesOp(
            match_conditions=tuple(conditions), max_depth=max_depth, limit=limit, offset=offset
        )
        validate_op_namespace(op)
        names: list[tuple[str, ...]] = (await self.abatch([op]))[0]  # type: ignore[assignment]
        return names

    def _refresh(self, refresh_ttl: bool | None) -> bool:
        """A read's ``refresh_ttl``: as given, else the config's ``refresh_on_read``
        (LangGraph's default: true)."""
        if refresh_ttl is not None:
            return bool(refresh_ttl)
        return bool((self.ttl_config or {}).get("refresh_on_read", True))

    # --- the queue ---

    async def _enqueue(self, ops: Iterable[Op]) -> list[Result]:
        """Queue one call's operations on the running loop; its results once served."""
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = Queue()
        request = Request(list(ops), loop.create_future())
        queue.waiting.append(request)
        if queue.task is None or queue.task.done():
            queue.task = loop.create_task(self._serve(queue))
        return await request.done

    async def _serve(self, queue: Queue[Op, Result]) -> None:
        """Serve the queue, one merged batch of every call waiting at a time, until empty."""
        while queue.waiting:
            batch = [r for r in queue.waiting if not r.done.done()]  # not cancelled
            queue.waiting = []
            if not batch:
                continue
            try:
                outcomes = await self._execute([r.ops for r in batch])
            except BaseException:
                for request in (*batch, *queue.waiting):
                    request.done.cancel()
                queue.waiting = []
                raise
            for request, outcome in zip(batch, outcomes, strict=True):
                if request.done.done():
                    continue
                if isinstance(outcome, BaseException):
                    request.done.set_exception(outcome)
                else:
                    request.done.set_result(outcome)

    def _plan(self, ops: list[Op]) -> _Plan:
        """Check one call's operations (every one, before anything runs)."""
        reads: list[tuple[int, GetOp | SearchOp | ListNamespacesOp]] = []
        writes: dict[tuple[tuple[str, ...], str], _Write | None] = {}
        for i, op in enumerate(ops):
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
                raise ValueError(f"Unknown operation type: {type(op)}")
            validate_op_namespace(op)
            if isinstance(op, SearchOp | ListNamespacesOp):
                check_count(op.limit, "limit")
                check_count(op.offset, "offset")
            if isinstance(op, PutOp):
                namespace = tuple(op.namespace)
                writes.pop((namespace, op.key), None)  # the last put of an item wins
                writes[(namespace, op.key)] = None if op.value is None else self._write(op)
            else:
                reads.append((i, op))
        return _Plan(ops, reads, writes, [None] * len(ops))

    def _write(self, op: PutOp) -> _Write:
        """A put's content, TTL and texts to embed, checked."""
        assert op.value is not None
        ttl = check_ttl(op.ttl)
        if ttl is not None:
            self._store_backend("ttl=")
        texts = None
        if self.index is not None and op.index is not False:
            if op.index is not None and (
                isinstance(op.index, str) or not isinstance(op.index, list | tuple)
            ):
                raise ValidationError("index", "must be False, None or a list of JSON paths")
            texts = self.index.texts(op.value, op.index)
        elif self.index is not None:
            texts = []
        content = encode_item(tuple(op.namespace), op.key, op.value, ttl)
        return _Write(content, ttl, texts)

    async def _execute(self, requests: list[list[Op]]) -> list[list[Result] | BaseException]:
        """Run the calls ``requests`` as one batch: every read first (identical ones once),
        then every put (the last of an item); each call's outcome on its own."""
        plans: list[_Plan] = []
        for ops in requests:
            try:
                plans.append(self._plan(ops))
            except Exception as exc:
                plans.append(_Plan(ops, [], {}, [], failed=exc))
        gate = asyncio.Semaphore(self.concurrency)
        calls: list[str] = []
        scans: _Scans = {}
        try:
            await self._read_all(plans, gate, calls, scans)
            await self._write_all(plans, gate, calls)
        finally:
            for scan in scans.values():
                scan.cancel()  # a no-op unless this batch itself was cancelled
            # The calls return once their audit rows are committed.
            await self.toolkit.hooks.drain(calls)
        return [plan.failed if plan.failed is not None else plan.results for plan in plans]

    async def _read_all(
        self, plans: list[_Plan], gate: asyncio.Semaphore, calls: list[str], scans: _Scans
    ) -> None:
        """Every read of the calls still standing, each distinct one once; a failed read
        fails the calls that asked for it."""
        readers: dict[Any, tuple[asyncio.Future[Any], list[tuple[_Plan, int]]]] = {}
        for plan in plans:
            if plan.failed is not None:
                continue
            for i, op in plan.reads:
                key = _read_key(op) or ("unique", id(op))
                if key not in readers:
                    readers[key] = (gated(gate, self._reader(op, calls, scans)), [])
                readers[key][1].append((plan, i))
        await settled([reader for reader, _users in readers.values()])
        for reader, askers in readers.values():
            error = reader.exception()
            for plan, i in askers:
                if error is not None:
                    plan.failed = plan.failed or error
                else:
                    result = reader.result()
                    plan.results[i] = list(result) if isinstance(result, list) else result

    async def _write_all(
        self, plans: list[_Plan], gate: asyncio.Semaphore, calls: list[str]
    ) -> None:
        """The last put of each item among the calls still standing; a failed write fails
        every call that put the item."""
        writes: dict[tuple[tuple[str, ...], str], tuple[_Write | None, list[_Plan]]] = {}
        for plan in plans:
            if plan.failed is not None:
                continue
            for item, write in plan.writes.items():
                _replaced, putters = writes.pop(item, (None, []))
                writes[item] = (write, [*putters, plan])
        writers = [
            (gated(gate, self._writer(ns, key, write, calls)), putters)
            for (ns, key), (write, putters) in writes.items()
        ]
        await settled([writer for writer, _putters in writers])
        for writer, putters in writers:
            error = writer.exception()
            if error is not None:
                for plan in putters:
                    plan.failed = plan.failed or error

    def _reader(
        self,
        op: GetOp | SearchOp | ListNamespacesOp,
        calls: list[str],
        scans: _Scans,
    ) -> Callable[[], Awaitable[Any]]:
        if isinstance(op, GetOp):
            arguments: dict[str, Any] = {"namespace": op.namespace, "key": op.key}
            return lambda: self._audited("store.get", arguments, self._get(op), calls)
        if isinstance(op, SearchOp):
            arguments = {"namespace_prefix": op.namespace_prefix}
            arguments.update({n: getattr(op, n) for n in ("query", "filter") if getattr(op, n)})
            return lambda: self._audited("store.search", arguments, self._search(op, scans), calls)
        arguments = {"match_conditions": op.match_conditions, "max_depth": op.max_depth}
        return lambda: self._audited(
            "store.list_namespaces", arguments, self._list_namespaces(op, scans), calls
        )

    def _writer(
        self, namespace: tuple[str, ...], key: str, write: _Write | None, calls: list[str]
    ) -> Callable[[], Awaitable[Any]]:
        if write is None:
            arguments: dict[str, Any] = {"namespace": namespace, "key": key}
            return lambda: self._audited(
                "store.delete", arguments, self._delete(namespace, key), calls
            )
        arguments = {"namespace": namespace, "key": key, "value": write.content}
        return lambda: self._audited(
            "store.put", arguments, self._put(namespace, key, write), calls
        )

    # --- the operations ---

    async def _audited(
        self, tool: str, arguments: dict[str, Any], work: Awaitable[Any], calls: list[str]
    ) -> Any:
        box: list[Any] = []

        async def run() -> ToolOutcome:
            box.append(await work)
            return ToolOutcome.ok("")

        await self.toolkit.call(
            tool,
            arguments,
            self.toolkit.session_id,
            run(),
            refuse=False,
            drain=False,
            calls=calls,
        )
        return box[0]

    async def _fact(self, namespace: tuple[str, ...], key: str) -> Decoded | None:
        """The item's fact, expired or not."""
        where = MemoryFilter(kind="fact", key=fact_key(self.prefix, namespace, key), limit=1)
        for memory in await self.backend.list(where):
            item = decode_item(self.prefix, memory)
            if item is not None and item.namespace == namespace and item.key == key:
                return item
        return None

    async def _refreshed(self, items: Sequence[Decoded], refresh: bool) -> None:
        """Extend the TTL of the items read that have one, when the read asks."""
        minutes = {i.memory.id: i.ttl for i in items if i.ttl is not None}
        if refresh and minutes:
            await self._store_backend("refresh_ttl").extend_expiry(minutes)

    async def _get(self, op: GetOp) -> Item | None:
        found = await self._fact(tuple(op.namespace), op.key)
        if found is None or not live(found.memory, datetime.now(UTC)):
            return None
        await self._refreshed([found], op.refresh_ttl)
        return Item(
            value=found.value,
            key=found.key,
            namespace=found.namespace,
            created_at=found.memory.created_at,
            updated_at=found.memory.updated_at,
        )

    async def _put(self, namespace: tuple[str, ...], key: str, write: _Write) -> None:
        # Embedded first: a model that fails leaves the item as it was.
        vectors = None
        if self.index is not None and write.texts is not None:
            vectors = await self.index.embed_documents(write.texts)
        expires_at = None
        if write.ttl is not None:
            expires_at = datetime.now(UTC) + timedelta(minutes=write.ttl)
        result = await self.backend.remember(
            write.content,
            key=fact_key(self.prefix, namespace, key),
            importance=self.importance,
            expires_at=expires_at,
        )
        if self.index is not None and vectors is not None:
            backend = self._store_backend("index=")
            await backend.write_vectors(result.memory, self.index.model, vectors)

    async def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        found = await self._fact(namespace, key)
        if found is None:
            return
        with contextlib.suppress(NotFoundError):  # deleted meanwhile: the outcome asked for
            await self.backend.delete(found.memory.id)

    async def _scan_once(self, namespace_prefix: tuple[str, ...], scans: _Scans) -> list[Decoded]:
        """``_scan`` made once per batch for every read that needs it."""
        scan = scans.get(namespace_prefix)
        if scan is None:
            scan = scans[namespace_prefix] = asyncio.ensure_future(self._scan(namespace_prefix))
        # Shielded: one reader's cancellation must not end the others' scan.
        return await asyncio.shield(scan)

    async def _scan(self, namespace_prefix: tuple[str, ...]) -> list[Decoded]:
        """This store's live items under ``namespace_prefix``, newest first."""
        pattern = prefix_pattern(namespace_prefix)
        found: list[Decoded] = []
        offset = 0
        now = datetime.now(UTC)
        while True:
            if offset >= self.scan_limit:
                raise ValidationError(
                    "scan_limit",
                    f"listing would read more than {self.scan_limit} facts of this resource; "
                    "search with a query, narrow the namespace, or raise scan_limit",
                )
            limit = min(PAGE, self.scan_limit - offset)
            page = await self.backend.list(
                MemoryFilter(kind="fact", text=pattern, limit=limit, offset=offset)
            )
            for memory in page:
                item = decode_item(self.prefix, memory)
                if (
                    item is not None
                    and item.namespace[: len(namespace_prefix)] == namespace_prefix
                    and live(memory, now)
                ):
                    found.append(item)
            if len(page) < PAGE:
                return found
            offset += len(page)

    async def _search(self, op: SearchOp, scans: _Scans) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        want = op.offset + op.limit
        if op.limit == 0:
            return []
        hits: list[tuple[Decoded, float | None]]
        if op.query is None or not op.query.strip():  # a blank query is no query
            hits = [
                (item, None)
                for item in await self._scan_once(prefix, scans)
                if filtered(item.value, op.filter)
            ]
        elif self.index is not None:
            hits = await self._ranked(op, scans)
        else:
            hits = await self._recalled(op, prefix, want)
        page = hits[op.offset : want]
        await self._refreshed([item for item, _score in page], op.refresh_ttl)
        return [
            SearchItem(
                namespace=item.namespace,
                key=item.key,
                value=item.value,
                created_at=item.memory.created_at,
                updated_at=item.memory.updated_at,
                score=score,
            )
            for item, score in page
        ]

    async def _ranked(self, op: SearchOp, scans: _Scans) -> list[tuple[Decoded, float | None]]:
        """Every item in scope, after ``filter``: those with vectors nearest first by the
        index's model (ties: newest first, as the scan lists them), then those without
        (``index=False``, or no text at the fields), newest first with no score, as
        ``InMemoryStore`` lists them."""
        assert self.index is not None and op.query is not None
        query = await self.index.embed_query(op.query)
        items = [
            item
            for item in await self._scan_once(tuple(op.namespace_prefix), scans)
            if filtered(item.value, op.filter)
        ]
        scores = await self._store_backend("index=").vector_scores(
            self.index.model, query, self.index.distance, [item.memory.id for item in items]
        )
        scored = [(item, scores[item.memory.id]) for item in items if item.memory.id in scores]
        scored.sort(key=lambda pair: pair[1], reverse=True)  # stable: newest first on ties
        unscored = [(item, None) for item in items if item.memory.id not in scores]
        return [*scored, *unscored]

    async def _recalled(
        self, op: SearchOp, prefix: tuple[str, ...], want: int
    ) -> list[tuple[Decoded, float | None]]:
        """popagent's recall, limited to the namespace prefix and ``filter``."""
        assert op.query is not None
        size = min(RECALL_CAP, max(4 * want, 32))
        while True:
            results = await self.backend.recall(op.query, limit=size)
            hits: list[tuple[Decoded, float | None]] = []
            for result in results:
                item = decode_item(self.prefix, result.memory)
                if item is None or item.namespace[: len(prefix)] != prefix:
                    continue
                if filtered(item.value, op.filter):
                    hits.append((item, result.score))
            if len(hits) >= want or len(results) < size or size == RECALL_CAP:
                return hits
            size = RECALL_CAP

    async def _list_namespaces(self, op: ListNamespacesOp, scans: _Scans) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        # A prefix condition without wildcards narrows the scan itself.
        narrow: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix" and "*" not in condition.path:
                narrow = tuple(condition.path)
                break
        seen = {item.namespace for item in await self._scan_once(narrow, scans)}
        kept = [ns for ns in seen if all(matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            depth = check_count(op.max_depth, "max_depth")
            names = sorted({ns[:depth] for ns in kept})
        else:
            names = sorted(kept)
        return names[op.offset : op.offset + op.limit]
