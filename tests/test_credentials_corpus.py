"""The credential screen over a corpus of realistic secrets, through every write path.

Each test that writes works on a database of its own (created on the suite's
cluster, dropped afterwards), so the closing scan of every text, varchar,
jsonb, array and tsvector column of every table sees exactly what these paths
stored, and nothing another test wrote.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from mcp import Client
from psycopg import sql

import popagent
from popagent.agent import Agent
from popagent.checks import is_blank
from popagent.cli import main
from popagent.credentials import find_credentials, redact_credentials, redact_json_text
from popagent.errors import SecretRefusedError, ValidationError
from popagent.llm import OpenAIChatModel
from popagent.memory.validation import check_query, normalize_fact_content, normalize_key
from popagent.observe import MemorySettingsStore
from popagent.observe.engine import ObservationalMemory
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from tests.agent_support import CountingTool
from tests.credential_corpus import CORPUS, ORDINARY, Secret
from tests.mcp_support import stdio_params, text_of
from tests.observe_support import (
    is_observer,
    is_reflector,
    reflector_input,
    update_settings,
    user_text,
)
from tests.scripted_model import CallTools, Reply, Respond, ScriptedModelServer
from tests.web_support import in_process

RESOURCE = "corpus-user"
ZERO_WIDTH = ["\u200b", "\u200c\u200d", "\u2060", "\ufeff", " \u200b\t\ufeff ", "\u00ad\u180e"]
# A secret shape that needs no words around it, for keys and zero-width splitting.
GITHUB = next(s.value for s in CORPUS if s.name == "github_pat_classic")
# Compact shapes a key could hold (no whitespace, at most 128 characters).
KEY_SECRETS = [f"token.{GITHUB}", "aws:AKIAQ3EGRTZ5XMPLJ7VA", "db_password=Kx9#vLm2qT"]


# --- the screen itself, without a database ---------------------------------------------------


@pytest.mark.parametrize("secret", CORPUS, ids=[s.name for s in CORPUS])
def test_every_corpus_value_is_redacted_and_refused(secret: Secret) -> None:
    redacted, count = redact_credentials(secret.sentence)
    assert count >= 1
    assert secret.value not in redacted and "[REDACTED:" in redacted
    assert redact_credentials(redacted) == (redacted, 0)  # a marker is never a value
    with pytest.raises(SecretRefusedError) as refused:
        normalize_fact_content(secret.sentence)
    assert refused.value.field == "content"
    assert secret.value not in str(refused.value)
    # Hidden behind zero-width characters, it is still found (and wholly redacted).
    hidden = secret.sentence.replace(secret.value, "\u200b".join(secret.value))
    assert "\u200b".join(secret.value) not in redact_credentials(hidden)[0]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_conversation_is_left_alone(text: str) -> None:
    assert find_credentials(text) == []
    assert redact_credentials(text) == (text, 0)
    assert normalize_fact_content(text) == text


@pytest.mark.parametrize("key", KEY_SECRETS)
def test_a_key_holding_a_credential_is_refused_naming_key(key: str) -> None:
    with pytest.raises(SecretRefusedError) as refused:
        normalize_key(key)
    assert refused.value.field == "key"


def test_tool_arguments_are_redacted_as_json_and_stay_json() -> None:
    pem = next(s for s in CORPUS if s.name == "pem_rsa_key")
    raw = json.dumps({"note": pem.sentence, "nested": [{"k": f"db_password='{'Kx9#vLm2qT'}'"}]})
    assert "\\n" in raw  # the key's newlines are escaped in the raw text
    cleaned = redact_json_text(raw)
    parsed = json.loads(cleaned)
    assert pem.value not in parsed["note"] and "[REDACTED:private_key]" in parsed["note"]
    assert "Kx9#vLm2qT" not in cleaned
    assert (
        redact_json_text("not json, password: Hunter2go")
        == "not json, password: [REDACTED:password]"
    )


@pytest.mark.parametrize("blank", ZERO_WIDTH)
def test_zero_width_or_blank_text_is_refused_as_empty(blank: str) -> None:
    assert is_blank(blank)
    for check, field in ((normalize_fact_content, "content"), (normalize_key, "key")):
        with pytest.raises(ValidationError) as caught:
            check(blank)
        assert caught.value.field == field
        assert not isinstance(caught.value, SecretRefusedError)
    with pytest.raises(ValidationError) as caught:
        check_query(blank)
    assert caught.value.field == "query"


def test_invisible_characters_inside_a_key_are_refused_and_trimmed_from_content() -> None:
    with pytest.raises(ValidationError, match="invisible") as caught:
        normalize_key("ui.\u200btheme")
    assert caught.value.field == "key"
    assert normalize_fact_content("\ufeff Prefers green tea\u200b ") == "Prefers green tea"


# --- a database of the test's own, and the scan -----------------------------------------------


_TEXT_TYPES = ("text", "character varying", "character", "jsonb", "json", "ARRAY", "tsvector")


def _forms(secret: Secret) -> list[str]:
    """What a stored copy of the value could look like: as written, JSON-escaped, the lines
    of a multi-line key, a card number's digits."""
    forms = {secret.value, json.dumps(secret.value)[1:-1]}
    forms.update(line for line in secret.value.splitlines() if len(line) >= 16)
    digits = re.sub(r"[ -]", "", secret.value)
    if digits.isdigit() and len(digits) >= 12:
        forms.add(digits)
    return sorted(forms)


def _holds(text: str, form: str) -> bool:
    """Case-insensitive (tsvector lexemes are lower-cased); a short value only as a whole
    token, so a hex digest that happens to contain "8316" is not a hit."""
    if len(form) < 8:
        return (
            re.search(rf"(?<![0-9A-Za-z]){re.escape(form.lower())}(?![0-9A-Za-z])", text)
            is not None
        )
    return form.lower() in text


def scan_database(url: str, *, skip: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Every corpus value found, by ``table.column``: every text-like column of every table
    of the schema (``information_schema.columns``), each cast to text and lower-cased."""
    found: dict[str, list[str]] = {}
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type = ANY(%s) "
            "AND table_name IN (SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE') "
            "ORDER BY table_name, column_name",
            (list(_TEXT_TYPES),),
        ).fetchall()
        tables = {t for t, _ in columns}
        assert {"popagent_messages", "popagent_memories", "popagent_sessions"} <= tables
        assert {"popagent_observation_logs", "popagent_observation_groups"} <= tables
        for table, column in columns:
            if table in skip:
                continue
            query = sql.SQL("SELECT lower({}::text) FROM {} WHERE {} IS NOT NULL").format(
                sql.Identifier(column), sql.Identifier(table), sql.Identifier(column)
            )
            values = [row[0] for row in conn.execute(query).fetchall()]
            for secret in CORPUS:
                if any(_holds(v, form) for v in values for form in _forms(secret)):
                    found.setdefault(f"{table}.{column}", []).append(secret.name)
    return found


def _row_count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
        ).fetchone()
    assert row is not None
    return int(row[0])


# --- every write path, then the scan ----------------------------------------------------------


async def test_no_corpus_value_is_stored_by_any_write_path(
    scratch: popagent.LongTermMemory,
    scratch_url: str,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = scratch
    threads = ThreadStore(memory.pool)
    kept = await memory.create_fact(RESOURCE, "Prefers green tea", key="drink")

    # Library: every fact write refuses, naming the field; nothing is written.
    for secret in CORPUS:
        for write in (
            lambda s=secret: memory.remember(RESOURCE, s.sentence),
            lambda s=secret: memory.create_fact(RESOURCE, s.sentence, key="note.x"),
            lambda s=secret: memory.update_fact(RESOURCE, kept.id, content=s.sentence),
        ):
            with pytest.raises(SecretRefusedError) as refused:
                await write()
            assert refused.value.field == "content"
    for key in KEY_SECRETS:
        with pytest.raises(SecretRefusedError) as refused:
            await memory.remember(RESOURCE, "Some ordinary fact", key=key)
        assert refused.value.field == "key"
    assert [f.content for f in await memory.list_facts(RESOURCE)] == ["Prefers green tea"]

    # Episodes: stored, redacted.
    for secret in CORPUS:
        episode = await memory.retain_episode(
            RESOURCE, "episodes", secret.sentence, f"Understood: {secret.sentence}"
        )
        assert episode is not None and "[REDACTED:" in episode.content

    # Agent turns: the user message carries the secret, the reply echoes it, and some
    # turns call tools whose arguments carry it (remember refuses; ping is refused for
    # its unknown arguments): in a sentence, and alone under a "password" field.
    agent = Agent(memory, threads, chat_model, tools=[CountingTool("ping")])
    for i, secret in enumerate(CORPUS):
        echo = Reply(f"You told me: {secret.sentence}")
        if i % 3 == 0:
            scripted.script(CallTools([("remember", {"content": secret.sentence})]), echo)
        elif i % 3 == 1:
            scripted.script(
                CallTools(
                    [("ping", {"note": secret.sentence, "login": {"password": secret.value}})]
                ),
                echo,
            )
        else:
            scripted.script(echo)
        result = await agent.run_turn(RESOURCE, "agent-chat", secret.sentence)
        assert result.reply == f"You told me: {secret.sentence}"  # shown as written
        assert result.episode is not None and secret.value not in result.episode.content
    stored = await threads.list_messages(RESOURCE, "agent-chat", limit=1000)
    calls = [p for m in stored for p in m.parts if p.get("type") == "tool_call"]
    assert len(calls) == len([i for i in range(len(CORPUS)) if i % 3 != 2])
    for call in calls:
        assert "[REDACTED:" in call["arguments"]
        json.loads(call["arguments"])  # still JSON
    # The remember refusals never repeat the value to the model.
    for request in scripted.requests:
        for message in request["messages"]:
            if message["role"] == "tool":
                assert not find_credentials(str(message["content"]))

    # A message any caller appends (an application, the API, the CLI) is screened too.
    for secret in CORPUS[:10]:
        await threads.append_message(
            RESOURCE,
            "direct",
            "tool",
            secret.sentence,
            parts=[{"type": "tool_result", "tool_call_id": "c1", "name": secret.sentence}],
            create_session=True,
        )

    # The HTTP API: facts refuse with 422 naming the field; chat turns store no value.
    app = create_app(
        ServerConfig(resource_id=RESOURCE, maintenance_interval_s=None),
        memory=memory,
        model=chat_model,
    )
    async with in_process(app) as api:
        for secret in CORPUS:
            created = await api.post("/api/facts", json={"content": secret.sentence})
            assert created.status_code == 422, created.text
            assert created.json()["field"] == "content"
            assert secret.value not in created.text
            patched = await api.patch(f"/api/facts/{kept.id}", json={"content": secret.sentence})
            assert (patched.status_code, patched.json()["field"]) == (422, "content")
            scripted.script(Reply(f"Echo: {secret.sentence}"))
            chat = await api.post("/api/sessions/api-chat/chat", json={"message": secret.sentence})
            assert chat.status_code == 200, chat.text
        for key in KEY_SECRETS:
            keyed = await api.post("/api/facts", json={"content": "Ordinary", "key": key})
            assert (keyed.status_code, keyed.json()["field"]) == (422, "key")
        blank = await api.post("/api/facts", json={"content": "\u200b\ufeff"})
        assert (blank.status_code, blank.json()["field"]) == (422, "content")
        query = await api.post("/api/recall", json={"query": "\u2060\u200b"})
        assert (query.status_code, query.json()["field"]) == (422, "query")

    # MCP over stdio (a real `popagent mcp` process): remember refuses every one.
    with (tmp_path / "mcp-stderr.log").open("w+") as errlog:
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(stdio_params(scratch_url, RESOURCE), errlog=errlog)) as c:
            for secret in CORPUS:
                answer = await c.call_tool("remember", {"content": secret.sentence})
                assert answer.is_error
                assert text_of(answer).startswith(
                    "Refused, nothing was stored: content: looks like it contains a credential"
                )
            for key in KEY_SECRETS:
                answer = await c.call_tool("remember", {"content": "Ordinary", "key": key})
                assert answer.is_error and "key: looks like it contains" in text_of(answer)
        errlog.seek(0)
        server_log = errlog.read()

    assert [f.content for f in await memory.list_facts(RESOURCE)] == ["Prefers green tea"]
    assert _row_count(scratch_url, "popagent_messages") > 4 * len(CORPUS)
    assert scan_database(scratch_url) == {}
    for secret in CORPUS:
        for form in _forms(secret):
            assert form not in caplog.text and form not in server_log, secret.name


def test_the_cli_refuses_every_corpus_secret(scratch_url: str) -> None:
    runner = CliRunner()
    base = ["--database-url", scratch_url, "--resource-id", RESOURCE]
    for secret in CORPUS:
        out = runner.invoke(main, [*base, "remember", secret.sentence], catch_exceptions=False)
        assert out.exit_code == 2, out.output
        assert "content: looks like it contains a credential" in out.output
        assert secret.value not in out.output
    for key in KEY_SECRETS:
        out = runner.invoke(
            main, [*base, "remember", "Ordinary", "--key", key], catch_exceptions=False
        )
        assert out.exit_code == 2 and "key: looks like it contains" in out.output
    out = runner.invoke(main, [*base, "remember", "\u200b\ufeff"], catch_exceptions=False)
    assert out.exit_code == 2 and "content:" in out.output
    assert _row_count(scratch_url, "popagent_memories") == 0
    assert scan_database(scratch_url) == {}


async def test_zero_width_chat_messages_and_queries_are_refused(
    scratch: popagent.LongTermMemory, scratch_url: str
) -> None:
    threads = ThreadStore(scratch.pool)
    for blank in ZERO_WIDTH:
        with pytest.raises(ValidationError) as caught:
            await threads.append_message(RESOURCE, "s", "user", blank, create_session=True)
        assert caught.value.field == "content"
        with pytest.raises(ValidationError) as caught:
            await scratch.recall(RESOURCE, blank)
        assert caught.value.field == "query"
        with pytest.raises(ValidationError) as caught:
            await scratch.remember(RESOURCE, blank)
        assert caught.value.field == "content"
        assert await scratch.retain_episode(RESOURCE, "s", blank, "a reply") is None
    assert _row_count(scratch_url, "popagent_messages") == 0
    assert _row_count(scratch_url, "popagent_sessions") == 0
    assert _row_count(scratch_url, "popagent_memories") == 0


# --- observational memory --------------------------------------------------------------------

_LEAKED = CORPUS[:5]


def _echoing_observer(body: dict[str, Any]) -> Reply:
    """An Observer that writes back every line of its input, plus secrets of its own."""
    assert is_observer(body)
    lines = [f"* 🟡 (10:00) {line}" for line in user_text(body).splitlines() if line.strip()]
    lines += [f"* 🔴 (10:01) the user also said {s.sentence}" for s in _LEAKED]
    return Reply("<observations>\n" + "\n".join(lines) + "\n</observations>")


def _leaking_reflector(body: dict[str, Any]) -> Reply:
    assert is_reflector(body)
    lines = [f"* 🔴 (10:02) key fact: {s.sentence}" for s in _LEAKED]
    return Reply("<observations>\n" + "\n".join(lines) + "\n</observations>")


async def test_observer_input_and_stored_observations_hold_no_secret(
    scratch: popagent.LongTermMemory,
    scratch_url: str,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
) -> None:
    memory = scratch
    await update_settings(
        memory,
        RESOURCE,
        observation_threshold_tokens=100,
        retained_context_percent=10,
        reflection_threshold_tokens=1_000_000,
    )
    # A thread holding secrets: rows written before the screen existed (inserted
    # directly, as they were), then messages written through the screen.
    with psycopg.connect(scratch_url) as conn:
        conn.execute(
            "INSERT INTO popagent_sessions (resource_id, session_id) VALUES (%s, 's')", (RESOURCE,)
        )
        for i, secret in enumerate(CORPUS):
            conn.execute(
                "INSERT INTO popagent_messages (resource_id, session_id, role, content, parts) "
                "VALUES (%s, 's', %s, %s, %s)",
                (
                    RESOURCE,
                    "user" if i % 2 == 0 else "assistant",
                    secret.sentence,
                    json.dumps(
                        [
                            {
                                "type": "tool_call",
                                "id": f"c{i}",
                                "name": "note",
                                "arguments": json.dumps({"text": secret.sentence}),
                            }
                        ]
                    )
                    if i % 2
                    else "[]",
                ),
            )
        # ... and an observation log of that time that holds some.
        legacy_log = "\n".join(f"* 🔴 (09:00) {s.sentence}" for s in CORPUS[5:9])
        conn.execute(
            "INSERT INTO popagent_observation_logs (resource_id, session_id, generation, "
            "origin, observations, observation_tokens) VALUES (%s, 's', 0, 'observation', %s, 50)",
            (RESOURCE, legacy_log),
        )
    threads = ThreadStore(memory.pool)
    for secret in CORPUS[:10]:
        await threads.append_message(RESOURCE, "s", "user", secret.sentence)
        await threads.append_message(RESOURCE, "s", "assistant", "Got it.")

    engine = ObservationalMemory(memory.pool, chat_model)
    snapshot = await engine.snapshot(RESOURCE)
    scripted.script(Respond(_echoing_observer))
    context = await engine.prepare(RESOURCE, "s", snapshot)
    assert context.observed
    (observer,) = [r for r in scripted.requests if is_observer(r)]
    request = json.dumps(observer)
    sent = user_text(observer)
    assert "[REDACTED:" in sent
    for secret in CORPUS:
        for form in _forms(secret):
            assert form not in sent and form not in request, secret.name
    (gen0,) = await engine.generations(RESOURCE, "s")
    assert "[REDACTED:" in gen0.observations and "the user also said" in gen0.observations
    assert "## Previous observations" in sent  # the legacy log was shown, screened
    for secret in CORPUS:
        for form in _forms(secret):
            assert form not in gen0.observations, secret.name

    # A reflection that repeats secrets stores none, and reads none.
    await MemorySettingsStore(memory.pool).update(RESOURCE, reflection_threshold_tokens=100)
    snapshot = await engine.snapshot(RESOURCE)
    # (Each attempt's answer stays above the target, so the Reflector is asked three times.)
    scripted.script(*[Respond(_leaking_reflector)] * 3)
    await engine.prepare(RESOURCE, "s", snapshot)
    reflectors = [r for r in scripted.requests if is_reflector(r)]
    assert len(reflectors) == 3
    assert all("[REDACTED:" in reflector_input(r) for r in reflectors)
    gens = await engine.generations(RESOURCE, "s")
    assert [g.origin for g in gens] == ["observation", "reflection"]
    assert gens[1].observations.count("key fact:") == len(_LEAKED)
    assert "[REDACTED:" in gens[1].observations
    for secret in CORPUS:
        for form in _forms(secret):
            assert form not in json.dumps(reflectors), secret.name

    # Only the rows written before the screen hold values; no observation does.
    found = scan_database(scratch_url)
    assert set(found) == {"popagent_messages.content", "popagent_messages.parts"}
    assert scan_database(scratch_url, skip=frozenset({"popagent_messages"})) == {}
