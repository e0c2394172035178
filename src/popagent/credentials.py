"""The one credential screen for everything popagent stores.

Every write path goes through it: facts that hold a credential are refused
(``memory.validation``); chat messages (text, part strings, tool-call
arguments), session titles and metadata, episodes, observations, reflections
and the Observer's and Reflector's input are stored or sent with each
credential replaced by ``[REDACTED:<kind>]``. It lives at the
bottom of the package (like ``checks``) so that every layer can use it.

Detection is pattern based and precise: it catches credentials written in the
ordinary ways, not every secret a person could type, and it is tuned not to
touch ordinary conversation (dates, prices, phone and order numbers, years).
What is detected, by kind:

- ``private_key``: PEM private key blocks (``-----BEGIN ... PRIVATE KEY-----``,
  OpenSSH, PGP ``PRIVATE KEY BLOCK``; an unterminated block to the end of the
  text) and PuTTY key files;
- ``jwt``: JSON Web Tokens (three base64url segments, the first two ``eyJ``);
- ``authorization``: ``Bearer``/``Basic`` values and ``Authorization:`` headers;
- ``api_key``: well-known token shapes: OpenAI/Anthropic ``sk-``, GitHub
  ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, GitLab
  ``glpat-``, AWS access key IDs ``AKIA``/``ASIA``, Slack ``xox?-``/``xapp-``
  and webhook URLs, Google ``AIza``/``ya29.``/``GOCSPX-``, Stripe
  ``sk_``/``rk_`` live/test and ``whsec_``, Hugging Face ``hf_``, SendGrid
  ``SG.x.y``, npm ``npm_``, PyPI ``pypi-AgE``, DigitalOcean ``do?_v1_``,
  Shopify ``shp??_``, Twilio ``SK`` + 32 hex, Mailgun ``key-`` + 32 hex,
  Telegram bot tokens, age ``AGE-SECRET-KEY-1``, Azure ``AccountKey=``/
  ``SharedAccessKey=`` and SAS ``sig=`` values;
- ``aws_secret_key``: a 40-character AWS secret access key after
  ``aws_secret_access_key``/``AWS_SECRET_ACCESS_KEY``/"AWS secret (access)
  key" (assignment, ini line or prose), or right after an access key ID;
- ``url_password``: the password inside a URL, ``scheme://user:pw@host``,
  the user possibly empty (``redis://:pw@host``);
- ``password``: a value given as a password or key in words or as an
  assignment, in English, Spanish, German, French, Italian, Portuguese, Dutch
  and a few more languages: ``password is X``, ``The password is: X``,
  ``my pwd for the router: X``, ``wifi password X``, ``db_password='X'``,
  ``"api_key": "X"``, ``mi contraseña es X``, ``mein Passwort ist X``,
  ``mon mot de passe est X``, ``la mia password è X``, ``minha senha é X``,
  ``mijn wachtwoord is X``; an ordinary word after "is"/":" ("the password is
  wrong") is not a value, and a value with no "is"/":"/"=" before it must look
  like a password (letters with digits or symbols such as ``!@#$``);
- ``secret``: assignments to credential-named identifiers, ``GITHUB_TOKEN=X``,
  ``PGPASSWORD=X``, ``slack_bot_token: X`` (not code that names a value:
  ``password = getpass()``, ``self.token = token``, ``$TOKEN``); in JSON
  (message parts, tool-call arguments), a string under a credential-named
  field (``"password"``, ``"client_secret"``, ``"apiKey"``) is redacted whole;
- ``card_number``: payment card numbers (Visa, Mastercard, Amex, Discover,
  Diners, JCB, UnionPay) by issuer prefix and length, Luhn-checked, written
  solid or in groups separated by spaces or dashes;
- ``pin``: 3 to 8 digits given as a PIN, passcode, security code or CVV;
- ``totp_seed``: the ``secret=`` of an ``otpauth://`` URI, and a base32 seed
  given as a "2FA/TOTP/MFA/authenticator seed, secret or key";
- ``seed_phrase``: 12 to 24 words given as a seed, recovery or mnemonic phrase.

Invisible format characters (zero-width spaces and joiners, BOM, bidi marks)
are ignored while detecting, so a secret cannot be hidden by breaking it up;
the redacted span covers them. Markers (``[REDACTED:...]``, the secret store's
``[secret:NAME]``) are never values, so redacting twice changes nothing.
Secret values an agent needs belong in the separate secret store.

Cost: linear in the text's length, whatever the text. Every pattern is
written so that the regular-expression engine never re-reads a stretch of
text from many starting points: candidates begin at a literal first
character (the engine skips ahead to it) with the word boundary checked
behind it, runs are matched possessively, the few scanners that would
otherwise retry a run from each position inside it (JSON Web Tokens, URL
schemes, ``otpauth://`` URIs, assignments to credential-named identifiers,
card numbers) skip the rest of a run once one start has failed, and every
other repetition is bounded. Case-insensitive detectors read a lower-cased
copy of the text (the same length, so offsets are shared; values are always
read from the text itself), and each detector runs only when a word it
needs occurs in the text (the token shapes too: each holds a literal such as
``ghp_`` or ``AKIA``); which words occur is found for every detector in one
pass over the text (``_Triggers``), which is most of the cost on ordinary
text. ``bench/screening.py`` measures adversarial input of each kind at 1, 8
and 32 KB; ``tests/test_credentials_gates.py`` checks that the gates change
no finding.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from itertools import accumulate
from typing import Any

__all__ = [
    "CredentialFinding",
    "credential_kinds",
    "find_credentials",
    "redact_credentials",
    "redact_json",
    "redact_json_text",
    "redacted",
    "redacted_path",
]


@dataclass(frozen=True, slots=True)
class CredentialFinding:
    kind: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Scan:
    """What the detectors read: ``text`` (invisible characters removed) and
    ``lower``, its lower-cased copy of the same length, so offsets are shared.
    Values are always read from ``text``."""

    text: str
    lower: str


_Span = tuple[str, int, int]
# A detector yields (kind, start, end) spans of secret values in the text.
_Detector = Callable[[_Scan], Iterator[_Span]]

# A marker written by this screen or the secret store is never a value; in the
# lower-cased copy the case-insensitive detectors read, "[redacted:" is one too.
_NOT_MARKER = r"(?!\[(?:secret|REDACTED):)"
_NOT_MARKER_LOWER = r"(?!\[(?:secret|redacted):)"
# What may not stand before a keyword: a letter or digit (an underscore, dot or
# dash counts as a separator, so ``db_password`` and ``X-Api-Key`` hold their
# keyword); and for token shapes, any word character (``\b``).
_ALNUM = r"[^\W_]"
_WORD = r"\w"
_END = r"(?![^\W_])"


def _starting(alternatives: Iterable[str], behind: str = _ALNUM) -> str:
    """An alternation of patterns that each open with a literal character and
    match only where ``behind`` does not precede them.

    The boundary is checked behind the first character rather than before it:
    a pattern that opens with a literal lets the regular-expression engine skip
    ahead to the characters that can start it instead of trying it at every
    position, which is most of the screen's speed on ordinary text.
    """
    parts = []
    for alternative in alternatives:
        first = alternative[0]
        if not (first.isalnum() or first in "-"):
            raise ValueError(f"{alternative!r} must open with a literal character")
        parts.append(f"{first}(?<!{behind}{first}){alternative[1:]}")
    return "(?:" + "|".join(parts) + ")"


def _token_like(value: str) -> bool:
    """A token mixes cases, or holds digits or ``+/=``: not a long plain word."""
    if any(ch.isdigit() or ch in "+/=" for ch in value):
        return True
    mixed = any(ch.isupper() for ch in value) and any(ch.islower() for ch in value)
    return mixed and not value.istitle()


def _whole(
    kind: str,
    pattern: str,
    flags: int = 0,
    *,
    lower: bool = False,
    check: Callable[[str], bool] | None = None,
) -> _Detector:
    """A detector redacting each whole match (or group ``v`` when the pattern has
    one) whose value, read from the text itself, passes ``check``. ``lower``: the
    pattern is written in lower case and reads the lower-cased copy."""
    compiled = re.compile(pattern, flags)
    group = "v" if "v" in compiled.groupindex else 0

    def detect(scan: _Scan) -> Iterator[_Span]:
        for match in compiled.finditer(scan.lower if lower else scan.text):
            start, end = match.span(group)
            if 0 <= start < end and (check is None or check(scan.text[start:end])):
                yield kind, start, end

    return detect


# --- fixed token shapes -----------------------------------------------------------------------

# Each opens a word (``\b``). Runs are possessive: none of the classes holds the
# character that follows it, so giving characters back could never match.
_SHAPES: tuple[str, ...] = (
    r"sk-[A-Za-z0-9_-]{20,}+",
    r"gh[pousr]_[A-Za-z0-9]{30,}+",
    r"github_pat_[A-Za-z0-9_]{22,}+",
    r"glpat-[A-Za-z0-9_-]{20,}+",
    r"AKIA[0-9A-Z]{16}\b",
    r"ASIA[0-9A-Z]{16}\b",
    r"xox[abposre]-[A-Za-z0-9-]{10,}+",
    r"xapp-\d-[A-Za-z0-9-]{10,}+",
    r"AIza[0-9A-Za-z_-]{35}",
    r"ya29\.[0-9A-Za-z_-]{20,}+",
    r"GOCSPX-[0-9A-Za-z_-]{20,}+",
    r"sk_(?:live|test)_[A-Za-z0-9]{16,}+",
    r"rk_(?:live|test)_[A-Za-z0-9]{16,}+",
    r"whsec_[A-Za-z0-9+/=]{20,}+",
    r"hf_[A-Za-z0-9]{30,}+",
    r"SG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+",
    r"npm_[A-Za-z0-9]{30,}+",
    r"pypi-AgE[A-Za-z0-9_-]{50,}+",
    r"do[por]_v1_[a-f0-9]{64}\b",
    r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b",
    r"SK[0-9a-fA-F]{32}\b",
    r"key-[0-9a-f]{32}\b",
    r"AGE-SECRET-KEY-1[0-9A-Z]{58}\b",
)
# Slack webhook URLs open with a literal and need no boundary.
_SLACK_HOOK = r"https://hooks\.slack\.com/services/T[A-Za-z0-9]++/B[A-Za-z0-9]++/[A-Za-z0-9]{8,}+"
# Telegram bot tokens: not after a word character or a colon.
_TELEGRAM = r"\d(?<![\w:]\d)\d{7,9}:AA[A-Za-z0-9_-]{33}(?![\w-])"

# A literal that every match of ``_SHAPES`` or ``_SLACK_HOOK`` holds, shape by shape
# (the gate of the token shapes' detector; ``tests/test_credentials_gates.py``
# checks that each shape's examples hold one).
_SHAPE_WORDS = (
    "sk-",
    *(f"gh{letter}_" for letter in "pousr"),
    "github_pat_",
    "glpat-",
    "AKIA",
    "ASIA",
    "xox",
    "xapp-",
    "AIza",
    "ya29.",
    "GOCSPX-",
    "sk_",
    "rk_",
    "whsec_",
    "hf_",
    "SG.",
    "npm_",
    "pypi-AgE",
    "_v1_",
    "shp",
    "SK",
    "key-",
    "AGE-SECRET-KEY-1",
    "https://hooks.slack.com/services/T",
)

_AZURE = (
    _starting((r"accountkey", r"sharedaccesskey", r"sharedaccesssignature"), _WORD)
    + r"\s*+=\s*+"
    + _NOT_MARKER_LOWER
    + r"(?P<v>[^;\s\"'&]{8,}+)"
)
_SAS_SIG = r"[?&]sig=(?P<v>[A-Za-z0-9%+/=]{20,}+)"

_PEM = (
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)
_PUTTY = r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: *[0-9a-fA-F]+|\Z)"
_AUTH = _starting((r"bearer", r"basic"), _WORD) + r"\s++(?P<v>[a-z0-9._~+/-]{16,}+=*+)"
_AUTH_HEADER = (
    _starting((r"proxy-authorization", r"authorization"), _WORD)
    + r"[\"']?\s*+[:=]\s*+[\"']?(?:[a-z]++\s++)?"
    + _NOT_MARKER_LOWER
    + r"(?P<v>[a-z0-9._~+/-]{8,}+=*+)"
)

# --- JSON Web Tokens ---------------------------------------------------------------------------

# Three base64url segments, the first two ``eyJ``, opening a word. Read once per
# run of token characters: the first start in the run is found atomically, and
# when it fails every later start in the same run fails the same way (its first
# segment ends where this one did, before the same dot or none), so the engine
# moves on to the next run instead of retrying from each position inside it.
_JWT = (
    r"(?<![A-Za-z0-9_-])(?>[A-Za-z0-9_-]*?(?P<v>e)(?<!\we)yJ)"
    r"[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+"
)


def _jwts(scan: _Scan) -> Iterator[_Span]:
    for match in re.finditer(_JWT, scan.text):
        yield "jwt", match.start("v"), match.end()


# --- AWS secret access keys --------------------------------------------------------------------

_AWS_VALUE = r"(?<![a-z0-9/+])(?P<v>[a-z0-9/+]{40})(?![a-z0-9/+=])"
_AWS_NAMED = re.compile(
    _starting(
        (
            r"aws[ _.-]?secret(?:[ _.-]?access)?(?:[ _.-]?key)?",
            r"secret[ _.-]?access[ _.-]?key",
        )
    )
    + r"(?:[ _.-]?id)?[^\n]{0,30}?"
    + _AWS_VALUE
)
_AWS_AFTER_ID = re.compile(
    _starting((r"AKIA", r"ASIA"), _WORD)
    + r"[0-9A-Z]{16}[^\n]{1,24}?(?<![A-Za-z0-9/+])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
)
_LOWER_LETTER = re.compile(r"[a-z]")
_UPPER_LETTER = re.compile(r"[A-Z]")
_DIGIT_OR_SLASH = re.compile(r"[0-9/+]")


def _aws_secret_keys(scan: _Scan) -> Iterator[_Span]:
    for pattern, source in ((_AWS_NAMED, scan.lower), (_AWS_AFTER_ID, scan.text)):
        for match in pattern.finditer(source):
            value = scan.text[match.start("v") : match.end("v")]
            # A real key mixes cases and digits or symbols; a word or a hex digest does not.
            if (
                _LOWER_LETTER.search(value)
                and _UPPER_LETTER.search(value)
                and _DIGIT_OR_SLASH.search(value)
            ):
                yield "aws_secret_key", match.start("v"), match.end("v")


# --- passwords in URLs -------------------------------------------------------------------------

# The scheme is the run of scheme characters before "://", read from the run's
# first character only; the match begins at the run's first letter that opens a
# word (checked in Python for the few whole matches), as a left-to-right
# search would. No "://" can start inside the user and password, which hold no
# "/", so skipping a match whose scheme has no such letter loses nothing.
_URL_PASSWORD = re.compile(
    r"[a-z0-9+.\-](?<![a-z0-9+.\-][a-z0-9+.\-])[a-z0-9+.\-]*+://[^\s/:@]*+:"
    + _NOT_MARKER_LOWER
    + r"(?P<v>[^\s/@]++)@(?=[\w\[])"
)
_SCHEME_START = re.compile(r"[a-z](?<!\w[a-z])")


def _url_passwords(scan: _Scan) -> Iterator[_Span]:
    """The password of ``scheme://user:password@host``."""
    low = scan.lower
    if "@" not in low:
        return  # every match holds the "@" before the host (most URLs have none)
    for match in _URL_PASSWORD.finditer(low):
        if _SCHEME_START.search(low, match.start(), low.index("://", match.start())):
            yield "url_password", match.start("v"), match.end("v")


# --- values named in words or assignments -----------------------------------------------------

_KEYWORDS = (
    # English
    r"pass(?:word|wd|phrase)s?",
    r"pass[ _-](?:word|phrase)",
    r"pwd",
    r"pw",
    r"app[ _-]?password",
    *(
        prefix + r"[ _-]?(?:key|token|secret)s?"
        for prefix in (
            "secret",
            "api",
            "access",
            "auth",
            "bot",
            "session",
            "refresh",
            "client",
            "private",
            "signing",
            "encryption",
            "deploy",
            "webhook",
            r"personal[ _-]access",
        )
    ),
    *(
        prefix + r"[ _-]?(?:key|passkey)"
        for prefix in ("wifi", "wi-fi", "wlan", r"wpa2?", "network")
    ),
    r"recovery[ _-]?(?:key|code|phrase)s?",
    r"backup[ _-]?codes?",
    r"credentials?",
    # Spanish, Portuguese, German, French, Italian, Dutch, and a few more
    r"contrase(?:ñ|n)as?",
    r"clave(?: de acceso| secreta)",
    r"senhas?",
    r"palavra-passe",
    r"passw(?:o|ö)rt(?:er)?",
    r"kennw(?:o|ö)rt(?:er)?",
    r"mot de passe",
    r"mots de passe",
    r"mdp",
    r"parola d'ordine",
    r"wachtwoord(?:en)?",
    r"has(?:ł|l)o",
    r"пароль",
    r"lösenord",
    r"adgangskode",
    r"salasana",
    r"şifre",
    r"sifre",
    r"heslo",
    r"jelszó",
)

# "for the router", "de mi banco", "für das WLAN": at most four words.
_QUALIFIER = (
    r"(?P<qual>\s++(?:for|to|of|on|at|de|del|da|do|di|du|für|fürs|zum|zur|vom|voor|van|para|"
    r"per|pour)(?:\s++[\w.@'\u2019-]{1,40}){1,4}?)?"
)
_ASSIGN = r"(?P<assign>\s*+[\"']?\s*+(?::=|=>|->|[:=]))\s*+"
_VERB = (
    r"(?P<verb>\s++(?:is\s++now|is\s++still|is\s++just|is\s++set\s++to|will\s++be|has\s++been|"
    r"is|was|are|were|reads|es|era|sea|est|était|c'est|ist|lautet|war|è|é|blijft|wordt)"
    r"(?![^\W_])\s*+(?:[:=]\s*+)?)"
)
_BARE = r"(?P<bare>[ \t]++)"
_ASSIGN_OR_VERB = r"(?:" + _ASSIGN + r"|" + _VERB + r")"
#: After a credential's name (a PIN's, a TOTP seed's): the end of the name, a
#: qualifier, then an assignment, a verb or blanks; the value follows.
_NAMED_SEPARATOR = _END + _QUALIFIER + r"(?:" + _ASSIGN + r"|" + _VERB + r"|" + _BARE + r")"


def _value(marker: str) -> str:
    """A quoted value (``q1``-``q5``) or a bare one (``b``). The quoted runs are
    possessive (no run holds its closing quote, so giving back cannot find one);
    a guillemet value drops one space before its closing guillemet in
    ``_value_span``, which a lazy run would have left out."""
    quoted = (
        r"\"" + marker + r"(?P<q1>[^\"\n]{1,200}+)\""
        r"|'" + marker + r"(?P<q2>[^'\n]{1,200}+)'"
        r"|`" + marker + r"(?P<q3>[^`\n]{1,200}+)`"
        r"|“" + marker + r"(?P<q4>[^”\n]{1,200}+)”"
        r"|«\s?" + marker + r"(?P<q5>[^»\n]{1,200}+)\s?»"
    )
    bare = r"[\"'`“]?" + marker + r"(?P<b>[^\s\"'`“”«»]{2,199}[^\s\"'`“”«».,;:!?)\]}>])"
    return r"(?:" + quoted + r"|" + bare + r")"


_VALUE_LOWER = _value(_NOT_MARKER_LOWER)

_NAMED_VALUE = re.compile(
    _starting(_KEYWORDS)
    + _END
    + _QUALIFIER
    + r"(?:"
    + _ASSIGN
    + r"|"
    + _VERB
    + r"|(?(qual)(?!)|"
    + _BARE
    + r"))"
    + _VALUE_LOWER
)

# Identifiers named for a credential, in an assignment: GITHUB_TOKEN=x, PGPASSWORD=x.
# Upper-case environment names. The name is matched atomically: its first parse
# (the last keyword in it) reaches the name's end, which is the only place an
# assignment can follow, so no other parse could match where this one failed.
_ENV_ASSIGN = re.compile(
    r"(?<![A-Za-z0-9_])(?>(?:[A-Z0-9]+_)*(?:[A-Z0-9]*(?:PASSWORD|PASSWD|SECRET|TOKEN)|PASS|PWD|"
    r"(?:API|ACCESS|SECRET|PRIVATE|MASTER|ENCRYPTION|SIGNING|ACCOUNT|AUTH)_?KEY|CREDENTIALS?)"
    r"(?:_[A-Z0-9]+)*)\s*+[:=]\s*+" + _value(_NOT_MARKER)
)
# Lower-case ones with a joiner (slack_bot_token: x): the whole dotted or dashed
# name is read possessively, then its last part must be the keyword.
_IDENT_KEYWORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    *(
        prefix + joiner + "key"
        for prefix in (
            "api",
            "access",
            "secret",
            "private",
            "auth",
            "account",
            "master",
            "signing",
            "encryption",
        )
        for joiner in ("_", "-", "")
    ),
)


def _ending_in(words: Iterable[str]) -> str:
    """A look-behind for a joiner and one of ``words``, one look-behind per width
    (the engine needs each to have one width)."""
    by_width: dict[int, list[str]] = {}
    for word in words:
        by_width.setdefault(len(word), []).append(re.escape(word))
    return (
        "(?:"
        + "|".join(f"(?<=[_.-](?:{'|'.join(group)}))" for _, group in sorted(by_width.items()))
        + ")"
    )


_IDENT_ASSIGN = re.compile(
    r"[a-z0-9](?<![\w.-][a-z0-9])[a-z0-9]*+(?:[_.-][a-z0-9]++)++"
    + _ending_in(_IDENT_KEYWORDS)
    + r"[\"']?\s*+[:=]\s*+"
    + _VALUE_LOWER
)

# Ordinary words that follow "password is"/"password:" in conversation; never values.
_ORDINARY_WORDS = """
    the a an and or but not no yes too very so also still now just only always never
    same different new old wrong right correct incorrect invalid valid required optional
    needed missing empty blank weak strong long short simple easy hard complex
    complicated secure insecure safe unsafe good bad fine ok okay great case sensitive
    written saved stored changed reset set expired locked unknown hidden private secret
    here there in on at for to of with by from into onto about like as my your his her
    our their its it this that these those what which who whom how why when where
    something nothing anything everything mine yours ours theirs please below above
    attached encrypted protected generated unique shared none null undefined true false
    etc typed sent stuck broken gone lost forgotten known same literally actually
    probably definitely really basically exactly again either neither both all any
    some every each more less most least much many few enough quite rather pretty
    one two three four five six seven eight nine ten first last next another other
    personal important useless useful easier harder stronger weaker longer shorter
    different identical similar something required same muy la el los las un una uno
    es no sí si es nicht kein keine ein eine einen sehr zu ganz auch noch le les une
    très pas non il lo gli molto ancora não muito uma um ainda niet een geen heel te
    nog het de ook sehr falsch richtig correcto incorrecto faux vrai sbagliato errato
    errado certo fout goed see under over behind inside outside near beside between
    somewhere everywhere nowhere taped kept left away back str int bytes string text
    varchar char bool float secretstr
"""
_NOT_VALUES = frozenset(_ORDINARY_WORDS.split())
_WORDY_ENDINGS = ("ed", "ing", "ly")


_PASSWORD_SYMBOLS = frozenset("!@#$%^&*+=?~")


def _looks_like_password(value: str) -> bool:
    """At least 6 characters starting with a letter or digit, letters with digits or
    password symbols (``!@#$%^&*+=?~``): not a word, a number or ``(a_name)``."""
    if len(value) < 6 or not value[0].isalnum():
        return False
    has_letter = any(ch.isalpha() for ch in value)
    has_other = any(ch.isdigit() or ch in _PASSWORD_SYMBOLS for ch in value)
    return has_letter and has_other


def _is_ordinary_word(value: str) -> bool:
    word = value.lower()
    if not word.isalpha():
        return False
    return word in _NOT_VALUES or (len(word) > 4 and word.endswith(_WORDY_ENDINGS))


_QUOTED_GROUPS = frozenset({"q1", "q2", "q3", "q4", "q5"})


def _value_span(match: re.Match[str]) -> tuple[int, int, bool] | None:
    """The value's span and whether it was quoted (the value is the match's last group)."""
    name = match.lastgroup
    if name is None or (name != "b" and name not in _QUOTED_GROUPS):
        return None
    start, end = match.span(name)
    # "« value »": the space before "»" is not part of the value.
    if (
        name == "q5"
        and end - start > 1
        and end + 1 == match.end()
        and match.string[end - 1].isspace()
    ):
        end -= 1
    return start, end, name != "b"


_CODE_VALUE = re.compile(r"[A-Za-z_][A-Za-z_.]*|[A-Za-z_][\w.]*[(\[].*|[$%{<].*")


def _is_code(value: str) -> bool:
    """An identifier, attribute, call or placeholder (``api_key``, ``self.token``,
    ``getpass()``, ``os.environ[...]``, ``$TOKEN``, ``{{ secret }}``, ``<your-key>``):
    code that names a value, not the value."""
    return _CODE_VALUE.fullmatch(value) is not None


def _matched_values(
    pattern: re.Pattern[str], scan: _Scan, *, lower: bool
) -> Iterator[tuple[re.Match[str], int, int, bool, str]]:
    """Each match of ``pattern`` (over the lower-cased text when ``lower``) with its
    value: ``(match, start, end, quoted, value)``; a match whose value is missing or
    blank is passed over."""
    for match in pattern.finditer(scan.lower if lower else scan.text):
        span = _value_span(match)
        if span is None:
            continue
        start, end, quoted = span
        value = scan.text[start:end]
        if value.strip():
            yield match, start, end, quoted, value


def _assigned(kind: str, pattern: re.Pattern[str], *, lower: bool) -> _Detector:
    def detect(scan: _Scan) -> Iterator[_Span]:
        for _match, start, end, quoted, value in _matched_values(pattern, scan, lower=lower):
            if not quoted and (_is_ordinary_word(value) or _is_code(value)):
                continue
            yield kind, start, end

    return detect


def _named_values(scan: _Scan) -> Iterator[_Span]:
    for match, start, end, quoted, value in _matched_values(_NAMED_VALUE, scan, lower=True):
        if match.group("bare") is not None:
            # "wifi password Sunflower42": with no "is" or ":" the value must look
            # like one ("password reset", "password manager" are ordinary words).
            if quoted or match.group("qual") is not None or not _looks_like_password(value):
                continue
        elif not quoted and _is_ordinary_word(value):
            continue
        elif not quoted and match.group("assign") is not None and _is_code(value):
            # "password = getpass()", "password: str", "self.password = password"
            continue
        yield "password", start, end


# --- PINs, TOTP seeds, seed phrases ----------------------------------------------------------

_PIN = (
    _starting(
        (
            r"pin(?:[ _-]?(?:code|number|no\.?))?",
            r"pin-?code",
            r"pass ?code",
            r"security[ _-]code",
            r"cvv2?",
            r"cvc2?",
            r"csc",
            r"geheimzahl",
            r"código pin",
            r"code pin",
            r"codice pin",
        )
    )
    + _NAMED_SEPARATOR
    + r"[\"'`]?(?P<v>\d{3,8})(?![\d.,:/-]\d|\d)"
)

_OTPAUTH_START = re.compile(r"o(?<!\wo)tpauth://")
_OTPAUTH_SECRET = re.compile(r"[?&]secret=(?P<v>[a-z2-7]++=*+)")
_WHITESPACE = re.compile(r"\s")
_TOTP_NAMED = re.compile(
    _starting(
        (
            r"2fa",
            r"mfa",
            r"totp",
            r"otp",
            r"authenticator",
            r"two[- ]factor",
            r"2-step",
        )
    )
    + r"(?:[ _-]?(?:app|auth))?[ _-]?(?:seed|secret|key|setup[ _-]key)s?"
    + _NAMED_SEPARATOR
    + r"[\"'`]?(?P<v>[a-z2-7]{4}(?:[ -]?[a-z2-7]{4}){3,15}[a-z2-7]{0,3}=*)(?![\w-])"
)

_SEED_PHRASE = re.compile(
    _starting((r"seed", r"recovery", r"mnemonic", r"backup"))
    + r"[ _-]?(?:phrase|words)"
    + _END
    + _ASSIGN_OR_VERB
    + r"[\"'`]?(?P<v>[a-z]{3,8}(?:\s++[a-z]{3,8}){11,23})\b"
)


def _otpauth_secrets(scan: _Scan) -> Iterator[tuple[int, int]]:
    """The ``secret=`` of each ``otpauth://`` URI: the first one after the start,
    before the URI's end (the next whitespace). When a start has none, no later
    start before that whitespace has one either, so the search resumes there."""
    low = scan.lower
    pos = 0
    end = -1  # the first whitespace at or after the last start: shared by later starts
    while (start := _OTPAUTH_START.search(low, pos)) is not None:
        if end < start.end():
            space = _WHITESPACE.search(low, start.end())
            end = space.start() if space is not None else len(low)
        found = _OTPAUTH_SECRET.search(low, start.end(), end)
        if found is None:
            pos = end
            continue
        yield found.start("v"), found.end("v")
        pos = found.end()


_SEED_SEPARATORS = re.compile(r"[ -]")


def _seeds(scan: _Scan) -> Iterator[_Span]:
    spans = list(_otpauth_secrets(scan))
    spans += [m.span("v") for m in _TOTP_NAMED.finditer(scan.lower)]
    for start, end in spans:
        compact = _SEED_SEPARATORS.sub("", scan.text[start:end]).rstrip("=")
        # A base32 seed is upper case or holds digits; words in prose are neither.
        if len(compact) >= 16 and (compact.isupper() or any(ch.isdigit() for ch in compact)):
            yield "totp_seed", start, end


_SENTENCE_WORDS = """
    the and you your with that this for are was not but have has they them from what
    when who should never would could can will anyone someone because into
"""
_FUNCTION_WORDS = frozenset(_SENTENCE_WORDS.split())


def _seed_phrases(scan: _Scan) -> Iterator[_Span]:
    for match in _SEED_PHRASE.finditer(scan.lower):
        words = match["v"].split()
        # Twelve random list words, not a sentence ("is something you should never share").
        if sum(w in _FUNCTION_WORDS for w in words) < 2:
            yield "seed_phrase", match.start("v"), match.end("v")


# --- payment card numbers -------------------------------------------------------------------

# Runs of digit groups separated by one space or dash; not part of a decimal,
# a longer number or a phone number written with "+". (Possessive: giving back
# digits always leaves a digit next, which the closing look-ahead refuses.) A
# run with fewer than 13 digits holds no card; the look-ahead leaves it to the
# engine, and so does every later start inside it, which has fewer still.
_DIGIT_RUN = re.compile(r"\d(?<![\w+.,/-]\d)(?=(?:[ -]?\d){12})\d*+(?:[ -]\d++)*(?![\w.,/]?\d)")

# The issuers' prefixes (no two can match the same number) and their lengths.
_ISSUER = re.compile(
    r"(?P<visa>4)"
    r"|(?P<mastercard>5[1-5]|2(?:2[2-9][1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720))"
    r"|(?P<amex>3[47])"
    r"|(?P<discover>6011|65|64[4-9])"
    r"|(?P<diners>3(?:0[0-5]|[689]))"
    r"|(?P<jcb>35(?:2[89]|[3-8]\d))"
    r"|(?P<unionpay>62)"
)
_LENGTHS: dict[str, frozenset[int]] = {
    "visa": frozenset({13, 16, 19}),
    "mastercard": frozenset({16}),
    "amex": frozenset({15}),
    "discover": frozenset({16, 17, 18, 19}),
    "diners": frozenset({14, 15, 16, 17, 18, 19}),
    "jcb": frozenset({16, 17, 18, 19}),
    "unionpay": frozenset({16, 17, 18, 19}),
}
_DOUBLED = bytes.maketrans(b"0123456789", b"0246813579")


@dataclass(frozen=True, slots=True)
class _Luhn:
    """Luhn sums of every stretch of a string of digits, from two running sums:
    ``even`` keeps the digits at even offsets and doubles the others, ``odd`` the
    other way round. A stretch's last digit is kept and every second one before
    it doubled, so a stretch ending at an even offset reads ``even``."""

    even: list[int]
    odd: list[int]

    @classmethod
    def of(cls, digits: str) -> _Luhn:
        kept = digits.encode()
        doubled = kept.translate(_DOUBLED)
        even, odd = bytearray(kept), bytearray(doubled)
        even[1::2], odd[1::2] = doubled[1::2], kept[1::2]
        return cls(list(accumulate(even, initial=0)), list(accumulate(odd, initial=0)))

    def valid(self, start: int, end: int) -> bool:
        sums = self.even if (end - 1) % 2 == 0 else self.odd
        return (sums[end] - sums[start] - 48 * (end - start)) % 10 == 0


def _cards(scan: _Scan) -> Iterator[_Span]:
    text = scan.text
    for run in _DIGIT_RUN.finditer(text):
        chunk = run.group()
        if " " in chunk and "-" in chunk:
            continue  # "4111-1111 1111" mixes separators: a list of numbers, not a card
        groups = chunk.split("-" if "-" in chunk else " ")
        digits = "".join(groups)
        sizes = [len(g) for g in groups]
        # Where each group starts among the digits, and in the text.
        offsets = list(accumulate(sizes, initial=0))
        starts = list(accumulate((n + 1 for n in sizes), initial=run.start()))
        luhn: _Luhn | None = None
        count = len(groups)
        i = 0
        while i < count:
            issuer = _ISSUER.match(digits, offsets[i])
            if issuer is None or issuer.lastgroup is None:
                i += 1
                continue
            lengths = _LENGTHS[issuer.lastgroup]
            # The longest run of whole groups starting here that is a card number:
            # at most 19 digits, so at most 19 groups are ever looked at.
            found = -1
            for j in range(i, count):
                # Written in groups: each of 3 to 6 digits (the last may be shorter).
                if j > i and not 3 <= sizes[j - 1] <= 6:
                    break
                total = offsets[j + 1] - offsets[i]
                if total > 19:
                    break
                if total not in lengths:
                    continue
                if luhn is None:
                    luhn = _Luhn.of(digits)
                begin, end = offsets[i], offsets[j + 1]
                if luhn.valid(begin, end) and digits.count(digits[begin], begin, end) < total:
                    found = j
            if found < 0:
                i += 1
                continue
            yield "card_number", starts[i], starts[found] + sizes[found]
            i = found + 1


# --- the detectors, each run only when a word it needs occurs ------------------------------


@dataclass(frozen=True, slots=True)
class _Gated:
    """A detector and the words one of which its matches always hold (``None``:
    always run): lower case, looked for in the lower-cased copy, unless
    ``cased`` (then looked for in the text itself). Which words occur is found
    for all the detectors at once (``_Triggers``)."""

    detect: _Detector
    needs: tuple[str, ...] | None
    cased: bool = False
    lowered: frozenset[str] = field(init=False)  # ``needs`` in lower case

    def __post_init__(self) -> None:
        needs = self.needs or ()
        if not self.cased and any(word != word.lower() for word in needs):
            raise ValueError(f"{needs!r}: the words of a detector that is not cased are lower case")
        object.__setattr__(self, "lowered", frozenset(word.lower() for word in needs))

    def wanted(self, scan: _Scan, present: frozenset[str]) -> bool:
        """Whether one of ``needs`` occurs in the text; ``present``: the words of
        ``_TRIGGERS`` that occur in ``scan.lower``."""
        if self.needs is None:
            return True
        if present.isdisjoint(self.lowered):
            return False
        if not self.cased:
            return True
        # A word in the text is its lower case in the lower-cased copy: only those
        # words are looked for in the text.
        return any(word in scan.text for word in self.needs if word.lower() in present)


_DETECTORS: tuple[_Gated, ...] = (
    _Gated(_whole("private_key", _PEM, re.DOTALL), ("-----begin ",)),
    _Gated(_whole("private_key", _PUTTY, re.DOTALL), ("putty-user-key-file-",)),
    _Gated(_jwts, ("eyJ",), cased=True),
    _Gated(_whole("authorization", _AUTH, lower=True, check=_token_like), ("bearer", "basic")),
    _Gated(
        _whole("authorization", _AUTH_HEADER, lower=True, check=_token_like),
        ("authorization",),
    ),
    # One alternation, one pass over the text, for all the fixed token shapes; each
    # shape opens with (or, ``do?_v1_``, holds) one of ``_SHAPE_WORDS``.
    _Gated(
        _whole("api_key", _starting(_SHAPES, _WORD)[:-1] + "|" + _SLACK_HOOK + ")"),
        _SHAPE_WORDS,
        cased=True,
    ),
    _Gated(_whole("api_key", _TELEGRAM), (":aa",)),
    _Gated(_whole("api_key", _AZURE, lower=True), ("accountkey", "sharedaccess")),
    _Gated(_whole("api_key", _SAS_SIG), ("sig=",)),
    _Gated(_aws_secret_keys, ("aws", "secret", "akia", "asia")),
    _Gated(_url_passwords, ("://",)),
    _Gated(
        _named_values,
        (
            "pass",
            "pw",
            "key",
            "token",
            "secret",
            "credential",
            "recovery",
            "backup",
            "contrase",
            "clave",
            "senha",
            "kennw",
            "mdp",
            "parola",
            "wachtwoord",
            "hasło",
            "haslo",
            "пароль",
            "lösenord",
            "adgangskode",
            "salasana",
            "ifre",
            "heslo",
            "jelszó",
        ),
    ),
    _Gated(
        _assigned("secret", _ENV_ASSIGN, lower=False),
        ("PASS", "PWD", "SECRET", "TOKEN", "KEY", "CREDENTIAL"),
        cased=True,
    ),
    _Gated(
        _assigned("secret", _IDENT_ASSIGN, lower=True),
        ("token", "secret", "passw", "pwd", "key"),
    ),
    _Gated(
        _whole("pin", _PIN, lower=True),
        ("pin", "pass", "security", "cvv", "cvc", "csc", "geheimzahl"),
    ),
    _Gated(_seeds, ("otp", "2fa", "mfa", "authenticator", "two", "2-step")),
    _Gated(_seed_phrases, ("seed", "recovery", "mnemonic", "backup")),
    _Gated(_cards, None),
)


def _trie(words: Iterable[str]) -> str:
    """An alternation of ``words`` as a trie: the branches at each point open with
    different characters, and a word that goes on into a longer one is an optional
    (greedy) tail, so at any position the pattern matches the longest word there."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(ch) + pattern(rest) for ch, rest in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return pattern(root)


@dataclass(frozen=True, slots=True)
class _Triggers:
    """Which of the detectors' words (``_Gated.needs``, in lower case) occur in a
    lower-cased text, found in one pass for all of them: a search per detector
    or per word cost more than the detectors themselves.

    Exact: the search resumes one character after the start of each match, so it
    stops at every position where a word starts, and there it matches the longest
    word (``_trie``), of which every other word starting there is a prefix. So the
    words that occur are exactly those within the words matched."""

    words: tuple[str, ...]
    pattern: re.Pattern[str] = field(init=False)
    within: dict[str, frozenset[str]] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile(_trie(self.words)))
        within = {word: frozenset(w for w in self.words if w in word) for word in self.words}
        object.__setattr__(self, "within", within)

    def present(self, lower: str) -> frozenset[str]:
        search = self.pattern.search
        found: set[str] = set()
        pos = 0
        for _ in range(_MATCHES_BEFORE_SCANS):
            match = search(lower, pos)
            if match is None:
                break
            found.add(match.group())
            pos = match.start() + 1
        else:
            # A text that repeats the words (say a pasted config, or an attack): a
            # substring test per word costs less than visiting every occurrence.
            return frozenset([word for word in self.words if word in lower])
        if not found:
            return frozenset()
        return frozenset().union(*(self.within[word] for word in found))


#: Matches ``_Triggers.present`` visits before it tests each word instead.
_MATCHES_BEFORE_SCANS = 48


_TRIGGERS = _Triggers(
    tuple(sorted({word.lower() for gated in _DETECTORS for word in gated.needs or ()}))
)


# --- invisible characters and case ------------------------------------------------------------


@cache
def _invisible_run() -> re.Pattern[str]:
    """Runs of the characters ``checks.is_invisible`` names, as a class of code
    point ranges (a list of single characters makes the engine slow on every
    non-ASCII text). Format characters (``Cf``) live in Unicode's planes 0, 1 and
    14 only, so those are the ones read (once per process, about 20 ms)."""
    # Imported here: ``checks`` screens identifiers with this module (``check_id``).
    from .checks import is_invisible

    planes = (range(0x10000), range(0x10000, 0x20000), range(0xE0000, 0xF0000))
    ranges: list[list[int]] = []
    for code in (c for plane in planes for c in plane if is_invisible(chr(c))):
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    members = "".join(
        re.escape(chr(first)) + ("" if first == last else "-" + re.escape(chr(last)))
        for first, last in ranges
    )
    return re.compile(f"[{members}]+")


# Characters whose lower case is not one character, or that the regular-expression
# engine's case-insensitive matching equates with an ASCII letter that
# ``str.lower`` leaves apart: mapped so that the lower-cased copy has the
# text's length and reads them as those letters.
_CASE_FIXES = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})


def _lowered(text: str) -> str:
    if text.isascii() or not any(ch in text for ch in "\u0130\u0131\u017f"):
        return text.lower()
    return text.translate(_CASE_FIXES).lower()


@dataclass(frozen=True, slots=True)
class _Visible:
    """``text`` without its invisible characters, and how to map an offset in it
    back to the text (``None``: nothing was removed)."""

    text: str
    piece_starts: list[int] | None = None  # where each visible piece starts, in ``text``
    original_starts: list[int] | None = None  # and in the original

    def original(self, offset: int) -> int:
        if self.piece_starts is None or self.original_starts is None:
            return offset
        k = bisect_right(self.piece_starts, offset) - 1
        return self.original_starts[k] + offset - self.piece_starts[k]


def _visible(text: str) -> _Visible:
    if text.isascii():
        return _Visible(text)
    invisible = _invisible_run()
    if invisible.search(text) is None:
        return _Visible(text)
    pieces = invisible.split(text)
    gaps = [len(g) for g in invisible.findall(text)]
    sizes = [len(p) for p in pieces]
    piece_starts = list(accumulate(sizes[:-1], initial=0))
    # A piece starts after every earlier piece and gap.
    original_starts = [
        start + gap for start, gap in zip(piece_starts, accumulate(gaps, initial=0), strict=True)
    ]
    return _Visible("".join(pieces), piece_starts, original_starts)


def find_credentials(text: str) -> list[CredentialFinding]:
    """Every credential-looking span in ``text``, sorted, non-overlapping.

    Linear in the text's length (see the module docstring): a 32,000-character
    message costs milliseconds whatever it holds.
    """
    if not text:
        return []
    visible = _visible(text)
    scan = _Scan(visible.text, _lowered(visible.text))
    present = _TRIGGERS.present(scan.lower)
    spans: list[CredentialFinding] = []
    for gated in _DETECTORS:
        if not gated.wanted(scan, present):
            continue
        for kind, start, end in gated.detect(scan):
            spans.append(
                CredentialFinding(kind, visible.original(start), visible.original(end - 1) + 1)
            )
    spans.sort(key=lambda f: (f.start, -f.end))
    merged: list[CredentialFinding] = []
    for finding in spans:
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            if finding.end > last.end:
                merged[-1] = CredentialFinding(last.kind, last.start, finding.end)
            continue
        merged.append(finding)
    return merged


@lru_cache(maxsize=4096)
def credential_kinds(text: str) -> str | None:
    """The kinds of credential found in ``text``, joined by ", " (``None``: none).

    For identifiers (``checks.check_id``, key and secret names), which cannot be
    redacted, only refused: cached, since the same resource and session IDs come
    with request after request (and an import checks tens of thousands)."""
    findings = find_credentials(text)
    return ", ".join(sorted({f.kind for f in findings})) if findings else None


def redacted(text: str) -> str:
    """``text`` with each credential replaced by ``[REDACTED:<kind>]``."""
    return redact_credentials(text)[0]


def redact_credentials(text: str) -> tuple[str, int]:
    """``text`` with each credential replaced by ``[REDACTED:<kind>]``, and how many were."""
    return _splice(text, find_credentials(text))


def redacted_path(path: str) -> str:
    """A URL path with each credential in it replaced by ``[REDACTED:<kind>]``: for
    the access log, which writes the path of every request, refused ones too.

    Screened twice, linear both times: as written (a URL inside the path keeps its
    ``//``) and with each ``/`` read as a space, so that a segment is screened as
    the whole it is (a card number between slashes reads as a date's digits
    otherwise). Overlapping findings are merged as ``find_credentials`` merges."""
    spans = find_credentials(path) + find_credentials(path.replace("/", " "))
    if not spans:
        return path
    spans.sort(key=lambda f: (f.start, -f.end))
    merged: list[CredentialFinding] = []
    for finding in spans:
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = CredentialFinding(last.kind, last.start, max(last.end, finding.end))
            continue
        merged.append(finding)
    return _splice(path, merged)[0]


def _splice(text: str, findings: list[CredentialFinding]) -> tuple[str, int]:
    """``text`` with each of ``findings`` (sorted, apart) replaced by its marker."""
    if not findings:
        return text, 0
    out: list[str] = []
    cursor = 0
    for finding in findings:
        out.append(text[cursor : finding.start])
        out.append(f"[REDACTED:{finding.kind}]")
        cursor = finding.end
    out.append(text[cursor:])
    return "".join(out), len(findings)


_SECRET_FIELD_WORDS = frozenset(
    {"password", "passwd", "pwd", "passphrase", "passcode", "secret", "token", "pin", "cvv"}
    | {"cvc", "credential", "credentials", "authorization", "contraseña", "passwort", "senha"}
    | {"wachtwoord", "apikey"}
)
_SECRET_FIELD_PAIRS = frozenset(
    {"api key", "access key", "secret key", "private key", "account key", "signing key"}
    | {"master key", "encryption key", "auth key", "client key", "otp seed", "totp seed"}
    | {"mot passe", "seed phrase", "recovery phrase", "recovery code"}
)


def _secret_field(name: str) -> str | None:
    """The kind for a JSON field named for a credential (``password``, ``db_password``,
    ``apiKey``, ``client_secret``, ``accessToken``), else ``None``."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()
    parts = [w for w in re.split(r"[\s_.\-]+", words) if w and w != "de"]
    if not parts:
        return None
    if parts[-1] in _SECRET_FIELD_WORDS:
        return "password" if parts[-1] in {"password", "passwd", "pwd", "passphrase"} else "secret"
    if len(parts) > 1 and " ".join(parts[-2:]) in _SECRET_FIELD_PAIRS:
        return "secret"
    return None


def redact_json(value: Any) -> Any:
    """A copy of a JSON value with every string (object keys included) redacted.

    A string under a field named for a credential (``"password": "..."``,
    ``"client_secret"``, ``"apiKey"``) is a value in itself: it is redacted whole,
    as ``"password": "..."`` written in text would be.
    """
    if isinstance(value, str):
        return redact_credentials(value)[0]
    if isinstance(value, list):
        return [redact_json(v) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            kind = _secret_field(str(k))
            if kind is not None and isinstance(v, str) and v.strip() and not _is_marker(v):
                out[redact_credentials(str(k))[0]] = f"[REDACTED:{kind}]"
            else:
                out[redact_credentials(str(k))[0]] = redact_json(v)
        return out
    return value


def _is_marker(text: str) -> bool:
    return re.fullmatch(r"\[(?:secret|REDACTED):[^\]]*\]", text.strip()) is not None


def redact_json_text(raw: str) -> str:
    """Raw JSON text (tool-call arguments) redacted.

    Parsed first, so a value that JSON escaping changed (a PEM key's ``\\n``,
    quotes, ``\\uXXXX``) is still found, and the result stays valid JSON;
    text that is not JSON is redacted as plain text.
    """
    if not raw:
        return raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        return redact_credentials(raw)[0]
    cleaned = redact_json(parsed)
    if cleaned != parsed:
        return json.dumps(cleaned, ensure_ascii=False)
    # Nothing in the values; the raw text may still hold one outside them (odd spacing).
    return redact_credentials(raw)[0]
