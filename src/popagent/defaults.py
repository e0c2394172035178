"""Defaults every surface shares, and the one table of popagent's environment variables.

The default resource, host and ports are defined here once; the server
(``popagent.web.config``), the command line, the MCP transport and the HTTP
client import them from here under these names.

``ENV_VARS`` lists every ``POPAGENT_*`` variable the code reads, with what it
means and its default. Code that reads one takes its name from the constant
here (``DATABASE_URL_ENV`` ...). Invariants, checked by the test suite: every
``POPAGENT_*`` name in ``src/popagent`` is in the table; every ``public``
variable is documented in README.md or docs/*.md; every ``POPAGENT_*`` name the
docs mention is in the table. ``internal`` variables are how ``popagent serve``
talks to its own worker processes (never set them by hand); ``test`` ones are
read by the test suite only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ALLOWED_HOSTS_ENV",
    "DATABASE_URL_ENV",
    "DATA_DIR_ENV",
    "DEFAULT_HOST",
    "DEFAULT_KEY_RATE",
    "DEFAULT_MCP_PORT",
    "DEFAULT_PORT",
    "DEFAULT_RESOURCE",
    "DEFAULT_URL",
    "EMBEDDER_ENV",
    "EMBEDDING_API_KEY_ENV",
    "EMBEDDING_BASE_URL_ENV",
    "EMBEDDING_DIMENSIONS_ENV",
    "EMBEDDING_MODEL_ENV",
    "ENV_VARS",
    "MODEL_API_KEY_ENV",
    "MODEL_BASE_URL_ENV",
    "MODEL_ENV",
    "MODEL_MAX_RETRIES_ENV",
    "MODEL_TIMEOUT_ENV",
    "OPENAI_API_KEY_ENV",
    "RESOURCE_ID_ENV",
    "SECRET_KEY_ENV",
    "SECRET_KEY_FILE_ENV",
    "TEST_AFTER_MIGRATE_ENV",
    "TEST_DATABASE_URL_ENV",
    "TEST_NO_CREATE_DATABASE_ENV",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "URL_ENV",
    "WORKERS_ENV",
    "WORKER_CONFIG_ENV",
    "WORKER_PARENT_ENV",
    "EnvVar",
    "env_var",
]

#: The resource a server, the CLI and the MCP server use unless told otherwise.
DEFAULT_RESOURCE = "popagent-user"
#: Every service binds loopback unless told otherwise (``popagent.access``).
DEFAULT_HOST = "127.0.0.1"
#: ``popagent serve``'s port.
DEFAULT_PORT = 8787
#: ``popagent mcp --transport http``'s port.
DEFAULT_MCP_PORT = 8766
#: Multi-resource mode (``serve`` and ``mcp --transport http``): requests one API key
#: may make per minute unless told otherwise (``popagent.keys.Limits``).
DEFAULT_KEY_RATE = 1200
#: Where the HTTP client looks for a server unless told otherwise.
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"

Scope = Literal["public", "internal", "test"]


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One environment variable: its name, what it sets, its default (``None``: unset
    means off or absent), and who may set it (see the module docstring)."""

    name: str
    meaning: str
    default: str | None = None
    scope: Scope = "public"


# The database.
DATABASE_URL_ENV = "POPAGENT_DATABASE_URL"
DATA_DIR_ENV = "POPAGENT_DATA_DIR"
RESOURCE_ID_ENV = "POPAGENT_RESOURCE_ID"
# Access to the server and the MCP server over HTTP.
TOKEN_ENV = "POPAGENT_TOKEN"
TOKEN_FILE_ENV = "POPAGENT_TOKEN_FILE"
ALLOWED_HOSTS_ENV = "POPAGENT_ALLOWED_HOSTS"
URL_ENV = "POPAGENT_URL"
WORKERS_ENV = "POPAGENT_WORKERS"
# The secret store's key.
SECRET_KEY_ENV = "POPAGENT_SECRET_KEY"
SECRET_KEY_FILE_ENV = "POPAGENT_SECRET_KEY_FILE"
# The chat model.
MODEL_BASE_URL_ENV = "POPAGENT_MODEL_BASE_URL"
MODEL_ENV = "POPAGENT_MODEL"
MODEL_API_KEY_ENV = "POPAGENT_MODEL_API_KEY"
MODEL_TIMEOUT_ENV = "POPAGENT_MODEL_TIMEOUT"
MODEL_MAX_RETRIES_ENV = "POPAGENT_MODEL_MAX_RETRIES"
# The embedding model.
EMBEDDER_ENV = "POPAGENT_EMBEDDER"
EMBEDDING_MODEL_ENV = "POPAGENT_EMBEDDING_MODEL"
EMBEDDING_BASE_URL_ENV = "POPAGENT_EMBEDDING_BASE_URL"
EMBEDDING_API_KEY_ENV = "POPAGENT_EMBEDDING_API_KEY"
EMBEDDING_DIMENSIONS_ENV = "POPAGENT_EMBEDDING_DIMENSIONS"
# ``popagent serve --workers`` hands these to its worker processes.
WORKER_CONFIG_ENV = "POPAGENT_WORKER_CONFIG"
WORKER_PARENT_ENV = "POPAGENT_WORKER_PARENT"
# The test suite's server (tests/conftest.py).
TEST_DATABASE_URL_ENV = "POPAGENT_TEST_DATABASE_URL"
TEST_NO_CREATE_DATABASE_ENV = "POPAGENT_TEST_NO_CREATE_DATABASE"
TEST_AFTER_MIGRATE_ENV = "POPAGENT_TEST_AFTER_MIGRATE"
#: Not popagent's: the fallback key of both model clients.
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"

ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar(
        DATABASE_URL_ENV,
        "PostgreSQL URL of an existing server (--database-url)",
        "the embedded server",
    ),
    EnvVar(
        DATA_DIR_ENV,
        "folder of the embedded server; its cluster lives in pgdata/ (--data-dir)",
        "the user data folder (platformdirs)",
    ),
    EnvVar(RESOURCE_ID_ENV, "the CLI's resource (--resource-id)", DEFAULT_RESOURCE),
    EnvVar(
        TOKEN_ENV,
        "bearer token of popagent serve / popagent mcp, and the client's",
        "none (only a loopback bind may go without)",
    ),
    EnvVar(TOKEN_FILE_ENV, "file whose first line is the bearer token (--token-file)"),
    EnvVar(
        ALLOWED_HOSTS_ENV,
        "comma-separated extra Host names the server answers to (--allowed-host)",
        "the bind address (and the loopback names on loopback)",
    ),
    EnvVar(URL_ENV, "the server the HTTP client talks to", DEFAULT_URL),
    EnvVar(WORKERS_ENV, "server processes of popagent serve (--workers)", "one per core"),
    EnvVar(SECRET_KEY_ENV, "the secret store's key: urlsafe base64 of 32 bytes"),
    EnvVar(
        SECRET_KEY_FILE_ENV,
        "file holding the secret key",
        "secret.key in the user data folder, created on first use",
    ),
    EnvVar(MODEL_BASE_URL_ENV, "chat model: base URL of an OpenAI-compatible API", "OpenAI's"),
    EnvVar(MODEL_ENV, "chat model: the model name; unset means no chat model"),
    EnvVar(MODEL_API_KEY_ENV, "chat model: the API key", OPENAI_API_KEY_ENV),
    EnvVar(MODEL_TIMEOUT_ENV, "chat model: seconds to wait for data", "60"),
    EnvVar(MODEL_MAX_RETRIES_ENV, "chat model: retries of a transient failure", "3"),
    EnvVar(EMBEDDER_ENV, "embedding provider: local, e5, openai or none (--embedder)", "local"),
    EnvVar(EMBEDDING_MODEL_ENV, "openai embedder: the model name (required)"),
    EnvVar(EMBEDDING_BASE_URL_ENV, "openai embedder: the endpoint", "OpenAI's"),
    EnvVar(EMBEDDING_API_KEY_ENV, "openai embedder: the API key", OPENAI_API_KEY_ENV),
    EnvVar(EMBEDDING_DIMENSIONS_ENV, "openai embedder: the dimensions to request"),
    EnvVar(
        WORKER_CONFIG_ENV,
        "the server's configuration, as JSON, for its worker processes",
        scope="internal",
    ),
    EnvVar(WORKER_PARENT_ENV, "the pid of the serving parent process", scope="internal"),
    EnvVar(
        TEST_DATABASE_URL_ENV,
        "runs the test suite on this server instead of a disposable one",
        scope="test",
    ),
    EnvVar(
        TEST_NO_CREATE_DATABASE_ENV,
        "1: the suite runs in the database of POPAGENT_TEST_DATABASE_URL itself",
        scope="test",
    ),
    EnvVar(
        TEST_AFTER_MIGRATE_ENV,
        "an .sql file or command run once the suite has migrated that database",
        scope="test",
    ),
)


def env_var(name: str) -> EnvVar:
    """The table's entry for ``name``; ``KeyError`` when popagent reads no such variable."""
    for var in ENV_VARS:
        if var.name == name:
            return var
    raise KeyError(name)
