"""The screen's gates skip detectors, never findings (``popagent.credentials``).

Each detector runs only when one of its words occurs in the text, and which
words occur is found for all detectors in one pass (``_Triggers``). These tests
hold the gates to what they promise: the one pass finds exactly the words a
substring test finds, and the screen with its gates finds exactly what every
detector run on every text finds, over the credential corpus, ordinary
conversation and texts built from the gates' own words.
"""

from __future__ import annotations

import random
import re

import pytest

from popagent import credentials
from popagent.credentials import find_credentials
from tests.credential_corpus import CORPUS, ORDINARY

# One example of each fixed token shape (``credentials._SHAPES``), each an api_key.
SHAPE_EXAMPLES = (
    "sk-proj-" + "aB3dE5fG7h" * 3,
    "ghp_" + "aB3dE5fG7h" * 4,
    "gho_" + "aB3dE5fG7h" * 4,
    "github_pat_" + "aB3dE5fG7h_" * 3,
    "glpat-" + "aB3dE5fG7h" * 3,
    "AKIA" + "ABCDEFGH23456789",
    "ASIA" + "ABCDEFGH23456789",
    "xoxb-" + "1234567890-abcdefghij",
    "xapp-1-" + "A1B2C3D4E5F6",
    "AIza" + "aB3dE5fG7h" * 3 + "aB3dE",
    "ya29." + "aB3dE5fG7h" * 3,
    "GOCSPX-" + "aB3dE5fG7h" * 3,
    "sk_live_" + "aB3dE5fG7h" * 2,
    "rk_test_" + "aB3dE5fG7h" * 2,
    "whsec_" + "aB3dE5fG7h" * 3,
    "hf_" + "aB3dE5fG7h" * 4,
    "SG." + "aB3dE5fG7h" * 2 + "." + "aB3dE5fG7h" * 2,
    "npm_" + "aB3dE5fG7h" * 4,
    "pypi-AgE" + "aB3dE5fG7h" * 6,
    "dop_v1_" + "0123456789abcdef" * 4,
    "shpat_" + "0123456789abcdef" * 2,
    "SK" + "0123456789abcdef" * 2,
    "key-" + "0123456789abcdef" * 2,
    "AGE-SECRET-KEY-1" + "QWERTYUPASDFGHJKLZXCVBNM023456789QWERTYUPASDFGHJKLZXCVBNM0",
    "https://hooks.slack.com/services/T0123ABCD/B0123ABCD/" + "aB3dE5fG7h" * 2,
)


def _ungated(monkeypatch: pytest.MonkeyPatch, text: str) -> list[credentials.CredentialFinding]:
    with monkeypatch.context() as patch:
        patch.setattr(credentials._Gated, "wanted", lambda self, scan, present: True)
        return find_credentials(text)


def _built_texts(seed: int, count: int) -> list[str]:
    """Texts made of the gates' words (in every case), the shape examples, corpus
    sentences and separators: where a gate that looked for too little would show."""
    rng = random.Random(seed)
    pieces = [
        *credentials._TRIGGERS.words,
        *credentials._SHAPE_WORDS,
        *SHAPE_EXAMPLES,
        *(secret.sentence for secret in CORPUS[::7]),
        "password is Hunter2!x",
        "4111 1111 1111 1111",
        "PGPASSWORD=s3cr3t-x",
        "\u200b",
        "\u0130",
        "\u017f",
    ]
    separators = ["", " ", "_", "-", ":", "=", "\n", ".", "/", "'", '"', "  "]
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 8)):
            piece = rng.choice(pieces)
            roll = rng.random()
            if roll < 0.2:
                piece = piece.upper()
            elif roll < 0.3:
                piece = piece.title()
            parts += [piece, rng.choice(separators)]
        texts.append("".join(parts))
    return texts


def test_the_one_pass_finds_exactly_the_words_that_occur() -> None:
    triggers = credentials._TRIGGERS
    texts = [text.lower() for text in _built_texts(11, 3000)]
    # Words inside other words, overlapping, and at the text's ends.
    texts += ["passwd", "pwd", "xpasswpd", "keyey", "sk-sk_", "aws", "two2fa", ":aa://"]
    for text in texts:
        assert triggers.present(text) == {w for w in triggers.words if w in text}, text


def test_the_trie_matches_the_longest_word_at_a_position() -> None:
    pattern = re.compile(credentials._trie(["pass", "passw", "passwd", "pw", "pwd"]))
    assert [m.group() for m in pattern.finditer("passwdx passwx passx pwdx pwx")] == [
        "passwd",
        "passw",
        "pass",
        "pwd",
        "pw",
    ]


def test_every_token_shape_holds_a_word_of_its_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    for example in SHAPE_EXAMPLES:
        text = f"here it is: {example} (keep it safe)"
        assert any(word in example for word in credentials._SHAPE_WORDS), example
        found = find_credentials(text)
        assert [f.kind for f in found] == ["api_key"], example
        assert found == _ungated(monkeypatch, text)


def test_the_gates_change_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [secret.sentence for secret in CORPUS] + list(ORDINARY) + _built_texts(5, 1500)
    found = 0
    for text in texts:
        gated = find_credentials(text)
        assert gated == _ungated(monkeypatch, text), text
        found += bool(gated)
    # The comparison is about texts that hold credentials, and ones that do not.
    assert len(texts) // 4 < found < len(texts)
