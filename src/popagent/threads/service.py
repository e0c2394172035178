"""``ThreadStore``: sessions and the exact message history of each.

Thread memory is the exact record of one chat; it is never substituted by the
long-term store, and deleting a session (with its messages and thread-scoped
state) never touches ``popagent_memories``.

Every message is screened here, whoever writes it (agent turns, the API, the
CLI, an application): each credential in its text, in the strings of its
parts and in tool-call arguments (parsed as JSON) is replaced by
``[REDACTED:<kind>]`` before it is stored (``popagent.credentials``); session
titles and metadata are screened the same way. So the record is exact except
for credentials, which are never kept.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any, Literal, get_args

from ..checks import (
    check_id,
    check_limit,
    check_new_session_id,
    check_text,
    is_blank,
    is_path_segment,
)
from ..credentials import redact_credentials, redact_json, redact_json_text
from ..errors import NotFoundError, ValidationError
from ..models import Message, Role, Session
from ..offload import json_size, off_loop, text_size
from ..store import threads as sql
from ..store.database import Conn, Pool

__all__ = [
    "PART_TYPES",
    "ThreadStore",
    "check_json_object",
    "check_parts",
    "check_title",
    "screen_message",
    "screen_metadata",
    "screen_part",
]

PART_TYPES = frozenset({"tool_call", "tool_result", "attachment"})
TITLE_CAP = 200
MESSAGE_CAP = 1_000_000
PAGE_CAP = 1_000


def check_title(title: object) -> str | None:
    """Trimmed, at most 200 characters, credentials redacted; blank is no title."""
    if title is None:
        return None
    text = check_text("title", title).strip()
    if len(text) > TITLE_CAP:
        raise ValidationError("title", f"must be at most {TITLE_CAP} characters")
    if is_blank(text):
        return None
    return redact_credentials(text)[0]


def check_json_object(field: str, value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object that PostgreSQL's jsonb can hold (JSON-
    serializable, no NUL character), else ``ValidationError(field, ...)``."""
    if not isinstance(value, dict):
        raise ValidationError(field, "must be a JSON object")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(field, f"must be JSON-serializable: {exc}") from exc
    if "\\u0000" in json.dumps(value):
        raise ValidationError(field, "must not contain NUL characters")
    return value


def check_parts(parts: Sequence[object]) -> list[dict[str, Any]]:
    """A message's parts, each a JSON object whose ``type`` is one of ``PART_TYPES``."""
    checked: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        obj = check_json_object(f"parts[{i}]", part)
        if obj.get("type") not in PART_TYPES:
            raise ValidationError(f"parts[{i}].type", f"must be one of {sorted(PART_TYPES)}")
        checked.append(obj)
    return checked


def screen_part(part: dict[str, Any]) -> dict[str, Any]:
    """A part with every credential redacted: its strings, and tool-call arguments
    (raw JSON text) as JSON, so an escaped value is found and the text stays JSON.

    An attachment's bytes (``data``, or a ``data:`` URL) are base64, not text: they
    are kept as they are (a redaction would corrupt the file, and a match in
    random base64 would be noise).
    """
    arguments = part.get("arguments")
    payload: dict[str, Any] = {}
    if part.get("type") == "attachment":
        payload = {k: part[k] for k in ("data", "url") if isinstance(part.get(k), str)}
        if not payload.get("url", "data:").startswith("data:"):
            del payload["url"]
    screened: dict[str, Any] = redact_json({k: v for k, v in part.items() if k not in payload})
    if part.get("type") == "tool_call" and isinstance(arguments, str):
        screened["arguments"] = redact_json_text(arguments)
    return {**screened, **payload}


def screen_message(
    role: str, content: object, parts: Sequence[object]
) -> tuple[str, list[dict[str, Any]]]:
    """A message's content and parts checked and screened, as ``append_message``
    stores them (``ValidationError`` naming the field otherwise). Pure and linear in
    the message's size, so large messages are screened off the event loop."""
    content = check_text("content", content)
    if len(content) > MESSAGE_CAP:
        raise ValidationError("content", f"must be at most {MESSAGE_CAP} characters")
    checked = check_parts(parts)
    if role == "user" and not checked and is_blank(content):
        raise ValidationError(
            "content", "must not be empty (nor only whitespace or invisible characters)"
        )
    return redact_credentials(content)[0], [screen_part(part) for part in checked]


def screen_metadata(metadata: object) -> dict[str, Any]:
    """A session's metadata checked (``check_json_object``) and screened: every
    credential in its keys and values redacted, as ``create_session`` stores it."""
    return dict(redact_json(check_json_object("metadata", metadata or {})))


async def refuse_new_unreachable(conn: Conn, resource_id: str, session_id: str) -> None:
    """Refuse to create, by writing to it, a session whose ID breaks ``check_new_session_id``.

    Only such IDs cost a lookup: an existing session (made before the rule) stays usable.
    """
    if (
        not is_path_segment(session_id)
        and await sql.get_session(conn, resource_id, session_id) is None
    ):
        check_new_session_id(session_id)


class ThreadStore:
    """Create, list, read (paged), rename and delete sessions; append and page messages."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def create_session(
        self,
        resource_id: str,
        session_id: str | None = None,
        *,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Session:
        """A new session (a random ID unless given); a taken ID is a ``ValidationError``."""
        resource_id = check_id("resource_id", resource_id)
        session_id = check_new_session_id(session_id or uuid.uuid4().hex)
        title = check_title(title)
        meta = await off_loop(json_size(metadata), screen_metadata, metadata)
        async with self._pool.connection() as conn:
            created = await sql.create_session(conn, resource_id, session_id, title, meta)
        if created is None:
            raise ValidationError("session_id", "is already taken in this resource")
        return created

    async def ensure_session(self, resource_id: str, session_id: str) -> Session:
        """The session, created when missing (a turn may start a new chat by naming it)."""
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            await refuse_new_unreachable(conn, resource_id, session_id)
            return await sql.ensure_session(conn, resource_id, session_id)

    async def get_session(self, resource_id: str, session_id: str) -> Session:
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            found = await sql.get_session(conn, resource_id, session_id)
        if found is None:
            raise NotFoundError(f"no session {session_id!r} in this resource")
        return found

    async def list_sessions(
        self, resource_id: str, *, limit: int = 50, offset: int = 0
    ) -> list[Session]:
        """Sessions, most recently active first."""
        resource_id = check_id("resource_id", resource_id)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError("offset", "must be an integer >= 0")
        async with self._pool.connection() as conn:
            return await sql.list_sessions(
                conn, resource_id, check_limit(limit, cap=PAGE_CAP), offset
            )

    async def rename_session(self, resource_id: str, session_id: str, title: str | None) -> Session:
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            renamed = await sql.rename_session(conn, resource_id, session_id, check_title(title))
        if renamed is None:
            raise NotFoundError(f"no session {session_id!r} in this resource")
        return renamed

    async def delete_session(self, resource_id: str, session_id: str) -> None:
        """Delete the session, its messages and thread-scoped state; long-term memory stays.
        (IDs are not screened for credentials here: one stored before the screen can go.)"""
        resource_id = check_id("resource_id", resource_id, screen=False)
        session_id = check_id("session_id", session_id, screen=False)
        async with self._pool.connection() as conn, conn.transaction():
            deleted = await sql.delete_session(conn, resource_id, session_id)
        if not deleted:
            raise NotFoundError(f"no session {session_id!r} in this resource")

    async def append_message(
        self,
        resource_id: str,
        session_id: str,
        role: Role,
        content: str,
        *,
        parts: Sequence[dict[str, Any]] = (),
        create_session: bool = False,
        turn_id: int | None = None,
        turn: Literal["start", "complete"] | None = None,
        conn: Conn | None = None,
    ) -> Message:
        """Append one message to the session's history, its credentials redacted.

        Chat turns (``Agent.run_turn``): ``turn="start"`` stores the message as
        the first of a new running turn (creating the session; a turn of the
        session still running is marked interrupted), all in one statement, and
        the message's ``turn_id`` names the turn; ``turn_id`` alone adds the
        message to that turn; ``turn="complete"`` with ``turn_id`` stores the
        turn's final message and marks the turn completed, in one statement.
        A turn reads ``running`` only while its writer holds the session's turn
        lock (``store.locks.session_turn_lock``, as ``Agent.run_turn`` does);
        otherwise readers see it ``interrupted``. ``conn`` writes on the caller's connection, inside its transaction (the
        agent stores the final message and the episode together).

        A user message needs visible text or a part (``ValidationError`` on
        ``content`` otherwise). The session must exist (``NotFoundError``) unless ``create_session``,
        which creates it in the same statement (a turn may start a chat by
        naming it).
        """
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        if role not in get_args(Role):
            raise ValidationError("role", f"must be one of {list(get_args(Role))}")
        size = text_size(content) + json_size(list(parts))
        content, checked = await off_loop(size, screen_message, role, content, parts)
        if turn == "complete" and turn_id is None:
            raise ValidationError("turn_id", "must name the turn to complete")
        message = await self._write(
            conn, resource_id, session_id, role, content, checked, create_session, turn_id, turn
        )
        if message is None:
            raise NotFoundError(f"no session {session_id!r} (or no such turn) in this resource")
        return message

    async def _write(
        self,
        conn: Conn | None,
        resource_id: str,
        session_id: str,
        role: Role,
        content: str,
        parts: list[dict[str, Any]],
        create_session: bool,
        turn_id: int | None,
        turn: Literal["start", "complete"] | None,
    ) -> Message | None:
        """The checked message's one statement, on ``conn`` or a pooled connection."""
        if conn is None:
            async with self._pool.connection() as own:
                return await self._write(
                    own,
                    resource_id,
                    session_id,
                    role,
                    content,
                    parts,
                    create_session,
                    turn_id,
                    turn,
                )
        if create_session or turn == "start":
            await refuse_new_unreachable(conn, resource_id, session_id)
        if turn == "start":
            return await sql.start_turn(conn, resource_id, session_id, role, content, parts)
        if turn == "complete":
            assert turn_id is not None
            return await sql.complete_turn(
                conn, resource_id, session_id, turn_id, role, content, parts
            )
        return await sql.append_message(
            conn,
            resource_id,
            session_id,
            role,
            content,
            parts,
            ensure_session=create_session,
            turn_id=turn_id,
        )

    async def list_messages(
        self, resource_id: str, session_id: str, *, after_id: int | None = None, limit: int = 100
    ) -> list[Message]:
        """A page of the exact history, oldest first; pass the last ``id`` as ``after_id``."""
        resource_id = check_id("resource_id", resource_id)
        session_id = check_id("session_id", session_id)
        async with self._pool.connection() as conn:
            if await sql.get_session(conn, resource_id, session_id) is None:
                raise NotFoundError(f"no session {session_id!r} in this resource")
            return await sql.list_messages(
                conn,
                resource_id,
                session_id,
                after_id=after_id,
                limit=check_limit(limit, cap=PAGE_CAP),
            )

    async def recent_messages(
        self, resource_id: str, session_id: str, *, limit: int
    ) -> list[Message]:
        """The ``limit`` newest messages, oldest first (the turn's recent context)."""
        async with self._pool.connection() as conn:
            return await sql.recent_messages(
                conn,
                check_id("resource_id", resource_id),
                check_id("session_id", session_id),
                limit=limit,
            )
