"""``/chat``: talk to the agent in the browser.

``/chat`` starts a new session (a fresh random ID; the session is created by
its first message) and ``/chat/{session_id}`` shows a session's recent
history with a message form. ``static/chat.js`` posts the form to the JSON
route ``/api/sessions/{session_id}/chat`` with ``fetch`` and renders the
streamed ``delta`` events as they come, then the final reply, its tool calls
and the recalled memories. Without JavaScript the form posts here instead
and the page reloads with the reply (a whole, unstreamed turn).

Invariants:
- The same turn path as the API: one turn at a time per session
  (``Services.chat_lock``), and a turn runs to its end even if the browser
  goes away.
- No model configured: the page says so and how to configure one (503).
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...errors import TurnFailedError, ValidationError
from ..api.chat import NO_MODEL
from ..schemas import CHAT_MESSAGE_CAP
from ..services import services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute, SessionId

__all__ = ["HISTORY_SHOWN", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

#: The newest messages shown above the chat form.
HISTORY_SHOWN = 100


def chat_path(session_id: str) -> str:
    return "/chat/" + quote(session_id, safe="")


@router.get("/chat")
async def new_chat(request: Request) -> Response:
    return redirect(chat_path(f"web-{uuid.uuid4().hex[:16]}"))


async def _chat_page(
    request: Request,
    session_id: str,
    *,
    message: str = "",
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    s = services(request)
    history = await s.root.threads.recent_messages(s.resource_id, session_id, limit=HISTORY_SHOWN)
    return page(
        request,
        "chat.html",
        active="chat",
        status_code=status_code,
        session_id=session_id,
        history=history,
        message=message,
        error=error,
        model_ready=s.agent is not None,
        no_model=NO_MODEL,
        message_cap=CHAT_MESSAGE_CAP,
        endpoint=f"/api/sessions/{quote(session_id, safe='')}/chat",
        action=chat_path(session_id),
    )


@router.get("/chat/{session_id}")
async def chat_page(request: Request, session_id: SessionId) -> Response:
    return await _chat_page(request, session_id)


@router.post("/chat/{session_id}")
async def chat_without_script(request: Request, session_id: SessionId) -> Response:
    """The form's fallback without JavaScript: one whole turn, then back to the page."""
    s = services(request)
    form = await read_form(request, ("message",))
    message = form.get("message", "").replace("\r\n", "\n")
    if s.agent is None:
        return await _chat_page(request, session_id, message=message, status_code=503)
    if not message.strip() or len(message) > CHAT_MESSAGE_CAP:
        error = f"message: must be 1 to {CHAT_MESSAGE_CAP:,} characters"
        return await _chat_page(request, session_id, message=message, error=error, status_code=422)
    try:
        async with s.chat_lock(session_id):
            await asyncio.shield(s.agent.run_turn(s.resource_id, session_id, message))
    except TurnFailedError as exc:
        error = f"The model failed: {exc.message}"
        return await _chat_page(request, session_id, message=message, error=error, status_code=502)
    except ValidationError as exc:
        return await _chat_page(
            request, session_id, message=message, error=str(exc), status_code=422
        )
    return redirect(chat_path(session_id))
