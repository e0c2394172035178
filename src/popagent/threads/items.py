"""``SessionItems``: a framework session's items, kept exactly, as a thread's messages.

The OpenAI Agents SDK keeps a session as a list of input items (JSON objects: a
message, a function call or its output, a reasoning item, ...). Each item is
stored as one message of the popagent session of the same id: the item itself,
verbatim, in ``popagent_messages.item``, and beside it popagent's own view of it
(``role``, ``content``, ``parts``), which is what the GUI, the observer and the
API's message list read:

- a message item keeps its role (``developer`` reads as ``system``) and its
  text (the text of its content parts, joined by newlines);
- ``function_call`` is an assistant message with a ``tool_call`` part;
- ``function_call_output`` is a tool message with its output as text and a
  ``tool_result`` part;
- ``reasoning`` is an assistant message holding its summary text;
- any other kind is an assistant message (a tool message for ``*_output``
  kinds) with no text.

Invariants:
- Credentials are screened as ``ThreadStore`` screens every message: each one
  in the item's strings (function-call arguments parsed as JSON) is replaced by
  ``[REDACTED:<kind>]`` before anything is stored, and the view is built from
  the screened item. Opaque payloads are kept as they are: ``encrypted_content``,
  ``file_data`` and ``data:`` URLs are ciphertext or base64, not text. So an
  item reads back exactly as added unless it held a credential.
- A batch of items is written by one statement: all of it or none of it. A
  session is created by its first write.
- Reading a session that popagent itself also wrote (an ``Agent`` turn, the
  API) gives each plain user, assistant or system message with text as a
  ``{"role", "content"}`` item; its tool messages have no item form and are left out.
- Clearing keeps the session (title, metadata, creation time) and empties every
  thread-scoped table; long-term memory is never touched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..checks import check_id, check_limit
from ..credentials import redact_credentials, redact_json, redact_json_text
from ..errors import ValidationError
from ..offload import json_size, off_loop
from ..store import session_items as sql
from ..store.database import Pool
from .service import refuse_new_unreachable

__all__ = ["ITEM_BATCH_CAP", "ITEM_CAP", "SessionItems", "check_item", "item_view", "screen_item"]

#: The largest item, as JSON text (the same cap as a message's content).
ITEM_CAP = 1_000_000
#: The most items one ``append`` writes.
ITEM_BATCH_CAP = 1_000
_READ_PAGE = 1_000
_OPAQUE_KEYS = frozenset({"encrypted_content", "file_data"})
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _opaque(key: str, value: object) -> bool:
    if not isinstance(value, str):
        return False
    return key in _OPAQUE_KEYS or (key in ("image_url", "url") and value.startswith("data:"))


def screen_item(value: Any) -> Any:
    """``value`` with every credential redacted, opaque payloads untouched (module doc).

    What ``SessionItems.append`` stores; the portable importer screens an
    imported item the same way."""
    if isinstance(value, list):
        return [screen_item(v) for v in value]
    if not isinstance(value, dict):
        return redact_json(value)
    out: dict[str, Any] = {}
    for key, v in value.items():
        if _opaque(key, v):
            out[key] = v
        elif key == "arguments" and isinstance(v, str):
            out[key] = redact_json_text(v)
        elif isinstance(v, dict | list):
            out[redact_credentials(key)[0]] = screen_item(v)
        else:
            # One pair at a time, so a value under a field named for a credential
            # ("password": ...) is redacted whole, as redact_json does.
            out.update(redact_json({key: v}))
    return out


def check_item(i: int, item: object) -> dict[str, Any]:
    """``item`` (the ``i``-th of a batch) if it can be stored as an item, else
    ``ValidationError("items[i]", ...)``: a JSON object, JSON-serializable, no NUL
    character or lone surrogate, at most ``ITEM_CAP`` characters as JSON."""
    field = f"items[{i}]"
    if not isinstance(item, dict):
        raise ValidationError(field, "must be a JSON object")
    try:
        text = json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(field, f"must be JSON-serializable: {exc}") from exc
    if "\\u0000" in text:
        raise ValidationError(field, "must not contain NUL characters")
    try:
        # PostgreSQL's jsonb refuses lone surrogates, which Python strings can hold.
        json.dumps(item, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise ValidationError(field, "must be valid Unicode (no lone surrogates)") from exc
    if len(text) > ITEM_CAP:
        raise ValidationError(field, f"must be at most {ITEM_CAP} characters as JSON")
    return item


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                texts.append(text)
            elif isinstance(part.get("type"), str):
                texts.append(f"[{part['type']}]")
    return "\n".join(texts)


def item_view(item: dict[str, Any]) -> tuple[str, str, list[dict[str, Any]]]:
    """popagent's ``(role, content, parts)`` for an item (see the module doc)."""
    kind = item.get("type")
    if kind in (None, "message") and isinstance(item.get("role"), str):
        role = _ROLES.get(item["role"], "assistant")
        text = _text_of(item.get("content"))
        return role, text or f"[{item['role']} message]", []
    if kind == "function_call":
        part = {
            "type": "tool_call",
            "id": str(item.get("call_id", "")),
            "name": str(item.get("name", "")),
            "arguments": item.get("arguments") if isinstance(item.get("arguments"), str) else "",
        }
        return "assistant", "", [part]
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _text_of(output)
        return "tool", text, [{"type": "tool_result", "tool_call_id": str(item.get("call_id", ""))}]
    if kind == "reasoning":
        return "assistant", _text_of(item.get("summary")), []
    if isinstance(kind, str) and kind.endswith("_output"):
        return "tool", "", []
    return "assistant", "", []


def _as_item(row: sql.ItemRow) -> dict[str, Any] | None:
    _id, role, content, item = row
    if item is not None:
        return item
    if role in ("user", "assistant", "system") and content:
        return {"role": role, "content": content}
    return None


def _screened_rows(items: Sequence[object]) -> list[dict[str, Any]]:
    """The batch checked and screened, each item with its view: what ``append``
    writes. Linear in the batch's size, so a large batch is handled off the event loop."""
    rows: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        screened = screen_item(check_item(i, item))
        role, content, parts = item_view(screened)
        rows.append({"role": role, "content": content, "parts": parts, "item": screened})
    return rows


class SessionItems:
    """Append, read, pop and clear the items of one session (see module doc)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def append(self, resource_id: str, session_id: str, items: Sequence[object]) -> list[int]:
        """Store ``items`` in order, screened, creating the session; their message ids."""
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        if len(items) > ITEM_BATCH_CAP:
            raise ValidationError("items", f"must be at most {ITEM_BATCH_CAP} per call")
        rows = await off_loop(json_size(list(items)), _screened_rows, items)
        if not rows:
            return []
        async with self._pool.connection() as conn:
            await refuse_new_unreachable(conn, resource_id, session_id)
            written = await sql.append_items(conn, resource_id, session_id, rows)
        return [row[0] for row in written]

    async def get(
        self, resource_id: str, session_id: str, *, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """All items oldest first, or the ``limit`` newest; an unknown session has none."""
        return [item for _id, item in await self.page(resource_id, session_id, last=limit)]

    async def page(
        self,
        resource_id: str,
        session_id: str,
        *,
        after_id: int | None = None,
        limit: int | None = None,
        last: int | None = None,
    ) -> list[tuple[int, dict[str, Any]]]:
        """``(message id, item)`` oldest first: after ``after_id`` (at most ``limit``,
        all when ``None``), or the ``last`` newest."""
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            if last is not None:
                rows = await sql.latest_items(
                    conn, resource_id, session_id, limit=check_limit(last, cap=2**31 - 1)
                )
            else:
                rows = []
                cap = None if limit is None else check_limit(limit, cap=2**31 - 1)
                while cap is None or len(rows) < cap:
                    want = _READ_PAGE if cap is None else min(_READ_PAGE, cap - len(rows))
                    got = await sql.list_items(
                        conn, resource_id, session_id, after_id=after_id, limit=want
                    )
                    rows.extend(got)
                    if len(got) < want:
                        break
                    after_id = got[-1][0]
        out: list[tuple[int, dict[str, Any]]] = []
        for row in rows:
            item = _as_item(row)
            if item is not None:
                out.append((row[0], item))
        return out

    async def pop(self, resource_id: str, session_id: str) -> dict[str, Any] | None:
        """Remove the newest message and give its item (``None`` when there is none,
        or when the message removed was a tool message popagent wrote, which has no item form)."""
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            row = await sql.pop_item(conn, resource_id, session_id)
        return _as_item(row) if row is not None else None

    async def clear(self, resource_id: str, session_id: str) -> None:
        """Empty the session (a no-op for an unknown one); the session itself stays.
        (IDs are not screened for credentials here, as for a delete.)"""
        resource_id = check_id("resource_id", resource_id, screen=False)
        session_id = check_id("session_id", session_id, screen=False)
        async with self._pool.connection() as conn, conn.transaction():
            await sql.clear_session(conn, resource_id, session_id)
