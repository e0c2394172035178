"""``popagent sessions`` and ``popagent secrets`` through click's runner, on the real database."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

import pytest
from click.testing import Result

import popagent
from popagent.defaults import SECRET_KEY_ENV, SECRET_KEY_FILE_ENV
from popagent.secrets import SecretStore, generate_key, load_cipher
from tests.cli_support import Env, invoke
from tests.scripted_model import CallTools, Reply, ScriptedModelServer

DARK = "Prefers dark mode in every app"


@pytest.fixture
def res() -> str:
    return f"cli-sessions-{uuid.uuid4().hex}"


@pytest.fixture
def key() -> str:
    return generate_key()


@pytest.fixture
def env(scripted: ScriptedModelServer, key: str) -> Env:
    return {
        "POPAGENT_MODEL_BASE_URL": scripted.base_url,
        "POPAGENT_MODEL": "scripted-1",
        "POPAGENT_MODEL_MAX_RETRIES": "0",
        SECRET_KEY_ENV: key,
        SECRET_KEY_FILE_ENV: None,
    }


def test_sessions_list_show_rename_and_delete_which_keeps_the_fact(
    database_url: str, res: str, env: Env, scripted: ScriptedModelServer
) -> None:
    scripted.script(
        CallTools([("remember", {"content": DARK, "key": "ui.theme"})], text="Let me note that."),
        Reply("Noted."),
    )
    chat = invoke(database_url, res, env, "chat", "--session-id", "s1", input="I like dark mode.\n")
    assert chat.exit_code == 0, chat.output

    def cli(*args: str, input: str | None = None) -> Result:
        return invoke(database_url, res, env, *args, input=input)

    listed = cli("sessions", "list")
    assert re.fullmatch(r'^s1  [\d-]+ [\d:]+  "I like dark mode\."\n', listed.output)
    (session,) = json.loads(cli("sessions", "list", "--json").output)
    assert (session["session_id"], session["title"]) == ("s1", None)

    shown = cli("sessions", "show", "s1")
    assert shown.exit_code == 0
    lines = shown.output.splitlines()
    assert lines[0].startswith("session s1  title: (untitled)  created ")
    assert re.match(r"#\d+ user  ", lines[1]) and lines[2] == "    I like dark mode."
    assert re.match(r"#\d+ assistant  ", lines[3]) and lines[4] == "    Let me note that."
    call = json.loads(lines[5].removeprefix("    → call remember [call_0] "))
    assert call == {"content": DARK, "key": "ui.theme"}
    assert re.match(r"#\d+ tool  .*  result of remember \[call_0\]: ok$", lines[6])
    assert lines[7].startswith("    Stored: created fact #")
    assert lines[-1] == "    Noted."

    data = json.loads(cli("sessions", "show", "s1", "--json").output)
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert data["messages"][1]["parts"][0]["type"] == "tool_call"
    assert data["next_after_id"] is None
    ids = [m["id"] for m in data["messages"]]
    page = cli("sessions", "show", "s1", "--limit", "2")
    assert page.output.rstrip().endswith(f"--after-id {ids[1]}")
    assert "Noted." not in page.output
    rest = json.loads(cli("sessions", "show", "s1", "--after-id", str(ids[1]), "--json").output)
    assert [m["id"] for m in rest["messages"]] == ids[2:] and rest["next_after_id"] is None

    assert (
        cli("sessions", "rename", "s1", "Dark mode").output == "renamed session s1 to 'Dark mode'\n"
    )
    assert "  Dark mode" in cli("sessions", "list").output
    missing = cli("sessions", "rename", "s2", "Nothing")
    assert missing.exit_code == 1 and "no session 's2'" in missing.output

    kept = cli("sessions", "delete", "s1", input="n\n")
    assert kept.exit_code == 1 and "Long-term memories (facts and episodes) are kept" in kept.output
    assert "s1" in cli("sessions", "list").output
    deleted = cli("sessions", "delete", "s1", "--yes")
    assert deleted.exit_code == 0 and "long-term memories" in deleted.output
    assert cli("sessions", "list").output == "No sessions.\n"
    assert cli("sessions", "show", "s1").exit_code == 1
    assert cli("sessions", "delete", "s1", "--yes").exit_code == 1
    facts = json.loads(cli("facts", "list", "--json").output)
    assert [f["content"] for f in facts] == [DARK]

    bad = cli("sessions", "show", " ")
    assert bad.exit_code == 2 and "session_id: must not be empty" in bad.output
    bad = cli("sessions", "list", "--limit", "0")
    assert bad.exit_code == 2 and "limit" in bad.output


async def _reveal(url: str, res: str, key: str, name: str) -> str:
    async with popagent.connect(url) as root:
        memory = root.memory
        return await SecretStore(memory.pool, load_cipher({SECRET_KEY_ENV: key})).reveal(res, name)


def test_secrets_set_list_and_delete_never_show_the_value(
    database_url: str, res: str, env: Env, key: str
) -> None:
    def cli(*args: str, input: str | None = None) -> Result:
        return invoke(database_url, res, env, *args, input=input)

    value = f"ghp_{uuid.uuid4().hex}"
    out = cli("secrets", "set", "GITHUB_TOKEN", input=f"{value}\n")
    assert out.exit_code == 0, out.output
    assert out.output.endswith("set secret GITHUB_TOKEN\n") and value not in out.output
    assert asyncio.run(_reveal(database_url, res, key, "GITHUB_TOKEN")) == value

    out = cli("secrets", "set", "DEPLOY_KEY", "--ttl-days", "7", input="deploy-key-value\n")
    assert out.exit_code == 0 and "expires 20" in out.output

    listed = cli("secrets", "list")
    assert [line.split()[0] for line in listed.output.splitlines()] == [
        "DEPLOY_KEY",
        "GITHUB_TOKEN",
    ]
    assert "last used 20" in listed.output  # the reveal above was a use
    assert value not in listed.output and "deploy-key-value" not in listed.output
    infos = json.loads(cli("secrets", "list", "--json").output)
    assert set(infos[0]) == {"name", "created_at", "updated_at", "last_used_at", "expires_at"}
    assert infos[0]["expires_at"] is not None and infos[1]["expires_at"] is None

    pasted = f"ghp_{uuid.uuid4().hex}"
    out = cli("secrets", "set", "OTHER", pasted)
    assert out.exit_code == 2 and "never an argument" in out.output and pasted not in out.output
    out = cli("secrets", "set", "1bad")  # refused before the value is asked for
    assert out.exit_code == 2 and "name: must be 1 to 64 characters" in out.output
    out = cli("secrets", "set", "EMPTY", input="\n")
    assert out.exit_code == 2 and "value: must not be empty" in out.output
    out = cli("secrets", "set", "LONG", "--ttl-days", "0", input="some-value\n")
    assert out.exit_code == 2 and "--ttl-days" in out.output
    assert [i["name"] for i in json.loads(cli("secrets", "list", "--json").output)] == [
        "DEPLOY_KEY",
        "GITHUB_TOKEN",
    ]

    assert cli("secrets", "delete", "GITHUB_TOKEN").output == "deleted secret GITHUB_TOKEN\n"
    again = cli("secrets", "delete", "GITHUB_TOKEN")
    assert again.exit_code == 1 and "no secret 'GITHUB_TOKEN'" in again.output
    assert cli("secrets", "list").output.startswith("DEPLOY_KEY  ")

    env[SECRET_KEY_ENV] = "not-a-key"
    bad = cli("secrets", "list")
    assert bad.exit_code == 1 and "POPAGENT_SECRET_KEY is not a valid secret key" in bad.output


def test_chat_scrubs_a_secret_set_from_the_cli(
    database_url: str, res: str, env: Env, scripted: ScriptedModelServer
) -> None:
    value = f"tok_{uuid.uuid4().hex}"
    assert (
        invoke(database_url, res, env, "secrets", "set", "API_TOKEN", input=f"{value}\n").exit_code
        == 0
    )
    scripted.script(Reply("Got it."))
    out = invoke(
        database_url, res, env, "chat", "--session-id", "s1", input=f"my token is {value}\n"
    )
    assert out.exit_code == 0, out.output
    shown = invoke(database_url, res, env, "sessions", "show", "s1").output
    assert "my token is [secret:API_TOKEN]" in shown and value not in shown
