"""The shape of an answer (tapeproxy.exchange.shape) and two shapes compared
(tapeproxy.tools.shapediff): values never matter, paths, types, enums, grammars and tools do."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.exchange.model import Frame, StoredResponse
from tapeproxy.exchange.shape import ENUM_FIELDS, Shape, collapse, shape_of
from tapeproxy.providers import anthropic, openai
from tapeproxy.tools.shapediff import compare

SIGNS = anthropic.PROVIDER.frame_signs


def body(value: Any, status: int = 200, kind: str = "application/json") -> StoredResponse:
    return StoredResponse(status=status, headers={"content-type": kind}, body={"json": value})


def sse(*events: tuple[str | None, Any]) -> StoredResponse:
    frames = []
    for event, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        frames.append(Frame(ms=0, text=f"{head}data: {text}\n\n"))
    headers: dict[str, str | list[str]] = {"content-type": "text/event-stream; charset=utf-8"}
    return StoredResponse(status=200, headers=headers, dialect="sse", frames=frames)


def changes(before: StoredResponse, after: StoredResponse) -> set[tuple[str, str, str]]:
    found = compare(shape_of(before, SIGNS), shape_of(after, SIGNS))
    return {(c.level, c.path, c.what) for c in found}


CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}


def test_paths_generalise_arrays_and_numbers() -> None:
    shape = shape_of(body({"a": [{"b": 1}, {"b": 2.5}], "c": None}), SIGNS)
    assert shape.paths == {
        "": {"object"},
        "a": {"array"},
        "a[]": {"object"},
        "a[].b": {"number"},
        "c": {"null"},
    }
    assert shape.content_type == "application/json" and shape.body == "json"


def test_the_same_answer_with_other_values_has_no_change() -> None:
    other = json.loads(json.dumps(CHAT).replace('"hi"', '"bye"').replace("chatcmpl-1", "x"))
    other["usage"]["prompt_tokens"] = 99
    assert changes(body(CHAT), body(other)) == set()


def test_each_change_has_its_level_and_path() -> None:
    removed = {k: v for k, v in CHAT.items() if k != "usage"}
    assert changes(body(CHAT), body(removed)) == {("error", "usage", "field removed")}
    retyped = {**CHAT, "usage": {"prompt_tokens": "3", "completion_tokens": 1}}
    assert changes(body(CHAT), body(retyped)) == {("error", "usage.prompt_tokens", "field retyped")}
    nested = json.loads(json.dumps(CHAT))
    nested["choices"][0]["message"]["audio"] = {"id": "a"}
    assert changes(body(CHAT), body(nested)) == {("info", "choices[].message.audio", "field added")}
    enum = {**CHAT, "object": "chat.completion.v2"}
    assert changes(body(CHAT), body(enum)) == {("warn", "object", "enum value never seen")}
    assert changes(body(CHAT), body(CHAT, status=400)) == {("error", "status", "status changed")}
    text = body(CHAT, kind="text/json")
    assert changes(body(CHAT), text) == {("error", "content-type", "content type changed")}


def test_an_empty_list_or_a_null_is_content_not_a_change() -> None:
    calls = {"message": {"tool_calls": [{"id": "c", "type": "function"}], "content": None}}
    text = {"message": {"tool_calls": [], "content": "hello"}}
    assert changes(body(calls), body(text)) == set()
    assert changes(body(text), body(calls)) == set()


STREAM = [
    ("message_start", {"type": "message_start", "message": {"role": "assistant"}}),
    ("content_block_start", {"type": "content_block_start", "index": 0}),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "a"}}),
    ("content_block_delta", {"type": "content_block_delta", "delta": {"text": "b"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("message_stop", {"type": "message_stop"}),
]


def test_a_stream_is_a_grammar_whatever_its_frame_and_block_counts() -> None:
    shape = shape_of(sse(*STREAM), SIGNS)
    assert shape.events == (
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_stop",
    )
    assert "<content_block_delta>.delta.text" in shape.paths
    two_blocks = [*STREAM[:4], STREAM[5], STREAM[1], *STREAM[3:]]
    assert changes(sse(*STREAM), sse(*two_blocks)) == set()


def test_stream_changes() -> None:
    new = [*STREAM[:-1], ("citation", {"type": "citation"}), STREAM[-1]]
    assert changes(sse(*STREAM), sse(*new)) == {("info", "<citation>", "new event type")}
    missing = [e for e in STREAM if e[0] != "content_block_stop"]
    assert changes(sse(*STREAM), sse(*missing)) == {
        ("error", "<content_block_stop>", "event type missing")
    }
    swapped = [STREAM[1], STREAM[0], *STREAM[2:]]
    assert changes(sse(*STREAM), sse(*swapped)) == {("error", "events", "events reordered")}


def test_chat_streams_end_with_done() -> None:
    chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "x"}}]}
    shape = shape_of(sse((None, chunk), (None, chunk), (None, "[DONE]")), openai.FRAME_SIGNS)
    assert shape.events == ("message", "[DONE]")
    assert shape.enums["<message>.object"] == {"chat.completion.chunk"}


def tools(*listed: dict[str, Any]) -> StoredResponse:
    return body({"jsonrpc": "2.0", "id": 1, "result": {"tools": list(listed)}})


ADD = {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}}}}
WEATHER = {"name": "get_weather", "inputSchema": {"type": "object", "properties": {}}}


def test_tools_by_name_and_schema() -> None:
    assert changes(tools(ADD, WEATHER), tools(WEATHER, ADD)) == set()
    assert changes(tools(ADD, WEATHER), tools(ADD)) == {
        ("error", "tools.get_weather", "tool removed")
    }
    changed = {**ADD, "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    assert changes(tools(ADD, WEATHER), tools(changed, WEATHER)) == {
        ("error", "tools.add.inputSchema", "tool schema changed")
    }
    assert changes(tools(ADD), tools(ADD, WEATHER)) == {("info", "tools.get_weather", "tool added")}


def test_collapse_keeps_each_run_and_cycle_once() -> None:
    assert collapse(["a", "b", "b", "b", "c"]) == ("a", "b", "c")
    assert collapse(["s", "x", "y", "x", "y", "x", "y", "e"]) == ("s", "x", "y", "e")
    assert collapse(["a", "b", "c", "a", "b", "c"]) == ("a", "b", "c")


# Hypothesis: a JSON value's shape is its shape whatever its leaves hold, as long as each
# leaf keeps its type (enum-like fields keep their values: a new one is news by design).
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)
)
keys = st.text("abcdefgh", min_size=1, max_size=3)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=20,
)


def refill(value: Any, draw: st.DrawFn, name: str = "") -> Any:
    if isinstance(value, dict):
        return {k: refill(v, draw, k) for k, v in value.items()}
    if isinstance(value, list):
        return [refill(v, draw, name) for v in value]
    if name in ENUM_FIELDS or value is None:
        return value
    if isinstance(value, bool):
        return draw(st.booleans())
    if isinstance(value, int):
        return draw(st.integers())
    if isinstance(value, float):
        return draw(st.floats(allow_nan=False) | st.integers())
    return draw(st.text(max_size=8))


@given(values, st.data())
def test_shape_is_unchanged_by_random_leaves_of_the_same_type(value: Any, data: Any) -> None:
    other = refill(value, data.draw)
    first, second = shape_of(body(value), SIGNS), shape_of(body(other), SIGNS)
    assert first.paths == second.paths
    assert compare(first, second) == []


@given(values, st.data())
def test_a_stream_shape_is_unchanged_by_random_leaves(value: Any, data: Any) -> None:
    frames = [("delta", {"type": "delta", "v": value}), ("stop", {"type": "stop"})]
    refilled = [("delta", {"type": "delta", "v": refill(value, data.draw)}), frames[1]]
    first, second = shape_of(sse(*frames), SIGNS), shape_of(sse(*refilled), SIGNS)
    assert isinstance(first, Shape) and first.paths == second.paths
    assert compare(first, second) == []


def test_ndjson_lines_and_a_streamed_json_document() -> None:
    lines = [{"message": {"content": "a"}, "done": False}, {"done": True, "eval_count": 3}]
    frames = [Frame(ms=0, text=json.dumps(line) + "\n") for line in lines]
    headers: dict[str, str | list[str]] = {"content-type": "application/x-ndjson"}
    ndjson = StoredResponse(status=200, headers=headers, dialect="ndjson", frames=frames)
    shape = shape_of(ndjson, SIGNS)
    assert shape.body == "ndjson" and shape.events == ("message",)
    assert shape.paths["<message>.eval_count"] == {"number"}
    pieces = ['[{"candidates": [{"finishReason": null}]}', ',{"candidates": []}]']
    document = StoredResponse(
        status=200,
        headers={"content-type": "application/json"},
        dialect="json",
        frames=[Frame(ms=0, text=piece) for piece in pieces],
    )
    shape = shape_of(document, SIGNS)
    assert shape.body == "json-stream" and "<message>.candidates[].finishReason" in shape.paths


def test_a_container_retyped_is_one_change_not_one_per_field() -> None:
    assert changes(body({"usage": {"a": 1, "b": 2}}), body({"usage": [1, 2]})) == {
        ("error", "usage", "field retyped")
    }
    assert changes(body({"usage": {"a": 1}}), body({"usage": "none"})) == {
        ("error", "usage", "field retyped")
    }


TOOL_CALL = {
    "id": "chatcmpl-2",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}],
            },
        }
    ],
}


def test_an_answer_of_another_kind_is_no_error() -> None:
    """A model that calls a tool where it answered in text (or the reverse) changes its
    answer's kind, which its discriminator says (`finish_reason`, a block's `type`): the
    fields of the kind it did not give are absent, not removed, and the new value warns."""
    text = json.loads(json.dumps(TOOL_CALL))
    text["choices"][0]["finish_reason"] = "stop"
    text["choices"][0]["message"] = {"role": "assistant", "content": "hi"}
    found = changes(body(TOOL_CALL), body(text))
    assert {level for level, _, _ in found} <= {"info", "warn"}, found
    assert ("warn", "choices[].finish_reason", "enum value never seen") in found
    said = {path for _, path, _ in found}
    assert "choices[].message.tool_calls" in said
    used = {"type": "message", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}
    wrote = {"type": "message", "content": [{"type": "text", "text": "hi"}]}
    for before, after in ((used, wrote), (wrote, used)):
        found = changes(body(before), body(after))
        assert {level for level, _, _ in found} <= {"info", "warn"}, found
    # A removal the kind does not explain is still an error.
    gone = {"type": "message", "content": [{"type": "text"}]}
    assert ("error", "content[].text", "field removed") in changes(body(wrote), body(gone))
    streamed = sse(
        (
            "content_block_start",
            {"type": "content_block_start", "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "a"}},
        ),
    )
    called = sse(
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            },
        ),
    )
    found = changes(streamed, called)
    assert {level for level, _, _ in found} <= {"info", "warn"}, found


def test_a_field_recorded_only_as_null_and_left_out_is_no_error() -> None:
    """`logprobs: null`, `refusal: null`, `stop_sequence: null`: some providers leave a null
    field out; a null said nothing of a type, so its absence is content, not shape."""
    recorded = {**CHAT, "system_fingerprint": None, "logprobs": None}
    found = changes(body(recorded), body(CHAT))
    assert {level for level, _, _ in found} == {"info"}, found
    assert ("error", "usage", "field removed") in changes(
        body(CHAT), body({k: v for k, v in CHAT.items() if k != "usage"})
    )


def test_a_keep_alive_may_come_or_not() -> None:
    """Anthropic: "any number of ping events", none included."""
    start = ("message_start", {"type": "message_start", "message": {"type": "message"}})
    stop = ("message_stop", {"type": "message_stop"})
    pinged = sse(start, ("ping", {"type": "ping"}), stop)
    assert changes(pinged, sse(start, stop)) == changes(sse(start, stop), pinged) == set()


def test_a_discriminator_removed_is_itself_an_error() -> None:
    error = {"error": {"type": "invalid_request_error", "message": "no", "code": "x"}}
    untyped = {"error": {"message": "no", "code": "x"}}
    assert ("error", "error.type", "field removed") in changes(body(error), body(untyped))


def test_a_provider_that_leaves_out_defaults_drops_a_count_at_zero() -> None:
    """Gemini answers in proto3 JSON: a count at 0, an empty list is left out
    (`thoughtsTokenCount` when the model did not think, `cacheTokensDetails` on a cache
    miss). A scalar or list gone is then news (info); an object gone is still an error."""
    hit = {
        "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": {
            "promptTokenCount": 5,
            "cachedContentTokenCount": 4,
            "thoughtsTokenCount": 9,
            "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 4}],
        },
    }
    miss = json.loads(json.dumps(hit))
    for name in ("cachedContentTokenCount", "thoughtsTokenCount", "cacheTokensDetails"):
        del miss["usageMetadata"][name]
    google, others = shape_of(body(hit), SIGNS), shape_of(body(miss), SIGNS)
    assert {c.level for c in compare(google, others, omits_defaults=True)} == {"info"}
    assert {c.level for c in compare(google, others)} == {"error"}  # OpenAI's would be
    del miss["usageMetadata"]
    found = compare(google, shape_of(body(miss), SIGNS), omits_defaults=True)
    assert [(c.level, c.path) for c in found] == [("error", "usageMetadata")]


def test_a_stream_of_many_small_frames_is_shaped_in_bounded_memory() -> None:
    """Nothing is kept per frame: 20,000 chunks (2 MB of frames) are shaped in well under a
    megabyte more (keeping each decoded chunk took ten times the frames' size)."""
    delta = {"index": 0, "delta": {"content": "a"}}
    chunk = {"object": "chat.completion.chunk", "choices": [delta]}
    frames = [Frame(ms=0, text=f"data: {json.dumps(chunk)}\n\n") for _ in range(20_000)]
    stream = StoredResponse(
        status=200, headers={"content-type": "text/event-stream"}, dialect="sse", frames=frames
    )
    tracemalloc.start()
    try:
        shape = shape_of(stream, openai.FRAME_SIGNS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert shape.events == ("message",) and peak < 1_000_000, peak


def test_a_frame_nested_past_the_json_parsers_depth_has_a_shape_and_no_crash() -> None:
    """A live answer (drift sends requests again) may hold a frame nested 5,000 deep: json
    raises RecursionError there, which is no ValueError."""
    deep = "[" * 5000 + "]" * 5000
    shape = shape_of(sse((None, deep), (None, {"type": "done"})), SIGNS)
    assert shape.status == 200
