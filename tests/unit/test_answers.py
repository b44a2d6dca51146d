"""What a recorded answer says, read from any stored form: tokens, model and text per dialect."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.engine.matching import diff
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange, Frame, StoredRequest, StoredResponse
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.tools.diff import view


def exchange(
    upstream: str,
    body: dict[str, Any] | None = None,
    frames: list[str] | None = None,
    dialect: str | None = None,
    request: dict[str, Any] | None = None,
    path: str = "/v1/x",
) -> Exchange:
    return Exchange(
        key="a" * 64,
        ordinal=1,
        seq=0,
        rules="r",
        request=StoredRequest(
            method="POST", upstream=upstream, path=path, body={"json": request or {}}
        ),
        response=StoredResponse(
            status=200,
            body=body,
            dialect=dialect,
            frames=None if frames is None else [Frame(ms=i, text=f) for i, f in enumerate(frames)],
        ),
    )


def sse(*payloads: Any) -> list[str]:
    return [f"data: {json.dumps(p)}\n\n" for p in payloads]


def test_openai_cached_tokens_and_responses_details_are_read() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 5}
    chat = {"usage": {**usage, "prompt_tokens_details": {"cached_tokens": 40}}}
    assert answers.tokens(exchange("openai", {"json": chat})) == Tokens(100, 5, 40)
    block = {"input_tokens": 9, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 2}}
    done = {"type": "response.completed", "response": {"usage": block}}
    streamed = exchange("openai", frames=sse({"type": "response.created"}, done), dialect="sse")
    assert answers.tokens(streamed) == Tokens(9, 3, 2)


def test_anthropic_cache_reads_and_writes_are_part_of_the_input() -> None:
    start = {
        "type": "message_start",
        "message": {
            "model": "claude-x",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 50,
                "output_tokens": 1,
            },
        },
    }
    delta = {"type": "message_delta", "usage": {"output_tokens": 20}}
    text = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}}
    found = exchange("anthropic", frames=sse(start, text, delta), dialect="sse")
    assert answers.tokens(found) == Tokens(160, 20, 100, 50)
    assert answers.model(found) == "claude-x" and answers.text(found) == "hi"
    assert found.model_copy().usage is None


def test_gemini_thinking_tokens_are_output_and_one_json_array_is_read() -> None:
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "a"}]}}], "modelVersion": "gemini-2"},
        {
            "candidates": [{"content": {"parts": [{"text": "b"}]}}],
            "usageMetadata": {
                "promptTokenCount": 7,
                "candidatesTokenCount": 2,
                "thoughtsTokenCount": 3,
                "cachedContentTokenCount": 4,
            },
        },
    ]
    path = "/v1beta/models/gemini-from-path:streamGenerateContent"
    whole = exchange("gemini", {"json": chunks}, path=path)
    assert answers.tokens(whole) == Tokens(7, 5, 4)
    assert answers.text(whole) == "ab" and answers.model(whole) == "gemini-2"
    pieces = ["[" + json.dumps(chunks[0]), "," + json.dumps(chunks[1]), "]"]
    streamed = exchange("gemini", frames=pieces, dialect="json", path=path)
    assert answers.tokens(streamed) == Tokens(7, 5, 4) and answers.text(streamed) == "ab"
    bare = exchange("gemini", {"json": {}}, path=path)
    assert answers.model(bare) == "gemini-from-path"


def test_a_json_answer_stored_as_text_still_gives_its_usage() -> None:
    text = '{"usage": {"prompt_tokens": 8, "total_tokens": 8}, "x": -0.000016}'
    assert answers.tokens(exchange("openai", {"text": text})) == Tokens(8, 0)
    assert answers.tokens(exchange("openai", {"text": "not json"})) is None


def test_ollama_and_an_upstream_of_the_users_are_read_by_the_dialect_they_speak() -> None:
    lines = [
        json.dumps({"model": "llama", "message": {"content": "he"}, "done": False}) + "\n",
        json.dumps({"message": {"content": "y"}, "done": True, "prompt_eval_count": 4}) + "\n",
    ]
    ollama = exchange("ollama", frames=lines, dialect="ndjson")
    assert answers.tokens(ollama) == Tokens(4, 0) and answers.text(ollama) == "hey"
    chat = {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 3}}
    gateway = exchange("my-gateway", {"json": chat})
    assert answers.tokens(gateway) == Tokens(3, 0) and answers.text(gateway) == "ok"


def test_readers_given_the_decoded_payloads_read_what_they_read_alone() -> None:
    """`tapeproxy ls` decodes a recording's payloads once and hands them to every reader."""
    usage = {"prompt_tokens": 7, "completion_tokens": 2}
    chunks = [{"model": "gpt-x", "choices": [{"delta": {"content": w}}]} for w in ("a", "b")]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1}}}  # fmt: skip
    result = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "2"}]}}
    recorded = [
        exchange("openai", frames=sse(*chunks, {"choices": [], "usage": usage}), dialect="sse"),
        exchange("openai", {"json": {"model": "gpt-y", "choices": [], "usage": usage}}),
        exchange("mcp", {"json": result}, request=call),
        exchange("gemini", {"json": {"candidates": []}}, path="/v1beta/models/g-1:generateContent"),
    ]
    for one in recorded:
        decoded = answers.payloads(one)
        alone = (answers.tokens(one), answers.model(one), answers.text(one), answers.tool_call(one))
        assert any(alone)
        shared = (
            answers.tokens(one, decoded),
            answers.model(one, decoded),
            answers.text(one, decoded),
            answers.tool_call(one, decoded),
        )
        assert shared == alone and decoded == answers.payloads(one)


@pytest.mark.parametrize("upstream", ["openai", "anthropic", "gemini", "ollama", "mistral"])
def test_no_usage_block_is_no_tokens_but_a_stored_usage_is_kept(upstream: str) -> None:
    assert answers.tokens(exchange(upstream, {"json": {"id": "x"}})) is None
    old = exchange(upstream, {"json": {}}).model_copy(update={"usage": {"input_tokens": 3}})
    assert answers.tokens(old) == Tokens(3, 0)


@given(
    st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=2),
    st.integers(min_value=0, max_value=999),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
)
def test_timings_and_recording_order_never_make_a_difference(
    times: list[int], seq: int, end_ms: int | None
) -> None:
    stream = sse({"choices": [{"delta": {"content": "hi"}}]}, "[DONE]")
    first = exchange("openai", frames=stream, dialect="sse")
    frames = [
        Frame(ms=ms, text=f.text) for ms, f in zip(times, first.response.frames or [], strict=True)
    ]
    response = first.response.model_copy(update={"frames": frames, "end_ms": end_ms})
    second = first.model_copy(update={"response": response, "seq": seq})
    assert diff(view(first), view(second)) == []
    assert view(first)["response"]["stream"] == {"dialect": "sse", "frames": 2, "text": "hi"}
