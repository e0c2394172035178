"""Secrets in turns: a value used or set in a turn ends up nowhere but ``popagent_secrets``."""

from __future__ import annotations

import uuid

import pytest

from popagent.agent import SecretScrubber, ToolCallRecord
from popagent.secrets import SecretStore
from tests.agent_support import AgentRig, EchoSecretTool, tables_containing, tool_results
from tests.scripted_model import CallTools, Reply


@pytest.fixture
def garden() -> str:
    """A secret value no other test uses (the searches span the whole database), and not
    shaped like a known credential, so only scrubbing can keep it out of the database."""
    return f"tulip-Orbit-{uuid.uuid4().hex[:8]}-quasar"


@pytest.fixture
def deploy_key() -> str:
    return f"marmot.Velvet.{uuid.uuid4().hex[:8]}.fjord"


async def test_a_secret_set_from_the_users_message_is_kept_only_in_the_secret_table(
    rig: AgentRig, secret_store: SecretStore, resource: str, garden: str
) -> None:
    memory, threads, _, scripted = rig
    agent = rig.agent(secrets=secret_store)
    scripted.script(
        CallTools(
            [("set_secret", {"name": "GARDEN_GATE", "value": garden})],
            text=f"Saving {garden} for you.",
        ),
        Reply(f"Saved. For the record, the gate code is {garden}."),
    )
    user_text = f"My garden gate code is {garden}; keep it as GARDEN_GATE."
    result = await agent.run_turn(resource, "s1", user_text)
    assert result.tool_calls == (ToolCallRecord("set_secret", "ok"),)
    assert await secret_store.reveal(resource, "GARDEN_GATE") == garden

    # The model sent the value; nothing it is sent back holds it.
    (text,) = tool_results(scripted.requests[-1])
    assert text.startswith("Stored secret 'GARDEN_GATE' (encrypted).")
    assert garden not in text

    assert await tables_containing(memory, garden) == {}
    assert (await tables_containing(memory, "[secret:GARDEN_GATE]")).keys() == {
        "popagent_messages",
        "popagent_memories",
    }
    stored = await threads.list_messages(resource, "s1")
    assert (
        stored[0].content == "My garden gate code is [secret:GARDEN_GATE]; keep it as GARDEN_GATE."
    )
    assert stored[1].parts[0]["arguments"] == (
        '{"name": "GARDEN_GATE", "value": "[secret:GARDEN_GATE]"}'
    )
    assert result.episode is not None
    assert garden not in result.episode.content

    # The next turn's history carries the marker, not the value.
    scripted.script(Reply("It is stored under GARDEN_GATE."))
    await agent.run_turn(resource, "s1", "What was my gate code stored as?")
    sent = str(scripted.requests[-1]["messages"])
    assert garden not in sent and "[secret:GARDEN_GATE]" in sent


async def test_a_secret_an_app_tool_used_is_kept_only_in_the_secret_table(
    rig: AgentRig, secret_store: SecretStore, resource: str, deploy_key: str
) -> None:
    memory, _, _, scripted = rig
    await secret_store.set(resource, "DEPLOY_KEY", deploy_key)
    deploy = EchoSecretTool("DEPLOY_KEY")
    agent = rig.agent(secrets=secret_store, tools=[deploy])
    scripted.script(CallTools([("deploy", {})]), Reply("Deployed."))
    result = await agent.run_turn(resource, "s1", "Deploy the site please")
    assert deploy.seen == [deploy_key]  # tool code got the real value
    assert result.tool_calls == (ToolCallRecord("deploy", "ok"),)
    assert tool_results(scripted.requests[-1]) == [
        "deployed using key [secret:DEPLOY_KEY] to production"
    ]
    assert (await secret_store.list(resource))[0].last_used_at is not None
    assert await tables_containing(memory, deploy_key) == {}
    assert "popagent_messages" in await tables_containing(memory, "[secret:DEPLOY_KEY]")


async def test_a_stored_secret_typed_again_is_scrubbed_without_any_tool(
    rig: AgentRig, secret_store: SecretStore, resource: str, garden: str
) -> None:
    memory, _, _, scripted = rig
    await secret_store.set(resource, "GARDEN_GATE", garden)
    scripted.script(Reply(f"Yes, {garden} is the code you stored."))
    result = await rig.agent(secrets=secret_store).run_turn(
        resource, "s1", f"Is {garden} still my gate code?"
    )
    assert garden in result.reply  # the caller gets the reply as the model wrote it
    assert await tables_containing(memory, garden) == {}
    # Loading values for scrubbing is not a use.
    assert (await secret_store.list(resource))[0].last_used_at is None


async def test_list_and_delete_secret_tools_show_names_only(
    rig: AgentRig,
    secret_store: SecretStore,
    resource: str,
    deploy_key: str,
    garden: str,
    other_resource: str,
) -> None:
    scripted = rig.scripted
    await secret_store.set(resource, "GARDEN_GATE", garden)
    await secret_store.set(resource, "DEPLOY_KEY", deploy_key)
    await secret_store.set(other_resource, "OTHER", "other-value-1234")
    scripted.script(
        CallTools(
            [
                ("list_secrets", {}),
                ("delete_secret", {"name": "DEPLOY_KEY"}),
                ("delete_secret", {"name": "OTHER"}),
                ("list_secrets", {}),
            ]
        ),
        Reply("Done."),
    )
    await rig.agent(secrets=secret_store).run_turn(
        resource, "s1", "Show my secrets and drop the deploy key"
    )
    assert tool_results(scripted.requests[-1]) == [
        "Stored secrets: DEPLOY_KEY, GARDEN_GATE",
        "Deleted secret 'DEPLOY_KEY'.",
        "Refused: no secret 'OTHER' in this resource",
        "Stored secrets: GARDEN_GATE",
    ]
    assert [s.name for s in await secret_store.list(other_resource)] == ["OTHER"]


async def test_a_refused_secret_value_is_still_scrubbed(
    rig: AgentRig, secret_store: SecretStore, resource: str, garden: str
) -> None:
    memory, _, _, scripted = rig
    scripted.script(
        CallTools([("set_secret", {"name": "bad name", "value": garden})]), Reply("Could not.")
    )
    await rig.agent(secrets=secret_store).run_turn(resource, "s1", f"store {garden} please")
    (text,) = tool_results(scripted.requests[-1])
    assert text.startswith("Refused: name: must be 1 to 64 characters")
    assert await secret_store.list(resource) == []
    assert await tables_containing(memory, garden) == {}


def test_scrubber_handles_escaped_json_and_replaced_values() -> None:
    scrubber = SecretScrubber({"A": 'quo"te-value'})
    raw = '{"v": "quo\\"te-value", "w": "caf\\u00e9-secret"}'
    assert scrubber.scrub_json_text(raw) == '{"v": "[secret:A]", "w": "café-secret"}'
    assert scrubber.add("B", "café-secret")
    assert not scrubber.add("C", "café-secret")  # known already
    assert scrubber.scrub_json_text(raw) == '{"v": "[secret:A]", "w": "[secret:B]"}'
    version = scrubber.version
    assert scrubber.add("A", "second-value-for-A")
    assert scrubber.version == version + 1
    assert scrubber.scrub('quo"te-value / second-value-for-A') == "[secret:A] / [secret:A]"
    assert 'quo"te' not in repr(scrubber) and "names=['A', 'B']" in repr(scrubber)
