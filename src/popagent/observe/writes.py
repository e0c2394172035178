"""The engine's writes of observations text, each through the credential screen.

Every write of an observations text by ``engine``, ``buffering`` and
``reflection`` goes through ``insert_log``, ``advance_log`` and
``insert_group`` here: each credential value becomes ``[REDACTED:<kind>]``,
also in text carried over from rows written before the screen existed.
Nothing here decides anything; it wraps ``popagent.store.observations``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from ..credentials import redacted
from ..offload import off_loop
from ..store import observations as obs_sql

__all__ = ["Conflict", "advance_log", "insert_group", "insert_log"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _screened(write: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
    """``write`` with its ``observations`` text passed through the credential screen."""

    async def screened(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        text = kwargs.get("observations")
        if isinstance(text, str):
            kwargs["observations"] = await off_loop(len(text), redacted, text)
        return await write(*args, **kwargs)

    return screened


# The store's writes of observations text; every engine write goes through these.
insert_log = _screened(obs_sql.insert_log)
advance_log = _screened(obs_sql.advance_log)
insert_group = _screened(obs_sql.insert_group)


class Conflict(Exception):
    """Another turn activated or observed this thread meanwhile (raised to roll back)."""
