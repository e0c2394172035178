"""popagent: memory for LLM agents on plain PostgreSQL.

The long-term store holds durable facts and per-turn episodes for each
resource, with explainable hybrid recall::

    async with popagent.connect() as memory:
        await memory.remember("popagent-user", "Prefers dark mode", key="ui.theme")
        results = await memory.recall("popagent-user", "do I prefer dark mode?")
        print(popagent.render(results))
"""

from .agent import SUPERVISOR_GUIDANCE, Agent, TurnResult
from .connection import connect
from .errors import (
    BackupError,
    ClientError,
    ConflictError,
    DatabaseError,
    DatabaseUnavailableError,
    EmbeddingError,
    ModelError,
    NotFoundError,
    ObservationFailed,
    PopagentError,
    SecretDecryptError,
    SecretKeyError,
    SecretRefusedError,
    ServerError,
    TransportError,
    TurnFailedError,
    UnauthorizedError,
    ValidationError,
)
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

__all__ = [
    "DEFAULT_WEIGHTS",
    "HEADER",
    "SUPERVISOR_GUIDANCE",
    "Agent",
    "BackupError",
    "ClientError",
    "ConflictError",
    "DatabaseError",
    "DatabaseUnavailableError",
    "EmbeddingError",
    "EpisodeTurn",
    "LongTermMemory",
    "MaintenanceReport",
    "Memory",
    "MemoryFilter",
    "ModelError",
    "NotFoundError",
    "ObservationFailed",
    "PopagentError",
    "RankingWeights",
    "RecallResult",
    "RememberResult",
    "ScoreComponent",
    "SecretDecryptError",
    "SecretKeyError",
    "SecretRefusedError",
    "ServerError",
    "TransportError",
    "TurnFailedError",
    "TurnResult",
    "UnauthorizedError",
    "ValidationError",
    "connect",
    "render",
]

__version__ = "0.1.0"
