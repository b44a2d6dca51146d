"""One suite over every built-in provider, through the real server and the fake upstream: a
streamed and a JSON answer replay byte for byte; a client that hangs up at the final frame
still gets the exchange recorded; an error frame mid-stream marks it a stream error."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tapeproxy.exchange import eventframes
from tapeproxy.providers import BUILTIN
from tests.conftest import MakeProxy
from tests.fakes.upstream import FakeUpstream
from tests.support import (
    SECRET_ANTHROPIC,
    SECRET_GEMINI,
    SECRET_OPENAI,
    SECRETS,
    files_under,
    library_files,
    wait_for,
)

USER: Any = [{"role": "user", "content": "What is the weather in Paris today?"}]


@dataclass(frozen=True)
class Call:
    """One request in a provider's wire format, and for a stream how its final frame looks."""

    path: str  # below the provider's route, `/<provider>`
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    final: bytes = b""  # what the final frame holds
    tail: bytes = b""  # how the final frame ends
    apart: bool = False  # its frames are the pieces as read: the fake sends them apart


@dataclass(frozen=True)
class Wire:
    """How a client speaks to a provider: its streamed answers by name, and a JSON answer."""

    streams: Mapping[str, Call]
    answer: Call


OPENAI_KEY = {"authorization": f"Bearer {SECRET_OPENAI}"}
CHAT = "/v1/chat/completions"
CHAT_BODY = {"model": "gpt-4o-mini", "messages": USER}
CHAT_STREAM = Call(
    CHAT,
    {**CHAT_BODY, "stream": True, "stream_options": {"include_usage": True}},
    OPENAI_KEY,
    final=b"data: [DONE]",
    tail=b"\n\n",
)
OPENAI_CHAT = Wire({"chat": CHAT_STREAM}, Call(CHAT, CHAT_BODY, OPENAI_KEY))

ANTHROPIC_KEY = {"x-api-key": SECRET_ANTHROPIC, "anthropic-version": "2023-06-01"}
MESSAGES = {"model": "claude-test-1", "max_tokens": 64, "messages": USER}
GEMINI = f"/v1beta/models/gemini-test:streamGenerateContent?key={SECRET_GEMINI}"
CONTENTS = {"contents": [{"parts": [{"text": "hi there"}]}]}
OLLAMA_CHAT = {"model": "llama3", "messages": USER}
AZURE = "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-10-21"
AZURE_KEY = {"api-key": SECRET_OPENAI}
CONVERSE = "/model/anthropic.claude-3-haiku-20240307-v1:0/converse"
CONVERSE_BODY = {"messages": [{"role": "user", "content": [{"text": "hi there"}]}]}
VERTEX = "/v1/projects/my-project/locations/europe-west4/publishers"
VERTEX_KEY = {"authorization": f"Bearer {SECRET_GEMINI}"}
ON_VERTEX = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "messages": USER}

WIRES: Mapping[str, Wire] = {
    "openai": Wire(
        {
            "chat": CHAT_STREAM,
            "responses": Call(
                "/v1/responses",
                {"model": "gpt-4o-mini", "input": "hi", "stream": True},
                OPENAI_KEY,
                final=b"event: response.completed",
                tail=b"\n\n",
            ),
        },
        Call(CHAT, CHAT_BODY, OPENAI_KEY),
    ),
    "anthropic": Wire(
        {
            "messages": Call(
                "/v1/messages",
                {**MESSAGES, "stream": True},
                ANTHROPIC_KEY,
                final=b"event: message_stop",
                tail=b"\n\n",
            )
        },
        Call("/v1/messages", MESSAGES, ANTHROPIC_KEY),
    ),
    "gemini": Wire(
        {
            "sse": Call(GEMINI + "&alt=sse", CONTENTS, final=b'"finishReason"', tail=b"\r\n\r\n"),
            # Without alt=sse: one JSON array, sent piece by piece.
            "json": Call(GEMINI, CONTENTS, final=b"]", tail=b"]", apart=True),
        },
        Call(f"/v1beta/models/gemini-test:generateContent?key={SECRET_GEMINI}", CONTENTS),
    ),
    "ollama": Wire(
        {
            "chat": Call("/api/chat", OLLAMA_CHAT, final=b'"done":true', tail=b"\n"),
            "generate": Call(
                "/api/generate",
                {"model": "llama3", "prompt": "hi"},
                final=b'"done":true',
                tail=b"\n",
            ),
        },
        Call("/api/chat", {**OLLAMA_CHAT, "stream": False}),
    ),
    "azure": Wire(
        {
            "deployment": Call(AZURE, CHAT_STREAM.body, AZURE_KEY, b"data: [DONE]", b"\n\n"),
            "v1": Call(
                "/openai/v1/chat/completions", CHAT_STREAM.body, AZURE_KEY, b"data: [DONE]", b"\n\n"
            ),
        },
        Call(AZURE, CHAT_BODY, AZURE_KEY),
    ),
    # An eventstream's final message is Converse's `metadata` event.
    "bedrock": Wire(
        {"converse": Call(CONVERSE + "-stream", CONVERSE_BODY, final=b"metadata")},
        Call(CONVERSE, CONVERSE_BODY),
    ),
    "vertex": Wire(
        {
            "gemini": Call(
                f"{VERTEX}/google/models/gemini-test:streamGenerateContent?alt=sse",
                CONTENTS,
                VERTEX_KEY,
                final=b'"finishReason"',
                tail=b"\r\n\r\n",
            ),
            "gemini-json": Call(
                f"{VERTEX}/google/models/gemini-test:streamGenerateContent",
                CONTENTS,
                VERTEX_KEY,
                final=b"]",
                tail=b"]",
                apart=True,
            ),
            "anthropic": Call(
                f"{VERTEX}/anthropic/models/claude-test@1:streamRawPredict",
                {**ON_VERTEX, "stream": True},
                VERTEX_KEY,
                final=b"event: message_stop",
                tail=b"\n\n",
            ),
        },
        Call(f"{VERTEX}/google/models/gemini-test:generateContent", CONTENTS, VERTEX_KEY),
    ),
}


def wire_of(provider: str) -> Wire:
    """A provider with no wire of its own here speaks OpenAI's chat shape, as most new ones
    do (mistral): the fake serves it at the same paths. One that does not fails this suite
    until it gets a row in WIRES (and its format in tests/fakes/)."""
    return WIRES.get(provider, OPENAI_CHAT)


STREAMS = [(name, label) for name in BUILTIN for label in wire_of(name).streams]
STREAM_IDS = [f"{name}-{label}" for name, label in STREAMS]


def send(url: str, provider: str, call: Call) -> tuple[int, str, bytes]:
    """Status, content type and the body's bytes as they came over the wire."""
    route = f"{url}/{provider}{call.path}"
    headers = dict(call.headers)
    with httpx.stream("POST", route, json=call.body, headers=headers, timeout=10) as response:
        body = b"".join(response.iter_raw())
    return response.status_code, response.headers["content-type"], body


def stored(cassettes: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in library_files(cassettes) if p.suffix == ".json"]


def frames_of(exchange: dict[str, Any]) -> bytes:
    """The frames' bytes as replay sends them (an eventstream message's from its text)."""
    readable = exchange["response"]["dialect"] == "eventstream"
    return b"".join(
        (eventframes.wire(f["text"]) if readable else f["text"].encode())
        if "text" in f
        else base64.b64decode(f["base64"])
        for f in exchange["response"]["frames"]
    )


def record_then_replay(
    make_proxy: MakeProxy, fake: FakeUpstream, provider: str, call: Call
) -> tuple[tuple[int, str, bytes], tuple[int, str, bytes]]:
    """What the client got live, recording; and replaying with the upstream gone."""
    recorder = make_proxy(mode="record")
    live = send(recorder.url, provider, call)
    recorder.stop()
    fake.stop()
    replayer = make_proxy(mode="replay")
    replayed = send(replayer.url, provider, call)
    assert replayer.stats["replayed"] == 1
    return live, replayed


def assert_no_secret(cassettes: Path) -> None:
    for name, data in files_under(cassettes).items():
        assert not any(secret.encode() in data for secret in SECRETS), name


@pytest.mark.parametrize(("provider", "label"), STREAMS, ids=STREAM_IDS)
def test_a_streamed_answer_replays_byte_for_byte(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, provider: str, label: str
) -> None:
    call = wire_of(provider).streams[label]
    fake.frame_delay = 0.05 if call.apart else 0.0
    live, replayed = record_then_replay(make_proxy, fake, provider, call)
    assert live[0] == 200
    assert replayed == live
    [exchange] = stored(cassettes)
    assert (exchange["request"]["upstream"], exchange["outcome"]) == (provider, "complete")
    assert exchange["response"]["dialect"] in {"sse", "ndjson", "json", "eventstream"}
    assert len(exchange["response"]["frames"]) >= 2, "kept as frames, not one blob"
    assert frames_of(exchange) == live[2]
    assert exchange["usage"]["output_tokens"] > 0
    assert_no_secret(cassettes)


@pytest.mark.parametrize("provider", BUILTIN)
def test_a_json_answer_replays_byte_for_byte(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, provider: str
) -> None:
    live, replayed = record_then_replay(make_proxy, fake, provider, wire_of(provider).answer)
    assert live[0] == 200
    assert replayed == live
    [exchange] = stored(cassettes)
    assert (exchange["request"]["upstream"], exchange["outcome"]) == (provider, "complete")
    assert "frames" not in exchange["response"]
    assert json.loads(live[2]) == exchange["response"]["body"]["json"], "stored readable"
    assert exchange["usage"]["output_tokens"] > 0
    assert_no_secret(cassettes)


def hang_up_after_final_frame(url: str, provider: str, call: Call) -> bytes:
    """Read until the final frame is in, then close the connection, before the body's end."""
    got = b""
    route = f"{url}/{provider}{call.path}"
    headers = dict(call.headers)
    with httpx.stream("POST", route, json=call.body, headers=headers, timeout=10) as response:
        for chunk in response.iter_raw():
            got += chunk
            if call.final in got and got.endswith(call.tail):
                return got
    raise AssertionError("the stream ended before the client could hang up")


@pytest.mark.parametrize(("provider", "label"), STREAMS, ids=STREAM_IDS)
def test_a_client_that_hangs_up_after_the_final_frame_still_gets_the_exchange_recorded(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, provider: str, label: str
) -> None:
    fake.end_delay = 0.5  # the end-of-body marker comes well after the final frame
    proxy = make_proxy(mode="record")
    got = hang_up_after_final_frame(proxy.url, provider, wire_of(provider).streams[label])
    wait_for(lambda: proxy.stats["recorded"] == 1, timeout=5)
    assert proxy.stats["aborted"] == 0
    [exchange] = stored(cassettes)
    assert exchange["outcome"] == "complete"
    assert frames_of(exchange) == got


@pytest.mark.parametrize(("provider", "label"), STREAMS, ids=STREAM_IDS)
def test_an_error_frame_mid_stream_is_a_stream_error_recorded_only_when_asked(
    make_proxy: MakeProxy, fake: FakeUpstream, cassettes: Path, provider: str, label: str
) -> None:
    call = wire_of(provider).streams[label]
    fake.stream_error_after = 2  # the provider's in-band error frame in place of the third
    plain = make_proxy(mode="record", cassette="plain")
    send(plain.url, provider, call)
    plain.stop()
    assert not (cassettes / "plain").exists()
    keeper = make_proxy(mode="record", cassette="kept", record_failures=True)
    live = send(keeper.url, provider, call)
    keeper.stop()
    [exchange] = stored(cassettes / "kept")
    assert exchange["outcome"] == "stream_error"
    assert frames_of(exchange) == live[2]
