"""popagent: memory for LLM agents on plain PostgreSQL.

The long-term store holds durable facts and per-turn episodes for each
resource, with explainable hybrid recall::

    async with popagent.connect() as app:
        await app.memory.remember("popagent-user", "Prefers dark mode", key="ui.theme")
        results = await app.memory.recall("popagent-user", "do I prefer dark mode?")
        print(popagent.render(results))

Only the error tree is imported with the package; every other name is imported
on first use (PEP 562), so that ``import popagent.cli`` does not pay for the
database driver, the model SDK or the agent before a command needs them.
"""

import importlib as _importlib
import typing as _typing

# The whole error tree, exactly ``errors.__all__``: a new error class is exported
# from here by being added there.
from . import errors as _errors
from .errors import *  # noqa: F403

if _typing.TYPE_CHECKING:
    from .agent import SUPERVISOR_GUIDANCE, Agent, TurnResult
    from .connection import connect
    from .memory.longterm import LongTermMemory
    from .memory.ranking import DEFAULT_WEIGHTS, RankingWeights
    from .memory.render import HEADER, render
    from .models import (
        EpisodeTurn,
        MaintenanceReport,
        Memory,
        MemoryFilter,
        RecallResult,
        RememberResult,
        ScoreComponent,
    )
    from .root import Popagent

#: Where each lazily imported name lives (relative to this package).
_LAZY = {
    "SUPERVISOR_GUIDANCE": ".agent",
    "Agent": ".agent",
    "TurnResult": ".agent",
    "connect": ".connection",
    "LongTermMemory": ".memory.longterm",
    "DEFAULT_WEIGHTS": ".memory.ranking",
    "RankingWeights": ".memory.ranking",
    "HEADER": ".memory.render",
    "render": ".memory.render",
    "EpisodeTurn": ".models",
    "MaintenanceReport": ".models",
    "Memory": ".models",
    "MemoryFilter": ".models",
    "RecallResult": ".models",
    "RememberResult": ".models",
    "ScoreComponent": ".models",
    "Popagent": ".root",
}

__all__ = [
    *_errors.__all__,
    "DEFAULT_WEIGHTS",
    "HEADER",
    "SUPERVISOR_GUIDANCE",
    "Agent",
    "EpisodeTurn",
    "LongTermMemory",
    "MaintenanceReport",
    "Memory",
    "MemoryFilter",
    "Popagent",
    "RankingWeights",
    "RecallResult",
    "RememberResult",
    "ScoreComponent",
    "TurnResult",
    "connect",
    "render",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> _typing.Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'popagent' has no attribute {name!r}")
    value = getattr(_importlib.import_module(where, __name__), name)
    globals()[name] = value  # imported once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
