"""The web GUI: server-rendered pages over the same services as the JSON API.

``gui_router`` holds every page; ``STATIC_DIR`` the stylesheet and the one
script (the chat page's), served at ``/static``. Everything is local: no CDN,
no build step, no inline script or style (the CSP forbids both).

Pages: ``/`` memory browser and ``/memories/{id}`` (``pages_memories``), fact
and episode writes (``pages_facts``), cleanup and maintenance
(``pages_cleanup``), ``/recall`` (``pages_recall``), ``/stale`` (``pages_stale``), ``/settings``
(``pages_settings``), ``/sessions`` (``pages_sessions``), ``/chat``
(``pages_chat``), ``/keys`` (``pages_keys``, an admin key's keys in
multi-resource mode), ``/login`` (``login``). Shared: ``forms`` (CSRF, strict form
bodies), ``rendering`` (templates, notices), ``routing`` (error pages).

Invariants:
- Every page acts on the server's resource only; no form has a resource field,
  and a submitted one is refused (422) like any unknown field.
- Every POST needs the CSRF token; successful writes answer 303 (redirect after POST).
"""

from pathlib import Path

from fastapi import APIRouter

from . import (
    login,
    pages_chat,
    pages_cleanup,
    pages_docs,
    pages_facts,
    pages_keys,
    pages_memories,
    pages_recall,
    pages_sessions,
    pages_settings,
    pages_stale,
)

__all__ = ["ROUTERS", "STATIC_DIR", "gui_router"]

STATIC_DIR = Path(__file__).parent / "static"

#: The page modules' routers, in the order they are matched.
ROUTERS = (
    pages_memories.router,
    pages_facts.router,
    pages_cleanup.router,
    pages_recall.router,
    pages_stale.router,
    pages_settings.router,
    pages_sessions.router,
    pages_chat.router,
    pages_docs.router,
    pages_keys.router,
    login.router,
)

gui_router = APIRouter(include_in_schema=False)
for _router in ROUTERS:
    gui_router.include_router(_router)
