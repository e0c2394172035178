"""How ``popagent serve`` prints: short lines for a person in a terminal, JSON lines for a log.

In a terminal (standard error is one), the log is human lines: the time, then
what happened (``12:03:04 warning: database unavailable: ...``), warnings and
errors marked, a record's fields after its message, a traceback as Python
prints it. Not shown there: one line per request (``--access-log`` turns them
on) and uvicorn's start-up and shutdown notices (warnings and errors still
are); the progress lines and ``ready at URL`` (``cli.startup``) say all that.
Anywhere else (a pipe, a file, a service manager), or with ``--log-format
json``, every log line is one JSON object (``web.logs``) and each request has
its access line, as a log collector wants them.

The server ends with ``popagent serve: stopped`` on standard output after
Ctrl-C or SIGTERM, once everything has shut down cleanly, and exits 0.

Invariants: the choice is made once, in the serving process, and handed to
every worker process (``ServeOutput.to_payload``); nothing here changes what is
logged, only how it is written and whether access lines are kept.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import Any, Literal, TextIO, TypeVar

import click

from ..web.logs import logging_config
from .startup import say

__all__ = [
    "HumanFormatter",
    "LogFormat",
    "ServeOutput",
    "output_options",
    "said_stopped",
]

LogFormat = Literal["human", "json"]
F = TypeVar("F", bound=Callable[..., Any])

# LogRecord attributes that are not a record's own fields (``web.logs`` has the same).
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's coloured copy of the message
}
_MARK = {logging.WARNING: "warning: ", logging.ERROR: "error: ", logging.CRITICAL: "error: "}


class HumanFormatter(logging.Formatter):
    """One short line per record: local time, a warning or error mark, the message, and
    the record's fields in brackets (an access line: its milliseconds)."""

    def format(self, record: logging.LogRecord) -> str:
        clock = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{clock} {_MARK.get(record.levelno, '')}{record.getMessage()}"
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and k[0] != "_"}
        if record.name == "popagent.access":
            line += f" ({fields.get('ms', '?')} ms)"  # method, path and status are the message
        elif fields:
            line += " (" + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in fields.items()) + ")"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


@dataclass(frozen=True, slots=True)
class ServeOutput:
    """How the server's log is written: ``log_format``, and whether requests are logged."""

    log_format: LogFormat
    access_log: bool

    @classmethod
    def choose(cls, log_format: LogFormat | None, access_log: bool | None) -> ServeOutput:
        """The given choices, else human lines without access lines when standard error
        is a terminal, JSON with access lines when it is not."""
        chosen: LogFormat = log_format or ("human" if _is_terminal() else "json")
        return cls(chosen, chosen == "json" if access_log is None else access_log)

    @property
    def human(self) -> bool:
        return self.log_format == "human"

    def logging_config(self, level: str) -> dict[str, Any]:
        """``web.logs.logging_config`` written this way (a ``dictConfig``)."""
        config = logging_config(level)
        loggers = config["loggers"]
        if self.human:
            config["formatters"]["human"] = {"()": HumanFormatter}
            config["handlers"]["stderr"]["formatter"] = "human"
            # uvicorn's notices (started, waiting for startup, shutting down, ...) repeat
            # what the progress lines say; its warnings and errors are kept.
            loggers["uvicorn"]["level"] = max(level.upper(), "WARNING", key=logging.getLevelName)
        loggers["popagent.access"] = {
            "handlers": ["stderr"],
            "level": level.upper() if self.access_log else "WARNING",
            "propagate": False,
        }
        return config

    def to_payload(self) -> dict[str, Any]:
        """For a worker process's environment (``cli.workers``)."""
        return {"log_format": self.log_format, "access_log": self.access_log}

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ServeOutput:
        """What ``to_payload`` wrote; JSON with access lines when it holds nothing."""
        return cls(payload.get("log_format", "json"), bool(payload.get("access_log", True)))


def _is_terminal(stream: TextIO | None = None) -> bool:
    try:
        return (stream or sys.stderr).isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def output_options(command: F) -> F:
    """``--log-format`` and ``--access-log/--no-access-log``, given to the command as
    ``log_format`` and ``access_log`` (``None`` when not given: ``ServeOutput.choose``)."""
    command = click.option(
        "--access-log/--no-access-log",
        "access_log",
        default=None,
        help="One log line per request (default: on for JSON, off in a terminal).",
    )(command)
    return click.option(
        "--log-format",
        type=click.Choice(["human", "json"]),
        default=None,
        help="human: short lines for a person; json: one JSON object a line "
        "(default: human in a terminal, else json).",
    )(command)


class _Stopped(Exception):
    """SIGTERM, once the server has shut down (uvicorn raises the signal again then)."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


@contextmanager
def said_stopped() -> Iterator[None]:
    """Serve inside this: a run ended by Ctrl-C or SIGTERM says ``stopped`` and exits 0.

    uvicorn handles both signals itself while it serves, shuts down gracefully,
    then raises the signal again against the handler that was there before it:
    Python's for SIGINT (``KeyboardInterrupt``), and for SIGTERM the one set
    here, so that the process ends here too instead of being killed by it. A
    signal before or after uvicorn's (while the database starts or stops) ends
    the same way. A run that ends any other way (a failed start) says nothing.
    """
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if _is_terminal(sys.stdout):
        click.echo("\r", nl=False)  # over the "^C" the terminal echoed
    say("stopped")
