"""The newest value first (``memory.newest``): pure ordering, then through recall
on the real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from popagent import LongTermMemory
from popagent.memory.newest import content_words, newest_first, same_topic
from popagent.models import Memory, RecallResult

T0 = datetime(2024, 1, 5, tzinfo=UTC)


def result(id: int, content: str, days: int, key: str | None = None) -> RecallResult:
    when = T0 + timedelta(days=days)
    memory = Memory(id, "r", None, "episode" if key is None else "fact", key, content,
                    "0" * 64, 0.5, when, when, None, 0)  # fmt: skip
    return RecallResult(memory=memory, score=1.0 - id / 100, components=())


def test_the_newer_of_two_memories_about_the_same_thing_goes_first() -> None:
    old = result(1, "User: I have two cats at home, Miso and Tofu.", 0)
    trip = result(2, "User: Planning a trip to Norway.", 10)
    new = result(3, "User: I have three cats now, we adopted Pickle.", 60)
    ordered = newest_first([old, trip, new], "How many cats do I have?")
    assert [r.memory.id for r in ordered] == [3, 1, 2]
    # Scores stay as ranked: each result still explains its own.
    assert ordered[0].score == new.score


def test_what_is_left_alone() -> None:
    old = result(1, "User: I have two cats at home.", 0)
    new = result(2, "User: I have three cats now.", 60)
    other = result(3, "User: The vet said the neighbours' dog is fine.", 90)
    # Already newest first; a question that no shared word answers; keyed facts.
    assert newest_first([new, old], "How many cats do I have?") == [new, old]
    assert newest_first([old, new], "what is the weather like?") == [old, new]
    keyed_old = result(4, "I have two cats at home.", 0, key="pets.cats")
    assert newest_first([keyed_old, new], "how many cats?") == [keyed_old, new]
    # A newer memory that holds no word of the question stays where it is.
    assert newest_first([old, other], "how many cats?") == [old, other]


def test_topic_needs_the_same_question_words_in_both() -> None:
    asked = content_words("Which city do I live in?")
    a = content_words("I live in Leeds with my partner, nice city.")
    b = content_words("We moved, I live in Bristol now.")
    assert same_topic(a, b, asked)  # "live", a word of the question, in both
    assert not same_topic(a, content_words("We bought a sofa."), asked)
    assert not same_topic(a, b, content_words("what is my partner called?"))
    assert not same_topic(frozenset(), b, asked)


async def test_recall_ranks_the_newer_episode_first_for_a_present_question(
    memory: LongTermMemory, resource: str
) -> None:
    # The older says more about cats: on words alone it ranks first.
    await memory.retain_episode(
        resource, "s1", "I have two cats, my cats Miso and Tofu are lovely cats.", "Two cats!",
        created_at=T0,
    )  # fmt: skip
    await memory.retain_episode(
        resource, "s2", "I have three cats now.", "Congrats on the third!",
        created_at=T0 + timedelta(days=60),
    )  # fmt: skip
    now = T0 + timedelta(days=61)
    present = await memory.recall(resource, "how many cats do I have?", now=now, mode="lexical")
    assert "three cats" in present[0].memory.content
    # A question about the past keeps the ranking's order (the older may be the answer).
    past = await memory.recall(
        resource, "how many cats did I have before this?", now=now, mode="lexical"
    )
    assert [r.score for r in past] == sorted((r.score for r in past), reverse=True)
