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

Semantics (those of LangGraph's own stores, ``InMemoryStore`` and ``PostgresStore``):

- ``batch``/``abatch`` validate every operation (namespace labels as
  ``validate_op_namespace`` does, every put's encoding, TTL) before anything is
  written; reads see the state before the batch's writes; several puts of one
  item keep the last; results come back in the operations' order. Each put is
  atomic; a batch as a whole is not a transaction (the database failing half way
  leaves the earlier puts in place).
- ``search`` with ``query`` is popagent's recall (lexical, or fused with vectors
  when the memory has an embedder); ``SearchItem.score`` is recall's score.
  Without a query it lists the items newest first. ``filter`` matches values
  like ``InMemoryStore`` (equality, nested objects, ``$eq $ne $gt $gte $lt $lte``).
- ``index`` arguments are accepted and do not narrow anything: popagent indexes
  the whole item. TTL is not supported (``supports_ttl`` is false).
- ``updated_at`` moves when a put changes the value; a put of the same value
  changes nothing (popagent's ``unchanged``).
- Listing (search without a query, ``list_namespaces``) pages through the
  resource's facts, at most ``scan_limit`` of them (default 100,000; more is a
  ``ValidationError`` naming ``scan_limit``).

Every store operation is hooked and audited as a call named ``store.get``,
``store.put``, ``store.delete``, ``store.search`` or ``store.list_namespaces``
(argument names and sizes only), and the tools as ``remember``/``recall``.
Sync methods work from threads other than the one running the backend's event
loop (LangGraph runs sync graphs' nodes so); from that thread use the async ones.

LangGraph is an optional extra: ``pip install "popagent[langgraph]"``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
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
from ..memory.longterm import LongTermMemory
from ..memory.validation import (
    FACT_CONTENT_CAP,
    check_importance,
    normalize_fact_content,
    normalize_key,
)
from ..models import Memory
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
#: Facts per ``list_facts`` page while scanning (popagent's list cap).
PAGE = 1_000
#: Recall's own cap on ``limit``.
RECALL_CAP = 1_000
#: Concurrent reads of one batch (each borrows a pooled connection).
READ_CONCURRENCY = 4

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


def _filtered(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return not filter or all(_compare(value.get(name), want) for name, want in filter.items())


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


class PopagentStore(BaseStore):
    """LangGraph's long-term memory store on popagent's facts of one resource.

    ``backend`` is a ``MemoryBackend``, or a ``LongTermMemory`` with the
    ``resource_id`` it acts for. ``prefix`` (lower case, like every fact key)
    sets this store's items apart from the resource's other facts; two stores
    with different prefixes on one resource do not see each other's items.
    ``importance`` is given to every item's fact. ``hooks`` default to an
    ``AuditHook`` for an in-process backend; ``session_id`` is the audit session.
    Make the store inside the event loop that owns the backend (or pass ``loop``).
    """

    supports_ttl = False

    def __init__(
        self,
        backend: MemoryBackend | LongTermMemory,
        resource_id: str | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        importance: float = 0.5,
        scan_limit: int = SCAN_LIMIT,
        hooks: Sequence[Hook] | None = None,
        session_id: str | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
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
        self.toolkit = MemoryToolkit(self.backend, hooks=hooks, session_id=session_id)
        self._bridge = LoopBridge(loop)

    # --- the two methods BaseStore builds everything on ---

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """``abatch`` from synchronous code in another thread than the backend's loop."""
        return self._bridge.run(self.abatch(ops), use="abatch (aget, aput, asearch, ...)")

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._bridge.note_running()
        ops = list(ops)
        writes: dict[tuple[tuple[str, ...], str], tuple[PutOp, str | None]] = {}
        for op in ops:
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
                raise ValueError(f"Unknown operation type: {type(op)}")
            validate_op_namespace(op)
            if isinstance(op, SearchOp | ListNamespacesOp):
                _count(op.limit, "limit")
                _count(op.offset, "offset")
            elif isinstance(op, PutOp):
                if op.ttl is not None:
                    raise NotImplementedError(
                        "TTL is not supported by PopagentStore; popagent keeps facts until "
                        "they are deleted. Use ttl=None."
                    )
                namespace = tuple(op.namespace)
                content = None if op.value is None else encode_item(namespace, op.key, op.value)
                writes.pop((namespace, op.key), None)  # the last put of an item wins
                writes[(namespace, op.key)] = (op, content)
        results: list[Result] = [None] * len(ops)
        gate = asyncio.Semaphore(READ_CONCURRENCY)

        async def read(i: int, op: Op) -> None:
            async with gate:
                if isinstance(op, GetOp):
                    results[i] = await self._audited(
                        "store.get", {"namespace": op.namespace, "key": op.key}, self._get(op)
                    )
                elif isinstance(op, SearchOp):
                    arguments = {"namespace_prefix": op.namespace_prefix}
                    arguments.update(
                        {n: getattr(op, n) for n in ("query", "filter") if getattr(op, n)}
                    )
                    results[i] = await self._audited("store.search", arguments, self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    results[i] = await self._audited(
                        "store.list_namespaces",
                        {"match_conditions": op.match_conditions, "max_depth": op.max_depth},
                        self._list_namespaces(op),
                    )

        reads = [
            asyncio.ensure_future(read(i, op))
            for i, op in enumerate(ops)
            if not isinstance(op, PutOp)
        ]
        try:
            try:
                await asyncio.gather(*reads)
            except BaseException:
                # One read failed: the others stop too, and no write is made.
                for task in reads:
                    task.cancel()
                await asyncio.gather(*reads, return_exceptions=True)
                raise
            for (namespace, key), (_op, content) in writes.items():
                if content is None:
                    await self._audited(
                        "store.delete",
                        {"namespace": namespace, "key": key},
                        self._delete(namespace, key),
                    )
                else:
                    await self._audited(
                        "store.put",
                        {"namespace": namespace, "key": key, "value": content},
                        self._put(namespace, key, content),
                    )
        finally:
            await self.toolkit.hooks.drain()
        return results

    # --- the operations ---

    async def _audited(self, tool: str, arguments: dict[str, Any], work: Any) -> Any:
        box: list[Any] = []

        async def run() -> ToolOutcome:
            box.append(await work)
            return ToolOutcome.ok("")

        await self.toolkit.call(
            tool, arguments, self.toolkit.session_id, run(), refuse=False, drain=False
        )
        return box[0]

    async def _fact(
        self, namespace: tuple[str, ...], key: str
    ) -> tuple[Memory, dict[str, Any]] | None:
        facts = await self.backend.list_facts(key=fact_key(self.prefix, namespace, key), limit=1)
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
            await self.backend.delete_fact(found[0].id)

    async def _scan(
        self, namespace_prefix: tuple[str, ...]
    ) -> list[tuple[Memory, tuple[str, ...], str, dict[str, Any]]]:
        """This store's items under ``namespace_prefix``, newest first."""
        pattern = _prefix_pattern(namespace_prefix)
        found: list[tuple[Memory, tuple[str, ...], str, dict[str, Any]]] = []
        offset = 0
        while True:
            if offset >= self.scan_limit:
                raise ValidationError(
                    "scan_limit",
                    f"listing would read more than {self.scan_limit} facts of this resource; "
                    "search with a query, narrow the namespace, or raise scan_limit",
                )
            page = await self.backend.list_facts(
                text=pattern, limit=min(PAGE, self.scan_limit - offset), offset=offset
            )
            for memory in page:
                decoded = decode_fact(self.prefix, memory)
                if decoded is not None and decoded[0][: len(namespace_prefix)] == namespace_prefix:
                    found.append((memory, *decoded))
            if len(page) < PAGE:
                return found
            offset += len(page)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        want = op.offset + op.limit
        if op.limit == 0:
            return []
        hits: list[tuple[Memory, tuple[str, ...], str, dict[str, Any], float | None]]
        if op.query is None:
            hits = [
                (memory, ns, key, value, None)
                for memory, ns, key, value in await self._scan(prefix)
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

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        # A prefix condition without wildcards narrows the scan itself.
        narrow: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix" and "*" not in condition.path:
                narrow = tuple(condition.path)
                break
        seen = {ns for _memory, ns, _key, _value in await self._scan(narrow)}
        kept = [ns for ns in seen if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            depth = _count(op.max_depth, "max_depth")
            names = sorted({ns[:depth] for ns in kept})
        else:
            names = sorted(kept)
        return names[op.offset : op.offset + op.limit]
