"""Observational memory over the longest LoCoMo conversation: prompt size, compression, overhead.

Data: LoCoMo (Maharana et al., ACL 2024; github.com/snap-research/LoCoMo),
``locomo10.json``, CC BY-NC 4.0, read in place (default
``../shared/benchdata/locomo10.json`` from the repository root), never copied.

The conversation with the most turns is replayed as ONE thread through
``Agent.run_turn``, with the real ``OpenAIChatModel`` against the scripted
OpenAI-compatible server of the tests (real HTTP on 127.0.0.1), on a disposable
embedded PostgreSQL (or the server in ``POPAGENT_DATABASE_URL``, in a scratch
database dropped afterwards). Turns are ``bench/locomo.py``'s pairs: within a
session, turns (0, 1), (2, 3), ... are one ``run_turn``, the first speaker's
``"<speaker>: <text>"`` (plus `` [image: <caption>]``) the user message and the
second's the reply the server returns (an odd last turn joins the previous
reply). A turn's ``now`` is its session's date plus one minute per turn, and
the bench sets the stored messages' ``created_at`` to it after each turn (the
pipeline stamps the wall clock), so the Observer sees the real dates and gaps.

Runs, each on a fresh resource with the same turns:

* ``baseline``: ``RecentMessages(limit=1000)``, which keeps the whole thread;
* ``OM default``: ``ObservationalHistory`` at the default settings (30,000 /
  40,000 tokens);
* ``OM scaled``: the same with the thresholds at 3,000 / 4,000 tokens (other
  settings default), added when the conversation never reaches the defaults.

The scripted server tells the requests apart by their system prompt, as
``tests/observe_support.py`` does: the Observer is answered with one dated line
per user/assistant pair of its input under ``Date:`` headers (each side cut to 8
words), the Reflector with the log rewritten shorter (each note cut to 12
words at level 1; the user's side alone, cut to 8 and 6 words, at levels 2 and
3), and every other request with the turn's recorded reply. So the compression
shown is that of this scripted Observer; a real one's depends on the model.

Measured: prompt tokens of every turn's model request as the server received
it (``count_conversation`` of its messages plus the tool specs' JSON, with
popagent's offline estimator); the compression at the end (the thread's raw
message tokens against the active observations plus the retained raw tail);
Observer and Reflector calls; and ``TurnResult.timings.overhead_ms`` (the turn
less its own model call; an Observer or Reflector call made in the turn is
inside it, so it is also shown without the turns that made one).

    python bench/observational.py [--data PATH] [--turns N] [--budget-s S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from popagent import LongTermMemory
from popagent.agent import Agent, ObservationalHistory, RecentMessages
from popagent.agent.history import HistorySource
from popagent.llm import ChatMessage, ModelSettings, OpenAIChatModel
from popagent.observe import MemorySettingsStore
from popagent.observe.tokens import count_conversation, count_message, count_text
from popagent.threads import ThreadStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.observe_support import is_observer, is_reflector, observed_section, reflector_input
from tests.scripted_model import Reply, Respond, ScriptedModelServer, Step

from latency import admin_url, database, pct, table
from locomo import DATE_FORMAT, DEFAULT_DATA, pair_turns

SCALED = {"observation_threshold_tokens": 3_000, "reflection_threshold_tokens": 4_000}
OBSERVED_WORDS = 8
REFLECT_WORDS = {1: 12, 2: 8, 3: 6}
_LINE = re.compile(r"^(User|Assistant) \((\d\d:\d\d)\): (.*)$")
_LEVEL = re.compile(r"## Compression \(level (\d) of")


@dataclass(frozen=True)
class Turn:
    user: str
    reply: str
    now: datetime


@dataclass
class Run:
    name: str
    prompt_tokens: list[int] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    quiet_overhead_ms: list[float] = field(default_factory=list)  # turns without OM calls
    observer_calls: int = 0
    reflector_calls: int = 0
    reflections: int = 0
    observed_turns: int = 0
    raw_tokens: int = 0
    kept_tokens: int = 0
    observation_tokens: int = 0
    seconds: float = 0.0


def longest(path: Path) -> tuple[str, list[Turn]]:
    """The sample with the most turns, as (sample_id, turns)."""
    with path.open(encoding="utf-8") as f:
        samples: list[dict[str, Any]] = json.load(f)

    def size(sample: dict[str, Any]) -> int:
        dialog = sample["conversation"]
        return sum(len(v) for k, v in dialog.items() if re.fullmatch(r"session_\d+", k))

    sample = max(samples, key=size)
    dialog, turns = sample["conversation"], list[Turn]()
    sessions = sorted(
        (int(k.split("_")[1]), k) for k in dialog if re.fullmatch(r"session_\d+", k) and dialog[k]
    )
    for _, key in sessions:
        when = datetime.strptime(dialog[f"{key}_date_time"], DATE_FORMAT).replace(tzinfo=UTC)
        for i, (user, reply, _ids) in enumerate(pair_turns(dialog[key])):
            turns.append(Turn(user, reply, when + timedelta(minutes=i)))
    return str(sample["sample_id"]), turns


def shorten(text: str, words: int) -> str:
    cut = text.split()
    return " ".join(cut[:words]) + (" …" if len(cut) > words else "")


def observe(body: dict[str, Any]) -> Reply:
    """A date header per day, then one line per user/assistant pair, each side shortened."""
    lines, user = [], ""
    for line in observed_section(body).splitlines():
        if line.startswith("Date: "):
            lines.append(line)
        elif m := _LINE.match(line):
            said = shorten(m[3], OBSERVED_WORDS)
            if m[1] == "User":
                user = f"* ({m[2]}) U: {said}"
            else:
                lines.append(f"{user or f'* ({m[2]})'} / A: {said}")
                user = ""
    if user:
        lines.append(user)
    return Reply("<observations>\n" + "\n".join(lines) + "\n</observations>")


def reflect(body: dict[str, Any]) -> Reply:
    """The log rewritten shorter: each note cut to fewer words at each compression
    level, the assistant's side dropped from level 2, date headers kept."""
    m = _LEVEL.search(str(body["messages"][-1]["content"]))
    level = int(m[1]) if m else 1
    words = REFLECT_WORDS.get(level, 4)
    lines: list[str] = []
    for line in reflector_input(body).splitlines():
        if line.startswith("Date: ") or not line.strip():
            if line.strip() and line not in lines[-1:]:
                lines.append(line)
            continue
        note = line.split(" / A: ", 1)[0] if level >= 2 else line
        lines.append(shorten(note, words))
    return Reply("<observations>\n" + "\n".join(lines) + "\n</observations>")


class Model:
    """The scripted server's brain: counts calls and the turns' prompt tokens.

    It keeps exactly one step queued on ``server``: each answer queues the next.
    """

    def __init__(self, server: ScriptedModelServer) -> None:
        self.lock = threading.Lock()
        self.server = server
        self.reply = ""
        self.observer = self.reflector = 0
        self.prompts: list[int] = []

    def answer(self, body: dict[str, Any]) -> Step:
        self.server.script(Respond(self.answer))
        with self.lock:
            if is_observer(body):
                self.observer += 1
                return observe(body)
            if is_reflector(body):
                self.reflector += 1
                return reflect(body)
            messages = [ChatMessage(m["role"], m.get("content")) for m in body["messages"]]
            tokens = count_conversation(messages)
            if body.get("tools"):
                tokens += count_text(json.dumps(body["tools"]))
            self.prompts.append(tokens)
            return Reply(self.reply)


async def replay(
    memory: LongTermMemory,
    server: ScriptedModelServer,
    brain: Model,
    run: Run,
    turns: list[Turn],
    om: dict[str, int] | None,
    budget_s: float,
) -> None:
    resource, session = f"bench-om-{run.name.replace(' ', '-')}", "locomo"
    settings = ModelSettings(base_url=server.base_url, api_key=None, model="scripted")
    threads = ThreadStore(memory.pool)
    async with OpenAIChatModel(settings) as model:
        history: HistorySource
        if om is None:
            history, tools = RecentMessages(limit=1_000), []
        else:
            if om:
                await MemorySettingsStore(memory.pool).update(resource, **om)
            observational = ObservationalHistory(model)
            history, tools = observational, [observational.retrieval_tool(memory.pool)]
        agent = Agent(memory.pool, memory, threads, model, history=history, tools=tools)
        started, last_id = time.perf_counter(), 0
        cursor, generation = 0, 0  # of the head log, to count turns that moved them
        server.script(Respond(brain.answer))
        for turn in turns:
            calls = brain.observer + brain.reflector
            brain.reply = turn.reply
            result = await agent.run_turn(resource, session, turn.user, now=turn.now)
            async with memory.pool.connection() as conn:  # the session's date, not the clock
                cur = await conn.execute(
                    "UPDATE popagent_messages SET created_at = %s WHERE resource_id = %s "
                    "AND session_id = %s AND id > %s RETURNING id",
                    (turn.now, resource, session, last_id),
                )
                last_id = max([last_id, *(r["id"] for r in await cur.fetchall())])
            run.overhead_ms.append(result.timings.overhead_ms)
            if brain.observer + brain.reflector == calls:
                run.quiet_overhead_ms.append(result.timings.overhead_ms)
            if isinstance(history, ObservationalHistory) and history.last and history.last.log:
                log = history.last.log  # the head generation this turn's context used
                run.observed_turns += (log.last_observed_message_id or 0) > cursor
                run.reflections += log.generation > generation and log.origin == "reflection"
                cursor, generation = log.last_observed_message_id or 0, log.generation
            if time.perf_counter() - started > budget_s:
                print(f"  {run.name}: stopped after {len(run.overhead_ms)} turns (budget)")
                break
        run.seconds = time.perf_counter() - started
        if isinstance(history, ObservationalHistory):
            await history.drain()  # background buffering still in flight
        stored = await threads.list_messages(resource, session, limit=1_000)
        while page := await threads.list_messages(resource, session, after_id=stored[-1].id):
            stored += page
        run.raw_tokens = sum(count_message(m) for m in stored)
        cursor = 0
        if isinstance(history, ObservationalHistory) and history.last and history.last.log:
            run.observation_tokens = history.last.log.observation_tokens
            cursor = history.last.log.last_observed_message_id or 0
        run.kept_tokens = sum(count_message(m) for m in stored if m.id > cursor)


async def main_async(args: argparse.Namespace, admin: str, turns: list[Turn]) -> list[Run]:
    runs: list[Run] = []
    async with database(admin, "observational") as memory:
        plans: list[tuple[str, dict[str, int] | None]] = [("baseline", None), ("OM default", {})]
        for name, om in plans:
            with ScriptedModelServer() as server:  # one per run: it keeps every request body
                brain = Model(server)
                run = Run(name)
                await replay(memory, server, brain, run, turns, om, args.budget_s)
            run.prompt_tokens = brain.prompts
            run.observer_calls, run.reflector_calls = brain.observer, brain.reflector
            runs.append(run)
            if name == "OM default" and not run.observation_tokens:  # nothing activated
                plans.append(("OM scaled", SCALED))
    return runs


def row(run: Run, base: Run) -> dict[str, Any]:
    p = run.prompt_tokens
    kept = run.observation_tokens + run.kept_tokens
    return {
        "run": run.name,
        "turns": len(p),
        "prompt_first": p[0],
        "prompt_p50": int(pct(p, 50)),
        "prompt_p95": int(pct(p, 95)),
        "prompt_max": max(p),
        "prompt_last": p[-1],
        "raw_history": run.raw_tokens,
        "obs+tail": f"{run.observation_tokens:,}+{run.kept_tokens:,}",
        "compression": f"{run.raw_tokens / kept:.1f}x" if kept else "",
        "observer": run.observer_calls,
        "reflector": run.reflector_calls,
        "ovh_p50": pct(run.overhead_ms, 50),
        "ovh_p95": pct(run.overhead_ms, 95),
        "p95_vs_base": f"{pct(run.overhead_ms, 95) / pct(base.overhead_ms, 95):.2f}x",
        "quiet_p50": pct(run.quiet_overhead_ms, 50),
        "quiet_p95": pct(run.quiet_overhead_ms, 95),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--turns", type=int, default=None, help="replay only the first N turns")
    parser.add_argument("--budget-s", type=float, default=300.0, help="time cap per run")
    args = parser.parse_args()
    sample, turns = longest(args.data)
    turns = turns[: args.turns]
    started = time.perf_counter()
    with admin_url() as admin:
        runs = asyncio.run(main_async(args, admin, turns))
    base = runs[0]
    title = (
        f"LoCoMo {sample}: {len(turns)} turns ({2 * len(turns)} stored messages) as one thread; "
        "tokens by popagent's estimate, overhead in ms"
    )
    columns = (
        "run turns prompt_first prompt_p50 prompt_p95 prompt_max prompt_last raw_history obs+tail "
        "compression observer reflector ovh_p50 ovh_p95 p95_vs_base quiet_p50 quiet_p95"
    )
    table(title, columns, [row(r, base) for r in runs])
    for run in runs[1:]:
        settings = "30,000 / 40,000 (default)" if run.name == "OM default" else "3,000 / 4,000"
        print(
            f"  {run.name}: thresholds {settings} tokens; the observation cursor moved in "
            f"{run.observed_turns} turns; {run.reflections} reflections became the log"
        )
    if len(runs) > 2:
        print("  The conversation never reaches the default threshold (no observations were")
        print("  active at its end): OM scaled is where observation and reflection happen.")
    print("  ovh: TurnResult.timings.overhead_ms (OM calls of the turn included);")
    print("  quiet: the same over turns that made no Observer or Reflector call.")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
