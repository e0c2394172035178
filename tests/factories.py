"""Small builders for pure tests."""

from __future__ import annotations

from datetime import UTC, datetime

from popagent.models import Kind, Memory, RecallResult, ScoreComponent

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def make_memory(
    id: int = 1,
    *,
    kind: Kind = "fact",
    content: str = "content",
    importance: float = 0.5,
    updated_at: datetime = NOW,
    key: str | None = None,
) -> Memory:
    return Memory(
        id=id,
        resource_id="r",
        session_id="s",
        kind=kind,
        key=key,
        content=content,
        content_sha256="0" * 64,
        importance=importance,
        created_at=updated_at,
        updated_at=updated_at,
        accessed_at=None,
        access_count=0,
    )


def make_result(id: int, kind: Kind, content: str, score: float = 1.0) -> RecallResult:
    return RecallResult(
        memory=make_memory(id, kind=kind, content=content),
        score=score,
        components=(ScoreComponent("text", score, 1.0),),
    )
