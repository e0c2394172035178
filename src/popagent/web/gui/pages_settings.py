"""``/settings``: what this server runs with, then the resource's memory settings,
grouped, editable.

First, read-only, what the environment sets (chat model, how recall works,
retention). Then every setting of ``SETTINGS`` once, in one of ``GROUPS`` (a
group takes the settings its predicate picks, in the table's order; anything
no group picks lands in "Other", so a new setting can never go missing): the
everyday groups (recall, retention, model instructions) open, the
observational-memory knobs folded under "Advanced". Each shows a plain label,
its name, help text, unit, what it accepts, its default and current value.

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
from ...memory.manage import EPISODE_CAP_PER_RESOURCE, EPISODE_MAX_AGE
from ...observe.settings import SETTINGS, Setting, format_setting, parse_setting
from ...observe.settings_store import StoredSettings
from ..services import services
from .forms import read_form
from .rendering import page, redirect
from .routing import HtmlRoute

__all__ = ["GROUPS", "LABELS", "SettingGroup", "group_settings", "label", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)

_NAMES = tuple(s.name for s in SETTINGS)
_BY_NAME = {s.name: s for s in SETTINGS}
_BUFFERING = ("_buffer_", "_block_after_", "shared_token_budget")


@dataclass(frozen=True, slots=True)
class SettingGroup:
    title: str
    settings: tuple[Setting, ...]
    #: Shown under "Advanced: observational memory" (folded until opened or in error).
    advanced: bool = False


#: Each group's title, which settings it takes, and whether it is advanced.
GROUPS: tuple[tuple[str, Callable[[str], bool], bool], ...] = (
    ("Looking up earlier messages", lambda n: n == "retrieval_scope", False),
    ("Retention", lambda n: n.startswith("retained_context_"), False),
    ("Model instructions", lambda n: n.endswith("_guidance"), False),
    ("Buffering", lambda n: any(part in n for part in _BUFFERING), True),
    (
        "Observation",
        lambda n: (
            n.startswith("observation_")
            or n in ("temporal_markers", "previous_observation_tokens", "forward_attachments")
        ),
        True,
    ),
    ("Reflection", lambda n: n.startswith("reflection_"), True),
)
#: The order the groups are shown in: the everyday ones first, then the advanced.
_SHOWN = (
    "Looking up earlier messages",
    "Retention",
    "Model instructions",
    "Observation",
    "Reflection",
    "Buffering",
    "Other",
)
_ADVANCED = {title for title, _, advanced in GROUPS if advanced} | {"Other"}

#: Plain labels; the setting's name (what the CLI and API take) is shown beside each.
LABELS: dict[str, str] = {
    "retrieval_scope": "Where the model may look up a chat's exact earlier messages",
    "retained_context_percent": "Recent messages kept word for word",
    "retained_context_tokens": "Recent messages kept word for word",
    "observer_guidance": "Extra instructions for note-taking",
    "reflector_guidance": "Extra instructions for condensing notes",
    "observation_threshold_tokens": "Take notes once a conversation has grown by",
    "reflection_threshold_tokens": "Condense the notes once they reach",
    "observation_buffer_percent": "Take notes ahead, in the background, every",
    "observation_buffer_tokens": "Take notes ahead, in the background, every",
    "reflection_buffer_start_percent": "Start condensing in the background at",
    "observation_block_after_percent": "Make a turn wait for note-taking above",
    "observation_block_after_tokens": "Make a turn wait for note-taking above",
    "reflection_block_after_percent": "Make a turn wait for condensing above",
    "reflection_block_after_tokens": "Make a turn wait for condensing above",
    "observation_activate_after_idle": "Use notes taken ahead after a pause of",
    "observation_activate_on_provider_change": "Use notes taken ahead when the model changes",
    "reflection_activate_after_idle": "Use condensed notes made ahead after a pause of",
    "reflection_activate_on_provider_change": "Use condensed notes made ahead when the model changes",
    "shared_token_budget": "One token budget for messages and notes",
    "temporal_markers": "Mark the time between messages in the notes",
    "forward_attachments": "Attachments the note-taker sees",
    "previous_observation_tokens": "Earlier notes shown to the note-taker",
}


#: What a setting does, in plain words, before its reference help (which names the
#: observational-memory terms the CLI and API docs use).
PLAIN: dict[str, str] = {
    "retrieval_scope": (
        "Once a long chat has been condensed into notes, the model can ask for the exact "
        "messages a note was made from. off: it cannot; thread: from the same chat only; "
        "resource: from every chat of this resource (never another resource's). This is "
        "not long-term memory, which every turn recalls whatever this says."
    ),
}


def label(setting: Setting) -> str:
    """A setting's plain label (its name, spaced out, where it has none)."""
    return LABELS.get(setting.name) or setting.name.replace("_", " ").capitalize()


def group_settings() -> list[SettingGroup]:
    """``SETTINGS`` split into the shown groups; each setting in exactly one (the first match)."""
    picked: dict[str, list[Setting]] = {title: [] for title in _SHOWN}
    for setting in SETTINGS:
        title = next((t for t, wants, _ in GROUPS if wants(setting.name)), "Other")
        picked[title].append(setting)
    return [SettingGroup(t, tuple(picked[t]), t in _ADVANCED) for t in _SHOWN if picked[t]]


def _server_facts(request: Request) -> dict[str, str]:
    """What this server runs with (set by its environment, not by this form)."""
    s = services(request)
    health = s.root.memory.model_health()
    if s.agent is None:
        chat = "none configured: set POPAGENT_MODEL (and POPAGENT_MODEL_BASE_URL) and restart"
    else:
        chat = (
            f"{s.agent.model.model or 'the endpoint default'} at {s.agent.model.provider}; "
            f"each turn recalls up to {s.agent.recall_limit} memories"
        )
    if health is None:
        recall = "by words only (POPAGENT_EMBEDDER=none)"
    else:
        recall = f"by meaning and words, model {health.model} ({health.state})"
    every = s.config.maintenance_interval_s
    if not every:
        when = "automatic maintenance is off (run popagent maintenance, or the button on Memories)"
    else:
        when = "maintenance runs every " + (
            f"{every / 3600:g} h" if every >= 3600 else f"{every:g} s"
        )
    retention = (
        f"episodes older than {EPISODE_MAX_AGE.days} days go, at most "
        f"{EPISODE_CAP_PER_RESOURCE:,} per resource; facts stay until deleted or expired; "
        f"{when}"
    )
    return {"Chat model": chat, "Recall": recall, "Retention": retention}


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
        labels={name: label(setting) for name, setting in _BY_NAME.items()},
        plain=PLAIN,
        server=_server_facts(request),
        stored=stored,
        form=form,
        errors=errors,
        defaults={s.name: format_setting(s.name, s.default) for s in SETTINGS},
    )


@router.get("/settings")
async def show(request: Request) -> Response:
    s = services(request)
    stored = await s.root.settings.read(s.resource_id)
    return _page(request, stored, _texts(stored), {})


@router.post("/settings")
async def save(request: Request) -> Response:
    s = services(request)
    sent = await read_form(request, _NAMES)
    stored = await s.root.settings.read(s.resource_id)
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
            stored = await s.root.settings.update_stored(s.resource_id, changes)
        except ValidationError as exc:
            errors[exc.field if exc.field in form else "form"] = exc.message
        else:
            return redirect("/settings", notice="settings-saved", version=str(stored.version))
    if errors:
        return _page(request, stored, form, errors, status_code=422)
    return redirect("/settings", notice="settings-unchanged")
