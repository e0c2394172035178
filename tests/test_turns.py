"""Chat turns as records: a turn that never finished is marked, and an episode never
exists without its turn's final message.

Real PostgreSQL, the real client against the scripted model server over HTTP, and
real processes (``popagent serve`` and ``popagent chat``) killed with SIGKILL mid-turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import popagent
from popagent.cli import main
from popagent.cli.sessions import history_lines
from popagent.errors import NotFoundError, TurnFailedError
from popagent.models import MemoryFilter
from popagent.store.locks import session_turn_lock
from popagent.store.threads import STALE_TURN_AFTER
from tests.agent_support import AgentRig
from tests.scripted_model import CallTools, Fail, Hang, Reply, ScriptedModelServer
from tests.web_support import cli_command, free_port, wait_healthy


async def turns_of(memory: popagent.LongTermMemory, resource: str, session: str) -> list[Any]:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT turn_id, status, started_at, ended_at FROM popagent_turns "
            "WHERE resource_id = %s AND session_id = %s ORDER BY turn_id",
            (resource, session),
        )
        return list(await cur.fetchall())


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


async def await_requests(scripted: ScriptedModelServer, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(scripted.requests) < n:
        assert time.monotonic() < deadline, "the model was not called"
        await asyncio.sleep(0.02)


async def test_a_completed_turn_holds_its_messages_and_one_episode(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, _, scripted = rig
    agent = rig.agent()
    scripted.script(
        CallTools([("remember", {"content": "Keeps bees on the roof", "key": "hobby"})]),
        Reply("Noted: bees."),
    )
    result = await agent.run_turn(resource, "s", "I keep bees on the roof.")
    (turn,) = await turns_of(memory, resource, "s")
    assert turn["status"] == "completed" and turn["ended_at"] >= turn["started_at"]
    stored = await threads.list_messages(resource, "s")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert {(m.turn_id, m.turn_status) for m in stored} == {(turn["turn_id"], "completed")}
    assert stored[-1].content == "Noted: bees."
    episodes = await memory.list(resource, MemoryFilter(kind="episode", session_id="s"))
    assert [e.id for e in episodes] == [result.episode.id if result.episode else None]
    assert history_lines(stored, last_page=True) == [
        line for m in stored for line in popagent.cli.common.message_lines(m)
    ]  # a completed turn has no marker
    # Messages written outside a turn belong to none.
    outside = await threads.append_message(resource, "s", "user", "written by the API")
    assert (outside.turn_id, outside.turn_status) == (None, None)
    assert (await threads.list_messages(resource, "s"))[-1].turn_id is None


async def test_what_a_turn_writes_records_its_turn_messages_and_tool_call(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, _, scripted = rig
    agent = rig.agent()
    scripted.script(
        CallTools(
            [
                ("remember", {"content": "Keeps bees on the roof", "key": "hobby"}),
                ("remember", {"content": "Sells honey at the market"}),
            ]
        ),
        Reply("Noted: bees and honey."),
    )
    result = await agent.run_turn(resource, "s", "I keep bees and sell honey.")
    (turn,) = await turns_of(memory, resource, "s")
    user, asked, _tool_1, _tool_2, answer = await threads.list_messages(resource, "s")
    assert [user.role, asked.role, answer.role] == ["user", "assistant", "assistant"]
    facts = {f.key: f for f in await memory.list(resource, MemoryFilter(kind="fact"))}
    for key, call_id in (("hobby", "call_0"), (None, "call_1")):
        fact = facts[key]
        assert (fact.origin, fact.session_id, fact.turn_id) == ("agent", "s", turn["turn_id"])
        assert (fact.message_ids, fact.tool_call_id) == ((user.id, asked.id), call_id)
    assert result.episode is not None
    (episode,) = await memory.list(resource, MemoryFilter(kind="episode"))
    assert episode.id == result.episode.id
    assert (episode.origin, episode.turn_id, episode.tool_call_id) == (
        "turn",
        turn["turn_id"],
        None,
    )
    assert episode.message_ids == (user.id, answer.id)
    # The next turn updates the fact: its earlier value keeps this turn's provenance.
    scripted.script(
        CallTools([("remember", {"content": "Keeps wasps on the roof", "key": "hobby"})]),
        Reply("Wasps, then."),
    )
    await agent.run_turn(resource, "s", "Actually wasps.")
    second = (await turns_of(memory, resource, "s"))[1]
    updated = (await memory.list(resource, MemoryFilter(kind="fact", key="hobby")))[0]
    assert (updated.turn_id, updated.version) == (second["turn_id"], 2)
    (before,) = await memory.fact_history(resource, updated.id)
    assert (before.origin, before.turn_id, before.message_ids, before.tool_call_id) == (
        "agent",
        turn["turn_id"],
        (user.id, asked.id),
        "call_0",
    )
    assert (before.ended_origin, before.ended_session_id) == ("agent", "s")


async def test_a_failed_model_call_marks_the_turn_failed_and_stores_no_episode(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, _, scripted = rig
    agent = rig.agent()
    scripted.script(Fail(400))
    with pytest.raises(TurnFailedError):
        await agent.run_turn(resource, "s", "Tell me about my bees")
    (turn,) = await turns_of(memory, resource, "s")
    assert turn["status"] == "failed" and turn["ended_at"] is not None
    (message,) = await threads.list_messages(resource, "s")
    assert (message.role, message.turn_status) == ("user", "failed")
    assert await memory.list(resource, MemoryFilter(kind="episode", session_id="s")) == []
    marker = history_lines([message], last_page=True)[-1]
    assert f"turn {turn['turn_id']} failed before its reply" in marker

    # The next turn still sees what the user said (kept in the history replayed).
    scripted.script(Reply("About your bees: they are fine."))
    await agent.run_turn(resource, "s", "Are you there?")
    sent = [m["content"] for m in scripted.requests[-1]["messages"] if m["role"] == "user"]
    assert sent[-2:] == ["Tell me about my bees", "Are you there?"]
    assert [t["status"] for t in await turns_of(memory, resource, "s")] == ["failed", "completed"]


async def test_a_turn_cancelled_mid_model_call_is_interrupted_without_episode(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, _, scripted = rig
    agent = rig.agent()
    scripted.script(Hang(30))
    task = asyncio.ensure_future(agent.run_turn(resource, "s", "A slow question"))
    await await_requests(scripted, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (turn,) = await turns_of(memory, resource, "s")
    assert turn["status"] == "interrupted"
    (message,) = await threads.list_messages(resource, "s")
    assert message.turn_status == "interrupted"
    assert await memory.list(resource, MemoryFilter(kind="episode", session_id="s")) == []


async def test_a_new_turn_marks_a_running_one_interrupted_and_old_ones_read_so(
    rig: AgentRig, resource: str
) -> None:
    memory, threads, _, scripted = rig
    # A turn whose process died: its user message and running turn, nothing more.
    dead = await threads.append_message(resource, "s", "user", "Lost words", turn="start")
    assert dead.turn_status == "running" and dead.turn_id is not None
    # No process holds the session's turn lock: readers see it interrupted at once.
    assert (await threads.list_messages(resource, "s"))[0].turn_status == "interrupted"
    async with session_turn_lock(memory.pool, resource, "s"):
        assert (await threads.list_messages(resource, "s"))[0].turn_status == "running"
    assert [t["status"] for t in await turns_of(memory, resource, "s")] == ["running"]
    agent = rig.agent()
    scripted.script(Reply("Here now."))
    await agent.run_turn(resource, "s", "Hello again")
    statuses = [(t["turn_id"], t["status"]) for t in await turns_of(memory, resource, "s")]
    assert statuses[0] == (dead.turn_id, "interrupted") and statuses[1][1] == "completed"
    stored = await threads.list_messages(resource, "s")
    assert [(m.content, m.turn_status) for m in stored] == [
        ("Lost words", "interrupted"),
        ("Hello again", "completed"),
        ("Here now.", "completed"),
    ]
    lines = history_lines(stored, last_page=True)
    assert lines[2] == f"    [turn {dead.turn_id} was interrupted before its reply: " + (
        "no reply and no episode were stored]"
    )
    # A page that ends inside an unfinished turn leaves the marker to the next page.
    assert history_lines(stored[:1], last_page=False) == lines[:2]

    # By age: a turn still 'running' long after any turn could last reads interrupted.
    old = await threads.append_message(resource, "t", "user", "Long ago", turn="start")
    async with memory.pool.connection() as conn:
        await conn.execute(
            "UPDATE popagent_turns SET started_at = now() - %s "
            "WHERE resource_id = %s AND session_id = 't'",
            (STALE_TURN_AFTER + timedelta(minutes=1), resource),
        )
    (read,) = await threads.list_messages(resource, "t")
    assert (read.turn_id, read.turn_status) == (old.turn_id, "interrupted")
    (recent,) = await threads.recent_messages(resource, "t", limit=5)
    assert recent.turn_status == "interrupted"
    assert [t["status"] for t in await turns_of(memory, resource, "t")] == ["running"]


async def test_a_turn_whose_session_goes_away_stores_no_episode(
    rig: AgentRig, resource: str
) -> None:
    """The final message, the episode and the completion are one transaction: when
    the final message cannot be stored, no episode is left without it."""
    memory, threads, _, scripted = rig
    agent = rig.agent()
    scripted.script(Hang(1.0, Reply("Too late.")))
    task = asyncio.ensure_future(agent.run_turn(resource, "gone", "Remember the bees"))
    await await_requests(scripted, 1)
    await threads.delete_session(resource, "gone")
    with pytest.raises(NotFoundError):
        await task
    assert await memory.list(resource, MemoryFilter(kind="episode", session_id="gone")) == []


# --- real processes killed mid-turn ------------------------------------------------------


def model_env(scripted: ScriptedModelServer, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
    for name in ("POPAGENT_DATABASE_URL", "POPAGENT_TOKEN", "POPAGENT_TOKEN_FILE"):
        env.pop(name, None)
    env |= {
        "POPAGENT_MODEL_BASE_URL": scripted.base_url,
        "POPAGENT_MODEL": "scripted-1",
        "POPAGENT_MODEL_MAX_RETRIES": "0",
        "POPAGENT_MODEL_TIMEOUT": "60",
    }
    env.pop("POPAGENT_MODEL_API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    return env


def stop_cluster(pgdata: Path) -> None:
    """Stop a postgres left running in ``pgdata`` (the SIGKILLed server's), if any."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)


@contextmanager
def serve(resource: str, data_dir: Path, env: dict[str, str]) -> Iterator[tuple[str, Any]]:
    """``popagent serve`` on ``data_dir``; yields its base URL and process; SIGTERM on exit."""
    port = free_port()
    process = subprocess.Popen(
        cli_command(
            "--resource-id", resource, "--data-dir", str(data_dir), "serve", "--port", str(port)
        ),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process, seconds=90)
        yield base, process
    finally:
        if process.poll() is None:
            process.terminate()
        process.communicate(timeout=60)


def test_popagent_serve_killed_mid_turn_leaves_the_turn_marked(
    scripted: ScriptedModelServer, tmp_path: Path
) -> None:
    resource, session = "kill-serve", "chat-k"
    data_dir = tmp_path / "data"
    env = model_env(scripted, tmp_path)
    try:
        with serve(resource, data_dir, env) as (base, process):
            scripted.script(Reply("First reply."))
            first = httpx.post(
                f"{base}/api/sessions/{session}/chat", json={"message": "Hi"}, timeout=30
            )
            assert first.status_code == 200, first.text
            scripted.script(Hang(60))
            with ThreadPoolExecutor(1) as pool:
                pending = pool.submit(
                    httpx.post,
                    f"{base}/api/sessions/{session}/chat",
                    json={"message": "A question the model hangs on"},
                    timeout=60,
                )
                wait_for(lambda: len(scripted.requests) == 2, "the hanging model call")
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=30)
                with pytest.raises(httpx.TransportError):
                    pending.result(timeout=60)
        # Started again on the same data dir (stale postmaster.pid, orphan postgres).
        with serve(resource, data_dir, env) as (base, _process):
            url = f"{base}/api/sessions/{session}/messages"
            items = httpx.get(url).json()["items"]
            assert [(m["role"], m["turn_status"]) for m in items] == [
                ("user", "completed"),
                ("assistant", "completed"),
                # Its process is gone, and with it the session's turn lock.
                ("user", "interrupted"),
            ]
            killed_turn = items[2]["turn_id"]
            scripted.script(Reply("Back again."))
            again = httpx.post(
                f"{base}/api/sessions/{session}/chat", json={"message": "Still there?"}, timeout=30
            )
            assert again.status_code == 200, again.text
            items = httpx.get(url).json()["items"]
            assert [(m["content"], m["turn_status"]) for m in items][2:] == [
                ("A question the model hangs on", "interrupted"),
                ("Still there?", "completed"),
                ("Back again.", "completed"),
            ]
            assert items[2]["turn_id"] == killed_turn
            episodes = httpx.get(f"{base}/api/episodes", params={"limit": 50}).json()["items"]
            # One episode per completed turn, none for the killed one.
            assert len(episodes) == 2
            assert not any("hangs on" in e["content"] for e in episodes)
            page = httpx.get(f"{base}/sessions/{session}")
            assert page.status_code == 200
            assert 'data-turn-status="interrupted"' in page.text
            assert f"Turn {killed_turn} was interrupted before its reply" in page.text
    finally:
        stop_cluster(data_dir / "pgdata")


def chat_waiting_on_the_model(
    scripted: ScriptedModelServer,
    env: dict[str, str],
    args: list[str],
    session: str,
    message: str,
    *,
    capture: bool,
) -> subprocess.Popen[str]:
    """A real ``popagent chat`` process with ``message`` typed in, returned once its model
    call (which hangs) has arrived: a turn in flight, for the test to kill or interrupt.
    ``capture``: stdout and stderr come back through ``stdout``; otherwise discarded."""
    scripted.script(Hang(60))
    output = subprocess.PIPE if capture else subprocess.DEVNULL
    process = subprocess.Popen(
        cli_command(*args, "chat", "--session-id", session),
        env=env,
        stdin=subprocess.PIPE,
        stdout=output,
        stderr=subprocess.STDOUT if capture else subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdin is not None
        process.stdin.write(f"{message}\n")
        process.stdin.flush()
        wait_for(lambda: len(scripted.requests) >= 1, "the chat's model call", 60)
    except BaseException:
        process.kill()
        process.wait(timeout=30)
        raise
    return process


def test_popagent_chat_killed_mid_turn_leaves_the_turn_marked(
    database_url: str, scripted: ScriptedModelServer, tmp_path: Path
) -> None:
    resource, session = f"kill-chat-{uuid.uuid4().hex}", "chat-c"
    env = model_env(scripted, tmp_path)
    args = ["--database-url", database_url, "--resource-id", resource]
    process = chat_waiting_on_the_model(
        scripted, env, args, session, "Words said before the kill", capture=False
    )
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.stdin is not None
    process.stdin.close()

    runner = CliRunner()
    cli_env: dict[str, str | None] = {
        k: env.get(k) for k in ("POPAGENT_MODEL_BASE_URL", "POPAGENT_MODEL")
    } | {"POPAGENT_MODEL_MAX_RETRIES": "0", "POPAGENT_MODEL_API_KEY": None, "OPENAI_API_KEY": None}
    shown = runner.invoke(main, [*args, "sessions", "show", session, "--json"], env=cli_env)
    assert shown.exit_code == 0, shown.output
    (message,) = json.loads(shown.output)["messages"]
    # The killed process took the session's turn lock with it: interrupted at once.
    assert (message["content"], message["turn_status"]) == (
        "Words said before the kill",
        "interrupted",
    )

    scripted.script(Reply("Welcome back."))
    chat = runner.invoke(
        main,
        [*args, "chat", "--session-id", session, "--no-stream"],
        input="Hello again\n/history\n",
        env=cli_env,
    )
    assert chat.exit_code == 0, chat.output
    assert "assistant> Welcome back." in chat.output
    marker = f"[turn {message['turn_id']} was interrupted before its reply"
    assert marker in chat.output  # /history shows it
    shown = runner.invoke(main, [*args, "sessions", "show", session], env=cli_env)
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    assert "Words said before the kill" in lines[at - 1]
    assert sum("[turn " in line for line in lines) == 1
    episodes = runner.invoke(main, [*args, "episodes", "list", "--json"], env=cli_env)
    (episode,) = json.loads(episodes.output)
    assert "Hello again" in episode["content"] and "before the kill" not in episode["content"]


def test_ctrl_c_in_popagent_chat_marks_the_turn_interrupted_at_once(
    database_url: str, scripted: ScriptedModelServer, tmp_path: Path
) -> None:
    resource, session = f"ctrl-c-{uuid.uuid4().hex}", "chat-i"
    env = model_env(scripted, tmp_path)
    args = ["--database-url", database_url, "--resource-id", resource]
    process = chat_waiting_on_the_model(scripted, env, args, session, "Never mind", capture=True)
    runner = CliRunner()

    def status() -> str | None:
        shown = runner.invoke(main, [*args, "sessions", "show", session, "--json"])
        if shown.exit_code != 0:
            return None
        messages = json.loads(shown.output)["messages"]
        return str(messages[0]["turn_status"]) if messages else None

    try:
        process.send_signal(signal.SIGINT)
        try:
            wait_for(lambda: status() == "interrupted", "the turn marked interrupted", 60)
        except AssertionError as exc:  # say what the chat printed (seen once under load)
            process.kill()
            printed, _ = process.communicate(timeout=30)
            raise AssertionError(
                f"{exc}; the turn: {status()}; the chat printed:\n{printed}"
            ) from exc
        output, _ = process.communicate(input="", timeout=60)  # EOF at the prompt: leave
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert "Interrupted: the turn was stopped." in output
    assert process.returncode == 0, output
