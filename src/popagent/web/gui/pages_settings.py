"""``/settings``: the resource's observational-memory settings, grouped, editable.

Every setting of ``SETTINGS`` is shown once, in one of ``GROUPS`` (a group
takes the settings its predicate picks, in the table's order; anything no
group picks lands in "Other", so a new setting can never go missing). Each
shows its help text, unit, what it accepts, its default and current value.

Invariants:
- The form sends every setting as text; only values that differ from the
  stored ones become changes, and they go through
  ``MemorySettingsStore.update_stored`` (the library's validation, all or nothing).
- Any problem, in parsing or in the merged result, is shown next to its
  setting and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ValidationError
from ...observe.settings import SETTINGS, Setting, format_setting, parse_setting
from ...observe.settings_store import StoredSettings
from ..services import services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["GROUPS", "SettingGroup", "group_settings", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

_NAMES = tuple(s.name for s in SETTINGS)
_BUFFERING = ("_buffer_", "_block_after_", "shared_token_budget")


@dataclass(frozen=True, slots=True)
class SettingGroup:
    title: str
    settings: tuple[Setting, ...]


GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("Retained context", lambda n: n.startswith("retained_context_")),
    ("Buffering", lambda n: any(part in n for part in _BUFFERING)),
    (
        "Observation",
        lambda n: (
            n.startswith("observation_") or n in ("temporal_markers", "previous_observation_tokens")
        ),
    ),
    ("Reflection", lambda n: n.startswith("reflection_") and not n.endswith("_guidance")),
    ("Retrieval and attachments", lambda n: n in ("retrieval_scope", "forward_attachments")),
    ("Custom instructions", lambda n: n.endswith("_guidance")),
)
#: The order the groups are shown in.
_SHOWN = (
    "Observation",
    "Reflection",
    "Retained context",
    "Buffering",
    "Retrieval and attachments",
    "Custom instructions",
    "Other",
)


def group_settings() -> list[SettingGroup]:
    """``SETTINGS`` split into the shown groups; each setting in exactly one (the first match)."""
    picked: dict[str, list[Setting]] = {title: [] for title in _SHOWN}
    for setting in SETTINGS:
        title = next((t for t, wants in GROUPS if wants(setting.name)), "Other")
        picked[title].append(setting)
    return [SettingGroup(t, tuple(picked[t])) for t in _SHOWN if picked[t]]


def _texts(stored: StoredSettings) -> dict[str, str]:
    return {name: format_setting(name, getattr(stored.settings, name)) for name in _NAMES}


def _same(name: str, new: Any, old: Any) -> bool:
    if name == "forward_attachments":
        new = ("*",) if new is True else () if new is False else new
    return bool(new == old)


def _page(
    request: Request,
    stored: StoredSettings,
    form: dict[str, str],
    errors: dict[str, str],
    status_code: int = 200,
) -> Response:
    return page(
        request,
        "settings.html",
        active="settings",
        status_code=status_code,
        groups=group_settings(),
        stored=stored,
        form=form,
        errors=errors,
        defaults={s.name: format_setting(s.name, s.default) for s in SETTINGS},
    )


@router.get("/settings")
async def show(request: Request) -> Response:
    s = services(request)
    stored = await s.settings.read(s.resource_id)
    return _page(request, stored, _texts(stored), {})


@router.post("/settings")
async def save(request: Request) -> Response:
    s = services(request)
    sent = await read_form(request, _NAMES)
    stored = await s.settings.read(s.resource_id)
    form = {**_texts(stored), **{n: v.replace("\r\n", "\n") for n, v in sent.items()}}
    errors: dict[str, str] = {}
    changes: dict[str, Any] = {}
    for name, text in sent.items():
        try:
            value = parse_setting(name, text.replace("\r\n", "\n"))
        except ValidationError as exc:
            errors[name] = exc.message
            continue
        if not _same(name, value, getattr(stored.settings, name)):
            changes[name] = value
    if not errors and changes:
        try:
            stored = await s.settings.update_stored(s.resource_id, changes)
        except ValidationError as exc:
            errors[exc.field if exc.field in form else "form"] = exc.message
        else:
            return redirect("/settings", notice="settings-saved", version=str(stored.version))
    if errors:
        return _page(request, stored, form, errors, status_code=422)
    return redirect("/settings", notice="settings-unchanged")
