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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .checks import is_invisible

__all__ = [
    "CredentialFinding",
    "find_credentials",
    "redact_credentials",
    "redact_json",
    "redact_json_text",
]


@dataclass(frozen=True, slots=True)
class CredentialFinding:
    kind: str
    start: int
    end: int


# A detector yields (kind, start, end) spans of secret values in the text.
_Detector = Callable[[str], Iterator[tuple[str, int, int]]]

# A marker written by this screen or the secret store is never a value.
_NOT_MARKER = r"(?!\[(?:secret|REDACTED):)"
# Not preceded by a letter or digit (an underscore, dot or dash counts as a
# separator, so ``db_password`` and ``X-Api-Key`` hold their keyword).
_START = r"(?<![^\W_])"
_END = r"(?![^\W_])"


def _token_like(value: str) -> bool:
    """A token mixes cases, or holds digits or ``+/=``: not a long plain word."""
    if any(ch.isdigit() or ch in "+/=" for ch in value):
        return True
    mixed = any(ch.isupper() for ch in value) and any(ch.islower() for ch in value)
    return mixed and not value.istitle()


def _whole(
    kind: str,
    pattern: str | re.Pattern[str],
    flags: int = 0,
    *,
    check: Callable[[str], bool] | None = None,
) -> _Detector:
    """A detector redacting each whole match (or group ``v`` when the pattern has one)
    whose value passes ``check``."""
    compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)
    group = "v" if "v" in compiled.groupindex else 0

    def detect(text: str) -> Iterator[tuple[str, int, int]]:
        for match in compiled.finditer(text):
            start, end = match.span(group)
            if 0 <= start < end and (check is None or check(text[start:end])):
                yield kind, start, end

    return detect


_SHAPES: tuple[str, ...] = (
    r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_-]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bxox[abposre]-[A-Za-z0-9-]{10,}",
    r"\bxapp-\d-[A-Za-z0-9-]{10,}",
    r"https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]{8,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\bya29\.[0-9A-Za-z_-]{20,}",
    r"\bGOCSPX-[0-9A-Za-z_-]{20,}",
    r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"\bwhsec_[A-Za-z0-9+/=]{20,}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
    r"\bnpm_[A-Za-z0-9]{30,}",
    r"\bpypi-AgE[A-Za-z0-9_-]{50,}",
    r"\bdo[por]_v1_[a-f0-9]{64}\b",
    r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b",
    r"\bSK[0-9a-fA-F]{32}\b",
    r"\bkey-[0-9a-f]{32}\b",
    r"(?<![\w:])\d{8,10}:AA[A-Za-z0-9_-]{33}(?![\w-])",
    r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b",
)

_AZURE = (
    r"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*"
    + _NOT_MARKER
    + r"(?P<v>[^;\s\"'&]{8,})"
)
_SAS_SIG = r"[?&]sig=(?P<v>[A-Za-z0-9%+/=]{20,})"

_PEM = (
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
)
_PUTTY = r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: *[0-9a-fA-F]+|\Z)"
_JWT = r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
_AUTH = r"(?i)\b(?:bearer|basic)\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)"
_AUTH_HEADER = (
    r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:[A-Za-z]+\s+)?"
    + _NOT_MARKER
    + r"(?P<v>[A-Za-z0-9._~+/-]{8,}=*)"
)
_URL_PASSWORD = (
    r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@]*:" + _NOT_MARKER + r"(?P<v>[^\s/@]+)@(?=[\w\[])"
)

# --- AWS secret access keys ------------------------------------------------------------------

_AWS_VALUE = r"(?<![A-Za-z0-9/+])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
_AWS_NAMED = re.compile(
    r"(?i)"
    + _START
    + r"(?:aws[ _.-]?secret(?:[ _.-]?access)?(?:[ _.-]?key)?|secret[ _.-]?access[ _.-]?key)"
    + r"(?:[ _.-]?id)?[^\n]{0,30}?"
    + _AWS_VALUE
)
_AWS_AFTER_ID = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}[^\n]{1,24}?" + _AWS_VALUE)


def _aws_secret_keys(text: str) -> Iterator[tuple[str, int, int]]:
    for pattern in (_AWS_NAMED, _AWS_AFTER_ID):
        for match in pattern.finditer(text):
            value = match["v"]
            # A real key mixes cases and digits or symbols; a word or a hex digest does not.
            if (
                re.search(r"[a-z]", value)
                and re.search(r"[A-Z]", value)
                and re.search(r"[0-9/+]", value)
            ):
                yield "aws_secret_key", match.start("v"), match.end("v")


# --- values named in words or assignments ---------------------------------------------------

_KEYWORDS = "|".join(
    (
        # English
        r"pass(?:word|wd|phrase)s?",
        r"pass[ _-](?:word|phrase)",
        r"pwd",
        r"pw",
        r"app[ _-]?password",
        r"(?:secret|api|access|auth|bot|session|refresh|client|private|signing|encryption|"
        r"deploy|webhook|personal[ _-]access)[ _-]?(?:key|token|secret)s?",
        r"(?:wifi|wi-fi|wlan|wpa2?|network)[ _-]?(?:key|passkey)",
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
        r"(?:ş|s)ifre",
        r"heslo",
        r"jelszó",
    )
)

# "for the router", "de mi banco", "für das WLAN": at most four words.
_QUALIFIER = (
    r"(?P<qual>\s+(?:for|to|of|on|at|de|del|da|do|di|du|für|fürs|zum|zur|vom|voor|van|para|"
    r"per|pour)(?:\s+[\w.@'\u2019-]{1,40}){1,4}?)?"
)
_ASSIGN = r"(?P<assign>\s*[\"']?\s*(?::=|=>|->|[:=]))\s*"
_VERB = (
    r"(?P<verb>\s+(?:is\s+now|is\s+still|is\s+just|is\s+set\s+to|will\s+be|has\s+been|"
    r"is|was|are|were|reads|es|era|sea|est|était|c'est|ist|lautet|war|è|é|blijft|wordt)"
    r"(?![^\W_])\s*(?:[:=]\s*)?)"
)
_BARE = r"(?P<bare>[ \t]+)"
_QUOTED = (
    r"\"" + _NOT_MARKER + r"(?P<q1>[^\"\n]{1,200})\""
    r"|'" + _NOT_MARKER + r"(?P<q2>[^'\n]{1,200})'"
    r"|`" + _NOT_MARKER + r"(?P<q3>[^`\n]{1,200})`"
    r"|“" + _NOT_MARKER + r"(?P<q4>[^”\n]{1,200})”"
    r"|«\s?" + _NOT_MARKER + r"(?P<q5>[^»\n]{1,200}?)\s?»"
)
_BARE_VALUE = r"[\"'`“]?" + _NOT_MARKER + r"(?P<b>[^\s\"'`“”«»]{2,199}[^\s\"'`“”«».,;:!?)\]}>])"
_VALUE = r"(?:" + _QUOTED + r"|" + _BARE_VALUE + r")"

_NAMED_VALUE = re.compile(
    r"(?i)"
    + _START
    + r"(?:"
    + _KEYWORDS
    + r")"
    + _END
    + _QUALIFIER
    + r"(?:"
    + _ASSIGN
    + r"|"
    + _VERB
    + r"|(?(qual)(?!)|"
    + _BARE
    + r"))"
    + _VALUE
)

# Identifiers named for a credential, in an assignment: GITHUB_TOKEN=x, PGPASSWORD=x,
# slack_bot_token: x. Upper-case environment names, or lower-case ones with a joiner.
_ENV_ASSIGN = re.compile(
    r"(?<![A-Za-z0-9_])(?:[A-Z0-9]+_)*(?:[A-Z0-9]*(?:PASSWORD|PASSWD|SECRET|TOKEN)|PASS|PWD|"
    r"(?:API|ACCESS|SECRET|PRIVATE|MASTER|ENCRYPTION|SIGNING|ACCOUNT|AUTH)_?KEY|CREDENTIALS?)"
    r"(?:_[A-Z0-9]+)*\s*[:=]\s*" + _VALUE
)
_IDENT_ASSIGN = re.compile(
    r"(?i)(?<![\w.-])[a-z0-9]+(?:[_.-][a-z0-9]+)*[_.-]"
    r"(?:token|secret|password|passwd|pwd|(?:api|access|secret|private|auth|account|master|"
    r"signing|encryption)[_-]?key)[\"']?\s*[:=]\s*" + _VALUE
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


def _value_span(match: re.Match[str]) -> tuple[int, int, bool] | None:
    for name in ("q1", "q2", "q3", "q4", "q5"):
        if match.group(name) is not None:
            return match.start(name), match.end(name), True
    if match.group("b") is not None:
        return match.start("b"), match.end("b"), False
    return None


_CODE_VALUE = re.compile(r"[A-Za-z_][A-Za-z_.]*|[A-Za-z_][\w.]*[(\[].*|[$%{<].*")


def _is_code(value: str) -> bool:
    """An identifier, attribute, call or placeholder (``api_key``, ``self.token``,
    ``getpass()``, ``os.environ[...]``, ``$TOKEN``, ``{{ secret }}``, ``<your-key>``):
    code that names a value, not the value."""
    return _CODE_VALUE.fullmatch(value) is not None


def _assigned(kind: str, pattern: re.Pattern[str]) -> _Detector:
    def detect(text: str) -> Iterator[tuple[str, int, int]]:
        for match in pattern.finditer(text):
            span = _value_span(match)
            if span is None:
                continue
            start, end, quoted = span
            value = text[start:end]
            if not value.strip():
                continue
            if not quoted and (_is_ordinary_word(value) or _is_code(value)):
                continue
            yield kind, start, end

    return detect


def _named_values(text: str) -> Iterator[tuple[str, int, int]]:
    for match in _NAMED_VALUE.finditer(text):
        span = _value_span(match)
        if span is None:
            continue
        start, end, quoted = span
        value = text[start:end]
        if not value.strip():
            continue
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

_PIN = re.compile(
    r"(?i)"
    + _START
    + r"(?:pin(?:[ _-]?(?:code|number|no\.?))?|pin-?code|pass ?code|security[ _-]code|"
    r"cvv2?|cvc2?|csc|geheimzahl|código pin|code pin|codice pin)"
    + _END
    + _QUALIFIER
    + r"(?:"
    + _ASSIGN
    + r"|"
    + _VERB
    + r"|"
    + _BARE
    + r")[\"'`]?(?P<v>\d{3,8})(?![\d.,:/-]\d|\d)"
)

_OTPAUTH = re.compile(r"(?i)\botpauth://[^\s]*?[?&]secret=(?P<v>[A-Z2-7]+=*)")
_TOTP_NAMED = re.compile(
    r"(?i)"
    + _START
    + r"(?:2fa|mfa|totp|otp|authenticator|two[- ]factor|2-step)(?:[ _-]?(?:app|auth))?"
    r"[ _-]?(?:seed|secret|key|setup[ _-]key)s?"
    + _END
    + _QUALIFIER
    + r"(?:"
    + _ASSIGN
    + r"|"
    + _VERB
    + r"|"
    + _BARE
    + r")[\"'`]?(?P<v>[A-Za-z2-7]{4}(?:[ -]?[A-Za-z2-7]{4}){3,15}[A-Za-z2-7]{0,3}=*)(?![\w-])"
)

_SEED_PHRASE = re.compile(
    r"(?i)"
    + _START
    + r"(?:seed|recovery|mnemonic|backup)[ _-]?(?:phrase|words)"
    + _END
    + r"(?:"
    + _ASSIGN
    + r"|"
    + _VERB
    + r")[\"'`]?(?P<v>[a-z]{3,8}(?:\s+[a-z]{3,8}){11,23})\b"
)


def _seeds(text: str) -> Iterator[tuple[str, int, int]]:
    for pattern in (_OTPAUTH, _TOTP_NAMED):
        for match in pattern.finditer(text):
            compact = re.sub(r"[ -]", "", match["v"]).rstrip("=")
            # A base32 seed is upper case or holds digits; words in prose are neither.
            if len(compact) >= 16 and (compact.isupper() or any(ch.isdigit() for ch in compact)):
                yield "totp_seed", match.start("v"), match.end("v")


_SENTENCE_WORDS = """
    the and you your with that this for are was not but have has they them from what
    when who should never would could can will anyone someone because into
"""
_FUNCTION_WORDS = frozenset(_SENTENCE_WORDS.split())


def _seed_phrases(text: str) -> Iterator[tuple[str, int, int]]:
    for match in _SEED_PHRASE.finditer(text):
        words = match["v"].lower().split()
        # Twelve random list words, not a sentence ("is something you should never share").
        if sum(w in _FUNCTION_WORDS for w in words) < 2:
            yield "seed_phrase", match.start("v"), match.end("v")


# --- payment card numbers -------------------------------------------------------------------

# Runs of digit groups separated by one space or dash; not part of a decimal,
# a longer number or a phone number written with "+".
_DIGIT_RUN = re.compile(r"(?<![\w+.,/-])\d+(?:[ -]\d+)*(?![\w.,/]?\d)")

_ISSUERS: tuple[tuple[re.Pattern[str], frozenset[int]], ...] = (
    (re.compile(r"4"), frozenset({13, 16, 19})),  # Visa
    (re.compile(r"5[1-5]|2(?:2[2-9][1-9]|2[3-9]\d|[3-6]\d\d|7[01]\d|720)"), frozenset({16})),
    (re.compile(r"3[47]"), frozenset({15})),  # American Express
    (re.compile(r"6011|65|64[4-9]"), frozenset({16, 17, 18, 19})),  # Discover
    (re.compile(r"3(?:0[0-5]|[689])"), frozenset({14, 15, 16, 17, 18, 19})),  # Diners Club
    (re.compile(r"35(?:2[89]|[3-8]\d)"), frozenset({16, 17, 18, 19})),  # JCB
    (re.compile(r"62"), frozenset({16, 17, 18, 19})),  # UnionPay
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _is_card(digits: str) -> bool:
    return (
        any(p.match(digits) and len(digits) in lengths for p, lengths in _ISSUERS)
        and len(set(digits)) > 1
        and _luhn(digits)
    )


def _cards(text: str) -> Iterator[tuple[str, int, int]]:
    for run in _DIGIT_RUN.finditer(text):
        groups = [(m.start(), m.end()) for m in re.finditer(r"\d+", run.group())]
        separators = set(re.findall(r"[ -]", run.group()))
        if len(groups) > 1 and len(separators) > 1:
            continue  # "4111-1111 1111" mixes separators: a list of numbers, not a card
        base = run.start()
        i = 0
        while i < len(groups):
            found = None
            # The longest run of whole groups starting here that is a card number.
            for j in range(len(groups) - 1, i - 1, -1):
                digits = "".join(run.group()[s:e] for s, e in groups[i : j + 1])
                if len(digits) > 19:
                    continue
                if len(digits) < 13:
                    break
                inner = [e - s for s, e in groups[i : j + 1]]
                # Written in groups: each of 3 to 6 digits (the last may be shorter).
                if len(inner) > 1 and any(not 3 <= n <= 6 for n in inner[:-1]):
                    continue
                if _is_card(digits):
                    found = j
                    break
            if found is None:
                i += 1
                continue
            yield "card_number", base + groups[i][0], base + groups[found][1]
            i = found + 1


_DETECTORS: tuple[_Detector, ...] = (
    _whole("private_key", _PEM, re.DOTALL),
    _whole("private_key", _PUTTY, re.DOTALL),
    _whole("jwt", _JWT),
    _whole("authorization", _AUTH, check=_token_like),
    _whole("authorization", _AUTH_HEADER, check=_token_like),
    # One alternation, one pass over the text, for all the fixed token shapes.
    _whole("api_key", "|".join(f"(?:{pattern})" for pattern in _SHAPES)),
    _whole("api_key", _AZURE),
    _whole("api_key", _SAS_SIG),
    _aws_secret_keys,
    _whole("url_password", _URL_PASSWORD),
    _named_values,
    _assigned("secret", _ENV_ASSIGN),
    _assigned("secret", _IDENT_ASSIGN),
    _whole("pin", _PIN),
    _seeds,
    _seed_phrases,
    _cards,
)


# --- invisible characters -------------------------------------------------------------------


def _visible(text: str) -> tuple[str, list[int] | None]:
    """``text`` without invisible characters, and where each kept one was (``None``: as is)."""
    if text.isascii() or not any(is_invisible(ch) for ch in text):
        return text, None
    kept: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if not is_invisible(ch):
            kept.append(ch)
            where.append(i)
    return "".join(kept), where


def find_credentials(text: str) -> list[CredentialFinding]:
    """Every credential-looking span in ``text``, sorted, non-overlapping."""
    if not text:
        return []
    visible, where = _visible(text)
    spans: list[CredentialFinding] = []
    for detect in _DETECTORS:
        for kind, start, end in detect(visible):
            if where is not None:
                start, end = where[start], where[end - 1] + 1
            spans.append(CredentialFinding(kind, start, end))
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


def redact_credentials(text: str) -> tuple[str, int]:
    """``text`` with each credential replaced by ``[REDACTED:<kind>]``, and how many were."""
    findings = find_credentials(text)
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
