"""Proves tests/fakes/upstream.py speaks the providers' wire formats.

The official SDKs are pointed straight at the fake; raw HTTP is used where the
SDKs hide the wire (pings, framing, truncation, gzip) and for Gemini/Ollama.
Raw payloads are also validated strictly with the SDKs' pydantic models
(``model_validate``), which is stricter than the SDKs' own lenient parsing.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.fakes.upstream import FakeUpstream, Reply

USER_HI: Any = [{"role": "user", "content": "hi"}]
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ANTHROPIC_TOOL: Any = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ANTHROPIC_HEADERS = {"x-api-key": "sk-ant-test-fake", "anthropic-version": "2023-06-01"}


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


@pytest.fixture
def fresh() -> Iterator[FakeUpstream]:
    """A private server for tests that turn knobs."""
    with FakeUpstream() as server:
        yield server


def oai(fake: FakeUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.url + "/v1", api_key="sk-test-fake", max_retries=0)


def claude(fake: FakeUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test-fake", max_retries=0)


def raw(
    url: str, body: Any = None, headers: dict[str, str] | None = None, method: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request via urllib (no automatic decompression); returns status, headers, body bytes."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return (
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                response.read(),
            )
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def sse_events(payload: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each server-sent event; accepts LF or CRLF framing."""
    text = payload.decode().replace("\r\n", "\n")
    events = []
    for block in filter(None, text.split("\n\n")):
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields.get("event"), fields["data"]))
    return events


def ndjson(payload: bytes) -> list[Any]:
    assert payload.endswith(b"\n")
    return [json.loads(line) for line in payload.splitlines()]


# ------------------------------------------------------------------------- OpenAI chat


def test_openai_chat_non_stream(fake: FakeUpstream) -> None:
    completion = oai(fake).chat.completions.create(model="gpt-4o-mini", messages=USER_HI)
    assert completion.choices[0].message.content == "echo: hi"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == 3
    assert completion.id.startswith("chatcmpl-") and completion.created == 1700000000

    status, headers, body = raw(
        fake.url + "/v1/chat/completions", {"model": "m", "messages": USER_HI}
    )
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert body.startswith(b'{\n  "id": "chatcmpl-')  # pretty-printed like the real API
    ChatCompletion.model_validate_json(body)


def test_openai_chat_list_content_and_tool_call(fake: FakeUpstream) -> None:
    content = [{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]
    messages: Any = [{"role": "user", "content": content}]
    completion = oai(fake).chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert completion.choices[0].message.content == "echo: hello there"

    called = oai(fake).chat.completions.create(
        model="gpt-4o-mini", messages=USER_HI, tools=[WEATHER_TOOL]
    )
    choice = called.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
        "city": "Paris"
    }


def test_openai_chat_stream_text_with_usage(fake: FakeUpstream) -> None:
    stream = oai(fake).chat.completions.create(
        model="gpt-4o-mini",
        messages=USER_HI,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: hi"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert (
        len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2
    )  # several deltas
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage is not None
        and chunks[-1].usage.total_tokens == 3
    )


def test_openai_chat_stream_wire(fake: FakeUpstream) -> None:
    body = {
        "model": "m",
        "messages": USER_HI,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, headers, payload = raw(fake.url + "/v1/chat/completions", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(payload)
    assert events[-1] == (None, "[DONE]") and all(name is None for name, _ in events)
    for _, data in events[:-1]:
        ChatCompletionChunk.model_validate_json(data)
    assert json.loads(events[-2][1])["choices"] == []
    no_usage = raw(fake.url + "/v1/chat/completions", {**body, "stream_options": None})[2]
    assert all(json.loads(d)["choices"] for _, d in sse_events(no_usage)[:-1])


def test_openai_chat_stream_tool_call_helper(fake: FakeUpstream) -> None:
    with oai(fake).chat.completions.stream(
        model="gpt-4o-mini", messages=USER_HI, tools=[WEATHER_TOOL]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    assert kinds.count("tool_calls.function.arguments.delta") >= 2
    assert "tool_calls.function.arguments.done" in kinds
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    function = choice.message.tool_calls[0].function
    assert function.name == "get_weather"
    assert json.loads(function.arguments) == {"city": "Paris"} and function.parsed_arguments == {
        "city": "Paris"
    }


# ---------------------------------------------------------------- OpenAI other routes


def test_openai_responses_create(fake: FakeUpstream) -> None:
    response = oai(fake).responses.create(model="gpt-4o-mini", input="hi")
    assert response.output_text == "echo: hi" and response.status == "completed"
    assert response.usage is not None and response.usage.total_tokens == 3
    listed = oai(fake).responses.create(
        model="gpt-4o-mini", input=[{"role": "user", "content": "list"}]
    )
    assert listed.output_text == "echo: list"
    body = raw(fake.url + "/v1/responses", {"model": "m", "input": "hi"})[2]
    Response.model_validate_json(body)


def test_openai_responses_stream_helper(fake: FakeUpstream) -> None:
    with oai(fake).responses.stream(
        model="gpt-4o-mini", input=[{"role": "user", "content": "hi"}]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "echo: hi"
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds.count("response.output_text.delta") >= 2
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_openai_responses_create_stream_wire(fake: FakeUpstream) -> None:
    events = list(oai(fake).responses.create(model="gpt-4o-mini", input="hi", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "echo: hi"

    payload = raw(fake.url + "/v1/responses", {"model": "m", "input": "hi", "stream": True})[2]
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for name, data in sse_events(payload):
        assert json.loads(data)["type"] == name
        adapter.validate_json(data)


def test_openai_embeddings(fake: FakeUpstream) -> None:
    default = oai(fake).embeddings.create(
        model="text-embedding-3-small", input="hi"
    )  # SDK asks for base64
    floats = oai(fake).embeddings.create(
        model="text-embedding-3-small", input="hi", encoding_format="float"
    )
    assert len(default.data[0].embedding) == 8
    assert default.data[0].embedding == floats.data[0].embedding
    many = oai(fake).embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert [d.index for d in many.data] == [0, 1] and many.data[0].embedding != many.data[
        1
    ].embedding
    body = {"model": "text-embedding-3-small", "input": ["a", "b"], "encoding_format": "float"}
    CreateEmbeddingResponse.model_validate_json(raw(fake.url + "/v1/embeddings", body)[2])


def test_openai_models_list(fake: FakeUpstream) -> None:
    ids = [model.id for model in oai(fake).models.list()]
    assert ids == ["gpt-4o-mini", "text-embedding-3-small"]


# -------------------------------------------------------------------------- Anthropic


def test_anthropic_messages_create(fake: FakeUpstream) -> None:
    message = claude(fake).messages.create(model="claude-fake", max_tokens=64, messages=USER_HI)
    assert message.content[0].type == "text" and message.content[0].text == "echo: hi"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 2
    status, _, body = raw(
        fake.url + "/v1/messages", {"model": "c", "messages": USER_HI}, ANTHROPIC_HEADERS
    )
    assert status == 200 and b"\n" not in body  # compact JSON
    Message.model_validate_json(body)


def test_anthropic_messages_stream(fake: FakeUpstream) -> None:
    with claude(fake).messages.stream(
        model="claude-fake", max_tokens=64, messages=USER_HI
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == "echo: hi"
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 2
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds


def test_anthropic_stream_wire_has_ping(fake: FakeUpstream) -> None:
    body = {"model": "c", "max_tokens": 9, "messages": USER_HI, "stream": True}
    status, headers, payload = raw(fake.url + "/v1/messages", body, ANTHROPIC_HEADERS)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(payload)
    names = [name for name, _ in events]
    assert (
        names[:3] == ["message_start", "content_block_start", "ping"] and names.count("ping") == 1
    )
    assert names[-4:] == [
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    for name, data in events:
        assert json.loads(data)["type"] == name
        if name != "ping":  # the SDK drops pings before parsing
            adapter.validate_json(data)


def test_anthropic_tool_use(fake: FakeUpstream) -> None:
    client = claude(fake)
    message = client.messages.create(
        model="c", max_tokens=64, messages=USER_HI, tools=[ANTHROPIC_TOOL]
    )
    block = message.content[0]
    assert message.stop_reason == "tool_use"
    assert (
        block.type == "tool_use"
        and block.name == "get_weather"
        and block.input == {"city": "Paris"}
    )
    with client.messages.stream(
        model="c", max_tokens=64, messages=USER_HI, tools=[ANTHROPIC_TOOL]
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert len([d for d in deltas if d.type == "input_json_delta" and d.partial_json]) >= 2
    streamed = final.content[0]
    assert (
        streamed.type == "tool_use"
        and streamed.input == {"city": "Paris"}
        and final.stop_reason == "tool_use"
    )


def test_anthropic_requires_auth_headers(fake: FakeUpstream) -> None:
    url, body = fake.url + "/v1/messages", {"model": "c", "max_tokens": 9, "messages": USER_HI}
    status, _, payload = raw(url, body, {"anthropic-version": "2023-06-01"})
    assert status == 401
    assert json.loads(payload) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "x-api-key header is required"},
    }
    assert raw(url, body, {"x-api-key": "k"})[0] == 401
    assert raw(url, body, ANTHROPIC_HEADERS)[0] == 200
    with pytest.raises(anthropic.AuthenticationError):
        claude(fake).messages.create(
            model="c",
            max_tokens=9,
            messages=USER_HI,
            extra_headers={"anthropic-version": ""},
        )


# ---------------------------------------------------------------------- Gemini, Ollama


def test_gemini_generate_content(fake: FakeUpstream) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    status, headers, payload = raw(
        fake.url + "/v1beta/models/gemini-2.0-flash:generateContent", body
    )
    answer = json.loads(payload)
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert answer["candidates"][0]["content"] == {"parts": [{"text": "echo: hi"}], "role": "model"}
    assert (
        answer["candidates"][0]["finishReason"] == "STOP"
        and answer["modelVersion"] == "gemini-2.0-flash"
    )
    assert answer["usageMetadata"]["totalTokenCount"] == 3


def test_gemini_stream_sse_and_array(fake: FakeUpstream) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    url = fake.url + "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
    status, headers, payload = raw(url + "?alt=sse", body)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert payload.endswith(b"}\r\n\r\n") and b"[DONE]" not in payload
    chunks = [json.loads(data) for _, data in sse_events(payload)]
    assert len(chunks) >= 2 and all("usageMetadata" in c for c in chunks)
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "echo: hi"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "finishReason" not in chunks[0]["candidates"][0]
    assert json.loads(raw(url, body)[2]) == chunks  # without alt=sse: one JSON array


def test_ollama_chat_and_generate(fake: FakeUpstream) -> None:
    status, headers, payload = raw(
        fake.url + "/api/chat", {"model": "llama3.2", "messages": USER_HI}
    )
    assert status == 200 and headers["content-type"] == "application/x-ndjson"
    lines = ndjson(payload)
    assert "".join(line["message"]["content"] for line in lines) == "echo: hi"
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["prompt_eval_count"] == 1 and lines[-1]["eval_count"] == 2
    assert lines[-1]["done_reason"] == "stop"

    lines = ndjson(raw(fake.url + "/api/generate", {"model": "llama3.2", "prompt": "yo"})[2])
    assert "".join(line["response"] for line in lines) == "echo: yo" and lines[-1]["done"] is True

    single = raw(
        fake.url + "/api/chat", {"model": "llama3.2", "messages": USER_HI, "stream": False}
    )
    answer = json.loads(single[2])
    assert (
        answer["message"]["content"] == "echo: hi"
        and answer["done"] is True
        and answer["eval_count"] == 2
    )


# ------------------------------------------------------------------- generic and test API


def test_generic_tool_api(fake: FakeUpstream) -> None:
    status, _, payload = raw(fake.url + "/search?q=cats&limit=2")
    assert status == 200
    assert json.loads(payload) == {
        "path": "/search",
        "method": "GET",
        "query": {"q": "cats", "limit": "2"},
        "echo": None,
    }
    posted = json.loads(raw(fake.url + "/tool/run", {"x": 1})[2])
    assert posted == {"path": "/tool/run", "method": "POST", "query": {}, "echo": {"x": 1}}


def test_every_response_has_volatile_headers(fake: FakeUpstream) -> None:
    first = raw(fake.url + "/search")[1]
    second = raw(fake.url + "/search")[1]
    assert (
        first["x-request-id"].startswith("req_") and first["x-request-id"] != second["x-request-id"]
    )
    assert "date" in first


def test_script_overrides_then_falls_back(fresh: FakeUpstream) -> None:
    error = {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    fresh.script(
        "/v1/chat/completions",
        Reply(status=429, body=error, headers={"retry-after": "0"}),
        Reply(body="plain text", headers={"Content-Type": "text/x-custom"}),
    )
    with pytest.raises(openai.RateLimitError):
        oai(fresh).chat.completions.create(model="m", messages=USER_HI)
    status, headers, payload = raw(
        fresh.url + "/v1/chat/completions", {"model": "m", "messages": USER_HI}
    )
    assert (status, headers["content-type"], payload) == (200, "text/x-custom", b"plain text")
    assert (
        oai(fresh).chat.completions.create(model="m", messages=USER_HI).choices[0].message.content
        == "echo: hi"
    )


def test_count_and_hits(fresh: FakeUpstream) -> None:
    assert fresh.count() == 0
    oai(fresh).models.list()
    raw(fresh.url + "/search?q=1")
    raw(fresh.url + "/search", {"a": 1})
    assert fresh.count() == 3 and fresh.count("/search") == 2 and fresh.count("/v1/models") == 1
    hit = fresh.hits[1]
    assert (hit.method, hit.path, hit.query, hit.json()) == ("GET", "/search", {"q": "1"}, None)
    assert fresh.hits[0].headers["authorization"] == "Bearer sk-test-fake"
    assert fresh.hits[2].json() == {"a": 1}


# ------------------------------------------------------------------------ stream knobs


def test_frame_delay_is_visible_in_frames_sent(fresh: FakeUpstream) -> None:
    fresh.frame_delay = 0.05
    raw(fresh.url + "/api/chat", {"model": "m", "messages": USER_HI})
    gaps = [b - a for a, b in zip(fresh.frames_sent, fresh.frames_sent[1:], strict=False)]
    assert len(fresh.frames_sent) == 3 and all(gap >= 0.045 for gap in gaps)
    fresh.frame_delay = 0.0
    raw(fresh.url + "/api/chat", {"model": "m", "messages": USER_HI})
    assert fresh.frames_sent[-1] - fresh.frames_sent[0] < 0.05


def test_cut_after_truncates_the_body(fresh: FakeUpstream) -> None:
    fresh.cut_after = 2
    with pytest.raises(openai.APIConnectionError):
        list(oai(fresh).chat.completions.create(model="m", messages=USER_HI, stream=True))

    async def read_raw() -> bytes:
        async with aiohttp.ClientSession() as session:
            body = {"model": "m", "messages": USER_HI, "stream": True}
            async with session.post(fresh.url + "/v1/chat/completions", json=body) as response:
                assert response.status == 200
                return await response.read()

    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(read_raw())
    assert len(fresh.frames_sent) == 2


def test_stream_error_after_anthropic(fresh: FakeUpstream) -> None:
    fresh.stream_error_after = 3
    client = claude(fresh)
    with (
        pytest.raises(anthropic.APIStatusError, match="overloaded_error"),
        client.messages.stream(model="c", max_tokens=9, messages=USER_HI) as stream,
    ):
        stream.get_final_message()
    body = {"model": "c", "max_tokens": 9, "messages": USER_HI, "stream": True}
    events = sse_events(raw(fresh.url + "/v1/messages", body, ANTHROPIC_HEADERS)[2])
    assert len(events) == 4 and events[-1][0] == "error"
    assert json.loads(events[-1][1]) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_stream_error_after_openai_chat(fresh: FakeUpstream) -> None:
    fresh.stream_error_after = 2
    with pytest.raises(openai.APIError, match="overloaded"):
        list(oai(fresh).chat.completions.create(model="m", messages=USER_HI, stream=True))
    events = sse_events(
        raw(
            fresh.url + "/v1/chat/completions", {"model": "m", "messages": USER_HI, "stream": True}
        )[2]
    )
    assert (
        len(events) == 3 and "error" in json.loads(events[-1][1]) and "[DONE]" not in events[-1][1]
    )


def test_stop_refuses_connections_and_is_idempotent() -> None:
    server = FakeUpstream().start()
    url = server.url
    assert raw(url + "/ping")[0] == 200
    server.stop()
    server.stop()
    with pytest.raises(urllib.error.URLError) as caught:
        raw(url + "/ping")
    assert isinstance(caught.value.reason, ConnectionRefusedError)


# ------------------------------------------------------------------ determinism, gzip


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": USER_HI}, {}),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": USER_HI, "stream": True, "tools": [WEATHER_TOOL]},
            {},
        ),
        ("/v1/responses", {"model": "m", "input": "hi", "stream": True}, {}),
        ("/v1/embeddings", {"model": "m", "input": "hi", "encoding_format": "base64"}, {}),
        ("/v1/messages", {"model": "c", "messages": USER_HI, "stream": True}, ANTHROPIC_HEADERS),
        (
            "/v1beta/models/g:streamGenerateContent?alt=sse",
            {"contents": [{"parts": [{"text": "hi"}]}]},
            {},
        ),
        ("/api/generate", {"model": "m", "prompt": "hi"}, {}),
    ],
)
def test_identical_requests_get_identical_bytes(
    fake: FakeUpstream, path: str, body: dict[str, Any], headers: dict[str, str]
) -> None:
    first = raw(fake.url + path, body, headers)
    second = raw(fake.url + path, body, headers)
    assert first[0] == 200 and first[2] == second[2]
    other = raw(fake.url + path, {**body, "model": "other"}, headers)
    assert other[2] != first[2]


def test_gzip_mode() -> None:
    with FakeUpstream(gzip=True) as server:
        url, body = server.url + "/v1/chat/completions", {"model": "m", "messages": USER_HI}
        status, headers, payload = raw(url, body)
        assert status == 200 and headers["content-encoding"] == "gzip"
        assert (
            json.loads(gzip.decompress(payload))["choices"][0]["message"]["content"] == "echo: hi"
        )
        assert raw(url, body)[2] == payload  # deterministic (mtime=0)
        streamed = raw(url, {**body, "stream": True})
        assert "content-encoding" not in streamed[1] and streamed[2].endswith(b"data: [DONE]\n\n")
        assert (
            oai(server)
            .chat.completions.create(model="m", messages=USER_HI)
            .choices[0]
            .message.content
            == "echo: hi"
        )
