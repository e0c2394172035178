"""``HtmlRoute``: GUI routes answer errors with HTML pages instead of the API's JSON;
``SessionId`` and ``MemoryId``: the pages' path parameters, bounded as stored.

The API's error handlers stay as they are for ``/api``; a GUI route catches
the errors a page can meet and renders ``error.html`` with the same status
the API would use (404 unknown memory or session, 409 conflict, 422 invalid
input, 503 database unavailable, also for a raw driver error or pool timeout;
403 and 422 from ``FormRefused``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Path
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from ...checks import ID_CAP
from ...errors import ConflictError, NotFoundError, ValidationError
from ..errors import OUTAGE_ERRORS, log_outage
from .forms import FormRefused
from .rendering import error_page

__all__ = ["HtmlRoute", "MemoryId", "SessionId"]

#: A session's id in a page's path; a longer one is a 404, as for no such session.
SessionId = Annotated[str, Path(min_length=1, max_length=ID_CAP)]
#: A memory's id in a page's path (PostgreSQL's bigint).
MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1)]

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class HtmlRoute(APIRoute):
    """An ``APIRoute`` whose errors are pages a person can read."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def with_error_pages(request: Request) -> Response:
            try:
                return await handler(request)
            except FormRefused as exc:
                return error_page(request, exc.status, exc.title, exc.message)
            except NotFoundError as exc:
                return error_page(request, 404, "Not found", str(exc))
            except RequestValidationError:
                return error_page(request, 404, "Not found", "there is no such page")
            except ValidationError as exc:
                return error_page(request, 422, "Invalid input", str(exc))
            except ConflictError as exc:
                return error_page(request, 409, "Conflict", str(exc))
            except OUTAGE_ERRORS as exc:
                log_outage(request, exc)
                return error_page(
                    request, 503, "Database unavailable", "the database cannot be reached"
                )

        return with_error_pages
