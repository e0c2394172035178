"""Concurrent identical writes from several OS processes: one row, one current value, no errors.

Five worker processes (this module run with ``python -m``) each open a pool
of ten connections and, per scenario, wait on a pipe barrier: each prints
``ready`` and blocks until the test has seen every worker ready and writes
``go`` to all of them, so the fifty calls start together. Rows are then
counted in SQL, and the recall statistics the triggers keep are checked
against a full recount (concurrent upserts must not skew them).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg

import popagent
from popagent.models import Memory, RememberResult

REPO = Path(__file__).parents[1]
PROCESSES = 5
TASKS = 10
SCENARIOS = ("identical_keyless", "identical_keyed", "same_key_different", "identical_episode")
STEP_TIMEOUT_S = 120.0


# --- the worker -------------------------------------------------------------------------------


async def _call(memory: popagent.LongTermMemory, scenario: str, resource: str, tag: str) -> Any:
    if scenario == "identical_keyless":
        return await memory.remember(resource, "Allergic to peanuts and tree nuts")
    if scenario == "identical_keyed":
        return await memory.remember(resource, "Prefers dark mode", key="ui.theme")
    if scenario == "same_key_different":
        return await memory.remember(resource, f"Favourite shade is number {tag}", key="shade")
    assert scenario == "identical_episode"
    return await memory.retain_episode(
        resource, "s1", "What time is it in Tokyo?", "It is nine in the evening there."
    )


def _outcome(value: object) -> dict[str, Any]:
    if isinstance(value, RememberResult):
        m = value.memory
        return {"ok": True, "action": value.action, "id": m.id, "content": m.content}
    if isinstance(value, Memory):
        return {"ok": True, "action": "episode", "id": value.id, "content": value.content}
    return {"ok": False, "error": repr(value)}


async def _work(url: str, worker: int, resources: dict[str, str]) -> None:
    async with popagent.connect(url, min_size=TASKS, max_size=TASKS) as root:
        memory = root.memory
        for scenario in SCENARIOS:
            print("ready", flush=True)
            line = await asyncio.to_thread(sys.stdin.readline)
            if line.strip() != "go":
                return
            outcomes = await asyncio.gather(
                *(
                    _call(memory, scenario, resources[scenario], f"{worker}-{i}")
                    for i in range(TASKS)
                ),
                return_exceptions=True,
            )
            print(json.dumps({"scenario": scenario, "outcomes": [_outcome(o) for o in outcomes]}))
            sys.stdout.flush()


def main() -> None:
    url, worker, resources = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    asyncio.run(_work(url, worker, resources))


# --- the test ---------------------------------------------------------------------------------


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    raw = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT_S)
    if not raw:
        assert proc.stderr is not None
        err = await proc.stderr.read()
        raise AssertionError(f"a worker exited early: {err.decode(errors='replace')}")
    return raw.decode().strip()


async def _run_workers(url: str, resources: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    env = {k: v for k, v in os.environ.items() if k != "POPAGENT_DATABASE_URL"}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.test_concurrency_processes",
            url,
            str(n),
            json.dumps(resources),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO,
            env=env,
        )
        for n in range(PROCESSES)
    ]
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
    try:
        for scenario in SCENARIOS:
            assert [await _line(p) for p in procs] == ["ready"] * PROCESSES
            for p in procs:  # the barrier opens: every worker is connected and waiting
                assert p.stdin is not None
                p.stdin.write(b"go\n")
            await asyncio.gather(*(p.stdin.drain() for p in procs if p.stdin is not None))
            for p in procs:
                report = json.loads(await _line(p))
                assert report["scenario"] == scenario
                results[scenario].extend(report["outcomes"])
        for p in procs:
            assert await asyncio.wait_for(p.wait(), STEP_TIMEOUT_S) == 0
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    return results


COUNT_ROWS = """
SELECT kind, key, content FROM popagent_memories WHERE resource_id = %s ORDER BY id
"""

# The triggers' statistics against a full recount of the resource's memories.
STATS_DRIFT = """
WITH actual AS (
    SELECT l.lexeme, count(*) AS documents
    FROM popagent_memories m CROSS JOIN LATERAL unnest(m.search_vector) AS l
    WHERE m.resource_id = %(r)s GROUP BY l.lexeme
), kept AS (
    SELECT lexeme, documents FROM popagent_lexeme_stats
    WHERE resource_id = %(r)s AND documents <> 0
)
SELECT
    (SELECT count(*) FROM (SELECT * FROM actual EXCEPT SELECT * FROM kept
                           UNION ALL
                           SELECT * FROM kept EXCEPT SELECT * FROM actual) d) AS lexemes_off,
    (SELECT documents FROM popagent_resource_stats WHERE resource_id = %(r)s) AS documents,
    (SELECT count(*) FROM popagent_memories WHERE resource_id = %(r)s) AS rows
"""


async def test_fifty_concurrent_writes_from_five_processes(database_url: str) -> None:
    resources = {s: f"conc-{s}-{uuid.uuid4().hex[:8]}" for s in SCENARIOS}
    results = await _run_workers(database_url, resources)

    for scenario, outcomes in results.items():
        assert len(outcomes) == PROCESSES * TASKS, scenario
        errors = [o["error"] for o in outcomes if not o["ok"]]
        assert errors == [], f"{scenario}: {errors[:3]}"

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        rows = {}
        for scenario, resource in resources.items():
            cur = await conn.execute(COUNT_ROWS, (resource,))
            rows[scenario] = await cur.fetchall()
            cur = await conn.execute(STATS_DRIFT, {"r": resource})
            drift = await cur.fetchone()
            assert drift == (0, 1, 1), f"{scenario}: recall statistics drifted: {drift}"

    for scenario in ("identical_keyless", "identical_keyed"):
        outcomes = results[scenario]
        assert len(rows[scenario]) == 1, rows[scenario]
        assert len({o["id"] for o in outcomes}) == 1
        actions = sorted(o["action"] for o in outcomes)
        assert actions == ["created"] + ["unchanged"] * (PROCESSES * TASKS - 1), actions

    sent = {f"Favourite shade is number {w}-{i}" for w in range(PROCESSES) for i in range(TASKS)}
    ((kind, key, content),) = rows["same_key_different"]
    assert (kind, key) == ("fact", "shade") and content in sent
    outcomes = results["same_key_different"]
    assert len({o["id"] for o in outcomes}) == 1
    assert sorted(o["action"] for o in outcomes) == ["created"] + ["updated"] * (
        PROCESSES * TASKS - 1
    )
    assert {o["content"] for o in outcomes} == sent  # each call returned its own value

    ((kind, _key, content),) = rows["identical_episode"]
    assert kind == "episode" and "Tokyo" in content
    assert len({o["id"] for o in results["identical_episode"]}) == 1


if __name__ == "__main__":
    main()
