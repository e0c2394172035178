"""Check the relative links of the docs: every link in ``README.md`` and ``docs/*.md`` to
a file of the repository names one that exists, and every ``#anchor`` names a heading
of its page.

::

    python tools/check_links.py            # exit 1, naming each broken link
    python tools/check_links.py FILE...    # those Markdown files instead

``scripts/check`` runs it. Links are read as Markdown writes them, ``[text](target)``
and ``[label]: target``, outside fenced code blocks and code spans; a target with a
scheme (``https:``, ``mailto:``) is not checked. A path is relative to the page that
links it, as GitHub and every Markdown viewer resolve it (so ``docs/x.md`` written
inside ``docs/`` is broken). An anchor is a heading's slug as GitHub makes it: the
heading's text without its Markdown, lower-cased, every character but letters,
digits, ``-``, ``_`` and spaces dropped, spaces as ``-``; a repeated heading gets
``-1``, ``-2``, ...; an HTML ``id`` or ``name`` attribute is an anchor too.
Each page is read once, with regular expressions that run in time linear in it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_INLINE = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"\n]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"\n]*\")?\s*$")
_HTML_ANCHOR = re.compile(r"""<[a-zA-Z][^>\n]*?\s(?:id|name)=["']([^"'\n]+)["']""")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_LINK_TEXT = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_NOT_SLUG = re.compile(r"[^\w\- ]")

__all__ = ["Broken", "anchors", "broken_links", "main", "slug"]


@dataclass(frozen=True, slots=True)
class Broken:
    """A link that leads nowhere: where it is, what it says, and why."""

    page: Path
    line: int
    target: str
    reason: str

    def __str__(self) -> str:
        where = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{where}:{self.line}: {self.target}: {self.reason}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text (without the repeat suffix)."""
    text = _LINK_TEXT.sub(r"\1", heading).replace("`", "")
    return _NOT_SLUG.sub("", text.strip().lower()).replace(" ", "-")


def _prose(lines: Iterable[str]) -> Iterable[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    fence: str | None = None
    for number, line in enumerate(lines, start=1):
        opening = _FENCE.match(line)
        if opening is not None:
            if fence is None:
                fence = opening.group(1)
            elif fence == opening.group(1):
                fence = None
            continue
        if fence is None:
            yield number, line


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every anchor of ``page``: its headings' slugs (repeats numbered) and HTML ids."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose(page.read_text(encoding="utf-8").splitlines()):
        heading = _HEADING.match(line)
        if heading is not None:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(_HTML_ANCHOR.findall(_CODE_SPAN.sub("", line)))
    return frozenset(found)


def broken_links(pages: Sequence[Path]) -> list[Broken]:
    """The broken relative links of ``pages``, in page and line order."""
    broken: list[Broken] = []
    for page in pages:
        for number, raw in _prose(page.read_text(encoding="utf-8").splitlines()):
            line = _CODE_SPAN.sub("", raw)  # a link inside a code span is an example
            targets = [m.group(1) for m in _INLINE.finditer(line)]
            reference = _REFERENCE.match(line)
            if reference is not None:
                targets.append(reference.group(1))
            for target in targets:
                reason = _why_broken(page, target)
                if reason is not None:
                    broken.append(Broken(page, number, target, reason))
    return broken


def _why_broken(page: Path, target: str) -> str | None:
    if _SCHEME.match(target) or target.startswith("//"):
        return None
    path, _, anchor = target.partition("#")
    linked = (page.parent / path).resolve() if path else page
    if not linked.exists():
        return f"no such file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}"
    if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
        return f"no heading with anchor #{anchor} in {linked.name}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv)
    pages = (
        [Path(name).resolve() for name in names]
        if names
        else [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )
    broken = broken_links(pages)
    for link in broken:
        print(link, file=sys.stderr)
    if broken:
        print(f"{len(broken)} broken link(s) in {len(pages)} page(s)", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
