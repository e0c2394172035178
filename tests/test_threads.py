"""Thread memory: sessions and their exact, ordered message history on PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from popagent import LongTermMemory, NotFoundError, ValidationError
from popagent.threads import ThreadStore


async def test_session_lifecycle(threads: ThreadStore, resource: str) -> None:
    first = await threads.create_session(resource, "s1", title="Trip", metadata={"app": "x"})
    assert (first.session_id, first.title, first.metadata) == ("s1", "Trip", {"app": "x"})
    with pytest.raises(ValidationError, match="session_id"):
        await threads.create_session(resource, "s1")
    generated = await threads.create_session(resource)
    assert len(generated.session_id) == 32
    renamed = await threads.rename_session(resource, "s1", "Kyoto trip")
    assert renamed.title == "Kyoto trip"
    await threads.append_message(resource, "s1", "user", "hello")  # s1 is now most recent
    listed = await threads.list_sessions(resource)
    assert [s.session_id for s in listed] == ["s1", generated.session_id]
    await threads.delete_session(resource, "s1")
    with pytest.raises(NotFoundError):
        await threads.get_session(resource, "s1")
    with pytest.raises(NotFoundError):
        await threads.list_messages(resource, "s1")
    with pytest.raises(NotFoundError):
        await threads.delete_session(resource, "s1")


async def test_messages_keep_exact_content_parts_and_order(
    threads: ThreadStore, resource: str
) -> None:
    await threads.create_session(resource, "s")
    call = {"type": "tool_call", "id": "c1", "name": "remember", "arguments": '{"content": "x"}'}
    # Written as fast as possible, many in the same millisecond: order is still stable.
    for i in range(30):
        await threads.append_message(resource, "s", "user", f"  message {i}\n  with spacing  ")
    await threads.append_message(resource, "s", "assistant", "", parts=[call])
    result = {"type": "tool_result", "tool_call_id": "c1", "name": "remember"}
    await threads.append_message(resource, "s", "tool", "stored", parts=[result])
    page1 = await threads.list_messages(resource, "s", limit=20)
    page2 = await threads.list_messages(resource, "s", after_id=page1[-1].id, limit=20)
    messages = page1 + page2
    assert [m.content for m in messages[:30]] == [
        f"  message {i}\n  with spacing  " for i in range(30)
    ]
    assert messages[30].parts == (call,) and messages[31].parts == (result,)
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    assert len(page2) == 12


async def test_append_to_a_missing_session_fails_unless_asked_to_create_it(
    threads: ThreadStore, resource: str, other_resource: str
) -> None:
    with pytest.raises(NotFoundError):
        await threads.append_message(resource, "nope", "user", "hi")
    created = await threads.append_message(resource, "new", "user", "hi", create_session=True)
    again = await threads.append_message(resource, "new", "user", "again", create_session=True)
    assert again.id > created.id
    assert [s.session_id for s in await threads.list_sessions(resource)] == ["new"]
    # The same session ID in another resource is another session.
    with pytest.raises(NotFoundError):
        await threads.list_messages(other_resource, "new")


async def test_concurrent_first_messages_create_one_session(
    threads: ThreadStore, resource: str
) -> None:
    await asyncio.gather(
        *(
            threads.append_message(resource, "race", "user", f"m{i}", create_session=True)
            for i in range(10)
        )
    )
    assert len(await threads.list_sessions(resource)) == 1
    assert len(await threads.list_messages(resource, "race")) == 10


async def test_bad_messages_are_refused_before_writing(threads: ThreadStore, resource: str) -> None:
    await threads.create_session(resource, "s")
    with pytest.raises(ValidationError, match="role"):
        await threads.append_message(resource, "s", "robot", "x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="content"):
        await threads.append_message(resource, "s", "user", "nul\x00byte")
    with pytest.raises(ValidationError, match=r"parts\[0\]\.type"):
        await threads.append_message(resource, "s", "user", "x", parts=[{"type": "video"}])
    assert await threads.list_messages(resource, "s") == []


async def test_deleting_a_session_keeps_long_term_memory(
    threads: ThreadStore, memory: LongTermMemory, resource: str
) -> None:
    await threads.create_session(resource, "s")
    await threads.append_message(resource, "s", "user", "I like green tea")
    await memory.remember(resource, "Likes green tea", key="drink.tea", session_id="s")
    await memory.retain_episode(resource, "s", "I like green tea", "Noted!")
    await threads.delete_session(resource, "s")
    kept = await memory.list(resource)
    assert sorted(m.kind for m in kept) == ["episode", "fact"]
    assert await memory.recall(resource, "green tea")
