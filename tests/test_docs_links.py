"""``tools/check_links.py``: every relative link and ``#anchor`` in ``README.md`` and
``docs/*.md`` leads somewhere; ``scripts/check`` runs it.

The tool runs as ``scripts/check`` runs it (a subprocess) on the real docs, and on
pages written into a temporary folder: a link to a missing file (``docs/x.md`` from
inside ``docs/``), an anchor no heading makes, and the links it must leave alone
(external ones, examples in code) are each told apart.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli_support import ROOT
from tests.cli_support import run_tool as run

TOOL = ROOT / "tools" / "check_links.py"


def run_tool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run(TOOL, *args)


def test_the_docs_have_no_broken_link() -> None:
    done = run_tool()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_scripts_check_runs_the_link_check() -> None:
    check = (ROOT / "scripts" / "check").read_text(encoding="utf-8")
    assert '"$py" tools/check_links.py\n' in check


def test_broken_files_and_anchors_are_named_and_the_rest_is_left_alone(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "README.md").write_text(
        '# Title\n\n## Use a `model` (here)\n\n## Notes\n\n## Notes\n\n<a id="kept"></a>\n',
        encoding="utf-8",
    )
    (docs / "guide.md").write_text(
        "# Guide\n\n"
        "See [the README](../README.md#use-a-model-here), [notes](../README.md#notes-1),\n"
        "[kept](../README.md#kept), [top](#guide) and [the web](https://example.com/x.md).\n"
        "Broken: [embeddings](docs/embeddings.md) and [a heading](../README.md#nothing).\n"
        "[self]: #no-such-heading\n"
        "An example, not a link: `[x](missing.md)`.\n\n"
        "```markdown\n[also an example](missing.md)\n```\n",
        encoding="utf-8",
    )
    done = run_tool(tmp_path / "README.md", docs / "guide.md")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert "guide.md:5: docs/embeddings.md: no such file " in lines[0]
    assert lines[0].endswith("docs/docs/embeddings.md")
    assert lines[1].endswith(
        "guide.md:5: ../README.md#nothing: no heading with anchor #nothing in README.md"
    )
    assert lines[2].endswith(
        "guide.md:6: #no-such-heading: no heading with anchor #no-such-heading in guide.md"
    )
    assert lines[3:] == ["3 broken link(s) in 2 page(s)"]
