"""The credential screen on adversarial input: linear growth, and how far from the aim.

Every text popagent stores passes ``popagent.credentials.find_credentials``
(the "screen"). This feeds it input built to be slow, of every kind we could
think of, at 1, 8 and 32 KB (32,000 characters is the largest chat message the
API accepts), and prints the median milliseconds per input, the growth from
8 KB to 32 KB (4.0 is linear: four times the text, four times the time) and
the ratio to ordinary prose of the same size measured in the same run.

The kinds:

- ``repeat``: every word that makes a detector look closer (``password``,
  ``sk-``, ``eyJ``, ``otpauth://``, ``AKIA`` ...), repeated with each separator
  (nothing, space, dash, dot, underscore, colon, equals, quote, newline, slash);
- ``run``: long runs without separators (letters, digits, base32, hex,
  dashes, dots, whitespace, zero-width and other invisible characters, a
  character whose lower case is two characters);
- ``nested``: text that makes a pattern with several optional or repeated
  parts try many ways (qualifiers, verbs, unclosed quotes, seed-phrase words,
  identifiers made of credential words);
- ``late``: many candidates that each fail at their last character (a token
  one character short, a JWT without its third part, a URL without its host);
- ``card``: digit groups, the case that once took 33 s for 2,000 characters
  (``"1 1 1 ..."``), groups of 3 to 6 digits, near-misses of the Luhn check;
- ``parser``: the other parsers of hostile text, a recall query's named
  period (cut at the 4,000 characters a query may hold) and the Observer's
  answer.

``--old FILE`` also times another version of ``credentials.py`` (for instance
``git show HEAD~1:src/popagent/credentials.py > /tmp/old.py``) on each input
in a subprocess, cut off after ``--old-timeout`` seconds.

Usage: python bench/screening.py [--repeat 5] [--sizes 1000,8000,32000]
       [--only KIND] [--old FILE] [--old-timeout 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from popagent.credentials import find_credentials
from popagent.memory.temporal import query_window
from popagent.memory.validation import QUERY_CAP
from popagent.observe.text import parse_observations

# Words that make some detector look closer.
TRIGGERS = (
    "password",
    "Password:",
    "pw",
    "passcode",
    "pass code",
    "pin",
    "PIN code",
    "cvv",
    "security code",
    "api key",
    "api_key",
    "access token",
    "secret",
    "client secret",
    "credentials",
    "recovery code",
    "backup codes",
    "mot de passe",
    "contraseña",
    "passwort",
    "wachtwoord",
    "hasło",
    "пароль",
    "şifre",
    "TOKEN",
    "GITHUB_TOKEN",
    "A_TOKEN_",
    "a_token_",
    "db.password",
    "sk-",
    "sk-a-",
    "sk_live_",
    "ghp_",
    "github_pat_",
    "glpat-",
    "AKIA",
    "xoxb-",
    "xapp-1-",
    "AIza",
    "ya29.",
    "GOCSPX-",
    "whsec_",
    "hf_",
    "SG.",
    "npm_",
    "pypi-AgE",
    "dop_v1_",
    "shpat_",
    "SK",
    "key-",
    "AGE-SECRET-KEY-1",
    "AccountKey=",
    "SharedAccessSignature=",
    "?sig=",
    "eyJ",
    "eyJ-",
    "Bearer",
    "Basic",
    "Authorization:",
    "Proxy-Authorization:",
    "-----BEGIN ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "PuTTY-User-Key-File-2:",
    "aws_secret_access_key",
    "aws secret key",
    "://",
    "a://",
    "https://u:",
    "@",
    "otpauth://",
    "otpauth://totp/x?secret=",
    "2fa secret",
    "totp key",
    "seed phrase",
    "mnemonic words",
    "is",
    "for",
    "12345678:AA",
    "[REDACTED:",
    "[secret:",
)
SEPARATORS = ("", " ", "-", ".", "_", ":", "=", '"', "'", "\n", "/", "a", "1")

# Ordinary prose: the baseline every row is compared with.
PROSE = (
    "We moved the team offsite to the second week of May, after the launch. "
    "Anna booked the train for 8:15 and the hotel near the old harbour; "
    "dinner on Thursday is at 7, table for 12, and the budget is about 2,400 euros. "
    "Remind me to call the plumber about the kitchen sink and to renew the passport. "
)


@dataclass(frozen=True, slots=True)
class Case:
    kind: str
    name: str
    make: Callable[[int], str]
    # What reads the input: the screen, or another parser of hostile text.
    read: Callable[[str], object] = find_credentials


def _cycle(unit: str) -> Callable[[int], str]:
    def make(size: int) -> str:
        return (unit * (size // max(len(unit), 1) + 1))[:size]

    return make


def _cases() -> list[Case]:
    cases: list[Case] = []
    for trigger in TRIGGERS:
        for sep in SEPARATORS:
            cases.append(Case("repeat", f"{trigger!r} + {sep!r}", _cycle(trigger + sep)))
    runs = {
        "letters": "a",
        "upper letters": "A",
        "digits": "1",
        "base32": "JBSWY3DPEHPK3PXP",
        "hex": "0123456789abcdef",
        "dashes": "-",
        "dots": ".",
        "underscores": "_",
        "spaces": " ",
        "newlines": "\n",
        "tabs": "\t",
        "word-dash": "a-",
        "word-dot": "a.",
        "zero-width": "\u200b",
        "letter + zero-width": "a\u200b",
        "dotted I (two in lower case)": "\u0130",
        "long s": "\u017f",
        "mixed symbols": "Ab1-_. :=\"'",
    }
    cases += [Case("run", name, _cycle(unit)) for name, unit in runs.items()]
    nested = {
        "qualifier words": "password for the old router at home ",
        "qualifier, no value": "password for a b c d e ",
        "verb chain": "password is now still just ",
        "unclosed double quote": 'password "',
        "unclosed guillemet": "password « ",
        "assignment, no value": "password = ",
        "seed words": "seed phrase is abandon ability able about above absent ",
        "credential identifiers": "API_KEY_SECRET_TOKEN_PASSWORD_",
        "dotted identifiers": "a.b.c.api_key.token.",
        "pin digits": "pin 1234567 ",
        "totp groups": "2fa key ABCD EFGH IJKL ",
        "aws prose": "aws secret key for the prod account ",
        "bearer spaces": "Bearer    ",
        "header chain": "Authorization: Basic ",
    }
    cases += [Case("nested", name, _cycle(unit)) for name, unit in nested.items()]
    late = {
        "sk one short": "sk-" + "a" * 19 + " ",
        "ghp one short": "ghp_" + "a" * 29 + " ",
        "JWT without third part": "eyJabcdefgh.eyJabcdefgh. ",
        "JWT short segment": "eyJabcdefg.eyJ ",
        "JWT segments": "eyJ.",
        "URL without host": "postgres://user:password@ ",
        "URL without password": "a://b:",
        "otpauth without secret": "otpauth://totp/x?issuer=a&",
        "otpauth bad secret": "otpauth://totp/x?secret=1&secret=",
        "AKIA one short": "AKIA" + "A" * 15 + " ",
        "PEM header only": "-----BEGIN A B C D ",
        "AWS key one short": "aws_secret_access_key=" + "aB1/" * 9 + "aB1 ",
        "azure short": "AccountKey=abc;",
        "telegram short": "123456789:AA" + "a" * 32 + " ",
    }
    cases += [Case("late", name, _cycle(unit)) for name, unit in late.items()]
    cards = {
        "1 1 1 (today's card case)": "1 ",
        "1-1-1": "1-",
        "4-digit groups": "4111 ",
        "4-digit groups, dashes": "4111-",
        "3-digit groups": "411 ",
        "6-digit groups": "411111 ",
        "Luhn near-miss cards": "4111 1111 1111 1112 ",
        "valid card, repeated": "4111 1111 1111 1111 ",
        "digits and decimals": "4111.5 ",
        "mixed separators": "4111 1111-",
        "phone numbers": "+1 415 555 0100 ",
    }
    cases += [Case("card", name, _cycle(unit)) for name, unit in cards.items()]
    # Other parsers of hostile text: a recall query's named period (a query holds at
    # most 4,000 characters, cut here), and the Observer's answer.
    now = datetime.now(UTC)

    def period(text: str) -> object:
        return query_window(text[:QUERY_CAP], now)

    parsers = {
        "query: ambiguous months": ("may ", period),
        "query: relation words": ("before the ", period),
        "query: periods": ("last week ", period),
        "observer: opening tags": ("<observations>\n", parse_observations),
        "observer: list lines": ("- a\n", parse_observations),
    }
    cases += [Case("parser", name, _cycle(unit), read) for name, (unit, read) in parsers.items()]
    return cases


def _median_ms(text: str, repeat: int, read: Callable[[str], object] = find_credentials) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        read(text)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


_OLD_TIMER = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("popagent._old_credentials", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
text = sys.stdin.read()
began = time.perf_counter()
module.find_credentials(text)
print((time.perf_counter() - began) * 1000)
"""


def _old_ms(path: str, text: str, timeout: float) -> str:
    """Another version's time on ``text``, in a subprocess cut off after ``timeout``."""
    with open(path, encoding="utf-8") as file:
        source = file.read().replace("from .checks", "from popagent.checks")
    with open("/tmp/popagent-old-credentials.py", "w", encoding="utf-8") as out:
        out.write(source)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _OLD_TIMER, "/tmp/popagent-old-credentials.py"],
            input=text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return f">{timeout:g} s"
    return f"{float(done.stdout):.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timings per input (median)")
    parser.add_argument("--sizes", default="1000,8000,32000", help="characters per input")
    parser.add_argument("--only", help="one kind: repeat, run, nested, late, card or parser")
    parser.add_argument(
        "--all", action="store_true", help="print every input, not the worst 3 per kind"
    )
    parser.add_argument("--old", help="another credentials.py to time beside this one")
    parser.add_argument("--old-timeout", type=float, default=10.0)
    parser.add_argument("--aim-ms", type=float, default=20.0, help="the aim at the largest size")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = [c for c in _cases() if args.only is None or c.kind == args.only]
    prose = {size: _median_ms(_cycle(PROSE)(size), args.repeat) for size in sizes}

    rows = []
    for case in cases:
        times = [_median_ms(case.make(size), args.repeat, case.read) for size in sizes]
        rows.append((case, times))

    print("ordinary prose: " + ", ".join(f"{s:,} chars {prose[s]:.2f} ms" for s in sizes))
    header = ["kind", "input", *[f"{s // 1000}K ms" for s in sizes], "growth", "vs prose"]
    if args.old:
        header.append(f"old {sizes[0] // 1000}K ms")
    table = []
    by_kind: dict[str, list[tuple[Case, list[float]]]] = {}
    for case, times in rows:
        by_kind.setdefault(case.kind, []).append((case, times))
    for kind, kind_rows in by_kind.items():
        kind_rows.sort(key=lambda r: r[1][-1], reverse=True)
        # The worst three of each kind, and always today's card case.
        shown = (
            kind_rows
            if args.all
            else kind_rows[:3] + [r for r in kind_rows[3:] if "today's" in r[0].name]
        )
        for case, times in shown:
            growth = times[-1] / times[-2] if len(times) > 1 and times[-2] > 0 else float("nan")
            cells = [
                kind,
                case.name,
                *[f"{t:.2f}" for t in times],
                f"{growth:.1f}",
                f"{times[-1] / prose[sizes[-1]]:.1f}x",
            ]
            if args.old:
                old = "" if case.kind == "parser" else None
                cells.append(
                    old
                    if old is not None
                    else _old_ms(args.old, case.make(sizes[0]), args.old_timeout)
                )
            table.append(cells)
    widths = [max(len(str(r[i])) for r in [header, *table]) for i in range(len(header))]
    line = "| " + " | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)) + " |"
    print(line)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cells in table:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |")

    worst_case, worst = max(rows, key=lambda r: r[1][-1])
    growths = [t[-1] / t[-2] for _, t in rows if len(t) > 1 and t[-2] > 0.05]
    print(
        f"{len(rows)} inputs; worst at {sizes[-1]:,} characters: {worst[-1]:.2f} ms "
        f"({worst_case.kind}: {worst_case.name}); aim <= {args.aim_ms:g} ms: "
        + ("met" if worst[-1] <= args.aim_ms else "MISSED")
    )
    print(
        f"growth {sizes[-2]:,} -> {sizes[-1]:,} characters: median {statistics.median(growths):.2f}, "
        f"max {max(growths):.2f} (4.0 is linear)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
