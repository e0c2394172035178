"""The newest value first (``memory.newest``): pure ordering, then through recall
on the real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from popagent import LongTermMemory
from popagent.memory.newest import content_words, newest_first, present_tense, same_topic, told
from popagent.memory.recall import newest_applies
from popagent.models import Memory, RecallResult

T0 = datetime(2024, 1, 5, tzinfo=UTC)


def result(
    id: int, content: str, days: int, key: str | None = None, score: float | None = None
) -> RecallResult:
    when = T0 + timedelta(days=days)
    memory = Memory(id, "r", None, "episode" if key is None else "fact", key, content,
                    "0" * 64, 0.5, when, when, None, 0)  # fmt: skip
    return RecallResult(memory=memory, score=1.0 - id / 100 if score is None else score,
                        components=())  # fmt: skip


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


def test_only_a_present_tense_question_about_a_state_puts_the_newest_first() -> None:
    now = T0 + timedelta(days=400)
    for asked in ("How many cats do I have?", "Where does Sam work?", "What's my rent now?",
                  "Who is my doctor?", "Which language am I learning these days?"):  # fmt: skip
        assert present_tense(asked) and newest_applies(asked, now), asked
    for asked in ("What did Caroline paint?", "How long has she been practising art?",
                  "Where was I living?", "cats", "When do I see the dentist?",
                  "Where did I live in 2021?"):  # fmt: skip
        assert not newest_applies(asked, now), asked


def test_a_newer_episode_that_only_looks_alike_keeps_its_place() -> None:
    """The looser rule moved these: a shared name or speaker label, a question word in
    the reply only, a newer turn far less relevant than the answer."""
    question = "What country is Maria's grandma from?"
    answer = result(1, "User: Maria: My grandma gave me this necklace, it comes from Sweden, "
                    "my home country.\nAssistant: John: Beautiful, Maria!", 0, score=0.74)  # fmt: skip
    chat = result(2, "User: Maria: Hey John, long time! I adopted a puppy named Coco.\n"
                  "Assistant: John: Congrats Maria, what a cute puppy!", 150, score=0.24)  # fmt: skip
    assert newest_first([answer, chat], question) == [answer, chat]
    # Close in relevance and about the same words, but the newer user said none of
    # the question's words (the reply did): no update told.
    old = result(1, "User: I work as a nurse.\nAssistant: Nursing is hard work.", 0, score=0.7)
    reply = result(2, "User: Long shift today.\nAssistant: Rest after work!", 30, score=0.68)
    assert newest_first([old, reply], "Where do I work?") == [old, reply]
    # A told update far below the older in relevance keeps its place too.
    new = result(3, "User: I now work at a startup.\nAssistant: Big change!", 60, score=0.3)
    assert newest_first([old, new], "Where do I work?") == [old, new]
    assert newest_first([old, replace_score(new, 0.6)], "Where do I work?")[0] is not old
    assert told("User: a\nAssistant: b") == "User: a"
    assert content_words("User: Maria: Hello Maria") == frozenset({"hello", "maria"})


def replace_score(r: RecallResult, score: float) -> RecallResult:
    return RecallResult(memory=r.memory, score=score, components=r.components)


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


async def test_recall_keeps_the_evidence_above_a_newer_chat_turn_that_only_looks_alike(
    memory: LongTermMemory, resource: str
) -> None:
    """A transcript between two people, as LoCoMo's: every turn names both, so the
    looser rule took a later turn naming the asker for an update of the answer."""
    turns = [
        ("Maria: My grandma gave me this necklace, it comes from Sweden, my home country.",
         "John: Beautiful, Maria! Your grandma has great taste.", 0),
        ("Maria: Work was busy, I finished the garden fence.", "John: Nice fence, Maria.", 40),
        ("Maria: Hey John, long time! I adopted a puppy named Coco.",
         "John: Congrats Maria, what a cute puppy!", 150),
    ]  # fmt: skip
    for i, (user, reply, days) in enumerate(turns):
        await memory.retain_episode(
            resource, f"s{i}", user, reply, created_at=T0 + timedelta(days=days)
        )
    now = T0 + timedelta(days=151)
    found = await memory.recall(resource, "What country is Maria's grandma from?", now=now,
                                mode="lexical")  # fmt: skip
    assert "Sweden" in found[0].memory.content
    assert [r.score for r in found] == sorted((r.score for r in found), reverse=True)
