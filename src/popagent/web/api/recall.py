"""``POST /api/recall``: the recall preview, the API's hottest route.

It has a router of its own so that ``ROUTERS`` can put it first: FastAPI tries
routes in order, and trying the two dozen routes before it cost a preview
about 0.05 ms. Its response is written straight from the recall results
(``recall_json``) rather than formatted as text, parsed back into a
``RecallPreview`` and formatted again: the same bytes (a test compares them
with ``RecallPreview``'s on every kind of result) for half the Python.
``RecallPreview`` (``popagent.models``) stays the documented response model.
"""

from __future__ import annotations

import pydantic_core
from fastapi import APIRouter, Request, Response

from ...memory.recall_report import RecallReport
from ...memory.render import render
from ...models import RecallPreview, RecallResult
from ..schemas import ErrorOut, RecallRequest
from ..services import services

__all__ = ["recall_json", "router"]

router = APIRouter(prefix="/api", tags=["memories"], responses={422: {"model": ErrorOut}})


def recall_json(query: str, report: RecallReport) -> bytes:
    """``RecallPreview`` of ``report`` as JSON, byte for byte what pydantic would write."""
    results: list[RecallResult] = report.results
    return pydantic_core.to_json(
        {
            "query": query,
            "results": [
                {
                    # pydantic_core writes a dataclass by its fields: ``Memory``'s JSON.
                    "memory": r.memory,
                    "score": r.score,
                    "components": {
                        c.name: {
                            "value": c.value,
                            "weight": c.weight,
                            "contribution": c.contribution,
                        }
                        for c in r.components
                    },
                    "evidence": r.evidence,
                    "until": r.until,
                }
                for r in results
            ],
            "rendered": render(results),
            **report.to_json(),
        }
    )


@router.post("/recall", response_model=RecallPreview, summary="Preview recall for a query")
async def recall(request: Request, body: RecallRequest) -> Response:
    """The ranked memories a turn would recall for ``query``, each with its score
    components, exactly the block the model would see, and which mode ran and why
    (the embedding model's state, memories still waiting for their vectors). A
    preview is not a use: the memories' access time and count stay as they were.
    ``as_of`` (``"2021-06-01"``) answers from the world as it was then, ``known_at``
    from what the store knew then; a fact's earlier value carries ``until``."""
    s = services(request)
    report = await s.root.memory.recall_report(
        s.resource_id, body.query, limit=body.limit, touch=False, **body.moments()
    )
    return Response(recall_json(body.query, report), media_type="application/json")
