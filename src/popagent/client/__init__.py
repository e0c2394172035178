"""``popagent.client``: typed HTTP clients of ``popagent serve`` (on httpx).

::

    from popagent.client import Client

    with Client("http://127.0.0.1:8787", token="...") as client:
        fact = client.create_fact("The user prefers tea", key="drink")
        for result in client.recall("what does the user drink?").results:
            print(result.score, result.memory.content)

``Client`` blocks, ``AsyncClient`` awaits; both have the same methods, one per
API route, returning popagent's own values (:mod:`popagent.models`: ``Memory``,
``Page``, ``FactHistory``, ``ChatReply``, ``Settings``, ..., the values the server
answers with) or the few of :mod:`popagent.client.shapes`.
Errors are popagent's: ``ValidationError`` (naming the server's field),
``NotFoundError``, ``ConflictError``, ``TurnFailedError``, and a
:class:`ClientError` for the rest (transport failures, 401, 5xx). See
docs/client.md. ``RemoteBackend`` is the adapters' ``MemoryBackend`` over an
``AsyncClient``.

This package sits at the top layer, beside ``web`` and ``cli``: it imports
``models``, ``errors`` and ``access`` only, never the server or the store.
"""

from ..models import (
    ChatReply,
    FactHistory,
    Health,
    ItemPage,
    MessagePage,
    ObservationGeneration,
    ObservationGroupInfo,
    Observations,
    Page,
    PurgeReport,
    RecallPreview,
    RevertReport,
    SessionItem,
    SessionWrites,
    Setting,
    Settings,
    ToolCallSummary,
)
from .async_ import AsyncClient, apaged
from .backend import RemoteBackend
from .calls import UNSET, Unset
from .errors import (
    ClientError,
    DatabaseUnavailableError,
    ServerBusyError,
    ServerError,
    TransportError,
    UnauthorizedError,
)
from .shapes import ChatDelta, MaintenanceSchedule, ServerInfo
from .sync import Client, paged

__all__ = [
    "UNSET",
    "AsyncClient",
    "ChatDelta",
    "ChatReply",
    "Client",
    "ClientError",
    "DatabaseUnavailableError",
    "FactHistory",
    "Health",
    "ItemPage",
    "MaintenanceSchedule",
    "MessagePage",
    "ObservationGeneration",
    "ObservationGroupInfo",
    "Observations",
    "Page",
    "PurgeReport",
    "RecallPreview",
    "RemoteBackend",
    "RevertReport",
    "ServerBusyError",
    "ServerError",
    "ServerInfo",
    "SessionItem",
    "SessionWrites",
    "Setting",
    "Settings",
    "ToolCallSummary",
    "TransportError",
    "UnauthorizedError",
    "Unset",
    "apaged",
    "paged",
]
