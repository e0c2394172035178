"""The JSON API under ``/api``: memories, sessions, settings, chat, and system routes."""

from .chat import router as chat_router
from .memories import router as memories_router
from .purge import router as purge_router
from .recall import router as recall_router
from .sessions import router as sessions_router
from .settings import router as settings_router
from .system import router as system_router

__all__ = ["ROUTERS"]

#: In match order (FastAPI tries routes one by one): the recall preview, the hot path, first.
ROUTERS = (
    recall_router,
    memories_router,
    purge_router,
    sessions_router,
    settings_router,
    chat_router,
    system_router,
)
