"""The model layer through the real SDK client against a scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from popagent.errors import ValidationError
from popagent.llm import (
    DEFAULT_BASE_URL,
    ChatMessage,
    ChatModel,
    FilePart,
    ImagePart,
    ModelError,
    ModelSettings,
    OpenAIChatModel,
    ToolCall,
    ToolSpec,
)
from tests.scripted_model import CallTools, Fail, Hang, Reply, Respond, ScriptedModelServer, Step

Connect = Callable[..., OpenAIChatModel]

HELLO = (ChatMessage("system", "You are terse."), ChatMessage("user", "Say hello."))
RECALL = ToolSpec(
    "recall",
    "Search long-term memory.",
    {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)


@pytest.fixture
def server(scripted: ScriptedModelServer) -> ScriptedModelServer:
    """The suite's scripted model server (``conftest.py``), by this file's name for it."""
    return scripted


@pytest.fixture
async def connect(server: ScriptedModelServer) -> AsyncIterator[Connect]:
    """Makes clients for the scripted server; closes them all after the test."""
    made: list[OpenAIChatModel] = []

    def make(**overrides: Any) -> OpenAIChatModel:
        fields: dict[str, Any] = {
            "base_url": server.base_url,
            "api_key": None,
            "model": "scripted-1",
            "timeout_s": 5.0,
            "connect_timeout_s": 2.0,
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
        }
        model = OpenAIChatModel(ModelSettings(**(fields | overrides)))
        made.append(model)
        return model

    yield make
    for model in made:
        await model.aclose()


class Collector:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    async def __call__(self, text: str) -> None:
        self.deltas.append(text)


async def test_client_satisfies_the_protocol() -> None:
    settings = ModelSettings(base_url="http://localhost:11434/v1", api_key=None, model="llama3.1")
    async with OpenAIChatModel(settings) as client:
        model: ChatModel = client
        assert model.provider == "localhost:11434"
        assert model.model == "llama3.1"


async def test_plain_reply(server: ScriptedModelServer, connect: Connect) -> None:
    server.script(Reply("Hello."))
    model = connect()
    completion = await model.complete(HELLO)
    assert completion.message == ChatMessage("assistant", "Hello.")
    assert completion.finish_reason == "stop"
    assert completion.model == "scripted-1"
    assert completion.usage_prompt_tokens == 5
    assert completion.usage_completion_tokens == 1
    (request,) = server.requests
    assert request["model"] == "scripted-1"
    assert request["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello."},
    ]
    assert "tools" not in request
    assert not request.get("stream")
    assert model.provider == server.base_url.removeprefix("http://").removesuffix("/v1")


async def test_tool_calls_non_streaming(server: ScriptedModelServer, connect: Connect) -> None:
    server.script(CallTools([("recall", {"query": "cats"}), ("recall", {"query": "dogs"})]))
    completion = await connect().complete(HELLO, tools=[RECALL])
    calls = completion.message.tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("recall", {"query": "cats"}),
        ("recall", {"query": "dogs"}),
    ]
    assert [c.id for c in calls] == ["call_0", "call_1"]
    assert completion.message.content is None
    assert completion.finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == [RECALL.to_openai()]


async def test_tool_calls_streaming_assemble_split_arguments(
    server: ScriptedModelServer, connect: Connect
) -> None:
    long_query = {"query": "what did the user say about the garden last spring", "limit": 5}
    server.script(CallTools([("recall", long_query), ("recall", {"query": "x"})], text="Checking."))
    collect = Collector()
    completion = await connect().complete(HELLO, tools=[RECALL], on_text=collect)
    assert collect.deltas == ["Checking."]
    assert completion.message.content == "Checking."
    calls = completion.message.tool_calls
    assert [c.id for c in calls] == ["call_0", "call_1"]
    assert [json.loads(c.arguments) for c in calls] == [long_query, {"query": "x"}]
    assert completion.finish_reason == "tool_calls"
    assert completion.usage_completion_tokens == 3
    request = server.requests[0]
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}


async def test_streaming_text_deltas_arrive_in_order(
    server: ScriptedModelServer, connect: Connect
) -> None:
    server.script(Reply("The quick brown fox jumps."))
    collect = Collector()
    completion = await connect().complete(HELLO, on_text=collect)
    assert collect.deltas == ["The ", "quick ", "brown ", "fox ", "jumps."]
    assert completion.message.content == "".join(collect.deltas)
    assert completion.message.tool_calls == ()
    assert completion.finish_reason == "stop"
    assert completion.usage_prompt_tokens == 5


async def test_tool_round_trip_is_sent_in_wire_format(
    server: ScriptedModelServer, connect: Connect
) -> None:
    def answer(body: dict[str, Any]) -> Step:
        # Compute the reply from what was sent: echo the tool result.
        return Reply(f"You have {body['messages'][-1]['content']}.")

    server.script(CallTools([("recall", {"query": "pets"})]), Respond(answer))
    model = connect()
    first = await model.complete(HELLO, tools=[RECALL])
    (call,) = first.message.tool_calls
    history = [*HELLO, first.message, ChatMessage("tool", "2 cats", tool_call_id=call.id)]
    second = await model.complete(history, tools=[RECALL])
    assert second.message.content == "You have 2 cats."
    assert server.requests[1]["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "recall", "arguments": '{"query": "pets"}'},
                }
            ],
        },
        {"role": "tool", "content": "2 cats", "tool_call_id": "call_0"},
    ]


@pytest.mark.parametrize("streaming", [False, True])
async def test_transient_errors_are_retried(
    server: ScriptedModelServer, connect: Connect, streaming: bool
) -> None:
    server.script(Fail(500), Fail(429), Fail(503), Reply("finally"))
    collect = Collector()
    completion = await connect(max_retries=3).complete(
        HELLO, on_text=collect if streaming else None
    )
    assert completion.message.content == "finally"
    assert len(server.requests) == 4
    assert collect.deltas == (["finally"] if streaming else [])


async def test_retry_after_is_honoured(server: ScriptedModelServer, connect: Connect) -> None:
    server.script(Fail(429, retry_after=0.3), Reply("ok"))
    started = time.monotonic()
    await connect(backoff_max_s=5.0).complete(HELLO)
    assert time.monotonic() - started >= 0.28
    assert len(server.requests) == 2


async def test_retry_after_is_capped(server: ScriptedModelServer, connect: Connect) -> None:
    server.script(Fail(503, retry_after=60), Reply("ok"))
    started = time.monotonic()
    await connect(backoff_max_s=0.05).complete(HELLO)
    assert time.monotonic() - started < 30  # not the 60 s asked for
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(
    server: ScriptedModelServer, connect: Connect, status: int
) -> None:
    server.script(Fail(status), Reply("never sent"))
    with pytest.raises(ModelError) as caught:
        await connect(max_retries=3).complete(HELLO)
    assert len(server.requests) == 1
    error = caught.value
    assert error.retryable is False
    assert error.status_code == status
    assert error.attempts == 1
    assert f"HTTP {status}: scripted {status}" in str(error)
    assert "after 1 attempt:" in str(error)


async def test_exhausted_retries_raise_model_error(
    server: ScriptedModelServer, connect: Connect
) -> None:
    server.script(Fail(502), Fail(503), Fail(503, body={"error": {"message": "overloaded"}}))
    with pytest.raises(ModelError) as caught:
        await connect(max_retries=2).complete(HELLO)
    assert len(server.requests) == 3
    error = caught.value
    assert error.retryable is True
    assert error.status_code == 503
    assert error.attempts == 3
    assert "failed after 3 attempts: HTTP 503: overloaded" in str(error)
    assert "scripted-1" in str(error)


async def test_empty_script_fails_loudly(server: ScriptedModelServer, connect: Connect) -> None:
    with pytest.raises(ModelError, match="script exhausted"):
        await connect(max_retries=0).complete(HELLO)


@pytest.mark.parametrize("streaming", [False, True])
async def test_timeout_is_retried_then_fails(
    server: ScriptedModelServer, connect: Connect, streaming: bool
) -> None:
    # Hangs far longer than the bound: the call ends by the timeout, however busy the
    # machine, and the time it took tells the two apart with room on both sides.
    server.script(Hang(120), Hang(120))
    collect = Collector()
    started = time.monotonic()
    with pytest.raises(ModelError) as caught:
        await connect(timeout_s=0.2, max_retries=1).complete(
            HELLO, on_text=collect if streaming else None
        )
    assert time.monotonic() - started < 60
    assert len(server.requests) == 2
    assert caught.value.retryable is True
    assert caught.value.attempts == 2
    assert "timed out" in str(caught.value)
    assert collect.deltas == []


async def test_timeout_then_success(server: ScriptedModelServer, connect: Connect) -> None:
    # The bound leaves a busy machine room to answer the second request in time.
    server.script(Hang(120), Reply("on time"))
    completion = await connect(timeout_s=5, max_retries=1).complete(HELLO)
    assert completion.message.content == "on time"


async def test_connection_refused_is_retried(connect: Connect) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = connect(base_url=f"http://127.0.0.1:{port}/v1", max_retries=2)
    with pytest.raises(ModelError, match="after 3 attempts: connection failed") as caught:
        await model.complete(HELLO)
    assert caught.value.retryable is True
    assert caught.value.status_code is None


async def test_broken_stream_after_text_is_not_retried(
    server: ScriptedModelServer, connect: Connect
) -> None:
    server.script(Reply("one two three four", cut_after=2), Reply("would duplicate"))
    collect = Collector()
    with pytest.raises(ModelError) as caught:
        await connect(max_retries=3).complete(HELLO, on_text=collect)
    assert collect.deltas == ["one ", "two "]
    assert len(server.requests) == 1
    assert caught.value.retryable is False
    assert "already been streamed" in str(caught.value)


async def test_broken_stream_before_text_is_retried(
    server: ScriptedModelServer, connect: Connect
) -> None:
    server.script(Reply("lost", cut_after=0), Reply("second try"))
    collect = Collector()
    completion = await connect().complete(HELLO, on_text=collect)
    assert collect.deltas == ["second ", "try"]
    assert completion.message.content == "second try"
    assert len(server.requests) == 2


async def test_truncated_json_body_is_retried(
    server: ScriptedModelServer, connect: Connect
) -> None:
    server.script(Reply("lost", cut_after=0), Reply("whole"))
    completion = await connect().complete(HELLO)
    assert completion.message.content == "whole"
    assert len(server.requests) == 2


async def test_callback_errors_propagate_unchanged(
    server: ScriptedModelServer, connect: Connect
) -> None:
    class Stop(Exception):
        pass

    async def refuse(text: str) -> None:
        raise Stop(text)

    server.script(Reply("a b c"), Reply("unused"))
    with pytest.raises(Stop, match="a "):
        await connect().complete(HELLO, on_text=refuse)
    assert len(server.requests) == 1


async def test_temperature_is_sent_only_when_set(
    server: ScriptedModelServer, connect: Connect
) -> None:
    server.script(Reply("a"), Reply("b"))
    await connect().complete(HELLO)
    await connect(temperature=0.2).complete(HELLO)
    assert "temperature" not in server.requests[0]
    assert server.requests[1]["temperature"] == 0.2


def test_chat_message_invariants() -> None:
    with pytest.raises(ValidationError) as caught:
        ChatMessage("tool", "result")
    assert caught.value.field == "tool_call_id"
    with pytest.raises(ValidationError):
        ChatMessage("user", "hi", tool_calls=(ToolCall("c", "f", "{}"),))
    with pytest.raises(ValidationError):
        ChatMessage("user", None)
    assert ChatMessage("user", "hi", name="ann").to_openai() == {
        "role": "user",
        "content": "hi",
        "name": "ann",
    }


def test_attachments_are_content_parts_in_the_wire_form() -> None:
    message = ChatMessage(
        "user",
        "Look:",
        attachments=(
            ImagePart("https://example.test/a.png"),
            ImagePart("data:image/jpeg;base64,QUJD", "low"),
            FilePart("notes.pdf", "application/pdf", "JVBERi0="),
        ),
    )
    assert message.to_openai() == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:"},
            {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/jpeg;base64,QUJD", "detail": "low"},
            },
            {
                "type": "file",
                "file": {
                    "file_data": "data:application/pdf;base64,JVBERi0=",
                    "filename": "notes.pdf",
                },
            },
        ],
    }
    # Empty text is left out; without attachments the content stays a string.
    only = ChatMessage("user", "", attachments=(ImagePart("http://x.test/b.gif"),))
    assert only.to_openai()["content"] == [
        {"type": "image_url", "image_url": {"url": "http://x.test/b.gif"}}
    ]
    assert ChatMessage("user", "hi").to_openai()["content"] == "hi"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ImagePart("ftp://x.test/a.png"), "url"),
        (lambda: ImagePart("https://"), "url"),
        (lambda: ImagePart("data:image/png;base64,not base64!"), "url"),
        (lambda: ImagePart("data:nonsense;base64,QUJD"), "url"),
        (lambda: ImagePart("https://x.test/a.png", "huge"), "detail"),  # type: ignore[arg-type]
        (lambda: FilePart(" ", "application/pdf", "QUJD"), "filename"),
        (lambda: FilePart("a.pdf", "pdf", "QUJD"), "media_type"),
        (lambda: FilePart("a.pdf", "application/pdf", ""), "data"),
        (lambda: FilePart("a.pdf", "application/pdf", "Q"), "data"),
        (
            lambda: ChatMessage("assistant", "x", attachments=(ImagePart("https://x.test/a"),)),
            "attachments",
        ),
        (lambda: ChatMessage("user", "x", attachments=("https://x.test/a",)), "attachments"),  # type: ignore[arg-type]
    ],
)
def test_attachment_parts_are_validated(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        make()
    assert caught.value.field == field


async def test_attachments_reach_the_server(server: ScriptedModelServer, connect: Connect) -> None:
    server.script(Reply("a cat"))
    message = ChatMessage("user", "What is it?", attachments=(ImagePart("https://x.test/c.png"),))
    await connect().complete([message])
    assert server.requests[0]["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://x.test/c.png"},
    }


def test_from_env_none_when_unconfigured() -> None:
    assert ModelSettings.from_env({}) is None
    assert ModelSettings.from_env({"OPENAI_API_KEY": "sk-x", "POPAGENT_MODEL": " "}) is None


def test_from_env_reads_everything() -> None:
    settings = ModelSettings.from_env(
        {
            "POPAGENT_MODEL_BASE_URL": "http://localhost:11434/v1/",
            "POPAGENT_MODEL": "llama3.1",
            "POPAGENT_MODEL_TIMEOUT": "12.5",
            "POPAGENT_MODEL_MAX_RETRIES": "0",
        }
    )
    assert settings == ModelSettings(
        base_url="http://localhost:11434/v1",
        api_key=None,
        model="llama3.1",
        timeout_s=12.5,
        max_retries=0,
    )
    assert settings.provider == "localhost:11434"


def test_from_env_defaults_to_openai_and_falls_back_to_openai_key() -> None:
    settings = ModelSettings.from_env({"POPAGENT_MODEL": "gpt-4o-mini", "OPENAI_API_KEY": "sk-1"})
    assert settings is not None
    assert settings.base_url == DEFAULT_BASE_URL
    assert settings.api_key == "sk-1"
    assert settings.timeout_s == 60.0
    assert settings.max_retries == 3
    own = ModelSettings.from_env(
        {"POPAGENT_MODEL": "m", "POPAGENT_MODEL_API_KEY": "sk-2", "OPENAI_API_KEY": "sk-1"}
    )
    assert own is not None
    assert own.api_key == "sk-2"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POPAGENT_MODEL_TIMEOUT", "soon"),
        ("POPAGENT_MODEL_TIMEOUT", "0"),
        ("POPAGENT_MODEL_TIMEOUT", "nan"),
        ("POPAGENT_MODEL_MAX_RETRIES", "three"),
        ("POPAGENT_MODEL_MAX_RETRIES", "-1"),
        ("POPAGENT_MODEL_MAX_RETRIES", "1.5"),
        ("POPAGENT_MODEL_BASE_URL", "localhost:11434"),
    ],
)
def test_from_env_rejects_malformed_values(variable: str, value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ModelSettings.from_env({"POPAGENT_MODEL": "m", variable: value})
    assert caught.value.field == variable


def test_from_env_base_url_needs_a_model_name() -> None:
    with pytest.raises(ValidationError) as caught:
        ModelSettings.from_env({"POPAGENT_MODEL_BASE_URL": "http://localhost:8080/v1"})
    assert caught.value.field == "POPAGENT_MODEL"


async def test_api_key_is_masked() -> None:
    settings = ModelSettings(base_url=DEFAULT_BASE_URL, api_key="sk-very-secret", model="m")
    assert "sk-very-secret" not in repr(settings)
    assert "sk-very-secret" not in str(settings)
    assert "api_key='***'" in repr(settings)
    assert "api_key=None" in repr(ModelSettings(base_url=DEFAULT_BASE_URL, api_key=None, model="m"))
    async with OpenAIChatModel(settings) as model:
        assert "sk-very-secret" not in repr(model)
