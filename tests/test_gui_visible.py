"""Characters that hide or reorder text are shown as visible escapes in the GUI's HTML.

An unclosed U+202E (RIGHT-TO-LEFT OVERRIDE) reverses the rest of the line it
is in; zero-width characters make two different IDs look the same. Every
printed value shows them as ``⟨U+XXXX⟩``; a form's own fields keep them, so
editing a value never changes it.
"""

from __future__ import annotations

import uuid

import psycopg

import popagent
from popagent import Popagent
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from tests.web_support import in_process

RLO, PDF, ZWSP, LRI = "\u202e", "\u202c", "\u200b", "\u2066"
HIDDEN = (RLO, PDF, ZWSP, LRI)


def _outside_fields(html: str) -> str:
    """The page without its form fields' values (inputs and textareas)."""
    import re

    html = re.sub(r"<textarea[^>]*>.*?</textarea>", "", html, flags=re.S)
    return re.sub(r'value="[^"]*"', "", html)


async def test_bidi_and_zero_width_characters_are_shown_visibly(
    root: Popagent, memory: popagent.LongTermMemory, database_url: str
) -> None:
    resource = f"gui-vis-{uuid.uuid4().hex[:8]}"
    fact = await memory.create_fact(resource, f"Pays invoice {RLO}cba{PDF} on Fridays{ZWSP}x")
    threads = ThreadStore(memory.pool)
    await threads.create_session(resource, "trip", title=f"Trip {RLO}sdrawkcab and more")
    # An ID written before the identifier rule refused invisible characters.
    old_id = f"old{LRI}{ZWSP}id"
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO popagent_sessions (resource_id, session_id, title) VALUES (%s, %s, %s)",
            (resource, old_id, f"Legacy {RLO}"),
        )
    app = create_app(ServerConfig(resource_id=resource, maintenance_interval_s=None), root=root)
    async with in_process(app) as gui:
        pages = {
            "memories": (await gui.get("/")).text,
            "memory": (await gui.get(f"/memories/{fact.id}")).text,
            "sessions": (await gui.get("/sessions")).text,
            "session": (await gui.get("/sessions/trip")).text,
        }
        edit = (await gui.get(f"/facts/{fact.id}/edit")).text
    for name, html in pages.items():
        shown = _outside_fields(html)
        for ch in HIDDEN:
            assert ch not in shown, (name, f"U+{ord(ch):04X}")
        assert "⟨U+202E⟩" in shown, name
    assert "Pays invoice ⟨U+202E⟩cba⟨U+202C⟩ on Fridays⟨U+200B⟩x" in pages["memory"]
    assert "old⟨U+2066⟩⟨U+200B⟩id" in pages["sessions"]  # the ID, in the list
    assert "Legacy ⟨U+202E⟩" in pages["sessions"]
    # The link to that session still names it exactly (percent-encoded).
    assert "/sessions/old%E2%81%A6%E2%80%8Bid" in pages["sessions"]
    # The edit form's field holds the content as it is: saving changes nothing.
    assert f"Pays invoice {RLO}cba{PDF} on Fridays{ZWSP}x</textarea>" in edit
    assert f'value="Trip {RLO}sdrawkcab and more"' in pages["session"]
