"""``MemorySettingsStore`` on the real database: defaults, round trips, nothing half-written."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import popagent
from popagent.errors import ValidationError
from popagent.observe import MemorySettings, MemorySettingsStore, execution_snapshot

COUNT_ROWS = "SELECT count(*) AS n FROM popagent_memory_settings WHERE resource_id = %s"


@pytest.fixture
def store(memory: popagent.LongTermMemory) -> MemorySettingsStore:
    return MemorySettingsStore(memory.pool)


async def rows(memory: popagent.LongTermMemory, resource_id: str) -> int:
    async with memory.pool.connection() as conn:
        cur = await conn.execute(COUNT_ROWS, (resource_id,))
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_a_resource_without_a_row_has_the_defaults(
    store: MemorySettingsStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    stored = await store.read(resource)
    assert stored.settings == MemorySettings()
    assert (stored.version, stored.updated_at) == (0, None)
    assert await store.get(resource) == MemorySettings()
    assert await rows(memory, resource) == 0


async def test_the_tables_defaults_equal_the_models(
    store: MemorySettingsStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    async with memory.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO popagent_memory_settings (resource_id) VALUES (%s)", (resource,)
        )
    stored = await store.read(resource)
    assert stored.settings == MemorySettings()
    assert stored.version == 0 and stored.updated_at is not None


async def test_update_round_trips_and_bumps_the_version(
    store: MemorySettingsStore, resource: str
) -> None:
    changes: dict[str, Any] = {
        "observation_threshold_tokens": 20_000,
        "retained_context_tokens": 4_000,
        "observation_buffer_tokens": 2_500,
        "reflection_block_after_tokens": 50_000,
        "observation_activate_after_idle": 300,
        "reflection_activate_after_idle": "auto",
        "reflection_activate_on_provider_change": True,
        "temporal_markers": True,
        "forward_attachments": ["image/png", "TEXT/*"],
        "previous_observation_tokens": None,
        "retrieval_scope": "resource",
        "observer_guidance": "Track every deadline with its date.",
        "reflector_guidance": "Keep people's names.",
    }
    updated = await store.update(resource, **changes)
    assert updated == MemorySettings(**changes)
    assert updated.retained_context_percent is None  # the pair's other side
    assert updated.forward_attachments == ("image/png", "text/*")
    first = await store.read(resource)
    assert first.settings == updated and first.version == 1
    assert first.updated_at is not None
    second = await store.update_stored(resource, {"forward_attachments": False})
    assert second.version == 2 and second.settings.forward_attachments == ()
    assert second.settings.observation_threshold_tokens == 20_000
    assert second.updated_at is not None and second.updated_at >= first.updated_at
    assert await store.get(resource) == second.settings


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"shared_token_budget": True}, "shared_token_budget"),
        ({"observation_buffer_tokens": 30_000}, "observation_buffer_tokens"),
        ({"retained_context_tokens": 999}, "retained_context_tokens"),
        ({"retained_context_tokens": 30_000}, "retained_context_tokens"),
        ({"observation_block_after_tokens": 20_000}, "observation_block_after_tokens"),
        (
            {"observation_buffer_percent": None, "observation_block_after_percent": 150},
            "observation_block_after_percent",
        ),
        ({"previous_observation_tokens": -5}, "previous_observation_tokens"),
        ({"reflector_guidance": "x" * 4_001}, "reflector_guidance"),
        ({"retrieval_scope": "everything"}, "retrieval_scope"),
        ({"temporal_markers": True, "not_a_setting": 1}, "not_a_setting"),
    ],
)
async def test_a_refused_update_names_the_field_and_writes_nothing(
    store: MemorySettingsStore,
    memory: popagent.LongTermMemory,
    resource: str,
    changes: dict[str, Any],
    field: str,
) -> None:
    # On a resource without a row: no row appears.
    with pytest.raises(ValidationError) as caught:
        await store.update(resource, **changes)
    assert caught.value.field == field
    assert await rows(memory, resource) == 0
    # On a stored row: neither the settings nor the version move.
    before = await store.update_stored(resource, {"temporal_markers": False})
    with pytest.raises(ValidationError) as caught:
        await store.update(resource, **changes)
    assert caught.value.field == field
    after = await store.read(resource)
    assert (after.settings, after.version, after.updated_at) == (
        before.settings,
        before.version,
        before.updated_at,
    )


async def test_an_update_is_validated_against_the_merged_settings(
    store: MemorySettingsStore, resource: str
) -> None:
    await store.update(resource, retained_context_tokens=5_000)
    with pytest.raises(ValidationError) as caught:
        await store.update(resource, observation_threshold_tokens=4_000)
    assert caught.value.field == "retained_context_tokens"
    both = await store.update(
        resource, observation_threshold_tokens=4_000, retained_context_percent=25
    )
    assert (both.observation_threshold_tokens, both.retained_context_tokens) == (4_000, None)
    shared = await store.update(resource, shared_token_budget=True, observation_buffer_percent=None)
    assert shared.observation_block_after_percent is None  # follows buffering off
    assert (await store.read(resource)).version == 3


async def test_update_needs_a_change_and_a_valid_resource(store: MemorySettingsStore) -> None:
    with pytest.raises(ValidationError) as caught:
        await store.update("res-x")
    assert caught.value.field == "changes"
    with pytest.raises(ValidationError) as caught:
        await store.update("", temporal_markers=True)
    assert caught.value.field == "resource_id"


async def test_settings_are_isolated_per_resource(
    store: MemorySettingsStore, resource: str, other_resource: str
) -> None:
    await store.update(resource, observation_threshold_tokens=12_345)
    await store.update(other_resource, temporal_markers=True)
    mine, theirs = await store.get(resource), await store.get(other_resource)
    assert (mine.observation_threshold_tokens, mine.temporal_markers) == (12_345, False)
    assert (theirs.observation_threshold_tokens, theirs.temporal_markers) == (30_000, True)
    await store.reset(resource)
    assert await store.get(other_resource) == theirs
    assert (await store.read(other_resource)).version == 1


async def test_reset_restores_the_defaults_and_still_counts_as_a_write(
    store: MemorySettingsStore, memory: popagent.LongTermMemory, resource: str
) -> None:
    assert await store.reset(resource) == MemorySettings()
    assert await rows(memory, resource) == 0  # nothing to reset
    await store.update(resource, observation_buffer_percent=None, shared_token_budget=True)
    assert await store.reset(resource) == MemorySettings()
    stored = await store.read(resource)
    assert (stored.settings, stored.version) == (MemorySettings(), 2)


async def test_a_snapshot_taken_before_an_update_is_unchanged_by_it(
    store: MemorySettingsStore, resource: str
) -> None:
    before = await store.snapshot(resource)
    assert before == execution_snapshot(MemorySettings(), version=0)
    await store.update(resource, observation_threshold_tokens=20_000, retained_context_percent=50)
    assert before == execution_snapshot(MemorySettings(), version=0)
    assert before.observation_message_tokens == 30_000
    assert before.observation_buffer_activation == 0.8
    after = await store.snapshot(resource)
    assert after.version == 1
    assert after.observation_message_tokens == 20_000
    assert after.observation_buffer_activation == 0.5
    assert after.retained_floor_tokens == 10_000


async def test_concurrent_updates_of_one_resource_both_land(
    store: MemorySettingsStore, resource: str
) -> None:
    await asyncio.gather(
        store.update(resource, temporal_markers=True),
        store.update(resource, retrieval_scope="thread"),
        store.update(resource, observation_threshold_tokens=25_000),
    )
    stored = await store.read(resource)
    assert stored.version == 3
    assert stored.settings.temporal_markers is True
    assert stored.settings.retrieval_scope == "thread"
    assert stored.settings.observation_threshold_tokens == 25_000


@pytest.mark.parametrize(
    "assignment",
    [
        "shared_token_budget = true",
        "retained_context_percent = NULL",
        "observation_buffer_percent = 100",
        "observation_block_after_percent = NULL",
        "observation_activate_after_idle = '5m'",
        "forward_attachments = '{image}'",
        "observer_guidance = ''",
    ],
)
async def test_the_table_refuses_what_the_model_refuses(
    memory: popagent.LongTermMemory, resource: str, assignment: str
) -> None:
    async with memory.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO popagent_memory_settings (resource_id) VALUES (%s)", (resource,)
        )
        with pytest.raises(psycopg.errors.CheckViolation):
            await conn.execute(
                f"UPDATE popagent_memory_settings SET {assignment} WHERE resource_id = %s",
                (resource,),
            )
