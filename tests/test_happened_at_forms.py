"""A fact's event clock (``happened_at``) through the GUI's fact form and the CLI's
``facts add`` and ``facts edit``, on the real database: set on create, changed in
place on edit (no new version), kept when left empty, refused inline when it names
no time.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import httpx
from click.testing import CliRunner

import popagent
from popagent.cli import main
from popagent.models import HAPPENED_AT_HELP, MemoryFilter
from tests.gui_support import field_error, post_form


def memory_id(location: str) -> int:
    return int(location.split("?")[0].rsplit("/", 1)[1])


async def test_the_fact_form_sets_changes_and_keeps_the_event_clock(
    gui: httpx.AsyncClient, memory: popagent.LongTermMemory, resource: str
) -> None:
    blank = (await gui.get("/facts/new")).text
    assert 'name="happened_at"' in blank and HAPPENED_AT_HELP.split(":")[0] in blank
    created = await post_form(
        gui,
        "/facts",
        {
            "content": "Works at the bakery",
            "key": "job",
            "importance": "0.5",
            "happened_at": "2019",
        },
    )
    assert created.status_code == 303, created.text[-800:]
    fid = memory_id(created.headers["location"])
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.happened_start, fact.happened_precision) == (
        datetime(2019, 1, 1, tzinfo=UTC),
        "year",
    )

    # The edit form says the clock and leaves the field empty: saving keeps it.
    form = (await gui.get(f"/facts/{fid}/edit")).text
    # Each date one unbreakable phrase (a narrow screen never splits it at a hyphen).
    shown = re.sub(r"<[^>]+>", "", form)
    assert "2019-01-01 to 2020-01-01 (year)" in shown
    assert '<span class="when">2019-01-01</span>' in form
    kept = await post_form(
        gui, f"/facts/{fid}", {"content": "Works at the bakery", "key": "job", "importance": "0.6"}
    )
    assert kept.status_code == 303
    fact = await memory.get(resource, fid, kind="fact")
    assert fact.happened_precision == "year" and fact.importance == 0.6
    version = fact.version

    # Given alone, it changes in place: the same value, no new version.
    changed = await post_form(
        gui,
        f"/facts/{fid}",
        {
            "content": "Works at the bakery",
            "key": "job",
            "importance": "0.6",
            "happened_at": "2018-05",
        },
    )
    assert changed.status_code == 303
    fact = await memory.get(resource, fid, kind="fact")
    assert (fact.happened_start, fact.happened_precision) == (
        datetime(2018, 5, 1, tzinfo=UTC),
        "month",
    )
    assert fact.version == version

    # A phrase that names no time is refused next to its field; nothing is written.
    refused = await post_form(
        gui,
        "/facts",
        {"content": "Plays the cello", "importance": "0.5", "happened_at": "someday"},
    )
    assert refused.status_code == 422
    assert "names no time" in field_error(refused.text, "happened_at")
    assert 'value="someday"' in refused.text
    assert await memory.list(resource, MemoryFilter(text="cello")) == []


def test_facts_add_and_edit_take_happened_at(database_url: str, resource: str) -> None:
    base = ["--database-url", database_url, "--resource-id", resource]
    runner = CliRunner()
    added = runner.invoke(
        main,
        [
            *base,
            "facts",
            "add",
            "Plays the cello",
            "--key",
            "cello",
            "--happened-at",
            "spring 2021",
        ],
    )
    assert added.exit_code == 0, added.output
    fid = int(added.output.split()[-1])
    shown = runner.invoke(main, [*base, "facts", "show", str(fid)])
    cello = json.loads(shown.output)
    assert cello["happened_precision"] == "season" and cello["happened_start"].startswith("2021-03")

    edited = runner.invoke(main, [*base, "facts", "edit", str(fid), "--happened-at", "2020"])
    assert edited.exit_code == 0, edited.output
    assert edited.output.strip() == f"updated fact {fid} (version 1)"  # in place
    shown = runner.invoke(main, [*base, "facts", "show", str(fid)])
    assert json.loads(shown.output)["happened_precision"] == "year"

    refused = runner.invoke(main, [*base, "facts", "edit", str(fid), "--happened-at", "someday"])
    assert refused.exit_code != 0 and "happened_at" in refused.output
    assert HAPPENED_AT_HELP.split(":")[0] in runner.invoke(main, ["facts", "add", "--help"]).output
