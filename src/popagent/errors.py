"""The one exception tree of popagent.

::

    PopagentError
    ├── ValidationError             bad input; names the field and the limit
    │   └── SecretRefusedError      a fact that looks like a credential
    ├── NotFoundError               no such memory in this resource
    ├── ConflictError               a strict create met an existing key
    ├── DatabaseError               the server could not be reached or started
    │   └── DatabaseBusyError       every connection in use past the queue's limits; retry
    ├── TurnFailedError             an agent turn could not complete; ``cause`` says why
    ├── ModelError                  a model call failed; ``retryable`` says if it may succeed later
    ├── EmbeddingError              the embedding model could not embed the texts
    ├── ObservationFailed           the Observer gave no usable observations
    ├── SecretKeyError              no usable secret key
    ├── SecretDecryptError          a secret did not decrypt
    ├── BackupError                 a backup or restore was refused or failed
    └── ClientError                 the HTTP client could not use the server for a request
        ├── TransportError          no answer at all
        ├── UnauthorizedError       401
        └── ServerError             another 5xx
            └── DatabaseUnavailableError   503 for the database (also a DatabaseError)
                └── ServerBusyError        503 ``database_busy`` (also a DatabaseBusyError)

Every class is defined here; the modules that raise them (``popagent.llm.protocol``,
``popagent.embed.protocol``, ``popagent.observe.observer``, ``popagent.secrets.cipher``,
``popagent.store.backup``, ``popagent.client.errors``) re-export them, so both
import paths name the same class.

Database failures: ``DatabaseError`` says that PostgreSQL could not do the
work: it does not answer (a connection could not be made or was lost, the
embedded server's supervisor saw it die, a probe found it silent; once it is
known away a caller waits at most the checkout timeout, 2 s), or it refused
(out of disk, a conflicting operation). ``DatabaseBusyError`` says that it
answers but every pooled connection stayed in use: callers wait for one in the
pool's queue, in order, and get this error only past the queue's limits
(``DEFAULT_QUEUE_LIMIT`` callers waiting, 10,000, or a wait of
``DEFAULT_QUEUE_TIMEOUT``, 30 s; both in ``popagent.store.database``). Nothing
was done, and the same call may succeed a moment later. The server answers it
with 503 ``database_busy`` and ``Retry-After``, which the HTTP client raises as
``ServerBusyError``.

Every error is raised before anything is written, or after the transaction
that would have written was rolled back: a failed call changes nothing. The one
exception is ``TurnFailedError``: a turn is a conversation, not a transaction,
so the messages it persisted before failing stay in the session's history.
"""

from __future__ import annotations

__all__ = [
    "BackupError",
    "ClientError",
    "ConflictError",
    "DatabaseBusyError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "EmbeddingError",
    "ModelError",
    "NotFoundError",
    "ObservationFailed",
    "PopagentError",
    "SecretDecryptError",
    "SecretKeyError",
    "SecretRefusedError",
    "ServerBusyError",
    "ServerError",
    "TransportError",
    "TurnFailedError",
    "UnauthorizedError",
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

    def __reduce__(self) -> tuple[type[ValidationError], tuple[str, str]]:
        # Checks may run in a worker process (``popagent.offload``); the error
        # crosses back pickled, and ``Exception`` would rebuild it from ``args``.
        return type(self), (self.field, self.message)


class SecretRefusedError(ValidationError):
    """A fact that looks like a credential; secrets belong in the secret store."""


class NotFoundError(PopagentError, LookupError):
    """The memory does not exist in the given resource (it may exist in another)."""


class ConflictError(PopagentError):
    """A strict create collided with an existing fact key."""


class DatabaseError(PopagentError):
    """PostgreSQL could not be reached, started or migrated."""


class DatabaseBusyError(DatabaseError):
    """PostgreSQL answers, but every pooled connection stayed in use past the queue's
    limits (too many callers waiting, or a wait longer than the queue timeout).

    Nothing was done; retry shortly. Not an outage: ``DatabaseError`` itself says
    that the server does not answer.
    """


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


class ModelError(PopagentError):
    """The model could not produce a completion.

    ``retryable`` is true when the failure was transient (a timeout, a lost
    connection, HTTP 408/409/429/5xx) so the whole call may succeed later; it
    is false when repeating the same request cannot help (HTTP 400/401/403/
    404/422, a malformed response) or would repeat text already streamed.
    ``attempts`` counts the HTTP requests made, retries included.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status_code: int | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status_code = status_code
        self.attempts = attempts


class EmbeddingError(PopagentError):
    """The embedding model could not embed the texts (unreachable, bad answer, bad model)."""


class ObservationFailed(PopagentError):
    """The Observer gave no usable observations (a failed, slow, empty or looping call)."""


class SecretKeyError(PopagentError):
    """The secret key is missing, malformed, or kept in an unsafe key file."""


class SecretDecryptError(PopagentError):
    """A stored secret could not be decrypted: the wrong key, or a ciphertext that
    does not belong to its row (copied or altered)."""


class BackupError(PopagentError):
    """A backup or restore was refused or failed; the message says why and what to do."""


class ClientError(PopagentError):
    """The server could not be used for this request; ``str()`` is one sentence.

    ``status`` is the HTTP status (``None`` when no answer came) and ``error``
    the server's error code (``None`` when it sent no error body).
    """

    def __init__(self, message: str, *, status: int | None = None, error: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.error = error


class TransportError(ClientError):
    """No answer: the server could not be reached, or the request timed out."""


class UnauthorizedError(ClientError):
    """401: no bearer token, or the wrong one."""


class ServerError(ClientError):
    """A 5xx the library has no error class for (the server failed or is unavailable)."""


class DatabaseUnavailableError(ServerError, DatabaseError):
    """503 ``database_unavailable``: the server is up but cannot reach its database."""


class ServerBusyError(DatabaseUnavailableError, DatabaseBusyError):
    """503 ``database_busy``: the server's database connections are all in use past its
    queue's limits; retry after the ``Retry-After`` it sent (a second or two)."""
