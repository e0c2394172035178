"""``POST /api/sessions/{session_id}/chat``: one agent turn over HTTP, whole or streamed.

With ``Accept: text/event-stream`` (or ``?stream=true``) the reply streams as
server-sent events: ``delta`` events (``{"text": ...}``) as the model writes,
then one ``done`` event with the same body as the non-streamed reply, or one
``error`` event with the error body. A session that does not exist yet is
started by its first message.

Invariants:
- Turns of one session run one at a time in this process (``Services.chat_lock``).
- A turn runs to its end even when the client goes away mid-stream: its messages
  and episode are stored as if the reply had been read (a dropped connection is
  not a cancelled turn).
- Without a configured model the route answers 503 and writes nothing.
- A refused message names this API's field, ``message`` (the agent calls it
  ``user_text``), and writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException

from ...agent import Agent, TurnResult
from ...checks import check_text, is_blank
from ...errors import DatabaseBusyError, PopagentError, TurnFailedError, ValidationError
from ...models import ChatReply
from ..errors import DATABASE_UNAVAILABLE, OUTAGE_ERRORS, error_body
from ..schemas import ChatRequest, ErrorOut
from ..services import Services, services

__all__ = ["NO_MODEL", "SHOWN_RESULTS", "reply_json", "router"]

NO_MODEL = (
    "no model is configured: set POPAGENT_MODEL (and POPAGENT_MODEL_BASE_URL, "
    "POPAGENT_MODEL_API_KEY) for any OpenAI-compatible endpoint and restart the server"
)

#: Tools whose answer a reply carries: ``remember`` says what it stored, which the
#: user should see; other answers (history pages, secrets' names) stay with the model.
SHOWN_RESULTS = frozenset({"remember"})

log = logging.getLogger("popagent.web")

router = APIRouter(
    prefix="/api/sessions",
    tags=["chat"],
    responses={422: {"model": ErrorOut}, 502: {"model": ErrorOut}, 503: {"model": ErrorOut}},
)


def reply_json(result: TurnResult) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "reply": result.reply,
        "tool_calls": [
            {
                "name": c.name,
                "outcome": c.outcome,
                "result": c.text if c.name in SHOWN_RESULTS else None,
            }
            for c in result.tool_calls
        ],
        "recalled": [r.to_json() for r in result.recalled],
        "memory_block": result.memory_block,
        "episode_id": result.episode.id if result.episode else None,
        "model_calls": result.model_calls,
        "overhead_ms": round(result.timings.overhead_ms, 2),
    }


def _agent(s: Services) -> Agent:
    if s.agent is None:
        raise HTTPException(503, NO_MODEL)
    return s.agent


@router.post(
    "/{session_id}/chat",
    response_model=ChatReply,
    summary="Send a message and get the reply (streamed with Accept: text/event-stream)",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def chat(
    request: Request,
    session_id: Annotated[str, Path(min_length=1, max_length=256)],
    body: ChatRequest,
    stream: Annotated[bool, Query(description="Stream as server-sent events.")] = False,
) -> Any:
    s = services(request)
    agent = _agent(s)
    check_text("message", body.message)
    if is_blank(body.message):
        raise ValidationError("message", "must not be empty")
    wants_stream = stream or "text/event-stream" in request.headers.get("accept", "")
    if not wants_stream:
        # A task of its own, holding the session's lock, shielded: a client that
        # disconnects cancels neither the turn nor the lock it holds.
        result = await asyncio.shield(s.spawn(_locked_turn(s, agent, session_id, body.message)))
        return reply_json(result)
    return StreamingResponse(
        _events(s, agent, session_id, body.message),
        media_type="text/event-stream",
        headers={"x-accel-buffering": "no"},
    )


async def _locked_turn(
    s: Services,
    agent: Agent,
    session_id: str,
    message: str,
    on_text: Callable[[str], Awaitable[None]] | None = None,
) -> TurnResult:
    """One turn, holding the session's lock for all of it."""
    async with s.chat_lock(session_id):
        try:
            return await agent.run_turn(s.resource_id, session_id, message, on_text=on_text)
        except ValidationError as exc:
            if exc.field != "user_text":
                raise
            raise ValidationError("message", exc.message) from exc


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _events(s: Services, agent: Agent, session_id: str, message: str) -> AsyncIterator[bytes]:
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def on_text(piece: str) -> None:
        queue.put_nowait(_event("delta", {"text": piece}))

    async def turn() -> None:
        try:
            result = await _locked_turn(s, agent, session_id, message, on_text)
            queue.put_nowait(_event("done", reply_json(result)))
        except TurnFailedError as exc:
            queue.put_nowait(_event("error", error_body("model_failed", exc.message)))
        except ValidationError as exc:
            queue.put_nowait(_event("error", error_body("validation_error", str(exc), exc.field)))
        except DatabaseBusyError as exc:
            log.warning("database busy during a chat turn (%s)", type(exc).__name__)
            queue.put_nowait(_event("error", error_body("database_busy", str(exc))))
        except OUTAGE_ERRORS as exc:
            log.warning("database unavailable during a chat turn (%s)", type(exc).__name__)
            queue.put_nowait(
                _event("error", error_body("database_unavailable", DATABASE_UNAVAILABLE))
            )
        except PopagentError as exc:
            queue.put_nowait(_event("error", error_body("error", str(exc))))
        except Exception:
            log.exception("chat turn failed")
            queue.put_nowait(_event("error", error_body("internal_error", "the turn failed")))
        finally:
            queue.put_nowait(None)

    s.spawn(turn())
    while (item := await queue.get()) is not None:
        yield item
