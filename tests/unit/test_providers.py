"""What each provider knows: its final and error frames, streaming paths, volatile headers,
its claim on bare `/v1` requests; and an upstream of the user's, which knows them all."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from tapeproxy.doors.routing import check_path, resolve
from tapeproxy.engine.keying import RequestParts
from tapeproxy.errors import BadPath
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.framing import Dialect, never, read_frame
from tapeproxy.providers import BUILTIN, generic, mistral, openai, provider_table
from tapeproxy.providers.base import HTTP_VOLATILE_HEADERS, Provider

TOOL = generic("tool", "http://127.0.0.1:9/")
EVERY = [*BUILTIN.values(), TOOL]


def names(providers: list[Provider]) -> list[str]:
    return [p.name for p in providers]


# provider, dialect, frame, error, final
FRAMES: list[tuple[str, Dialect, str, bool, bool]] = [
    ("openai", "sse", "data: [DONE]\n\n", False, True),
    ("openai", "sse", "data:  [DONE]\r\r", False, True),
    ("openai", "sse", 'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n', False, False),
    ("openai", "sse", 'data: {"error":{"message":"overloaded"}}\n\n', True, True),
    ("openai", "sse", 'data: {"text":"an error event, [DONE]"}\n\n', False, False),
    ("openai", "sse", 'event: response.output_text.delta\ndata: {"type":"x"}\n\n', False, False),
    ("openai", "sse", 'event: response.completed\ndata: {"type":"x"}\n\n', False, True),
    ("openai", "sse", 'event: response.incomplete\ndata: {"type":"x"}\n\n', False, True),
    ("openai", "sse", 'data: {"type":"response.completed"}\n\n', False, True),
    ("openai", "sse", 'event: response.failed\ndata: {"type":"response.failed"}\n\n', True, True),
    ("openai", "sse", 'event: error\ndata: {"type":"error","code":"server_error"}\n\n', True, True),
    ("openai", "sse", 'event: message_stop\ndata: {"type":"message_stop"}\n\n', False, False),
    ("anthropic", "sse", 'event: message_delta\ndata: {"type":"message_delta"}\n\n', False, False),
    ("anthropic", "sse", 'event: message_stop\ndata: {"type":"message_stop"}\n\n', False, True),
    ("anthropic", "sse", 'data: {"type":"message_stop"}\n\n', False, True),
    ("anthropic", "sse", 'event: error\ndata: {"type":"error","error":{}}\n\n', True, True),
    ("anthropic", "sse", 'data: {"type":"error"}\n\n', True, True),
    ("anthropic", "sse", "data: [DONE]\n\n", False, False),
    ("gemini", "sse", 'data: {"candidates":[{"finishReason":"STOP"}]}\r\n\r\n', False, True),
    ("gemini", "sse", 'data: {"candidates":[{"content":{"parts":[]}}]}\r\n\r\n', False, False),
    ("gemini", "sse", 'data: {"error":{"code":503,"status":"UNAVAILABLE"}}\r\n\r\n', True, True),
    ("gemini", "sse", "data: [DONE]\n\n", False, False),
    ("ollama", "ndjson", '{"response":"hi","done":false}\n', False, False),
    ("ollama", "ndjson", '{"response":"","done":true,"eval_count":4}\n', False, True),
    ("ollama", "ndjson", '{"error":"model not found"}\n', True, True),
    ("ollama", "ndjson", '{"candidates":[{"finishReason":"STOP"}]}\n', False, False),
    ("mistral", "sse", "data: [DONE]\n\n", False, True),
    ("mistral", "sse", 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', False, False),
    ("mistral", "sse", 'data: {"error":{"message":"overloaded"}}\n\n', True, True),
]


@pytest.mark.parametrize(("name", "dialect", "frame", "error", "final"), FRAMES)
def test_each_provider_knows_its_final_and_error_frames(
    name: str, dialect: Dialect, frame: str, error: bool, final: bool
) -> None:
    meaning = read_frame(dialect, frame, BUILTIN[name].frame_signs)
    assert (meaning.error, meaning.final) == (error, final)


@pytest.mark.parametrize("provider", EVERY, ids=names(EVERY))
@pytest.mark.parametrize(
    ("frame", "error"),
    [
        ('event: error\ndata: {"message":"model overloaded","code":503}\n\n', True),
        ("event: error\r\ndata: upstream overloaded\r\n\r\n", True),
        (": keep-alive\n\n", False),
    ],
)
def test_every_provider_takes_a_generic_sse_error_event_for_a_failure(
    provider: Provider, frame: str, error: bool
) -> None:
    meaning = read_frame("sse", frame, provider.frame_signs)
    assert (meaning.error, meaning.final) == (error, error)


@pytest.mark.parametrize("provider", BUILTIN.values(), ids=list(BUILTIN))
def test_every_builtin_names_its_final_frames(provider: Provider) -> None:
    assert provider.frame_signs.final is not never


@pytest.mark.parametrize(("name", "dialect", "frame", "error", "final"), FRAMES)
def test_an_upstream_of_the_users_knows_the_frames_of_every_builtin(
    name: str, dialect: Dialect, frame: str, error: bool, final: bool
) -> None:
    meanings = [read_frame(dialect, frame, p.frame_signs) for p in BUILTIN.values()]
    meaning = read_frame(dialect, frame, TOOL.frame_signs)
    assert meaning.error is any(m.error for m in meanings)
    assert meaning.final is any(m.final for m in meanings)
    assert meaning.final >= final and meaning.error >= error


def test_only_anthropic_takes_a_ping_for_a_keep_alive() -> None:
    ping = 'event: ping\ndata: {"type": "ping"}\n\n'
    idle = {p.name: p.frame_signs.idle("ping", {"type": "ping"}, ping) for p in EVERY}
    # Anthropic on Vertex streams Anthropic's events.
    assert idle == {name: name in ("anthropic", "vertex", "tool") for name in idle}


def request(path: str, body: Any) -> RequestParts:
    payload = Payload("json", body) if body is not None else Payload("empty")
    return RequestParts("POST", "any", path, (), (), payload)


GEMINI_STREAM = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"


@pytest.mark.parametrize("provider", EVERY, ids=names(EVERY))
@pytest.mark.parametrize(
    ("body", "path", "asks"),
    [
        ({"model": "m", "stream": True}, "/v1/chat/completions", True),
        ({"model": "m", "stream": False}, "/v1/chat/completions", False),
        ({"model": "m", "stream": "yes"}, "/v1/chat/completions", False),
        ({"model": "m"}, "/v1/chat/completions", False),
        ({"contents": []}, "/v1beta/models/gemini-2.0-flash:generateContent", False),
        (None, "/v1/models", False),
    ],
)
def test_a_stream_true_body_asks_any_provider_for_a_stream(
    provider: Provider, body: Any, path: str, asks: bool
) -> None:
    assert provider.asks_to_stream(request(path, body)) is asks


@pytest.mark.parametrize("provider", EVERY, ids=names(EVERY))
def test_a_streaming_method_in_the_path_is_gemini_s_and_any_user_upstream_s(
    provider: Provider,
) -> None:
    knows = provider.name in ("gemini", "vertex", "tool")
    assert provider.stream_path(GEMINI_STREAM) is knows
    assert provider.asks_to_stream(request(GEMINI_STREAM, {"contents": []})) is knows
    assert provider.stream_path(GEMINI_STREAM + "/x") is False


@pytest.mark.parametrize("provider", EVERY, ids=names(EVERY))
@pytest.mark.parametrize(
    "header", [*sorted(HTTP_VOLATILE_HEADERS), "x-ratelimit-remaining-tokens", "x-tapeproxy-key"]
)
def test_every_provider_drops_the_volatile_http_headers(provider: Provider, header: str) -> None:
    assert provider.is_volatile(header)


# header -> the built-ins that call it volatile
OWN_VOLATILE = {
    "openai-processing-ms": {"openai", "azure"},
    "anthropic-organization-id": {"anthropic"},
    "anthropic-ratelimit-requests-remaining": {"anthropic", "vertex"},
    "mistral-correlation-id": {"mistral"},
    "x-kong-request-id": {"mistral"},
    "x-kong-upstream-latency": {"mistral"},
    "content-type": set(),
    "openai-model": set(),
    "anthropic-version": set(),
    "x-custom": set(),
}


@pytest.mark.parametrize(("header", "owners"), OWN_VOLATILE.items())
def test_a_providers_own_volatile_headers_are_its_own(header: str, owners: set[str]) -> None:
    assert {name for name, p in BUILTIN.items() if p.is_volatile(header)} == owners
    assert TOOL.is_volatile(header) is bool(owners), "a user's upstream knows them all"


ANTHROPIC_VERSION = {"anthropic-version": "2023-06-01"}


def raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """Headers as a door hands them to resolve()."""
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


@pytest.mark.parametrize(
    ("path", "headers", "upstream", "forwarded"),
    [
        ("/v1/messages", ANTHROPIC_VERSION, "anthropic", "/v1/messages"),
        ("/v1/chat/completions", {}, "openai", "/v1/chat/completions"),
        ("/v1/models", {"authorization": "Bearer x"}, "openai", "/v1/models"),
        ("/mistral/v1/chat/completions", {}, "mistral", "/v1/chat/completions"),
        ("/openai/v1/messages", ANTHROPIC_VERSION, "openai", "/v1/messages"),
        ("/tool/v1/search", ANTHROPIC_VERSION, "tool", "/v1/search"),
    ],
)
def test_a_bare_v1_request_goes_to_the_builtin_that_claims_it_else_to_openai(
    path: str, headers: dict[str, str], upstream: str, forwarded: str
) -> None:
    table = provider_table({"tool": "http://127.0.0.1:9"})
    provider, upstream_path = resolve(path, raw(headers), table)
    assert (provider.name, upstream_path) == (upstream, forwarded)


def test_a_bare_v1_request_goes_to_the_url_upstream_gave_the_builtin() -> None:
    table = provider_table({"anthropic": "http://127.0.0.1:7/", "openai": "http://127.0.0.1:8"})
    assert (
        resolve("/v1/messages", raw(ANTHROPIC_VERSION), table)[0].base_url == "http://127.0.0.1:7"
    )
    assert resolve("/v1/models", [], table)[0].base_url == "http://127.0.0.1:8"


def test_only_anthropic_claims_a_bare_v1_request() -> None:
    claims = {p.name: p.claims_bare_v1(ANTHROPIC_VERSION) for p in EVERY}
    assert claims == {name: name == "anthropic" for name in claims}
    assert not any(p.claims_bare_v1({}) for p in EVERY)


def test_an_overridden_builtin_keeps_all_it_knows_but_its_url() -> None:
    table = provider_table({"gemini": "http://127.0.0.1:9/"})
    assert table["gemini"].base_url == "http://127.0.0.1:9"
    assert table["gemini"].stream_path is BUILTIN["gemini"].stream_path
    assert table["gemini"].frame_signs is BUILTIN["gemini"].frame_signs


def test_mistral_speaks_openais_chat_shape_at_its_own_url() -> None:
    provider = mistral.PROVIDER
    assert provider.base_url == "https://api.mistral.ai"
    assert provider.error_body("cassette_miss", "m", 422) == openai.error_body(
        "cassette_miss", "m", 422
    )
    chunk = {"usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
    assert provider.usage([chunk]) == {"input_tokens": 5, "output_tokens": 2}
    assert provider.frame_signs == openai.PROVIDER.frame_signs


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/v1/models/gemini-1.5:generateContent",
        "/v1/a/.../b",  # `...` is a name, not `..`
        "/v1/a..b/c",
        "/v1/files/%41bc",  # encoded, harmless
    ],
)
def test_a_path_below_the_base_path_goes_upstream_as_it_came(path: str) -> None:
    assert check_path(path) == path


@pytest.mark.parametrize(
    "path",
    [
        "/v1/..",
        "/v1/../admin",
        "/v1/..;x/admin",
        "/v1/%2e%2e/admin",
        "/v1/%252e%252e/admin",
        "/v1/..%2fadmin",
        "/v1/a\\b",
        "/v1/a%5cb",
    ],
)
def test_a_path_that_could_reach_above_the_base_path_is_refused(path: str) -> None:
    with pytest.raises(BadPath):
        check_path(path)


@pytest.mark.parametrize("name", ["azure", "bedrock", "vertex"])
def test_a_clouds_default_url_is_one_of_the_hosts_the_forward_proxy_intercepts(name: str) -> None:
    provider = BUILTIN[name]
    host = provider.base_url.split("://", 1)[1]
    assert any(fnmatch.fnmatchcase(host, pattern) for pattern in provider.hosts)
