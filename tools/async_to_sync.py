"""Generate the blocking client from the asyncio one: ``client/sync.py`` from ``client/async_.py``.

::

    python tools/async_to_sync.py            # rewrite src/popagent/client/sync.py
    python tools/async_to_sync.py --check    # exit 1, printing a diff, when sync.py is stale

Either exits 2, naming the line or phrase, when ``async_.py`` uses something the
tables below do not cover (an async name or an async word left in the output).

``async_.py`` is the one source of truth; ``sync.py`` is its output and is never
edited by hand (``scripts/check`` runs ``--check``, so CI fails on a stale file).

The transform works on tokens (``tokenize``), not on the syntax tree, so that
comments, docstrings and layout survive. On code it drops ``async`` and
``await``, unwraps ``Awaitable[X]`` to ``X`` and renames the names in
:data:`NAMES` (``AsyncClient`` to ``Client``, ``aclose`` to ``close``, ...). On
docstrings and comments it first rewrites the phrases of :data:`TEXT` (what is
about asyncio rather than about the API), then renames the same names. Every
phrase of :data:`TEXT` must occur in the source: one that no longer does fails
the generation instead of silently leaving async wording in the blocking client.
The result then goes through ``ruff check --fix`` (imports re-sorted; ``for x
in y: yield x``, which an async generator must spell out, becomes ``yield from
y``) and ``ruff format``, so the output is stable and passes the project's lint.
"""

from __future__ import annotations

import argparse
import difflib
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "popagent" / "client" / "async_.py"
TARGET = ROOT / "src" / "popagent" / "client" / "sync.py"
COMMAND = "python tools/async_to_sync.py"

# Names of the asyncio API and their blocking counterparts, in code and in text.
NAMES = {
    "AsyncClient": "Client",  # ours and httpx's
    "apaged": "paged",
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aread": "read",
    "aiter_lines": "iter_lines",
}

# Type wrappers that only exist on the async side: ``Awaitable[X]`` becomes ``X``,
# and the name is dropped from the imports.
UNWRAP = {"Awaitable"}

# Phrases of docstrings and comments that describe asyncio use, and what the
# blocking client says instead, matched exactly (a reflowed docstring must be
# matched again here: an unmatched phrase fails the generation). The
# replacement is final: ``NAMES`` is not applied to it.
TEXT = {
    "the asyncio client of": "the blocking client of",
    "An asyncio client of": "A blocking client of",
    "safe to share between tasks (``httpx.AsyncClient`` is, within one event loop);": (
        "safe to share between threads (``httpx.Client`` is);"
    ),
    "``await aclose()`` it, or use it as an async context manager.": (
        "close it, or use it as a context manager."
    ),
    "The blocking ``Client`` (``popagent.client.sync``) is generated from this module:": (
        "Generated from the asyncio ``AsyncClient`` (``popagent.client.async_``), method for method:"
    ),
    "change this one, then run": "change that one, then run",
    # An async generator left early is closed by ``aclosing`` (or, later, by the
    # event loop's finaliser); a generator is closed as soon as the loop drops it.
    "closes the connection once the generator is closed": (
        "closes the connection as soon as the generator is dropped"
    ),
    "(wrap it in ``contextlib.aclosing``);": "(or closed);",
    "``await fetch(offset)``": "``fetch(offset)``",
}

HEADER = f"""\
# Generated from src/popagent/client/async_.py by `{COMMAND}`: DO NOT EDIT.
# Change async_.py (or the tool's tables) and run the command again;
# `scripts/check` fails while this file differs from what the tool makes.
"""

# What must not survive into the blocking module. In code: a name of the asyncio
# API with no entry in NAMES. In docstrings and comments, outside TEXT's phrases:
# a word about awaiting.
_ASYNC_NAME = re.compile(
    r"(?i)\w*async\w*|__a(enter|exit|iter|next)__|__await__|aiter\w*|anext|aclose\w*|aread"
    r"|asend|athrow|Awaitable|Coroutine"
)
_ASYNC_WORD = re.compile(r"\b((?i:async|asyncio|await\w*|coroutines?|event loops?)|Async\w+)\b")

_TEXT_TOKENS = {tokenize.STRING, tokenize.COMMENT}
if sys.version_info >= (3, 12):  # f-strings are split into parts from 3.12 on
    _TEXT_TOKENS.add(tokenize.FSTRING_MIDDLE)


def _text_pattern() -> re.Pattern[str]:
    phrases = [re.escape(phrase) for phrase in TEXT]
    names = [rf"\b{re.escape(name)}\b" for name in NAMES]
    return re.compile("|".join(f"({p})" for p in phrases + names))


def _rewrite_text(text: str, pattern: re.Pattern[str], used: set[str], line: int) -> str:
    phrases = list(TEXT)
    out: list[str] = []
    position = 0
    for match in [*pattern.finditer(text), None]:
        plain = text[position : len(text) if match is None else match.start()]
        left = _ASYNC_WORD.search(plain)
        if left:
            raise ValueError(f"line {line}: {left.group(0)!r} in text: add a phrase to TEXT")
        out.append(plain)
        if match is None:
            break
        index = match.lastindex
        assert index is not None
        if index <= len(phrases):
            used.add(phrases[index - 1])
            out.append(TEXT[phrases[index - 1]])
        else:
            out.append(NAMES[match.group(0)])
        position = match.end()
    return "".join(out)


def transform(source: str) -> str:
    """``source`` (an async module) as its blocking twin, before ruff's pass."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), in order
    pattern = _text_pattern()
    used: set[str] = set()
    closers: list[int] = []  # depth of each open ``Awaitable[``, to find its ``]``
    depth = 0
    for i, token in enumerate(tokens):
        start, end = offset(token.start), offset(token.end)
        if token.type == tokenize.OP and token.string in {"(", "[", "{"}:
            depth += 1
        elif token.type == tokenize.OP and token.string in {")", "]", "}"}:
            depth -= 1
            if closers and closers[-1] == depth and token.string == "]":
                closers.pop()
                edits.append((start, end, ""))
        elif token.type in _TEXT_TOKENS:
            new = _rewrite_text(token.string, pattern, used, token.start[0])
            if new != token.string:
                edits.append((start, end, new))
        elif token.type != tokenize.NAME:
            continue
        elif token.string in {"async", "await"}:
            # Up to the next token: ``async def`` becomes ``def``, ``await f()`` ``f()``.
            edits.append((start, offset(tokens[i + 1].start), ""))
        elif token.string in NAMES:
            edits.append((start, end, NAMES[token.string]))
        elif token.string in UNWRAP:
            after = tokens[i + 1]
            if after.string == "[":  # ``Awaitable[X]`` -> ``X``; the ``]`` goes when met
                closers.append(depth)
                edits.append((start, offset(after.end), ""))
            elif after.string == ",":  # in an import list: drop with its comma
                edits.append((start, offset(tokens[i + 2].start), ""))
            else:
                raise ValueError(f"line {token.start[0]}: cannot drop {token.string!r} here")
        elif _ASYNC_NAME.fullmatch(token.string):
            raise ValueError(f"line {token.start[0]}: {token.string!r} has no entry in NAMES")
    unused = set(TEXT) - used
    if unused:
        raise ValueError(f"phrases of TEXT no longer in the source: {sorted(unused)}")
    if closers:
        raise ValueError("unbalanced brackets after an unwrapped name")
    out: list[str] = []
    position = 0
    for start, end, new in edits:
        out.append(source[position:start])
        out.append(new)
        position = end
    out.append(source[position:])
    return "".join(out)


def _ruff(args: Sequence[str], text: str) -> str:
    # Always as sync.py in its place (also for --target elsewhere): the project's
    # configuration and the module's place in it decide the result.
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ruff {args[0]} failed:\n{done.stderr}")
    return done.stdout


def generate(source: str) -> str:
    """The text of the blocking module made from ``source``, formatted."""
    text = HEADER + transform(source)
    # I: the renamed imports sorted again; UP028: ``yield from`` for the spelled-out loops.
    fixes = "--select=I,UP028"
    text = _ruff(["check", "--fix", "--unsafe-fixes", "--exit-zero", fixes, "--quiet"], text)
    return _ruff(["format", "--quiet"], text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff if stale")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the async module")
    parser.add_argument("--target", type=Path, default=TARGET, help="the generated module")
    args = parser.parse_args(argv)
    try:
        wanted = generate(args.source.read_text(encoding="utf-8"))
    except (ValueError, RuntimeError, tokenize.TokenError) as exc:
        print(f"{args.source}: {exc}", file=sys.stderr)
        return 2
    current = args.target.read_text(encoding="utf-8") if args.target.exists() else ""
    if not args.check:
        if current != wanted:
            args.target.write_text(wanted, encoding="utf-8")
            print(f"wrote {args.target}")
        return 0
    if current == wanted:
        return 0
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        wanted.splitlines(keepends=True),
        f"{args.target} (as it is)",
        f"{args.target} (as {COMMAND} makes it)",
    )
    sys.stdout.writelines(diff)
    sys.stdout.flush()  # the diff before the verdict, also when both go to one pipe
    print(f"\n{args.target} is stale: run `{COMMAND}` and commit the result.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
