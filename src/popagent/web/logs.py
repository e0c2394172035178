"""Structured logs: one JSON object per line on stderr, for the server's own
records, the access log, uvicorn's, and (through the root logger) every other
library's: psycopg's pool, the embedded server, asyncio, Python's warnings.

Fields: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, and the
record's extras (the access log's ``method``, ``path``, ``status``, ``bytes``,
``ms``, ``client``), and ``exception`` (the traceback as one string) when the
record carries one. Nothing logs a request's query string or body.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "logging_config"]

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Format a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_") and name != "color_message":
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def logging_config(level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for ``popagent serve``: popagent's and uvicorn's
    loggers at ``level``, every other logger through the root at warning (or ``level``
    when higher), all as JSON on stderr."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    root_level = level.upper() if level.lower() in ("warning", "error") else "WARNING"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stderr": handler},
        # Libraries without a handler of their own (psycopg.pool, asyncio, the MCP SDK,
        # py.warnings) would otherwise reach Python's last-resort plain-text handler.
        "root": {"handlers": ["stderr"], "level": root_level},
        "loggers": {
            "popagent": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            # popagent.access replaces uvicorn's access log, which prints query strings.
            "uvicorn.access": {"handlers": [], "level": "CRITICAL", "propagate": False},
        },
    }
