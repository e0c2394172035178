"""The one exception tree of popagent.

::

    PopagentError
    ├── ValidationError        bad input; names the field and the limit
    │   └── SecretRefusedError a fact that looks like a credential
    ├── NotFoundError          no such memory in this resource
    ├── ConflictError          a strict create met an existing key
    ├── DatabaseError          the server could not be reached or started
    ├── TurnFailedError        an agent turn could not complete; ``cause`` says why
    ├── ModelError             a model call failed (``popagent.llm.protocol``)
    ├── SecretKeyError         no usable secret key (``popagent.secrets.cipher``)
    └── SecretDecryptError     a secret did not decrypt (``popagent.secrets.cipher``)

Every error is raised before anything is written, or after the transaction
that would have written was rolled back: a failed call changes nothing. The one
exception is ``TurnFailedError``: a turn is a conversation, not a transaction,
so the messages it persisted before failing stay in the session's history.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "DatabaseError",
    "NotFoundError",
    "PopagentError",
    "SecretRefusedError",
    "TurnFailedError",
    "ValidationError",
]


class PopagentError(Exception):
    """Base class of every error popagent raises on purpose."""


class ValidationError(PopagentError, ValueError):
    """Input that breaks a documented rule.

    ``field`` names the offending argument or body field so that the CLI and
    the HTTP layer can point at it.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SecretRefusedError(ValidationError):
    """A fact that looks like a credential; secrets belong in the secret store."""


class NotFoundError(PopagentError, LookupError):
    """The memory does not exist in the given resource (it may exist in another)."""


class ConflictError(PopagentError):
    """A strict create collided with an existing fact key."""


class DatabaseError(PopagentError):
    """PostgreSQL could not be reached, started or migrated."""


class TurnFailedError(PopagentError):
    """An agent turn could not complete: the model call failed after its retries, or the
    model was still calling tools when the turn's round limit ran out.

    ``cause`` is the underlying error (a ``ModelError``), or ``None`` when the turn
    itself gave up. A failed turn stores no episode; what it already wrote to the
    session's history (the user message above all) stays, since it was said.
    """

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
