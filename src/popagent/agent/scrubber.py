"""``SecretScrubber``: the secret values one turn knows, and scrubbing text with them.

A turn starts with the values of the resource's live secrets (when the agent has
a secret store and the resource has any) and learns more as tools reveal or set
secrets. Everything the turn stores or shows back to the model passes through
``scrub`` or ``scrub_json`` first, which replace each value with ``[secret:NAME]``.

Invariants: values are only ever added, never forgotten, within a turn;
``version`` grows with each new value, so a caller can tell whether text it
scrubbed earlier must be scrubbed again. The ``repr`` shows names, never values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..secrets import scrub

__all__ = ["SecretScrubber"]


class SecretScrubber:
    """Known secret values by name; scrubs text, JSON values and raw JSON text."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        # Each layer maps names to values; a name set to a new value during the
        # turn keeps its old value in an earlier layer, since text the turn
        # already produced may hold either.
        self._layers: list[dict[str, str]] = [{}]
        self._known: set[str] = set()
        for name, value in (values or {}).items():
            self.add(name, value)

    def __repr__(self) -> str:
        return f"SecretScrubber(names={sorted(self.names)!r})"

    def __len__(self) -> int:
        return len(self._known)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for layer in self._layers for name in layer)

    @property
    def version(self) -> int:
        """Grows by one each time a new value is learnt."""
        return len(self._known)

    def add(self, name: str, value: str) -> bool:
        """Learn ``value`` under ``name``; ``True`` when it was not known before."""
        if not value or value in self._known:
            return False
        self._known.add(value)
        layer = self._layers[-1]
        if name in layer:
            layer = {}
            self._layers.append(layer)
        layer[name] = value
        return True

    def scrub(self, text: str) -> str:
        """``text`` with every known value replaced by ``[secret:NAME]``."""
        if not self._known or not text:
            return text
        # The newest values first: a marker is never itself rewritten within a
        # layer, and older layers are rare (a secret replaced mid-turn).
        for layer in reversed(self._layers):
            text = scrub(text, layer)
        return text

    def scrub_json(self, value: Any) -> Any:
        """A copy of a JSON value with every string (keys included) scrubbed."""
        if not self._known:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, list):
            return [self.scrub_json(v) for v in value]
        if isinstance(value, dict):
            return {self.scrub(str(k)): self.scrub_json(v) for k, v in value.items()}
        return value

    def scrub_json_text(self, raw: str) -> str:
        """Raw JSON text (tool-call arguments) scrubbed.

        Parsed first, so a value that JSON escaping changed (quotes, backslashes,
        non-ASCII written as ``\\uXXXX``) is still found; text that is not JSON is
        scrubbed as plain text.
        """
        if not self._known or not raw:
            return raw
        try:
            parsed = json.loads(raw)
        except ValueError:
            return self.scrub(raw)
        cleaned = self.scrub_json(parsed)
        if cleaned != parsed:
            return json.dumps(cleaned, ensure_ascii=False)
        return self.scrub(raw)
