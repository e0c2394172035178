"""What recall lets into the block, with the defaults (the bundled model, calibrated
fusion: ``memory.evidence``), on real PostgreSQL.

Issue 37's report, tried as a new user would: ten facts, and questions in other words.
"What do I do for a living?" ranked "My sister Ana lives in Toronto" ("living" and
"lives" stem alike) above "I work as a backend engineer", and every question brought
back unrelated facts, admitted by importance, recency and the fact bonus alone. Here a
one-word overlap loses to a strong match by meaning, a rare word (a name) still wins,
nothing is admitted without evidence, and each result says what admitted it: in the
library, the API, the CLI and the GUI preview.
"""

from __future__ import annotations

import asyncio
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

import popagent
from popagent import Popagent
from tests.gui_support import post_form
from tests.web_support import api_client, cli_command

#: Ten facts of one user, as ``remember --key`` stores them.
FACTS = {
    "work.job": "I work as a backend engineer at a logistics startup",
    "family.sister": "My sister Ana lives in Toronto",
    "diet.allergy": "I am allergic to shellfish",
    "pets": "I have a greyhound called Biscuit",
    "home.city": "I moved to Lisbon in 2022",
    "morning.routine": "I go running at six every morning before work",
    "music": "My favourite band is Radiohead",
    "car": "I drive a 2015 Honda Civic",
    "travel.next": "Planning a trip to Kyoto in April",
    "finance.savings": "Saving for a down payment on an apartment",
}
#: A fact that answers nothing below, as important and as new as a fact can be.
LOUD = "Reminder: the quarterly report template lives on the shared drive"


@pytest.fixture(autouse=True)
def no_configured_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, whatever the environment running the suite says."""
    monkeypatch.delenv("POPAGENT_EMBEDDER", raising=False)


async def store(memory: popagent.LongTermMemory, resource: str) -> None:
    for key, content in FACTS.items():
        await memory.remember(resource, content, key=key)
    assert await memory.wait_for_vectors(resource) == 0


def contents(results: list[popagent.RecallResult]) -> list[str]:
    return [r.memory.content for r in results]


async def test_a_one_word_overlap_loses_to_a_strong_match_by_meaning(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    await store(memory, resource)
    results = await memory.recall(resource, "What do I do for a living?")
    assert contents(results)[0] == FACTS["work.job"], contents(results)
    assert results[0].evidence == "meaning"
    sister = [r for r in results if r.memory.content == FACTS["family.sister"]]
    # The sister's fact shares one common word and nothing of the meaning: if it is
    # there at all, it ranks below the answer.
    assert not sister or sister[0].score < results[0].score
    # The blend it replaced put the one shared word first (the report's ranking).
    blend = popagent.LongTermMemory(
        memory.pool,
        embedder=memory.embedder,
        weights=popagent.RankingWeights(fusion="blend"),
    )
    before = await blend.recall(resource, "What do I do for a living?", touch=False)
    assert contents(before)[0] == FACTS["family.sister"]


async def test_a_rare_word_still_wins(memory: popagent.LongTermMemory, resource: str) -> None:
    await store(memory, resource)
    for question, answer in (
        ("Where is Ana based?", "family.sister"),
        ("Do I like Radiohead?", "music"),
        ("When is the Kyoto trip?", "travel.next"),
    ):
        results = await memory.recall(resource, question)
        assert contents(results)[0] == FACTS[answer], (question, contents(results))
        assert results[0].evidence == "words"


async def test_importance_and_recency_admit_nothing(
    memory: popagent.LongTermMemory, resource: str
) -> None:
    """A memory with the highest importance, written last, that answers none of the
    questions never comes back; a question nothing answers gets at most one memory."""
    await store(memory, resource)
    now = datetime.now(UTC)
    loud = await memory.remember(resource, LOUD, key="work.report", importance=1.0)
    assert await memory.wait_for_vectors(resource) == 0
    for question in (
        "What is my profession?",
        "Which dog breed do I own?",
        "What seafood should I stay away from?",
        "What vehicle is parked in my garage?",
    ):
        results = await memory.recall(resource, question, now=now + timedelta(minutes=1))
        assert loud.memory.id not in {r.memory.id for r in results}, question
        assert all(r.evidence in {"words", "meaning", "next turn"} for r in results)
    for question in ("What is my blood type?", "Do I have any tattoos?"):
        results = await memory.recall(resource, question)
        assert len(results) <= 1, (question, contents(results))


async def test_each_surface_says_what_admitted_a_memory(
    root: Popagent, memory: popagent.LongTermMemory, resource: str, database_url: str
) -> None:
    await store(memory, resource)
    question = "What do I do for a living?"
    async with api_client(root, resource) as api:
        body = (await api.post("/api/recall", json={"query": question})).json()
        first = body["results"][0]
        assert first["evidence"] == "meaning"
        assert {"relevance", "meaning", "similarity", "background"} <= set(first["components"])
        assert "vector" not in first["components"]  # no unexplained rescaled cosine
        page = await post_form(api, "/recall", {"query": question, "limit": "8"})
        assert page.status_code == 200
        assert "Admitted by <strong>meaning</strong>" in page.text
        assert "well above what this resource" in page.text
    done = await asyncio.to_thread(
        subprocess.run,
        [
            *cli_command(),
            "--database-url",
            database_url,
            "--resource-id",
            resource,
            "recall",
            question,
            "--explain",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first_line = next(line for line in done.stdout.splitlines() if line.startswith("#1 "))
    assert "admitted by meaning" in first_line and "background=" in first_line
