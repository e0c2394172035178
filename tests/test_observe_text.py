"""The pure parts of observational memory: gap wording, loop detection, parsing,
previous-observation trimming and the Observer's input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from popagent.llm import FilePart
from popagent.models import Message
from popagent.observe import MemorySettings, execution_snapshot
from popagent.observe.engine import retained_split
from popagent.observe.observer import (
    OBSERVER_PROMPT,
    attachment_allowed,
    build_observer_messages,
    format_messages,
)
from popagent.observe.reflector import build_reflector_messages
from popagent.observe.text import gap_text, is_degenerate, parse_observations, trim_previous
from popagent.observe.tokens import count_message, count_text

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _message(i: int, role: str, content: str, at: datetime, parts: tuple = ()) -> Message:  # type: ignore[type-arg]
    return Message(i, "r", "s", role, content, parts, at)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (600, "10 minutes later"),
        (3_599, "59 minutes later"),
        (3_600, "1 hour later"),
        (2 * 3_600 + 5 * 60, "2 hours 5 minutes later"),
        (86_400 + 3 * 3_600, "1 day 3 hours later"),
        (15 * 86_400, "2 weeks 1 day later"),
        (70 * 86_400, "2 months 1 week later"),
        (400 * 86_400, "1 year 1 month later"),
    ],
)
def test_gap_wording(seconds: int, text: str) -> None:
    assert gap_text(seconds) == text


def test_loop_detection() -> None:
    varied = "\n".join(
        f"* 🔴 (10:{i:02d}) the user mentioned item number {i} today" for i in range(40)
    )
    assert not is_degenerate(varied)
    assert is_degenerate("\n".join(["* 🔴 (10:00) the user repeated the same thing"] * 12))
    assert is_degenerate("the cat sat on the mat and then " * 100)  # long-period, one line
    assert not is_degenerate("* ✅ done\n" * 5)


def test_parsing_takes_the_tagged_blocks_or_list_lines() -> None:
    text = "Sure!\n<observations>\nDate: Mar 1, 2026\n* 🔴 (09:00) a\n</observations>\nbye"
    assert parse_observations(text) == "Date: Mar 1, 2026\n* 🔴 (09:00) a"
    assert parse_observations("Here you go:\n- one\n- two\nthanks") == "- one\n- two"
    assert parse_observations("nothing useful") == ""
    long = "<observations>\n* " + "x" * 20_000 + "\n</observations>"
    assert parse_observations(long).endswith("… [truncated]")


def test_previous_observations_are_trimmed_to_the_budget() -> None:
    lines = [
        f"* {'🔴' if i % 5 == 0 else '🟡'} (10:{i:02d}) observation number {i} about the project"
        for i in range(60)
    ]
    text = "\n".join(lines)
    assert trim_previous(text, None) == (text, False)
    assert trim_previous(text, 0) == ("", True)
    assert trim_previous(text, 10_000) == (text, False)
    shown, truncated = trim_previous(text, 200)
    assert truncated and count_text(shown) <= 200
    kept = shown.splitlines()
    assert kept[-1] == lines[-1]  # the newest lines are kept
    assert any("observations truncated here]" in line for line in kept)
    important_before_tail = [k for k in kept if "🔴" in k and k not in lines[-len(kept) :]]
    assert important_before_tail  # older 🔴 lines are kept before the tail


def test_observer_input_has_dates_times_gaps_and_filtered_attachments() -> None:
    messages = [
        _message(1, "user", "I planted tomatoes", T0),
        _message(2, "assistant", "Nice!", T0 + timedelta(minutes=1)),
        _message(
            3,
            "user",
            "Look at these",
            T0 + timedelta(hours=2, minutes=6),
            (
                {
                    "type": "attachment",
                    "name": "bed.png",
                    "media_type": "image/png",
                    "url": "https://example.test/bed.png",
                },
                {
                    "type": "attachment",
                    "name": "notes.docx",
                    "media_type": "application/msword",
                    "url": "https://example.test/n",
                },
            ),
        ),
    ]
    text = format_messages(messages, temporal_markers=True, attachments=("image/*",))
    assert text.splitlines() == [
        "Date: Mar 1, 2026",
        "User (09:00): I planted tomatoes",
        "Assistant (09:01): Nice!",
        "[2 hours 5 minutes later]",
        "User (11:06): Look at these",
        "[Image #1: bed.png] (image/png; https://example.test/bed.png)",
        "[File #1: notes.docx]",
    ]
    plain = format_messages(messages, temporal_markers=False, attachments=())
    assert "later]" not in plain and "https://" not in plain
    assert attachment_allowed("IMAGE/PNG", ("image/*",))
    assert attachment_allowed("application/pdf", ("*",))
    assert not attachment_allowed("application/pdf", ("image/*",))


def test_observer_request_carries_guidance_and_trimmed_previous_observations() -> None:
    snapshot = execution_snapshot(
        MemorySettings(observer_guidance="Track plant names.", previous_observation_tokens=0)
    )
    system, user = build_observer_messages(
        [_message(1, "user", "hi", T0)], "* 🔴 (08:00) old", snapshot
    )
    assert system.content is not None and system.content.startswith(OBSERVER_PROMPT)
    assert system.content.endswith("=== CUSTOM INSTRUCTIONS ===\nTrack plant names.")
    assert user.content is not None and "old" not in user.content
    assert "left out" in user.content
    full = execution_snapshot(MemorySettings(previous_observation_tokens=None))
    _, user = build_observer_messages([_message(1, "user", "hi", T0)], "* 🔴 (08:00) old", full)
    assert user.content is not None and "* 🔴 (08:00) old" in user.content
    reflector = build_reflector_messages(
        "x", execution_snapshot(MemorySettings(reflector_guidance="Keep plant names.")), 3
    )
    assert reflector[0].content is not None and reflector[0].content.endswith("Keep plant names.")
    assert reflector[1].content is not None and "level 3 of 3" in reflector[1].content


def test_the_retained_tail_never_starts_on_a_tool_result() -> None:
    call = {"type": "tool_call", "id": "c1", "name": "ping", "arguments": "{}"}
    result = {"type": "tool_result", "tool_call_id": "c1", "name": "ping"}
    messages = [
        _message(1, "user", "a " * 50, T0),
        _message(2, "assistant", "", T0, (call,)),
        _message(3, "tool", "pong " * 20, T0, (result,)),
        _message(4, "assistant", "done", T0),
    ]
    floor = count_message(messages[3]) + 1  # would start the tail on the tool result
    assert retained_split(messages, floor, None) == 1
    assert retained_split(messages, 0, None) == 4


def test_unusable_attachments_stay_placeholders() -> None:
    parts = (
        {"type": "attachment", "name": "a.png", "media_type": "image/png", "data": "not base64!"},
        {
            "type": "attachment",
            "name": "b.pdf",
            "media_type": "application/pdf",
            "url": "https://x.test/b",
        },
        {"type": "attachment", "name": "c.png", "media_type": "image/png", "url": "ftp://x.test/c"},
        {
            "type": "attachment",
            "name": "d.pdf",
            "media_type": "application/pdf",
            "url": "data:application/pdf;base64,JVBERi0x",
        },
    )
    snapshot = execution_snapshot(MemorySettings(forward_attachments=True))
    _, user = build_observer_messages([_message(1, "user", "files", T0, parts)], "", snapshot)
    assert user.attachments == (FilePart("d.pdf", "application/pdf", "JVBERi0x"),)
    assert user.content is not None and "in this order:\n- File #2: d.pdf" in user.content
    assert "[File #1: b.pdf] (application/pdf; https://x.test/b)" in user.content
    assert "[Image #1: a.png] (image/png)" in user.content and "JVBERi0x" not in user.content
