"""Thread memory: sessions and their exact message history."""

from .items import SessionItems
from .service import ThreadStore

__all__ = ["SessionItems", "ThreadStore"]
