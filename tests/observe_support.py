"""Helpers for the observational-memory tests: a deterministic Observer and Reflector
behind the scripted model server, and seeding threads."""

from __future__ import annotations

import re
from typing import Any

import popagent
from popagent.models import ObservationGroup, ObservationLog, Role
from popagent.observe import MemorySettingsStore
from popagent.observe.observer import OBSERVER_PROMPT
from popagent.observe.reflector import REFLECTOR_PROMPT
from popagent.store import observations as obs_sql
from popagent.store.database import Conn
from popagent.threads import ThreadStore
from tests.scripted_model import Reply, Respond

_LINE = re.compile(r"^(User|Assistant) \((\d\d:\d\d)\): (.*)$")


def is_observer(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(OBSERVER_PROMPT[:80])


def is_reflector(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith(REFLECTOR_PROMPT[:80])


def user_text(body: dict[str, Any]) -> str:
    """The text of the request's last (user) message, whether a string or content parts."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        return "".join(p["text"] for p in content if p.get("type") == "text")
    return str(content)


def observed_section(body: dict[str, Any]) -> str:
    user = user_text(body)
    return user.split("## New messages to observe\n\n", 1)[1].split("\n\n---\n## Your task", 1)[0]


def _observe(body: dict[str, Any]) -> Reply:
    assert is_observer(body), "expected an Observer request"
    lines = []
    for line in observed_section(body).splitlines():
        m = _LINE.match(line)
        if m:
            mark = "🔴" if m[1] == "User" else "🟡"
            lines.append(f"* {mark} ({m[2]}) {m[1]}: {m[3]}")
    return Reply("<observations>\n" + "\n".join(lines) + "\n</observations>")


#: An Observer that writes one line per user/assistant message of its input.
OBSERVE = Respond(_observe)


def reflecting(text: str) -> Respond:
    """A Reflector step answering ``text`` (wrapped in the tags unless empty)."""

    def answer(body: dict[str, Any]) -> Reply:
        assert is_reflector(body), "expected a Reflector request"
        return Reply(f"<observations>\n{text}\n</observations>" if text else "")

    return Respond(answer)


def reflector_input(body: dict[str, Any]) -> str:
    user = str(body["messages"][-1]["content"])
    return user.split("## Observations to reflect on\n\n", 1)[1].split("\n\n---\n", 1)[0]


async def update_settings(memory: popagent.LongTermMemory, resource: str, **changes: Any) -> None:
    """Update ``resource``'s memory settings with ``changes``; background buffering is off
    unless they turn it on, so observation runs synchronously, at the threshold."""
    changes.setdefault("observation_buffer_percent", None)
    await MemorySettingsStore(memory.pool).update(resource, **changes)


async def seed(
    threads: ThreadStore, resource: str, session: str, count: int, tag: str = "m"
) -> list[int]:
    """``count`` alternating user/assistant messages, each with a unique marker; their ids."""
    ids = []
    for i in range(count):
        role: Role = "user" if i % 2 == 0 else "assistant"
        text = (
            f"{tag}{i}: my note number {i} says the garden shed is painted color {i} "
            f"and the key sits under pot {i}."
        )
        message = await threads.append_message(resource, session, role, text, create_session=True)
        ids.append(message.id)
    return ids


async def insert_observed(
    conn: Conn,
    resource: str,
    session: str,
    first_id: int,
    last_id: int,
    observations: str,
    *,
    tokens: int,
    message_tokens: int,
    generation: int = 0,
    observed_to: int | None = None,
    group_observations: str | None = None,
) -> tuple[ObservationLog, ObservationGroup]:
    """What an Observer run stores, written directly: a generation holding ``observations``
    (``tokens`` tokens) observed up to ``observed_to`` (default ``last_id``), and its one
    active group over messages ``first_id``..``last_id`` (``group_observations``, default
    the same text)."""
    log = await obs_sql.insert_log(
        conn,
        resource,
        session,
        generation=generation,
        origin="observation",
        observations=observations,
        observation_tokens=tokens,
        last_observed_message_id=last_id if observed_to is None else observed_to,
    )
    group = await obs_sql.insert_group(
        conn,
        log,
        kind="observation",
        first_message_id=first_id,
        last_message_id=last_id,
        observations=observations if group_observations is None else group_observations,
        observation_tokens=tokens,
        message_tokens=message_tokens,
    )
    return log, group


async def insert_chunk(
    conn: Conn,
    log: ObservationLog,
    first_id: int,
    last_id: int,
    observations: str,
    *,
    tokens: int,
    message_tokens: int,
) -> ObservationGroup:
    """A buffered chunk in ``log`` over messages ``first_id``..``last_id``: observed in the
    background, not active yet."""
    return await obs_sql.insert_group(
        conn,
        log,
        kind="observation",
        first_message_id=first_id,
        last_message_id=last_id,
        observations=observations,
        observation_tokens=tokens,
        message_tokens=message_tokens,
        status="buffered",
    )
