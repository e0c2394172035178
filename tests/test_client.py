"""``popagent.client``: Client, AsyncClient and RemoteBackend against a real ``popagent serve``.

One server for the module (a subprocess with a bearer token, on the suite's
database, chatting with the scripted model). Each test makes the rows it
reads, with content no other test uses, so the tests share the resource
without seeing each other's facts.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from popagent.adapters.backend import MemoryBackend
from popagent.client import (
    AsyncClient,
    ChatDelta,
    ChatReply,
    Client,
    ClientError,
    FactHistory,
    ItemPage,
    PurgeReport,
    RemoteBackend,
    RevertReport,
    ServerError,
    SessionItem,
    SessionWrites,
    TransportError,
    UnauthorizedError,
    apaged,
)
from popagent.errors import ConflictError, NotFoundError, TurnFailedError, ValidationError
from popagent.models import FactVersion, MaintenanceReport, MemoryFilter
from popagent.models import PurgeReport as LibraryPurgeReport
from popagent.store.purge import PURGE_TABLES
from tests.credential_corpus import CORPUS
from tests.expiry_support import LATER, pass_expiry_sync
from tests.fault_support import ServeProcess, clean_env, wait_for
from tests.scripted_model import CallTools, Fail, Hang, Reply, ScriptedModelServer
from tests.web_support import free_port

TOKEN = "client-test-token-0123456789"
RESOURCE = f"client-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(
    database_url: str, model: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    tmp = tmp_path_factory.mktemp("client")
    env = clean_env(
        tmp,
        POPAGENT_DATABASE_URL=database_url,
        POPAGENT_TOKEN=TOKEN,
        POPAGENT_MODEL_BASE_URL=model.base_url,
        POPAGENT_MODEL="scripted-1",
        POPAGENT_MODEL_MAX_RETRIES="0",
        POPAGENT_MODEL_TIMEOUT="30",
        POPAGENT_EMBEDDER="none",
        XDG_DATA_HOME=str(tmp / "data-home"),
    )
    env.pop("POPAGENT_MODEL_API_KEY", None)
    env.pop("OPENAI_API_KEY", None)
    process = ServeProcess(Path(tmp / "unused-data-dir"), tmp, resource_id=RESOURCE, env=env)
    try:
        process.start()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def client(server: ServeProcess) -> Iterator[Client]:
    with Client(server.base_url, token=TOKEN, timeout=10, chat_timeout=30) as c:
        yield c


def unique(what: str) -> str:
    return f"{what} {uuid.uuid4().hex[:10]}"


# --- Client (blocking) ------------------------------------------------------------------------


def test_health_and_info(client: Client) -> None:
    health = client.health()
    assert health.ok and health.database == "ok"
    info = client.info()
    assert info.resource_id == RESOURCE
    assert info.model == "scripted-1"
    assert info.maintenance is None  # served with --maintenance-interval 0
    assert info.version


def test_fact_crud_and_paging(client: Client) -> None:
    tag = uuid.uuid4().hex[:10]
    key = f"drink-{tag}"
    fact = client.create_fact(f"  Prefers   green tea {tag} ", key=key.upper(), importance=0.7)
    assert (fact.content, fact.key, fact.importance) == (f"Prefers green tea {tag}", key, 0.7)
    assert fact.resource_id == RESOURCE and fact.kind == "fact"
    assert client.get(fact.id, kind="fact") == fact
    assert client.get(fact.id) == fact
    with pytest.raises(NotFoundError, match=f"no episode {fact.id} "):
        client.get(fact.id, kind="episode")
    with pytest.raises(ValidationError) as bad_kind:
        client.get(fact.id, kind="facts")  # type: ignore[arg-type]
    assert bad_kind.value.field == "kind"
    # A fact by its key is a list with the key filter, as in the library (normalized).
    assert client.list(MemoryFilter(kind="fact", key=key)).items == (fact,)
    assert client.list(MemoryFilter(kind="fact", key=f" {key.upper()} ")).items == (fact,)

    others = [client.create_fact(f"Paging fact {i} {tag}") for i in range(3)]
    everything = client.list(MemoryFilter(kind="fact", text=tag, limit=200))
    assert len(everything.items) == 4 and everything.next_offset is None
    page = client.list(MemoryFilter(kind="fact", text=tag, limit=2))
    assert len(page.items) == 2 and page.next_offset == 2 and page.limit == 2
    assert {m.id for m in client.iter(MemoryFilter(kind="fact", text=tag, limit=1))} == {
        fact.id,
        *(o.id for o in others),
    }
    # iter starts at the filter's offset and pages by its limit.
    rest = client.iter(MemoryFilter(kind="fact", text=tag, limit=1, offset=2))
    assert [m.id for m in rest] == [m.id for m in everything.items[2:]]

    updated = client.update_fact(fact.id, content=f"Prefers black tea {tag}", importance=0.9)
    assert (updated.content, updated.importance, updated.key) == (
        f"Prefers black tea {tag}",
        0.9,
        key,
    )
    keyless = client.update_fact(fact.id, key=None)
    assert keyless.key is None and keyless.content == updated.content

    client.delete(fact.id)  # no kind: the client learns it, as the library does
    with pytest.raises(NotFoundError):
        client.get(fact.id, kind="fact")
    with pytest.raises(NotFoundError, match=f"no memory {fact.id} "):
        client.delete(fact.id)
    with pytest.raises(NotFoundError, match=f"no fact {fact.id} "):
        client.delete(fact.id, kind="fact")


def test_errors_name_the_field_and_say_what_happened(client: Client, server: ServeProcess) -> None:
    with pytest.raises(ValidationError) as empty:
        client.create_fact("")
    assert empty.value.field == "content"
    with pytest.raises(ValidationError) as heavy:
        client.create_fact(unique("Important"), importance=2.0)
    assert heavy.value.field == "importance"
    assert "importance" not in heavy.value.message.split(":")[0]  # no doubled prefix
    with pytest.raises(ValidationError) as limit:
        client.list(MemoryFilter(kind="fact", limit=0))
    assert limit.value.field == "limit"
    with pytest.raises(ValidationError) as confirm:
        client.cleanup(confirm=False)
    assert confirm.value.field == "confirm"

    fact = client.create_fact(unique("Keyed"), key=unique("k").replace(" ", "-"))
    assert fact.key is not None
    with pytest.raises(ValidationError) as nothing:
        client.update_fact(fact.id)
    assert nothing.value.field == "body"
    with pytest.raises(ConflictError):
        client.create_fact(unique("Same key"), key=fact.key)
    with pytest.raises(NotFoundError):
        client.get(2**62, kind="fact")
    with pytest.raises(NotFoundError):
        client.get_session(unique("no-such-session").replace(" ", "-"))

    for token in ("wrong-token-0123456789abcdef", None):
        with Client(server.base_url, token=token) as stranger:
            assert stranger.health().ok  # /healthz needs no token
            with pytest.raises(UnauthorizedError) as denied:
                stranger.info()
            assert denied.value.status == 401
            assert "401" in str(denied.value) and "token" in str(denied.value)
            assert str(denied.value).startswith("info (GET /api/info) answered 401")

    with Client(f"http://127.0.0.1:{free_port()}", timeout=2) as nowhere:
        with pytest.raises(TransportError) as unreachable:
            nowhere.info()
        # The client's method first, then the route it called.
        assert str(unreachable.value).startswith("info (GET /api/info) to http://127.0.0.1:")
        assert "could not connect" in str(unreachable.value)
        assert unreachable.value.status is None

    with pytest.raises(ClientError):
        Client("127.0.0.1:8787")  # not a URL


def test_chat_sessions_and_episodes(client: Client, model: ScriptedModelServer) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    model.script(Reply("Hello there, nice to meet you."), Reply("Second answer."))
    reply = client.chat(session, "Hello, I am Ada.")
    assert isinstance(reply, ChatReply)
    assert reply.reply == "Hello there, nice to meet you."
    assert reply.session_id == session and reply.model_calls == 1
    assert reply.episode_id is not None
    client.chat(session, "And a second message.")

    episode = client.get(reply.episode_id, kind="episode")
    assert episode.kind == "episode" and episode.session_id == session
    assert client.get(episode.id) == episode
    with pytest.raises(NotFoundError):
        client.get(episode.id, kind="fact")
    with pytest.raises(NotFoundError):
        client.delete(episode.id, kind="fact")
    # An episode has no history to purge: refused, by kind or once its kind is known.
    for kind in ("episode", None):
        with pytest.raises(ValidationError) as no_history:
            client.delete(episode.id, kind=kind, purge=True)
        assert no_history.value.field == "purge"
    assert client.get(episode.id) == episode
    episodes = client.list(MemoryFilter(kind="episode", session_id=session))
    assert len(episodes.items) == 2 and episodes.next_offset is None
    one_by_one = client.iter(MemoryFilter(kind="episode", session_id=session, limit=1))
    assert [e.id for e in one_by_one] == [e.id for e in episodes.items]
    assert client.list(MemoryFilter(session_id=session)).items == episodes.items
    later = datetime.now(UTC) + timedelta(hours=1)
    assert client.list(MemoryFilter(session_id=session, created_after=later)).items == ()
    assert len(list(client.iter(MemoryFilter(session_id=session, limit=1)))) == 2

    found = client.get_session(session)
    assert found.session_id == session and found.resource_id == RESOURCE
    assert session in {s.session_id for s in client.iter_sessions(page_size=200)}
    assert client.list_sessions(limit=200).items
    assert client.rename_session(session, "Meeting Ada").title == "Meeting Ada"
    assert client.rename_session(session, None).title is None

    messages = client.list_messages(session, limit=200)
    assert [m.role for m in messages.items] == ["user", "assistant", "user", "assistant"]
    assert messages.items[0].content == "Hello, I am Ada."
    assert messages.next_after_id is None
    assert list(client.iter_messages(session, page_size=1)) == list(messages.items)
    state = client.observations(session)
    assert state.session_id == session and state.generations == () and state.groups == ()

    client.delete(episode.id, kind="episode")
    with pytest.raises(NotFoundError):
        client.get(episode.id, kind="episode")
    client.delete_session(session)
    with pytest.raises(NotFoundError):
        client.list_messages(session)
    assert model.pending == 0


def test_chat_stream(client: Client, model: ScriptedModelServer) -> None:
    session = f"s-{uuid.uuid4().hex[:10]}"
    model.script(Reply("Streaming this reply word by word."))
    events = list(client.chat_stream(session, "Say something"))
    deltas = [e.text for e in events if isinstance(e, ChatDelta)]
    assert len(deltas) > 1
    assert "".join(deltas) == "Streaming this reply word by word."
    done = events[-1]
    assert isinstance(done, ChatReply) and done.reply == "Streaming this reply word by word."
    assert sum(isinstance(e, ChatReply) for e in events) == 1

    model.script(Fail(500))
    with pytest.raises(TurnFailedError):
        list(client.chat_stream(session, "This turn fails"))
    with pytest.raises(ValidationError) as blank:
        list(client.chat_stream(session, "   "))
    assert blank.value.field == "message"
    model.script(Fail(500))
    with pytest.raises(TurnFailedError):
        client.chat(session, "This one fails whole")
    assert model.pending == 0


def test_chat_timeout_is_a_transport_error(
    server: ServeProcess, model: ScriptedModelServer
) -> None:
    """A reply slower than ``chat_timeout``: the client gives up, the turn still ends."""
    session = f"s-{uuid.uuid4().hex[:10]}"
    model.script(Hang(5, Reply("A late reply.")))  # far past the client's 0.3 s
    with Client(server.base_url, token=TOKEN, timeout=5, chat_timeout=0.3) as impatient:
        with pytest.raises(TransportError) as late:
            impatient.chat(session, "Take your time")
        assert "timed out" in str(late.value)

        def answered() -> bool:
            roles = [m.role for m in impatient.list_messages(session).items]
            return roles == ["user", "assistant"]

        wait_for(answered, 60, "the abandoned turn's reply")
    assert model.pending == 0


def test_recall_settings_maintenance_cleanup(client: Client) -> None:
    tag = uuid.uuid4().hex[:10]
    fact = client.create_fact(f"The user's bicycle is a red {tag} tandem", importance=0.8)
    preview = client.recall(f"red {tag} tandem bicycle", limit=3)
    assert preview.query == f"red {tag} tandem bicycle"
    assert preview.results[0].memory.id == fact.id
    top = preview.results[0]
    assert top.score == pytest.approx(sum(c.contribution for c in top.components))
    assert {c.name for c in top.components}
    assert fact.content in preview.rendered

    settings = client.get_settings()
    assert settings.value("observation_threshold_tokens") == 30_000
    changed = client.update_settings({"observation_threshold_tokens": 20_000})
    assert changed.value("observation_threshold_tokens") == 20_000
    assert changed.version > settings.version and changed.updated_at is not None
    with pytest.raises(ValidationError) as unknown:
        client.update_settings({"no_such_setting": 1})
    assert unknown.value.field == "no_such_setting"
    reset = client.reset_settings()
    assert reset.value("observation_threshold_tokens") == 30_000
    with pytest.raises(KeyError):
        reset.value("no_such_setting")

    assert isinstance(client.maintain(), MaintenanceReport)
    past = datetime.now(UTC) - timedelta(days=3650)
    assert client.cleanup(confirm=True, kind="fact", older_than=past) == 0
    assert client.get(fact.id, kind="fact").id == fact.id  # older than ten years ago: no
    assert client.cleanup(confirm=True, kind="fact") >= 1
    with pytest.raises(NotFoundError):
        client.get(fact.id, kind="fact")


def test_fact_expiry_versions_restore_and_purged_delete(client: Client) -> None:
    tag = uuid.uuid4().hex[:10]
    key = f"home-{tag}"
    later = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    fact = client.create_fact(f"Lives in Porto {tag}", key=key, expires_at=later)
    assert (fact.expires_at, fact.version, fact.origin) == (later, 1, "api")
    assert (fact.turn_id, fact.message_ids, fact.tool_call_id) == (None, (), None)
    history = client.fact_history(fact.id)
    assert history == FactHistory(fact_id=fact.id, current=fact, versions=())

    moved = client.update_fact(fact.id, content=f"Lives in Braga {tag}")
    assert (moved.version, moved.expires_at) == (2, later)  # left out: kept
    lasting = client.update_fact(fact.id, expires_at=None)
    assert (lasting.version, lasting.expires_at, lasting.content) == (3, None, moved.content)
    assert client.update_fact(fact.id, expires_at=None).version == 3  # no change, no version
    history = client.fact_history(fact.id)
    assert history.current == lasting
    assert all(isinstance(v, FactVersion) for v in history.versions)
    assert [(v.version, v.content, v.expires_at) for v in history.versions] == [
        (2, moved.content, later),
        (1, fact.content, later),
    ]
    first = history.versions[1]
    assert (first.fact_id, first.resource_id, first.key) == (fact.id, RESOURCE, key)
    assert (first.ended, first.ended_origin, first.origin) == ("updated", "api", "api")
    assert first.valid_from == fact.updated_at and first.valid_to == history.versions[0].valid_from
    assert first.content_sha256 == fact.content_sha256 and first.importance == fact.importance

    restored = client.restore_fact(fact.id, 1)
    assert (restored.id, restored.content, restored.expires_at) == (fact.id, fact.content, later)
    assert restored.version == 4
    assert client.fact_history(fact.id).versions[0].content == lasting.content
    with pytest.raises(NotFoundError):
        client.restore_fact(fact.id, 99)
    with pytest.raises(ValidationError) as zero:
        client.restore_fact(fact.id, 0)
    assert zero.value.field == "version"

    # Restoring a key another fact now holds is a conflict, and changes nothing.
    client.update_fact(fact.id, key=f"{key}.old")
    squatter = client.create_fact(f"Lives in Faro {tag}", key=key)
    with pytest.raises(ConflictError):
        client.restore_fact(fact.id, 1)
    assert client.get(fact.id, kind="fact").key == f"{key}.old"
    client.delete(squatter.id, kind="fact", purge=True)

    # A deleted fact keeps its history and comes back under its id; a purged one does not.
    client.delete(fact.id, kind="fact")
    with pytest.raises(NotFoundError):
        client.get(fact.id, kind="fact")
    gone = client.fact_history(fact.id)
    assert gone.current is None
    assert (gone.versions[0].ended, gone.versions[0].key) == ("deleted", f"{key}.old")
    back = client.restore_fact(fact.id, gone.versions[0].version)
    assert (back.id, back.key) == (fact.id, f"{key}.old")
    client.delete(fact.id, kind="fact", purge=True)
    with pytest.raises(NotFoundError):
        client.fact_history(fact.id)
    with pytest.raises(NotFoundError):
        client.restore_fact(fact.id, 1)
    with pytest.raises(NotFoundError):
        client.fact_history(squatter.id)

    past = datetime.now(UTC) - timedelta(hours=1)
    with pytest.raises(ValidationError) as expired:
        client.create_fact(unique("Already over"), expires_at=past)
    assert expired.value.field == "expires_at"
    with pytest.raises(ValidationError) as naive:
        client.create_fact(unique("No zone"), expires_at=datetime.now() + timedelta(days=1))
    assert naive.value.field == "expires_at"
    keep = client.create_fact(unique("Stays as it is"))
    with pytest.raises(ValidationError) as late:
        client.update_fact(keep.id, content=unique("changed"), expires_at=past)
    assert late.value.field == "expires_at"
    assert client.get(keep.id, kind="fact") == keep
    client.delete(keep.id, kind="fact", purge=True)


def test_expired_fact_ends_at_maintenance(client: Client, database_url: str) -> None:
    tag = uuid.uuid4().hex[:10]
    ahead = datetime.now(UTC) + LATER
    fact = client.create_fact(f"Parked on level three {tag}", expires_at=ahead)
    assert fact.expires_at == ahead
    assert fact.id in {r.memory.id for r in client.recall(f"parked level three {tag}").results}
    passed = pass_expiry_sync(database_url, RESOURCE, fact.id)
    assert client.get(fact.id, kind="fact").expires_at == passed  # readable until maintenance
    assert fact.id not in {r.memory.id for r in client.recall(f"parked level three {tag}").results}
    report = client.maintain()
    assert report.expired_facts == 1  # no other test writes an expiry this close
    with pytest.raises(NotFoundError):
        client.get(fact.id, kind="fact")
    history = client.fact_history(fact.id)
    assert history.current is None
    assert [(v.ended, v.ended_origin) for v in history.versions] == [("expired", "maintenance")]
    restored = client.restore_fact(fact.id, 1)
    assert (restored.content, restored.expires_at) == (fact.content, None)  # past: dropped
    client.delete(fact.id, kind="fact", purge=True)


def test_session_writes_and_revert(client: Client, model: ScriptedModelServer) -> None:
    tag = uuid.uuid4().hex[:10]
    session = f"w-{tag}"
    key = f"home-{tag}"
    kept = client.create_fact(f"Lives in Porto {tag}", key=key)
    model.script(
        CallTools(
            [
                ("remember", {"content": f"Lives in Lisbon {tag}", "key": key}),
                ("remember", {"content": f"Learns Finnish {tag}"}),
            ]
        ),
        Reply("Noted: Lisbon and Finnish."),
    )
    reply = client.chat(session, "I moved to Lisbon and I am learning Finnish.")
    assert reply.episode_id is not None and model.pending == 0
    (new,) = client.list(MemoryFilter(kind="fact", text=f"Learns Finnish {tag}")).items

    writes = client.session_writes(session)
    assert isinstance(writes, SessionWrites) and writes.session_id == session
    assert {m.id for m in writes.memories} == {kept.id, new.id, reply.episode_id}
    assert all(m.session_id == session for m in writes.memories)
    by_id = {m.id: m for m in writes.memories}
    assert (by_id[kept.id].content, by_id[kept.id].version) == (f"Lives in Lisbon {tag}", 2)
    for written in (by_id[kept.id], by_id[new.id]):
        assert written.origin == "agent" and written.turn_id is not None
        assert written.message_ids and written.tool_call_id
    assert by_id[reply.episode_id].origin == "turn"
    assert [(v.fact_id, v.content, v.ended, v.ended_session_id) for v in writes.ended] == [
        (kept.id, kept.content, "updated", session)
    ]
    nobody = client.session_writes(unique("nobody").replace(" ", "-"))
    assert (nobody.memories, nobody.ended) == ((), ())

    with pytest.raises(ValidationError) as unconfirmed:
        client.revert_session(session, confirm=False)
    assert unconfirmed.value.field == "confirm"
    assert client.session_writes(session) == writes

    report = client.revert_session(session, confirm=True)
    assert isinstance(report, RevertReport)
    assert report.restored == (kept.id,) and report.skipped == ()
    assert sorted(report.deleted) == sorted([new.id, reply.episode_id])
    home = client.get(kept.id, kind="fact")
    assert (home.content, home.origin) == (kept.content, "api")
    with pytest.raises(NotFoundError):
        client.get(new.id, kind="fact")
    with pytest.raises(NotFoundError):
        client.get(reply.episode_id, kind="episode")
    assert client.session_writes(session).memories == ()
    # What was undone stays in history: the session's value among it.
    assert client.fact_history(kept.id).versions[0].content == f"Lives in Lisbon {tag}"
    client.delete_session(session)
    client.delete(kept.id, kind="fact", purge=True)


def test_session_items(client: Client) -> None:
    session = f"i-{uuid.uuid4().hex[:10]}"
    items: list[dict[str, object]] = [
        {"role": "user", "content": "What is six times seven?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "multiply",
            "arguments": '{"a": 6, "b": 7}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is 42."}],
        },
    ]
    assert client.list_items(session) == ItemPage(items=(), next_after_id=None)
    ids = client.add_items(session, items)
    assert len(ids) == 4 and list(ids) == sorted(ids)
    assert client.get_session(session).session_id == session  # created by the first write
    everything = client.list_items(session)
    assert everything == ItemPage(
        items=tuple(SessionItem(id=i, item=item) for i, item in zip(ids, items, strict=True)),
        next_after_id=None,
    )
    first = client.list_items(session, limit=3)
    assert first.items == everything.items[:3] and first.next_after_id == ids[2]
    rest = client.list_items(session, after_id=first.next_after_id, limit=3)
    assert rest.items == everything.items[3:] and rest.next_after_id is None
    assert list(client.iter_items(session, page_size=1)) == list(everything.items)
    assert client.list_items(session, last=2) == ItemPage(everything.items[2:], None)
    roles = [m.role for m in client.list_messages(session).items]
    assert roles == ["user", "assistant", "tool", "assistant"]

    (secret_id,) = client.add_items(session, [{"role": "user", "content": CORPUS[0].sentence}])
    (stored,) = client.list_items(session, last=1).items
    assert stored.id == secret_id
    assert CORPUS[0].value not in str(stored.item) and "[REDACTED:" in str(stored.item)

    with pytest.raises(ValidationError) as empty:
        client.add_items(session, [])
    assert empty.value.field == "items"
    with pytest.raises(ValidationError) as last:
        client.list_items(session, last=0)
    assert last.value.field == "last"

    assert client.pop_item(session) == stored.item
    assert client.pop_item(session) == items[-1]
    assert [i.id for i in client.iter_items(session)] == list(ids[:3])
    client.clear_items(session)
    assert client.list_items(session).items == ()
    assert client.pop_item(session) is None
    assert client.get_session(session).session_id == session  # the session stays
    client.clear_items(unique("never-was").replace(" ", "-"))  # a no-op, not a 404
    client.delete_session(session)


def test_from_env(server: ServeProcess, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {"POPAGENT_URL": server.base_url, "POPAGENT_TOKEN_FILE": str(token_file)}
    with Client.from_env(env=env) as configured:
        assert configured.base_url == server.base_url
        assert configured.info().resource_id == RESOURCE
    with Client.from_env(server.base_url, env={}) as anonymous, pytest.raises(UnauthorizedError):
        anonymous.info()


def test_5xx_is_a_server_error_in_one_sentence(database_url: str, tmp_path: Path) -> None:
    """A server without a model answers chat with 503; no token on a loopback server."""
    env = clean_env(tmp_path, POPAGENT_DATABASE_URL=database_url, POPAGENT_EMBEDDER="none")
    bare = ServeProcess(tmp_path / "unused", tmp_path, resource_id=f"{RESOURCE}-bare", env=env)
    try:
        bare.start()
        with Client(bare.base_url) as anonymous:
            assert anonymous.info().model is None
            for attempt in (
                lambda: anonymous.chat("s", "hello"),
                lambda: list(anonymous.chat_stream("s", "hello")),
            ):
                with pytest.raises(ServerError) as unavailable:
                    attempt()
                assert unavailable.value.status == 503
                assert unavailable.value.error == "unavailable"
                message = str(unavailable.value)
                assert message.startswith("chat (POST /api/sessions/s/chat) answered 503")
                assert "POPAGENT_MODEL" in message and "\n" not in message
            assert anonymous.list_sessions().items == ()  # the refused turns wrote nothing
    finally:
        bare.stop()


# --- AsyncClient ------------------------------------------------------------------------------


async def test_async_client_covers_the_api(
    server: ServeProcess, model: ScriptedModelServer
) -> None:
    tag = uuid.uuid4().hex[:10]
    session = f"a-{tag}"
    async with AsyncClient(server.base_url, token=TOKEN, timeout=10, chat_timeout=30) as client:
        assert (await client.health()).ok
        assert (await client.info()).resource_id == RESOURCE

        fact = await client.create_fact(f"Async fact about otters {tag}", key=f"otters-{tag}")
        assert await client.get(fact.id, kind="fact") == fact
        assert await client.get(fact.id) == fact
        assert (await client.list(MemoryFilter(kind="fact", key=f"otters-{tag}"))).items == (fact,)
        assert [m async for m in client.iter(MemoryFilter(kind="fact", text=tag, limit=1))] == [
            fact
        ]
        changed = await client.update_fact(fact.id, importance=0.25)
        assert changed.importance == 0.25
        with pytest.raises(ValidationError) as bad:
            await client.create_fact("x" * 3000)
        assert bad.value.field == "content"
        with pytest.raises(ConflictError):
            await client.create_fact(f"Another {tag}", key=f"otters-{tag}")

        preview = await client.recall(f"otters {tag}")
        assert preview.results[0].memory.id == fact.id

        model.script(Reply("Otters hold hands while sleeping."), Reply("Streamed otter words."))
        reply = await client.chat(session, "Tell me about otters")
        assert reply.reply == "Otters hold hands while sleeping."
        assert reply.recalled and reply.recalled[0].memory.id == fact.id
        events = [e async for e in client.chat_stream(session, "More, streamed")]
        assert "".join(e.text for e in events if isinstance(e, ChatDelta)) == (
            "Streamed otter words."
        )
        assert isinstance(events[-1], ChatReply)
        model.script(Fail(500))
        with pytest.raises(TurnFailedError):
            async with contextlib.aclosing(client.chat_stream(session, "fails")) as stream:
                async for _ in stream:
                    pass

        assert reply.episode_id is not None
        episode = await client.get(reply.episode_id, kind="episode")
        assert episode.session_id == session
        episodes = MemoryFilter(kind="episode", session_id=session)
        assert len((await client.list(episodes)).items) == 2
        assert len([e async for e in client.iter(replace(episodes, limit=1, offset=1))]) == 1
        assert len((await client.list(MemoryFilter(session_id=session))).items) == 2
        assert len([m async for m in client.iter(MemoryFilter(session_id=session))]) == 2

        assert (await client.get_session(session)).session_id == session
        assert session in {s.session_id async for s in client.iter_sessions(page_size=200)}
        assert (await client.list_sessions()).items
        assert (await client.rename_session(session, "Otters")).title == "Otters"
        page = await client.list_messages(session, limit=2)
        assert len(page.items) == 2 and page.next_after_id is not None
        history = [m async for m in client.iter_messages(session, page_size=2)]
        assert [m.role for m in history][:4] == ["user", "assistant", "user", "assistant"]
        assert history[-1].content == "fails"  # a failed turn's message stays
        assert (await client.observations(session)).session_id == session

        settings = await client.update_settings({"observation_threshold_tokens": 25_000})
        assert settings.value("observation_threshold_tokens") == 25_000
        assert (await client.get_settings()).version == settings.version
        assert (await client.reset_settings()).value("observation_threshold_tokens") == 30_000
        assert isinstance(await client.maintain(), MaintenanceReport)

        with pytest.raises(ValidationError) as no_history:
            await client.delete(episode.id, purge=True)
        assert no_history.value.field == "purge"
        await client.delete(episode.id)  # no kind: learnt from the episode itself
        with pytest.raises(NotFoundError):
            await client.get(episode.id)
        await client.delete_session(session)
        with pytest.raises(NotFoundError):
            await client.get_session(session)
        await client.delete(fact.id, kind="fact")
        with pytest.raises(NotFoundError):
            await client.get(fact.id, kind="fact")
        assert await client.cleanup(confirm=True, kind="episode") >= 1
        assert [
            m async for m in apaged(lambda o: client.list(MemoryFilter(kind="episode", offset=o)))
        ] == []

    async with AsyncClient(server.base_url, token="not-the-token-0123456789") as stranger:
        with pytest.raises(UnauthorizedError):
            await stranger.list()
    async with AsyncClient(f"http://127.0.0.1:{free_port()}", timeout=2) as nowhere:
        with pytest.raises(TransportError):
            await nowhere.health()
    assert model.pending == 0


async def test_async_client_history_writes_items(
    server: ServeProcess, model: ScriptedModelServer
) -> None:
    tag = uuid.uuid4().hex[:10]
    session = f"ah-{tag}"
    later = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    async with AsyncClient(server.base_url, token=TOKEN, timeout=10, chat_timeout=30) as client:
        fact = await client.create_fact(f"Async heron fact {tag}", key=f"heron-{tag}")
        dated = await client.update_fact(fact.id, content=f"Async heron v2 {tag}", expires_at=later)
        assert (dated.version, dated.expires_at) == (2, later)
        cleared = await client.update_fact(fact.id, expires_at=None)
        assert (cleared.version, cleared.expires_at) == (3, None)
        history = await client.fact_history(fact.id)
        assert history.current == cleared
        assert [(v.version, v.expires_at) for v in history.versions] == [(2, later), (1, None)]
        restored = await client.restore_fact(fact.id, 1)
        assert (restored.content, restored.version) == (fact.content, 4)
        with pytest.raises(NotFoundError):
            await client.restore_fact(fact.id, 50)
        await client.delete(fact.id, kind="fact")
        gone = await client.fact_history(fact.id)
        assert gone.current is None and gone.versions[0].ended == "deleted"
        back = await client.restore_fact(fact.id, gone.versions[0].version)
        assert back.id == fact.id
        await client.delete(fact.id, kind="fact", purge=True)
        with pytest.raises(NotFoundError):
            await client.fact_history(fact.id)
        with pytest.raises(ValidationError) as past:
            await client.create_fact(unique("Over"), expires_at=datetime.now(UTC) - timedelta(1))
        assert past.value.field == "expires_at"
        expiring = await client.create_fact(f"Async expiring {tag}", expires_at=later)
        assert expiring.expires_at == later
        assert (await client.maintain()).expired_facts == 0  # a day away: stays
        await client.delete(expiring.id, kind="fact", purge=True)

        # A turn's episode is the session's write; reverting deletes it.
        model.script(Reply("Herons stand very still."))
        reply = await client.chat(session, "Tell me about herons")
        assert reply.episode_id is not None
        writes = await client.session_writes(session)
        assert [m.id for m in writes.memories] == [reply.episode_id] and writes.ended == ()
        with pytest.raises(ValidationError) as unconfirmed:
            await client.revert_session(session, confirm=False)
        assert unconfirmed.value.field == "confirm"
        report = await client.revert_session(session, confirm=True)
        assert report == RevertReport(restored=(), deleted=(reply.episode_id,), skipped=())
        assert (await client.session_writes(session)).memories == ()

        items = [{"role": "user", "content": f"item {n}"} for n in range(3)]
        ids = await client.add_items(f"{session}-items", items)
        assert len(ids) == 3
        page = await client.list_items(f"{session}-items", limit=2)
        assert [i.item for i in page.items] == items[:2] and page.next_after_id == ids[1]
        assert [i.id async for i in client.iter_items(f"{session}-items", page_size=2)] == list(ids)
        assert [i.id for i in (await client.list_items(f"{session}-items", last=1)).items] == [
            ids[2]
        ]
        assert await client.pop_item(f"{session}-items") == items[2]
        await client.clear_items(f"{session}-items")
        assert await client.pop_item(f"{session}-items") is None
        assert (await client.list_items(f"{session}-items")).items == ()
        await client.delete_session(session)
        await client.delete_session(f"{session}-items")
    assert model.pending == 0


# --- RemoteBackend ----------------------------------------------------------------------------


async def test_remote_backend_remember_recall_round_trip(server: ServeProcess) -> None:
    tag = uuid.uuid4().hex[:10]
    async with AsyncClient(server.base_url, token=TOKEN) as client:
        backend = await RemoteBackend.connect(client)
        assert isinstance(backend, MemoryBackend)
        assert backend.resource_id == RESOURCE

        key = f"pet-{tag}"
        created = await backend.remember(f"The user has a cat named Miso {tag}", key=key)
        assert created.action == "created" and created.memory.key == key
        again = await backend.remember(f"The user has a cat   named Miso {tag}", key=key)
        assert again.action == "unchanged" and again.memory.id == created.memory.id
        moved = await backend.remember(f"The user has a dog named Miso {tag}", key=key.upper())
        assert moved.action == "updated" and moved.memory.id == created.memory.id
        assert moved.memory.content == f"The user has a dog named Miso {tag}"

        loose = await backend.remember(f"The user bakes bread on Sundays {tag}", importance=0.4)
        assert loose.action == "created" and loose.memory.key is None
        twin = await backend.remember(f"The user bakes bread on Sundays {tag}", importance=0.3)
        assert twin.action == "unchanged" and twin.memory.id == loose.memory.id
        raised = await backend.remember(f"The user bakes bread on Sundays {tag}", importance=0.9)
        assert raised.action == "updated" and raised.memory.importance == 0.9

        results = await backend.recall(f"dog named Miso {tag}", limit=2)
        assert results[0].memory.id == created.memory.id
        assert {m.id for m in await backend.list(MemoryFilter(text=tag))} == {
            created.memory.id,
            loose.memory.id,
        }
        assert (await backend.get(loose.memory.id)).importance == 0.9
        with pytest.raises(ValidationError) as refused:
            await backend.remember(CORPUS[0].sentence)
        assert refused.value.field == "content"
        await backend.delete(loose.memory.id)
        with pytest.raises(NotFoundError):
            await backend.get(loose.memory.id)


async def test_remote_backend_remember_with_expiry(server: ServeProcess) -> None:
    tag = uuid.uuid4().hex[:10]
    later = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    async with AsyncClient(server.base_url, token=TOKEN) as client:
        backend = await RemoteBackend.connect(client)
        key = f"trip-{tag}"
        created = await backend.remember(
            f"Is in Oslo until Friday {tag}", key=key, expires_at=later
        )
        assert created.action == "created" and created.memory.expires_at == later
        same = await backend.remember(f"Is in Oslo until Friday {tag}", key=key, expires_at=later)
        assert same.action == "unchanged" and same.memory.version == 1
        lasting = await backend.remember(f"Is in Oslo until Friday {tag}", key=key)
        assert lasting.action == "updated" and lasting.memory.expires_at is None
        assert (await client.get(created.memory.id, kind="fact")).expires_at is None

        loose = await backend.remember(f"Waters the ferns {tag}", importance=0.6)
        dated = await backend.remember(f"Waters the ferns {tag}", importance=0.2, expires_at=later)
        assert dated.action == "updated" and dated.memory.id == loose.memory.id
        assert (dated.memory.expires_at, dated.memory.importance) == (later, 0.6)  # never lowered
        again = await backend.remember(f"Waters the ferns {tag}", importance=0.2, expires_at=later)
        assert again.action == "unchanged"

        with pytest.raises(ValidationError) as past:
            await backend.remember(
                unique("Was true once"), expires_at=datetime.now(UTC) - timedelta(hours=1)
            )
        assert past.value.field == "expires_at"
        for memory in (created.memory, loose.memory):
            await client.delete(memory.id, kind="fact", purge=True)


# --- purge (last: it empties the module's resource) -------------------------------------------


async def test_purge_empties_the_resource_in_both_clients(
    client: Client, server: ServeProcess
) -> None:
    tag = uuid.uuid4().hex[:10]
    fact = client.create_fact(f"Doomed fact {tag}", key=f"doomed-{tag}")
    client.update_fact(fact.id, content=f"Doomed fact v2 {tag}")
    client.add_items(f"p-{tag}", [{"role": "user", "content": "doomed message"}])
    client.update_settings({"observation_threshold_tokens": 20_000})
    with pytest.raises(ValidationError) as unconfirmed:
        client.purge(confirm=False)
    assert unconfirmed.value.field == "confirm"
    assert client.get(fact.id, kind="fact").id == fact.id

    report = client.purge(confirm=True)
    assert isinstance(report, PurgeReport) and type(report) is LibraryPurgeReport
    assert list(report.deleted) == list(PURGE_TABLES)
    assert report.total == sum(report.deleted.values())
    assert report.count("popagent_memories") >= 1 and report.count("popagent_fact_versions") >= 1
    assert report.count("popagent_sessions") >= 1 and report.count("popagent_messages") >= 1
    assert report.count("popagent_memory_settings") == 1
    assert report.count("no_such_table") == 0
    assert report.vacuum_error is None and "popagent_sessions" in report.vacuumed
    with pytest.raises(NotFoundError):
        client.fact_history(fact.id)
    assert client.list().items == () and client.list_sessions().items == ()
    assert list(client.iter()) == []
    assert client.get_settings().value("observation_threshold_tokens") == 30_000

    async with AsyncClient(server.base_url, token=TOKEN) as aclient:
        await aclient.create_fact(f"Async doomed fact {tag}")
        with pytest.raises(ValidationError):
            await aclient.purge(confirm=False)
        again = await aclient.purge(confirm=True)
        assert again.count("popagent_memories") == 1 and again.count("popagent_sessions") == 0
        assert (await aclient.list()).items == ()
        assert [m async for m in aclient.iter()] == []


def test_recall_as_of_and_derived_facts(client: Client) -> None:
    """``as_of``/``known_at`` on recall and ``based_on`` on writes, through the blocking
    client (generated from the asyncio one) against ``popagent serve``."""
    tag = uuid.uuid4().hex[:10]
    city = client.put_fact(f"home-{tag}", f"Lives in Paris {tag}")
    between = datetime.now(UTC)  # after the first value was written, before the second
    client.put_fact(f"home-{tag}", f"Lives in Lyon {tag}")
    for moment in ({"as_of": between}, {"known_at": between.isoformat()}):
        preview = client.recall(f"where do I live {tag}?", **moment)
        facts = [r for r in preview.results if r.memory.kind == "fact"]
        assert [(r.memory.id, r.memory.content) for r in facts] == [(city.id, city.content)]
        assert facts[0].until is not None and "past value" in preview.rendered
    now = client.recall(f"where do I live {tag}?")
    assert [r.memory.content for r in now.results] == [f"Lives in Lyon {tag}"]
    with pytest.raises(ValidationError) as bad:
        client.recall("anything", as_of="whenever")
    assert bad.value.field == "as_of"

    airport = client.put_fact(f"airport-{tag}", f"Airport LYS {tag}", based_on=[f"home-{tag}"])
    lounge = client.create_fact(f"Lounge {tag}", based_on=[airport.id])
    assert airport.based_on == (f"home-{tag}",) and lounge.based_on == (airport.id,)
    client.put_fact(f"home-{tag}", f"Lives in Nice {tag}")
    stale = {m.id: m for m in client.stale(limit=1000)}
    assert stale[airport.id].stale_source == f"home-{tag}" and lounge.id in stale
    assert client.confirm(airport.id).stale_since is None
    assert airport.id not in {m.id for m in client.stale(limit=1000)}
    cleared = client.update_fact(lounge.id, based_on=[])
    assert cleared.based_on == () and cleared.stale_since is None
