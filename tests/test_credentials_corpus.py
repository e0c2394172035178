"""The credential screen over a corpus of realistic secrets, through every write path.

Each test that writes works on a database of its own (created on the suite's
cluster, dropped afterwards), so the closing scan of every text, varchar,
jsonb, array and tsvector column of every table sees exactly what these paths
stored, and nothing another test wrote.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from click.testing import CliRunner
from mcp import Client
from psycopg import sql

import popagent
from popagent import Popagent
from popagent.checks import is_blank
from popagent.cli import main
from popagent.credentials import (
    credential_kinds,
    find_credentials,
    redact_credentials,
    redact_json_text,
)
from popagent.errors import SecretRefusedError, ValidationError
from popagent.llm import OpenAIChatModel
from popagent.memory.validation import check_query, normalize_fact_content, normalize_key
from popagent.models import MemoryFilter
from popagent.observe import MemorySettingsStore
from popagent.observe.engine import ObservationalMemory
from popagent.secrets import SecretCipher
from popagent.threads import ThreadStore
from popagent.web import ServerConfig, create_app
from tests.agent_support import CountingTool
from tests.credential_corpus import CORPUS, ORDINARY, Secret
from tests.mcp_support import stdio_params, text_of
from tests.observe_support import (
    insert_observed,
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


_TEXT_TYPES = (
    "text",
    "character varying",
    "character",
    "jsonb",
    "json",
    "ARRAY",
    "tsvector",
    "bytea",
)


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
    token, so a hex digest that happens to contain "8316" is not a hit. A short number
    is not a hit either as a timestamp's fraction (``11:17:39.8316``: PostgreSQL drops
    trailing zeros) or as a whole field of a dump's COPY row (an id, a count of bytes):
    a stored credential sits in text, a JSON string or a tsvector's quotes."""
    if len(form) >= 8:
        return form.lower() in text
    for found in re.finditer(rf"(?<![0-9A-Za-z]){re.escape(form.lower())}(?![0-9A-Za-z])", text):
        before = text[found.start() - 1 : found.start()]
        after = text[found.end() : found.end() + 1]
        if form.isdigit() and (before == "." or (before in ("", "\t") and after in ("\t", "\n"))):
            continue
        return True
    return False


def scan_database(url: str, *, skip: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Every corpus value found, by ``table.column``: every text-like column of every table
    of the schema (``information_schema.columns``), each cast to text and lower-cased."""
    found: dict[str, list[str]] = {}
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type = ANY(%s) "
            "AND table_name IN (SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE') "
            "ORDER BY table_name, column_name",
            (list(_TEXT_TYPES),),
        ).fetchall()
        tables = {t for t, _c, _d in columns}
        assert {"popagent_messages", "popagent_memories", "popagent_sessions"} <= tables
        assert {"popagent_observation_logs", "popagent_observation_groups"} <= tables
        for table, column, data_type in columns:
            if table in skip:
                continue
            # bytea as its bytes read as text (encode 'escape'), every other type as text.
            as_text = (
                sql.SQL("encode({}, 'escape')") if data_type == "bytea" else sql.SQL("{}::text")
            ).format(sql.Identifier(column))
            query = sql.SQL("SELECT lower({}) FROM {} WHERE {} IS NOT NULL").format(
                as_text, sql.Identifier(table), sql.Identifier(column)
            )
            values = [row[0] for row in conn.execute(query).fetchall()]
            for secret in CORPUS:
                if any(_holds(v, form) for v in values for form in _forms(secret)):
                    found.setdefault(f"{table}.{column}", []).append(secret.name)
    return found


def scan_dump(url: str) -> list[str]:
    """The corpus values found in a plain ``pg_dump`` of the whole database (names)."""
    from popagent.store.backup import tool_path

    dump = subprocess.run(
        [tool_path("pg_dump"), "--no-owner", "--no-privileges", f"--dbname={url}"],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout.decode("utf-8", "replace")
    lowered = dump.lower()
    assert "copy public.popagent_memory_settings" in lowered  # the rows are in it
    return [s.name for s in CORPUS if any(_holds(lowered, form) for form in _forms(s))]


def _row_count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
        ).fetchone()
    assert row is not None
    return int(row[0])


# --- every write path, then the scan ----------------------------------------------------------


async def test_no_corpus_value_is_stored_by_any_write_path(
    scratch_root: Popagent,
    scratch_url: str,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = scratch_root
    memory = root.memory
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
    assert [f.content for f in await memory.list(RESOURCE, MemoryFilter(kind="fact"))] == [
        "Prefers green tea"
    ]

    # Episodes: stored, redacted.
    for secret in CORPUS:
        episode = await memory.retain_episode(
            RESOURCE, "episodes", secret.sentence, f"Understood: {secret.sentence}"
        )
        assert episode is not None and "[REDACTED:" in episode.content

    # Agent turns: the user message carries the secret, the reply echoes it, and some
    # turns call tools whose arguments carry it (remember refuses; ping is refused for
    # its unknown arguments): in a sentence, and alone under a "password" field.
    agent = root.agent(chat_model, tools=[CountingTool("ping")])
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
        root=root,
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

    assert [f.content for f in await memory.list(RESOURCE, MemoryFilter(kind="fact"))] == [
        "Prefers green tea"
    ]
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


# --- every other surface: settings, sessions, items, adapters, the GUI, import ------------------

# Sentences that fit a session title (at most 200 characters) whole.
_SHORT = [s for s in CORPUS if len(s.sentence) <= 180]


def _stored(url: str, query: str, *params: object) -> str:
    """The rows ``query`` reads, as one lower-cased text (for a per-write check)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(query.encode(), params).fetchall()
    return json.dumps([list(map(str, row)) for row in rows]).lower()


def _assert_nowhere(text: str, secrets: list[Secret], where: str) -> None:
    for secret in secrets:
        for form in _forms(secret):
            assert not _holds(text.lower(), form), f"{secret.name} in {where}"


_GUIDANCE = "SELECT observer_guidance, reflector_guidance FROM popagent_memory_settings "


async def test_no_corpus_value_is_stored_by_any_other_surface(
    scratch_root: Popagent,
    scratch_url: str,
    chat_model: OpenAIChatModel,
    scripted: ScriptedModelServer,
    tmp_path: Path,
) -> None:
    from langchain_core.runnables import RunnableConfig
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from popagent.adapters.langchain import memory_tools
    from popagent.adapters.langgraph import PopagentStore
    from popagent.adapters.openai_agents import PopagentSession
    from popagent.adapters.pydantic_ai import memory_toolset
    from popagent.store import observations as obs_sql
    from tests.gui_support import post_form

    root = scratch_root
    memory = root.memory
    threads = ThreadStore(memory.pool)
    settings = MemorySettingsStore(memory.pool)
    runner = CliRunner()
    cli = ["--database-url", scratch_url]

    # Library: the Observer's and Reflector's guidance (one resource each: the settings
    # are one row per resource), session titles, metadata keys and values, renames.
    for i, secret in enumerate(CORPUS):
        await settings.update(
            f"lib-{i}",
            observer_guidance=f"Watch for this: {secret.sentence}",
            reflector_guidance=secret.sentence,
        )
    for i, secret in enumerate(_SHORT):
        await threads.create_session(
            RESOURCE,
            f"lib-{i}",
            title=secret.sentence,
            # In a value, as a key, and alone under a credential-named field.
            metadata={
                "note": secret.sentence,
                secret.sentence: "as a key",
                "n": [{"password": secret.value}],
            },
        )
        await threads.rename_session(RESOURCE, f"lib-{i}", f"Now: {secret.sentence}"[:200])
    # Guidance stored before the screen existed is screened when read, so it never
    # reaches the Observer's instructions either.
    legacy = CORPUS[0]
    with psycopg.connect(scratch_url) as conn:
        conn.execute(
            "INSERT INTO popagent_memory_settings (resource_id, version, observer_guidance) "
            "VALUES ('legacy', 1, %s)",
            (legacy.sentence,),
        )
    read = await settings.read("legacy")
    assert read.settings.observer_guidance is not None
    assert legacy.value not in read.settings.observer_guidance
    snapshot = await ObservationalMemory(memory.pool, chat_model).snapshot("legacy")
    assert legacy.value not in str(snapshot)
    with psycopg.connect(scratch_url) as conn:
        conn.execute("DELETE FROM popagent_memory_settings WHERE resource_id = 'legacy'")

    # The OpenAI Agents SDK session (framework items, local), LangGraph's store, the
    # LangChain and Pydantic AI memory tools.
    agents_session = PopagentSession.local("agents-sdk", root, RESOURCE)
    items: list[Any] = []
    for i, secret in enumerate(CORPUS):
        items.append({"role": "user", "content": secret.sentence})
        arguments = json.dumps({"login": {"password": secret.value}, "note": secret.sentence})
        items.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "login", "arguments": arguments}
        )
        items.append(
            {"type": "function_call_output", "call_id": f"c{i}", "output": secret.sentence}
        )
    await agents_session.add_items(items)
    store = PopagentStore(root, RESOURCE)
    tools = {t.name: t for t in memory_tools(root, RESOURCE, session_id="langchain")}
    config: RunnableConfig = {"configurable": {"thread_id": "langchain"}}
    for i, secret in enumerate(CORPUS):
        try:
            await store.aput(("notes",), f"n{i}", {"text": secret.sentence})
        except ValidationError as exc:
            assert secret.value not in str(exc)
        answer = await tools["remember"].ainvoke({"content": secret.sentence}, config)
        assert "credential" in str(answer) and secret.value not in str(answer)

    def pydantic_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("remember", {"content": asked})])
        return ModelResponse(parts=[TextPart("Noted.")])

    pydantic_agent = PydanticAgent(
        FunctionModel(pydantic_model),
        toolsets=[memory_toolset(root, RESOURCE, session_id="pydantic")],
    )
    for secret in CORPUS:
        await pydantic_agent.run(secret.sentence)

    # The HTTP API and the GUI's forms (one server resource: each settings write is
    # checked in the row at once, the sessions and chats by the final scan).
    app = create_app(
        ServerConfig(resource_id=RESOURCE, maintenance_interval_s=None),
        root=root,
        model=chat_model,
    )
    await threads.create_session(RESOURCE, "web", title="Web")
    async with in_process(app) as web:
        for i, secret in enumerate(CORPUS):
            patched = await web.patch(
                "/api/settings", json={"observer_guidance": f"API {i}: {secret.sentence}"}
            )
            assert patched.status_code == 200, patched.text
            assert secret.value not in patched.text
            _assert_nowhere(_stored(scratch_url, _GUIDANCE), [secret], "the API's settings")
            saved = await post_form(web, "/settings", {"reflector_guidance": secret.sentence})
            assert saved.status_code == 303, saved.text
            _assert_nowhere(_stored(scratch_url, _GUIDANCE), [secret], "the GUI's settings")
            fact = await post_form(web, "/facts", {"content": secret.sentence, "key": ""})
            assert fact.status_code == 422  # the form is shown again as typed, nothing stored
            added = await web.post(
                "/api/sessions/web/items",
                json={"items": [{"role": "user", "content": secret.sentence}]},
            )
            assert added.status_code in (200, 201), added.text
            scripted.script(Reply(f"Echo: {secret.sentence}"))
            chat = await post_form(web, "/chat/gui-chat", {"message": secret.sentence})
            assert chat.status_code == 303, chat.text
        for secret in _SHORT:
            renamed = await web.patch("/api/sessions/web", json={"title": secret.sentence})
            assert renamed.status_code == 200 and secret.value not in renamed.text
            form = await post_form(web, "/sessions/web/rename", {"title": secret.sentence})
            assert form.status_code == 303, form.text

    # The CLI: settings and session titles.
    for secret in CORPUS:
        out = await asyncio.to_thread(
            runner.invoke,
            main,
            [
                *cli,
                "--resource-id",
                "cli",
                "settings",
                "set",
                f"observer_guidance={secret.sentence}",
            ],
            catch_exceptions=False,
        )
        assert out.exit_code == 0 and secret.value not in out.output, out.output
        _assert_nowhere(_stored(scratch_url, _GUIDANCE), [secret], "the CLI's settings")
    for secret in _SHORT:
        out = await asyncio.to_thread(
            runner.invoke,
            main,
            [*cli, "--resource-id", RESOURCE, "sessions", "rename", "web", secret.sentence],
            catch_exceptions=False,
        )
        assert out.exit_code == 0 and secret.value not in out.output, out.output

    # Import: an export of a resource whose every text is a placeholder, with the
    # placeholders replaced by corpus sentences, imported into a resource per file.
    source = "import-source"
    await threads.create_session(
        source, "imp", title="TITLE_PH", metadata={"META_KEY_PH": "META_PH"}
    )
    message = await threads.append_message(source, "imp", "user", "MESSAGE_PH")
    await memory.retain_episode(source, "imp", "EPISODE_PH asked", "and was answered")
    await settings.update(source, observer_guidance="GUIDE_PH", reflector_guidance="REFLECT_PH")
    async with memory.pool.connection() as aconn, aconn.transaction():
        await insert_observed(
            aconn,
            source,
            "imp",
            message.id,
            message.id,
            "* OBSERVED_PH",
            tokens=5,
            message_tokens=5,
        )
        await obs_sql.record_actor(aconn, source, "imp", "ACTOR_PH")
    exported = tmp_path / "source.jsonl"
    out = await asyncio.to_thread(
        runner.invoke, main, [*cli, "--resource-id", source, "export", "-o", str(exported)]
    )
    assert out.exit_code == 0, out.output
    template = exported.read_text(encoding="utf-8")
    holders = ["TITLE_PH", "META_KEY_PH", "META_PH", "MESSAGE_PH", "EPISODE_PH", "GUIDE_PH"]
    holders += ["REFLECT_PH", "OBSERVED_PH", "ACTOR_PH"]
    for holder in holders:
        assert holder in template, holder
    per_file = len(holders)
    for n in range(0, len(CORPUS), per_file):
        group = CORPUS[n : n + per_file]
        text = template
        for holder, secret in zip(holders, group, strict=False):
            sentence = secret.sentence if holder != "TITLE_PH" or secret in _SHORT else secret.value
            text = text.replace(holder, json.dumps(sentence)[1:-1])
        crafted = tmp_path / f"import-{n}.jsonl"
        crafted.write_text(text, encoding="utf-8")
        out = await asyncio.to_thread(
            runner.invoke, main, [*cli, "import", str(crafted), "--resource-id", f"imported-{n}"]
        )
        assert out.exit_code == 0, out.output
        assert all(s.value not in out.output for s in group)
    # A fact's content or key holding a credential is refused by import (popagent's
    # format and Mem0's), as by every other fact write: exit 2, nothing written.
    fact_record = {
        "type": "fact",
        "id": 1,
        "key": None,
        "content": "Ordinary",
        "importance": 0.5,
        "origin": "cli",
        "version": 1,
        "created_at": "2026-02-01T10:00:00+00:00",
        "updated_at": "2026-02-01T10:00:00+00:00",
    }
    head = json.dumps({"format": "popagent-export", "version": 1, "resource_id": "x"})
    bad_facts = [{**fact_record, "content": s.sentence} for s in CORPUS]
    bad_facts += [{**fact_record, "key": key} for key in KEY_SECRETS]
    for n, record in enumerate(bad_facts):
        crafted = tmp_path / f"fact-{n}.jsonl"
        crafted.write_text(f"{head}\n{json.dumps(record)}\n", encoding="utf-8")
        out = await asyncio.to_thread(
            runner.invoke, main, [*cli, "import", str(crafted), "--resource-id", "imported-fact"]
        )
        assert out.exit_code == 2 and "line 2: fact." in out.output, out.output
    for n, secret in enumerate(CORPUS):
        crafted = tmp_path / f"mem0-{n}.json"
        memories = [{"memory": "Likes jazz"}, {"memory": secret.sentence}]
        crafted.write_text(json.dumps({"results": memories}), encoding="utf-8")
        out = await asyncio.to_thread(
            runner.invoke,
            main,
            [*cli, "import", str(crafted), "--from", "mem0", "--resource-id", "mem0"],
        )
        assert out.exit_code == 2 and "results[1].memory" in out.output, out.output
        assert secret.value not in out.output
    # The CLI's other fact writes, and the API's upsert by key.
    kept_id = (await memory.create_fact(RESOURCE, "Prefers green tea", key="drink")).id
    for secret in CORPUS:
        out = await asyncio.to_thread(
            runner.invoke,
            main,
            [*cli, "--resource-id", RESOURCE, "facts", "add", secret.sentence],
            catch_exceptions=False,
        )
        assert out.exit_code == 2 and "content: looks like" in out.output, out.output
        out = await asyncio.to_thread(
            runner.invoke,
            main,
            [
                *cli,
                "--resource-id",
                RESOURCE,
                "facts",
                "edit",
                str(kept_id),
                "--content",
                secret.sentence,
            ],
            catch_exceptions=False,
        )
        assert out.exit_code == 2 and "content: looks like" in out.output, out.output
    async with in_process(app) as web:
        for secret in CORPUS:
            put = await web.put("/api/facts/by-key/note", json={"content": secret.sentence})
            assert (put.status_code, put.json()["field"]) == (422, "content")
        for key in KEY_SECRETS:
            put = await web.put(
                f"/api/facts/by-key/{quote(key, safe='')}", json={"content": "Ordinary"}
            )
            assert (put.status_code, put.json()["field"]) == (422, "key"), put.text
    with psycopg.connect(scratch_url) as conn:
        conn.execute("DELETE FROM popagent_sessions WHERE resource_id = %s", (source,))

    assert _row_count(scratch_url, "popagent_messages") > 3 * len(CORPUS)
    assert scan_database(scratch_url) == {}
    assert scan_dump(scratch_url) == []


async def test_audit_rows_keep_no_credential_the_model_put_in_a_name(
    scratch: popagent.LongTermMemory, scratch_url: str
) -> None:
    """A tool call's names come from the model: a tool or argument named with a
    credential is stored redacted (the rows hold names only, never values)."""
    import uuid
    from datetime import UTC, datetime

    from popagent.threads.audit import write_audit_rows

    rows = [
        {
            "resource_id": RESOURCE,
            "session_id": "audited",
            "call_id": uuid.uuid4(),
            "hook": "before_tool_call",
            "tool": GITHUB,
            "model": None,
            "started_at": datetime.now(UTC),
            "duration_ms": None,
            "outcome": None,
            "error_type": None,
            "input_chars": 10,
            "output_chars": None,
            "message_count": None,
            "argument_names": ["content", GITHUB, "db_password=Kx9#vLm2qT"],
        }
    ]
    await write_audit_rows(scratch.pool, rows)
    stored = _stored(scratch_url, "SELECT tool, argument_names FROM popagent_audit")
    assert "[redacted:" in stored and "content" in stored
    assert GITHUB.lower() not in stored and "kx9#vlm2qt" not in stored
    assert scan_database(scratch_url) == {}


# --- identifiers, names and the access log ---------------------------------------------------

#: The corpus values that an identifier could hold and that the screen finds alone (a
#: token's shape; a bare password is a credential only by the words around it), and
#: the compact ones with their context.
ID_SECRETS = [
    s.value for s in CORPUS if not any(c.isspace() for c in s.value) and credential_kinds(s.value)
] + KEY_SECRETS


async def test_no_corpus_value_reaches_the_database_through_an_identifier(
    scratch_root: Popagent,
    scratch_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Session and resource IDs, a key's name, a secret's name: refused, naming the
    field (an identifier cannot be redacted). An import's ``tool_call_id``: redacted,
    as in items; a record that names a key twice: refused. The access log masks a
    credential in a path, on a refused request too."""
    root = scratch_root
    memory, threads, items = root.memory, root.threads, root.items
    secrets = root.secrets(SecretCipher(b"k" * 32))
    assert len(ID_SECRETS) >= 20
    item = [{"role": "user", "content": "hello"}]
    for value in ID_SECRETS:
        for write, field in (
            (lambda v=value: threads.create_session(RESOURCE, v), "session_id"),
            (
                lambda v=value: threads.append_message(
                    RESOURCE, v, "user", "hello", create_session=True
                ),
                "session_id",
            ),
            (lambda v=value: items.append(RESOURCE, v, item), "session_id"),
            (lambda v=value: memory.retain_episode(RESOURCE, v, "hi", "ok"), "session_id"),
            (lambda v=value: memory.remember(v, "Likes jazz"), "resource_id"),
            (lambda v=value: threads.create_session(v, "s1"), "resource_id"),
            (lambda v=value: root.keys.create(RESOURCE, f"ci {v}"), "name"),
            (lambda v=value: secrets.set(RESOURCE, v, "the value"), "name"),
        ):
            with pytest.raises(ValidationError) as refused:
                await write()
            assert refused.value.field == field, (value, field)
            assert value not in str(refused.value)

    # The API: a session ID in the path is refused (422 naming it); with a token, a
    # request without it is refused (401) before any route; the access log masks both.
    caplog.set_level("INFO", logger="popagent.access")
    for token in (None, "t" * 32):
        app = create_app(
            ServerConfig(resource_id=RESOURCE, maintenance_interval_s=None, token=token),
            root=root,
        )
        async with in_process(app) as api:
            for value in ID_SECRETS:
                session = quote(value, safe="")
                added = await api.post(f"/api/sessions/{session}/items", json={"items": item})
                read = await api.get(f"/api/sessions/{session}/messages")
                if token is not None:
                    assert (added.status_code, read.status_code) == (401, 401)
                elif "/" not in value:  # a "/" makes it two segments: no such route
                    assert (added.status_code, added.json()["field"]) == (422, "session_id")
                    assert (read.status_code, read.json()["field"]) == (422, "session_id")
                    assert value not in added.text
    # Multi-resource mode audits a refused credential with the path's first two
    # segments: a credential there is masked too (the scan below reads the audit).
    app = create_app(
        ServerConfig(maintenance_interval_s=None, multi_resource=True, token="t" * 32), root=root
    )
    async with in_process(app, authorization="Bearer pak_" + "x" * 43) as api:
        for value in ID_SECRETS:
            unknown = await api.get(f"/api/{quote(value, safe='')}")
            assert unknown.status_code == 401
    async with memory.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE path LIKE '%%[REDACTED:%%') AS masked, count(*) AS n"
            " FROM popagent_access_audit WHERE reason = 'unknown_credential'"
        )
        audited = await cur.fetchone()
    # (A value with a "/" leaves only its first part, no credential, in the route.)
    assert audited == {"masked": sum("/" not in v for v in ID_SECRETS), "n": len(ID_SECRETS)}
    logged = [r for r in caplog.records if r.name == "popagent.access"]
    assert len(logged) >= 5 * len(ID_SECRETS)
    assert any("[REDACTED:" in r.getMessage() for r in logged)
    for value in ID_SECRETS:
        for record in logged:
            assert value not in record.getMessage() and value not in str(record.__dict__)

    # Import: a fact's and an episode's tool_call_id are redacted; a session ID is refused.
    runner, cli = CliRunner(), ["--database-url", scratch_url]
    head = json.dumps({"format": "popagent-export", "version": 1, "resource_id": "x"})
    when = "2026-02-01T10:00:00+00:00"
    fact = {"type": "fact", "id": 1, "key": None, "content": "Ordinary", "importance": 0.5}
    fact |= {"origin": "agent", "version": 1, "created_at": when, "updated_at": when}
    episode = {"type": "episode", "id": 2, "session_id": "imp", "content": "User: hi"}
    episode |= {"importance": 0.5, "origin": "turn", "created_at": when}
    for n, value in enumerate(ID_SECRETS):
        records = [{**fact, "tool_call_id": value}, {**episode, "tool_call_id": value}]
        crafted = tmp_path / f"tool-call-{n}.jsonl"
        crafted.write_text("\n".join([head, *map(json.dumps, records)]) + "\n", encoding="utf-8")
        out = await asyncio.to_thread(
            runner.invoke, main, [*cli, "import", str(crafted), "--resource-id", f"imp-{n}"]
        )
        assert out.exit_code == 0, out.output
        for kind in ("fact", "episode"):
            [stored] = await memory.list(f"imp-{n}", MemoryFilter(kind=kind))
            assert stored.tool_call_id is not None and "[REDACTED:" in stored.tool_call_id
        named = {"type": "session", "session_id": value, "created_at": when, "updated_at": when}
        crafted.write_text(f"{head}\n{json.dumps(named)}\n")
        out = await asyncio.to_thread(
            runner.invoke, main, [*cli, "import", str(crafted), "--resource-id", "imp-s"]
        )
        assert out.exit_code == 2 and "line 2: session.session_id" in out.output, out.output
        assert value not in out.output
    twice = '{"type": "fact", "id": 1, "content": "Ordinary", "content": "Other"}'
    crafted = tmp_path / "twice.jsonl"
    crafted.write_text(f"{head}\n{twice}\n", encoding="utf-8")
    out = await asyncio.to_thread(runner.invoke, main, [*cli, "import", str(crafted)])
    assert out.exit_code == 2 and "line 2" in out.output and "'content' twice" in out.output

    assert scan_database(scratch_url) == {}
    assert scan_dump(scratch_url) == []
