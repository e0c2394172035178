"""Thread memory: sessions and their exact message history."""

from .service import ThreadStore

__all__ = ["ThreadStore"]
