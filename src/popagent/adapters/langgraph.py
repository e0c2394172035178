"""LangGraph: a ``BaseStore`` on popagent's facts, and memory tools for ``create_react_agent``.

::

    from popagent.adapters.langgraph import PopagentStore, memory_tools

    store = PopagentStore(memory, "user-42")        # or PopagentStore(backend)
    await store.aput(("memories", "prefs"), "editor", {"text": "Uses Helix, not Vim"})
    hits = await store.asearch(("memories",), query="which editor?")   # popagent recall
    agent = create_react_agent(model, memory_tools(store.backend), store=store)

How an item becomes a fact (reversible, see ``encode_item``/``decode_fact``):

- **Key**: ``prefix`` (default ``"langgraph:"``) plus 40 hex digits of the SHA-256
  of the exact namespace and key (``json.dumps([list(namespace), key])``), so
  LangGraph's case-sensitive, arbitrarily long keys fit popagent's lower-cased
  128-character fact keys, and a ``put`` of the same item upserts one fact.
- **Content**: the item as compact JSON, ``{"namespace":[...],"key":...,"value":{...}}``,
  written so that popagent's normalization (NFC, whitespace runs collapsed,
  trimmed) leaves it unchanged: whitespace other than a single space, and
  unpaired surrogates, are ``\\uXXXX`` escapes, and an item whose text is not in
  NFC is written all in ASCII escapes. ``get`` parses it back exactly. Text the
  escapes hide from the lexical index (multi-line strings, for one) follows the
  JSON as plain normalized words, so recall still finds it.
- **Limits**: the JSON must fit popagent's 2,000-character fact (a longer item is a
  ``ValidationError`` on ``value`` naming its size), values must be JSON objects
  with string keys, and popagent's credential screen applies: a value holding a
  password or token is refused with ``SecretRefusedError``, and nothing is written.

Semantics (those of LangGraph's own stores, ``InMemoryStore`` and ``PostgresStore``,
unless said otherwise):

- ``batch``/``abatch`` validate every operation (namespace labels as
  ``validate_op_namespace`` does, every put's encoding, TTL, ``index``) before
  anything is written; reads see the state before the batch's writes; several
  puts of one item keep the last; results come back in the operations' order.
  Each put is atomic; a batch as a whole is not a transaction (the database
  failing half way leaves the earlier puts in place).
- Concurrent calls are merged, as LangGraph's ``AsyncBatchedBaseStore`` does:
  every call (``aget``, ``aput``, ..., ``abatch``, and the sync methods through
  the owner loop) joins a queue, and one batch at a time serves everything
  queued so far on that event loop, with at most ``concurrency`` backend calls
  (pooled connections) at once and identical reads made once. Calls stay
  independent: one call's invalid operation, failed read or failed write fails
  that call (and, for a write, the calls whose puts of the same item it
  replaced), never another.
- ``search`` with a ``query`` is popagent's recall (lexical, or fused with
  vectors when the memory has an embedder), limited to the namespace prefix
  and ``filter``: it returns what recall finds, best first, and
  ``SearchItem.score`` is recall's score (unbounded, explained by its
  components), where LangGraph's stores with an index rank every item in scope
  by vector similarity. A blank query (``""``) is no query: the items newest
  first, as without one. ``filter`` matches values like ``InMemoryStore``
  (equality, nested objects, ``$eq $ne $gt $gte $lt $lte``); a dotted key
  that is not a key of the value names a nested field (``"user.level"``), as
  LangGraph's SQL stores read it.
- Not supported, refused with ``NotImplementedError`` before anything is
  written: ``index=`` on a put (fields to embed, or ``False``: popagent indexes
  the whole item, lexically and with the memory's embedder), the store's
  ``index=`` embedding config (give ``popagent.connect(embedder=...)`` instead),
  and TTL (``ttl=`` on a put or the store; ``supports_ttl`` is false: facts
  stay until deleted).
- ``updated_at`` moves when a put changes the value; a put of the same value
  changes nothing (popagent's ``unchanged``).
- Listing (search without a query, ``list_namespaces``) pages through the
  resource's facts, at most ``scan_limit`` of them (default 100,000; more is a
  ``ValidationError`` naming ``scan_limit``).

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
import hashlib
import json
import re
import unicodedata
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

try:
    from langgraph.store.base import (
        NOT_PROVIDED,
        BaseStore,
        GetOp,
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
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised by the import test in a subprocess
    raise ImportError(
        'popagent.adapters.langgraph needs LangGraph: pip install "popagent[langgraph]"'
    ) from exc

from ..agent.hooks import Hook
from ..agent.tools import ToolOutcome
from ..checks import strip_blank
from ..errors import NotFoundError, ValidationError
from ..memory.validation import (
    FACT_CONTENT_CAP,
    check_importance,
    normalize_fact_content,
    normalize_key,
)
from ..models import Memory, MemoryFilter
from ..root import Popagent
from .backend import MemoryBackend
from .langchain import memory_tools
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

DEFAULT_PREFIX = "langgraph:"
SCAN_LIMIT = 100_000
DIGEST_CHARS = 40
#: Facts per ``MemoryBackend.list`` page while scanning (popagent's list cap).
PAGE = 1_000
#: Recall's own cap on ``limit``.
RECALL_CAP = 1_000
#: Backend calls one store makes at once on an event loop (each borrows a pooled connection).
CONCURRENCY = 4

INDEX_REFUSAL = (
    "index= is not supported by PopagentStore: popagent indexes the whole item, lexically "
    "and with the memory's embedder (popagent.connect(embedder=...)); leave index as None"
)
TTL_REFUSAL = (
    "TTL is not supported by PopagentStore; popagent keeps facts until they are deleted. "
    "Use ttl=None."
)

_WHITESPACE = re.compile(r"\s+")
_COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


# --- the item <-> fact mapping ----------------------------------------------------------


def fact_key(prefix: str, namespace: Sequence[str], key: str) -> str:
    """The popagent fact key of the item ``(namespace, key)``: prefix + 40 hex digits."""
    ident = json.dumps([list(namespace), key], ensure_ascii=True, separators=(",", ":"))
    return prefix + hashlib.sha256(ident.encode("ascii")).hexdigest()[:DIGEST_CHARS]


def _json(obj: object, *, ascii: bool) -> str:
    """Compact JSON that popagent's normalization leaves as it is (NFC aside)."""
    text = json.dumps(obj, ensure_ascii=ascii, separators=(",", ":"), allow_nan=False)
    out: list[str] = []
    prev = ""
    for ch in text:
        # Outside strings compact JSON has no whitespace, so every space is in one.
        if (ch.isspace() and (ch != " " or prev == " ")) or unicodedata.category(ch) == "Cs":
            out.append(f"\\u{ord(ch):04x}")
            prev = ""
        else:
            out.append(ch)
            prev = ch
    return "".join(out)


def _plain(value: object, field: str) -> Any:
    """``value`` checked as JSON: objects with string keys, lists, strings, finite numbers,
    booleans and null (tuples are lists, as JSON has it)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValidationError(field, "must hold only finite numbers (JSON has no NaN)")
        return value
    if isinstance(value, Mapping):
        plain: dict[str, Any] = {}
        for name, inner in value.items():
            if not isinstance(name, str):
                raise ValidationError(
                    field, f"object keys must be strings, not {type(name).__name__}"
                )
            plain[name] = _plain(inner, field)
        return plain
    if isinstance(value, list | tuple):
        return [_plain(inner, field) for inner in value]
    raise ValidationError(field, f"must be JSON: {type(value).__name__} is not")


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def encode_item(namespace: Sequence[str], key: str, value: Mapping[str, Any]) -> str:
    """The fact content of an item (see the module doc); ``ValidationError`` when it cannot fit.

    ``decode`` of the result gives back exactly ``(namespace, key, value)``.
    """
    if not isinstance(key, str):
        raise ValidationError("key", f"must be a string, not {type(key).__name__}")
    if not isinstance(value, Mapping):
        raise ValidationError("value", f"must be a JSON object, not {type(value).__name__}")
    plain = _plain(value, "value")
    for ascii in (False, True):
        body = (
            '{"namespace":'
            + _json(list(namespace), ascii=ascii)
            + ',"key":'
            + _json(key, ascii=ascii)
            + ',"value":'
            + _json(plain, ascii=ascii)
            + "}"
        )
        if ascii or unicodedata.is_normalized("NFC", body):
            break
    if len(body) > FACT_CONTENT_CAP:
        raise ValidationError(
            "value",
            f"the item (namespace, key and value as JSON) takes {len(body)} characters; "
            f"a popagent fact holds at most {FACT_CONTENT_CAP}",
        )
    # Words the escapes glue together or hide (newlines, tabs, non-NFC text in ASCII
    # escapes), as plain text after the JSON, for recall only.
    hidden = [
        strip_blank(_WHITESPACE.sub(" ", unicodedata.normalize("NFC", s)))
        for s in _strings(plain)
        if _json(s, ascii=ascii)[1:-1] != s
    ]
    tail = " ".join(h for h in hidden if h)[: max(0, FACT_CONTENT_CAP - len(body) - 1)]
    content = f"{body} {tail}" if tail.strip() else body
    try:
        normalized = normalize_fact_content(content, "value")
    except ValidationError as exc:
        if exc.field != "value" or content == body:
            raise
        normalized = normalize_fact_content(body, "value")
    if not normalized.startswith(body):
        normalized = normalize_fact_content(body, "value")
    if not normalized.startswith(body):  # pragma: no cover - the escapes above prevent it
        raise ValidationError("value", "cannot be stored exactly as a popagent fact")
    return normalized


def decode_fact(prefix: str, memory: Memory) -> tuple[tuple[str, ...], str, dict[str, Any]] | None:
    """``(namespace, key, value)`` of a fact this mapping wrote under ``prefix``, else ``None``
    (another fact of the resource, an episode, or a fact whose key does not match its item)."""
    if memory.kind != "fact" or memory.key is None or not memory.key.startswith(prefix):
        return None
    try:
        parsed, _end = json.JSONDecoder().raw_decode(memory.content)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or set(parsed) != {"namespace", "key", "value"}:
        return None
    namespace, key, value = parsed["namespace"], parsed["key"], parsed["value"]
    if (
        not isinstance(namespace, list)
        or not all(isinstance(label, str) for label in namespace)
        or not isinstance(key, str)
        or not isinstance(value, dict)
        or fact_key(prefix, namespace, key) != memory.key
    ):
        return None
    return tuple(namespace), key, value


def _prefix_pattern(namespace_prefix: tuple[str, ...]) -> str | None:
    """Text every item under ``namespace_prefix`` holds, to narrow a scan; ``None`` when the
    labels' encoding depends on the rest of the item."""
    if not namespace_prefix:
        return None
    readable = _json(list(namespace_prefix), ascii=False)
    if readable != _json(list(namespace_prefix), ascii=True):
        return None
    return '"namespace":' + readable[:-1]


# --- filters and namespace matching (InMemoryStore's rules) ------------------------------


def _compare(item_value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(name.startswith("$") for name in wanted):
            return all(_operator(item_value, op, arg) for op, arg in wanted.items())
        if not isinstance(item_value, dict):
            return False
        return all(_compare(item_value.get(name), inner) for name, inner in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(item_value, list | tuple)
            and len(item_value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(item_value, wanted, strict=True))
        )
    return bool(item_value == wanted)


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if op not in _COMPARISONS:
        raise ValidationError("filter", f"unsupported operator {op!r} (use one of {_COMPARISONS})")
    try:
        left, right = float(value), float(arg)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return left > right
    if op == "$gte":
        return left >= right
    if op == "$lt":
        return left < right
    return left <= right


_MISSING = object()


def _field(value: dict[str, Any], name: str) -> Any:
    """``value[name]``; else, for a dotted name, the nested field it names
    (``"user.level"``, as LangGraph's SQL stores read filter keys); else ``None``."""
    if name in value:
        return value[name]
    found: Any = value
    for part in name.split(".") if "." in name else ():
        found = found.get(part, _MISSING) if isinstance(found, dict) else _MISSING
        if found is _MISSING:
            return None
    return None if found is value else found


def _filtered(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return not filter or all(_compare(_field(value, name), want) for name, want in filter.items())


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValidationError(
            "match_type", f"must be 'prefix' or 'suffix', not {condition.match_type!r}"
        )
    return all(want == "*" or have == want for have, want in pairs)


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(field, "must be an integer >= 0")
    return value


# --- the store ---------------------------------------------------------------------------


#: One item found by a scan: its fact, namespace, key and value.
_Found = tuple[Memory, tuple[str, ...], str, dict[str, Any]]
#: The scans of one batch, by namespace prefix, shared by the reads that need them.
_Scans = dict[tuple[str, ...], "asyncio.Future[list[_Found]]"]


@dataclass(eq=False)
class _Request:
    """One call's operations waiting in a store's queue, and where its results go."""

    ops: list[Op]
    done: asyncio.Future[list[Result]]


@dataclass(eq=False)
class _Queue:
    """A store's queue on one event loop, and the task serving it."""

    waiting: list[_Request] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _Plan:
    """One call's operations, checked: its reads (by position) and its puts' contents."""

    ops: list[Op]
    reads: list[tuple[int, GetOp | SearchOp | ListNamespacesOp]]
    writes: dict[tuple[tuple[str, ...], str], str | None]
    results: list[Result]
    failed: BaseException | None = None


def _read_key(op: GetOp | SearchOp | ListNamespacesOp) -> tuple[Any, ...] | None:
    """Equal for reads that must give the same result (made once per batch); ``None``
    when the op cannot be compared so (a filter that is not JSON)."""
    try:
        if isinstance(op, GetOp):
            return ("get", tuple(op.namespace), op.key)
        if isinstance(op, SearchOp):
            return (
                "search",
                tuple(op.namespace_prefix),
                json.dumps(op.filter, sort_keys=True),
                op.limit,
                op.offset,
                op.query,
            )
        conditions = tuple((c.match_type, tuple(c.path)) for c in (op.match_conditions or ()))
        return ("list", conditions, op.max_depth, op.limit, op.offset)
    except (TypeError, ValueError):
        return None


def _gated(gate: asyncio.Semaphore, work: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]:
    """``work()`` as a task that runs once ``gate`` lets it."""

    async def run() -> Any:
        async with gate:
            return await work()

    return asyncio.ensure_future(run())


async def _settled(tasks: list[asyncio.Future[Any]]) -> None:
    """Wait until every task is done; when this wait is cancelled, so are they."""
    if not tasks:
        return
    try:
        await asyncio.wait(tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


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
    event loop. ``index`` and ``ttl`` exist to refuse LangGraph's embedding
    and TTL configs with a clear ``NotImplementedError`` (module doc).

    A local backend's event loop is its pool's; for a remote one, make the
    store inside the event loop that owns its client (or pass ``loop``).
    """

    supports_ttl = False

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
        index: object = None,
        ttl: object = None,
    ) -> None:
        if index is not None:
            raise NotImplementedError(INDEX_REFUSAL)
        if ttl is not None:
            raise NotImplementedError(TTL_REFUSAL)
        self.backend = as_backend(backend, resource_id, origin="langgraph")
        checked = normalize_key(prefix + "0" * DIGEST_CHARS, "prefix")
        if checked != prefix + "0" * DIGEST_CHARS or len(prefix) > 64:
            raise ValidationError(
                "prefix", "must be lower case, at most 64 characters, without whitespace"
            )
        self.prefix = prefix
        self.importance = check_importance(importance)
        if isinstance(scan_limit, bool) or not isinstance(scan_limit, int) or scan_limit < 1:
            raise ValidationError("scan_limit", "must be a positive integer")
        self.scan_limit = scan_limit
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValidationError("concurrency", "must be a positive integer")
        self.concurrency = concurrency
        self.toolkit = MemoryToolkit(self.backend, hooks=hooks, session_id=session_id)
        self._bridge = LoopBridge.of(self.backend, loop)
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = (
            weakref.WeakKeyDictionary()
        )

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
        item: Item | None = (await self.abatch([GetOp(namespace, str(key))]))[0]  # type: ignore[assignment]
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
        op = SearchOp(namespace_prefix, filter, limit, offset, query)
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
        if ttl not in (NOT_PROVIDED, None):
            raise NotImplementedError(TTL_REFUSAL)
        await self.abatch([PutOp(namespace, str(key), value, index=index)])

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

    # --- the queue ---

    async def _enqueue(self, ops: Iterable[Op]) -> list[Result]:
        """Queue one call's operations on the running loop; its results once served."""
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue()
        request = _Request(list(ops), loop.create_future())
        queue.waiting.append(request)
        if queue.task is None or queue.task.done():
            queue.task = loop.create_task(self._serve(queue))
        return await request.done

    async def _serve(self, queue: _Queue) -> None:
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
        writes: dict[tuple[tuple[str, ...], str], str | None] = {}
        for i, op in enumerate(ops):
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
                raise ValueError(f"Unknown operation type: {type(op)}")
            validate_op_namespace(op)
            if isinstance(op, SearchOp | ListNamespacesOp):
                _count(op.limit, "limit")
                _count(op.offset, "offset")
            if isinstance(op, PutOp):
                if op.ttl is not None:
                    raise NotImplementedError(TTL_REFUSAL)
                if op.index is not None and op.value is not None:
                    raise NotImplementedError(INDEX_REFUSAL)
                namespace = tuple(op.namespace)
                content = None if op.value is None else encode_item(namespace, op.key, op.value)
                writes.pop((namespace, op.key), None)  # the last put of an item wins
                writes[(namespace, op.key)] = content
            else:
                reads.append((i, op))
        return _Plan(ops, reads, writes, [None] * len(ops))

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
                    readers[key] = (_gated(gate, self._reader(op, calls, scans)), [])
                readers[key][1].append((plan, i))
        await _settled([reader for reader, _users in readers.values()])
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
        writes: dict[tuple[tuple[str, ...], str], tuple[str | None, list[_Plan]]] = {}
        for plan in plans:
            if plan.failed is not None:
                continue
            for item, content in plan.writes.items():
                _replaced, putters = writes.pop(item, (None, []))
                writes[item] = (content, [*putters, plan])
        writers = [
            (_gated(gate, self._writer(ns, key, content, calls)), putters)
            for (ns, key), (content, putters) in writes.items()
        ]
        await _settled([writer for writer, _putters in writers])
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
        self, namespace: tuple[str, ...], key: str, content: str | None, calls: list[str]
    ) -> Callable[[], Awaitable[Any]]:
        if content is None:
            arguments: dict[str, Any] = {"namespace": namespace, "key": key}
            return lambda: self._audited(
                "store.delete", arguments, self._delete(namespace, key), calls
            )
        arguments = {"namespace": namespace, "key": key, "value": content}
        return lambda: self._audited(
            "store.put", arguments, self._put(namespace, key, content), calls
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

    async def _fact(
        self, namespace: tuple[str, ...], key: str
    ) -> tuple[Memory, dict[str, Any]] | None:
        where = MemoryFilter(kind="fact", key=fact_key(self.prefix, namespace, key), limit=1)
        facts = await self.backend.list(where)
        for memory in facts:
            decoded = decode_fact(self.prefix, memory)
            if decoded is not None and decoded[0] == namespace and decoded[1] == key:
                return memory, decoded[2]
        return None

    async def _get(self, op: GetOp) -> Item | None:
        namespace = tuple(op.namespace)
        found = await self._fact(namespace, op.key)
        if found is None:
            return None
        memory, value = found
        return Item(
            value=value,
            key=op.key,
            namespace=namespace,
            created_at=memory.created_at,
            updated_at=memory.updated_at,
        )

    async def _put(self, namespace: tuple[str, ...], key: str, content: str) -> None:
        await self.backend.remember(
            content, key=fact_key(self.prefix, namespace, key), importance=self.importance
        )

    async def _delete(self, namespace: tuple[str, ...], key: str) -> None:
        found = await self._fact(namespace, key)
        if found is None:
            return
        with contextlib.suppress(NotFoundError):  # deleted meanwhile: the outcome asked for
            await self.backend.delete(found[0].id)

    async def _scan_once(self, namespace_prefix: tuple[str, ...], scans: _Scans) -> list[_Found]:
        """``_scan`` made once per batch for every read that needs it."""
        scan = scans.get(namespace_prefix)
        if scan is None:
            scan = scans[namespace_prefix] = asyncio.ensure_future(self._scan(namespace_prefix))
        # Shielded: one reader's cancellation must not end the others' scan.
        return await asyncio.shield(scan)

    async def _scan(self, namespace_prefix: tuple[str, ...]) -> list[_Found]:
        """This store's items under ``namespace_prefix``, newest first."""
        pattern = _prefix_pattern(namespace_prefix)
        found: list[_Found] = []
        offset = 0
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
                decoded = decode_fact(self.prefix, memory)
                if decoded is not None and decoded[0][: len(namespace_prefix)] == namespace_prefix:
                    found.append((memory, *decoded))
            if len(page) < PAGE:
                return found
            offset += len(page)

    async def _search(self, op: SearchOp, scans: _Scans) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        want = op.offset + op.limit
        if op.limit == 0:
            return []
        hits: list[tuple[Memory, tuple[str, ...], str, dict[str, Any], float | None]]
        if op.query is None or not op.query.strip():  # a blank query is no query
            hits = [
                (memory, ns, key, value, None)
                for memory, ns, key, value in await self._scan_once(prefix, scans)
                if _filtered(value, op.filter)
            ]
        else:
            size = min(RECALL_CAP, max(4 * want, 32))
            while True:
                results = await self.backend.recall(op.query, limit=size)
                hits = []
                for result in results:
                    decoded = decode_fact(self.prefix, result.memory)
                    if decoded is None or decoded[0][: len(prefix)] != prefix:
                        continue
                    if _filtered(decoded[2], op.filter):
                        hits.append((result.memory, *decoded, result.score))
                if len(hits) >= want or len(results) < size or size == RECALL_CAP:
                    break
                size = RECALL_CAP
        return [
            SearchItem(
                namespace=ns,
                key=key,
                value=value,
                created_at=memory.created_at,
                updated_at=memory.updated_at,
                score=score,
            )
            for memory, ns, key, value, score in hits[op.offset : want]
        ]

    async def _list_namespaces(self, op: ListNamespacesOp, scans: _Scans) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        # A prefix condition without wildcards narrows the scan itself.
        narrow: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix" and "*" not in condition.path:
                narrow = tuple(condition.path)
                break
        seen = {ns for _memory, ns, _key, _value in await self._scan_once(narrow, scans)}
        kept = [ns for ns in seen if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            depth = _count(op.max_depth, "max_depth")
            names = sorted({ns[:depth] for ns in kept})
        else:
            names = sorted(kept)
        return names[op.offset : op.offset + op.limit]
