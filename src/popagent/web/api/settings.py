"""``/api/settings``: the resource's observational-memory settings (``popagent_memory_settings``).

Updates go through ``MemorySettingsStore.update_stored``: the same validation
as the library and the CLI, the merged result checked as a whole, all or nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request

from ...models import Settings
from ...observe.settings import SETTINGS, format_setting
from ...observe.settings_store import StoredSettings
from ..schemas import ErrorOut
from ..services import services

__all__ = ["router", "settings_json"]

router = APIRouter(prefix="/api/settings", tags=["settings"], responses={422: {"model": ErrorOut}})


def settings_json(stored: StoredSettings) -> dict[str, Any]:
    """The stored settings with each setting's documentation, in the table's order."""
    values = stored.settings.to_json()
    return {
        "version": stored.version,
        "updated_at": stored.updated_at,
        "settings": [
            {
                "name": s.name,
                "value": values[s.name],
                "default": _json(s.default),
                "text": format_setting(s.name, getattr(stored.settings, s.name)),
                "kind": s.kind,
                "unit": s.unit,
                "accepts": s.accepts,
                "help": s.help,
            }
            for s in SETTINGS
        ],
    }


def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@router.get("", response_model=Settings, summary="Read the memory settings")
async def read_settings(request: Request) -> dict[str, Any]:
    s = services(request)
    return settings_json(await s.root.settings.read(s.resource_id))


@router.patch("", response_model=Settings, summary="Change memory settings")
async def update_settings(
    request: Request,
    changes: Annotated[
        dict[str, Any],
        Body(
            description="Settings to change by name, e.g. "
            '`{"observation_threshold_tokens": 20000}`; `null` turns a setting off '
            "where off is a value. Applies from the next turn.",
            examples=[{"observation_threshold_tokens": 20000, "async_buffering": False}],
        ),
    ],
) -> dict[str, Any]:
    s = services(request)
    return settings_json(await s.root.settings.update_stored(s.resource_id, changes))


@router.post("/reset", response_model=Settings, summary="Reset every setting to its default")
async def reset_settings(request: Request) -> dict[str, Any]:
    s = services(request)
    await s.root.settings.reset(s.resource_id)
    return settings_json(await s.root.settings.read(s.resource_id))
