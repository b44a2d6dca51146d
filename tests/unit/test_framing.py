"""Stream framing: the same frames however the bytes arrive, every byte kept; what a frame says."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tapeproxy.exchange.framing import (
    Dialect,
    FrameSigns,
    FrameSplitter,
    dialect_for,
    ends_answer,
    frame_data,
    frame_payload,
    json_document,
    read_frame,
    read_item,
)
from tapeproxy.exchange.jsonitems import json_items


def split(dialect: Dialect, chunks: list[bytes]) -> list[bytes]:
    splitter = FrameSplitter(dialect)
    frames = [frame for chunk in chunks for frame in splitter.feed(chunk)]
    return frames + splitter.flush()


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *sorted({p % (len(data) + 1) for p in points}), len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


# Streams made of the pieces that matter to a splitter: line ends in every mix, and payload.
streams = st.lists(
    st.sampled_from(
        [b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b'data: {"a":1}', b"x", b"\xe2\x82"]
    ),
    max_size=30,
).map(b"".join)


@pytest.mark.parametrize(
    ("stream", "frames"),
    [
        (b"data: a\n\ndata: b\n\n", [b"data: a\n\n", b"data: b\n\n"]),
        (b"data: a\r\n\r\ndata: b\r\n\r\n", [b"data: a\r\n\r\n", b"data: b\r\n\r\n"]),
        (b"event: x\ndata: a\n\n: ping\n\n", [b"event: x\ndata: a\n\n", b": ping\n\n"]),
        (b"data: a\n\ndata: tail", [b"data: a\n\n", b"data: tail"]),
        (b"data: a\ndata: b\n", [b"data: a\ndata: b\n"]),
    ],
)
def test_sse_splits_on_a_blank_line(stream: bytes, frames: list[bytes]) -> None:
    assert split("sse", [stream]) == frames


@pytest.mark.parametrize(
    ("stream", "frames"),
    [
        # A line ends with CRLF, LF or CR, and the blank line after it may end another way.
        (b"data: 1\n\r\ndata: 2", [b"data: 1\n\r\n", b"data: 2"]),
        (
            b"data: 1\r\n\ndata: 2\n\r\ndata: 3\r\n\r\n",
            [b"data: 1\r\n\n", b"data: 2\n\r\n", b"data: 3\r\n\r\n"],
        ),
        (b"data: 1\r\r\ndata: 2\r\r", [b"data: 1\r\r\n", b"data: 2\r\r"]),
        (b"data: 1\r\n\rdata: 2", [b"data: 1\r\n\r", b"data: 2"]),
        (b"data: 1\rdata: 2\r\r", [b"data: 1\rdata: 2\r\r"]),
        # Each blank line ends an (empty) event of its own.
        (b"\n\ndata: a\n\n", [b"\n", b"\n", b"data: a\n\n"]),
    ],
)
def test_sse_lines_end_with_crlf_lf_or_cr_in_any_mix(stream: bytes, frames: list[bytes]) -> None:
    assert split("sse", [stream]) == frames


def test_sse_a_cr_at_the_end_of_a_read_waits_for_a_possible_lf() -> None:
    splitter = FrameSplitter("sse")
    assert splitter.feed(b"data: a\n\r") == []
    assert splitter.feed(b"\ndata: b\r") == [b"data: a\n\r\n"]
    assert splitter.feed(b"\r") == []
    assert splitter.flush() == [b"data: b\r\r"]


def test_sse_frame_waits_for_its_blank_line_across_chunks() -> None:
    splitter = FrameSplitter("sse")
    assert splitter.feed(b"data: a\r\n\r") == []
    assert splitter.feed(b"\ndata: b") == [b"data: a\r\n\r\n"]
    assert splitter.flush() == [b"data: b"]
    assert splitter.flush() == []


def test_ndjson_splits_after_each_newline() -> None:
    assert split("ndjson", [b'{"a":1}\n{"b"', b':2}\n{"c":3}']) == [
        b'{"a":1}\n',
        b'{"b":2}\n',
        b'{"c":3}',
    ]


def test_chunks_dialect_keeps_each_chunk_and_drops_empty_ones() -> None:
    assert split("chunks", [b"ab", b"", b"c"]) == [b"ab", b"c"]


@pytest.mark.parametrize("dialect", ["chunks", "json"])
def test_chunks_keep_a_character_split_across_reads_whole_in_the_next_frame(
    dialect: Dialect,
) -> None:
    text = "Grüße — 日本 ✓".encode()
    assert split(dialect, [text[:3], text[3:9], text[9:13], text[13:]]) == [
        b"Gr",
        "üße ".encode(),
        "— ".encode(),
        "日本 ✓".encode(),
    ]
    assert split(dialect, [b"ok\xe2\x82"]) == [b"ok", b"\xe2\x82"], "the rest at the end"


@given(text=st.text(max_size=40), points=st.lists(st.integers(min_value=0), max_size=12))
def test_chunks_of_utf8_text_are_utf8_text_however_it_is_split(
    text: str, points: list[int]
) -> None:
    data = text.encode()
    frames = split("chunks", cut(data, points))
    assert b"".join(frames) == data
    assert all(frame.decode() for frame in frames)


def sse_reference(data: bytes) -> list[bytes]:
    """The SSE spec read on the whole stream at once: a line ends at CRLF, LF or CR (CRLF
    taken first), and an event ends at an empty line."""
    frames, start, line_start = [], 0, 0
    for match in re.finditer(rb"\r\n|\r|\n", data):
        if match.start() == line_start:
            frames.append(data[start : match.end()])
            start = match.end()
        line_start = match.end()
    return frames + ([data[start:]] if data[start:] else [])


line_ends = st.lists(
    st.sampled_from([b"\n", b"\r", b"\r\n", b"data: x", b": c", b"event: e", b"\xc3\xa9"]),
    max_size=40,
).map(b"".join)


@given(data=line_ends, points=st.lists(st.integers(min_value=0), max_size=16))
def test_sse_frames_are_the_events_of_the_spec_however_the_stream_is_split(
    data: bytes, points: list[int]
) -> None:
    frames = split("sse", cut(data, points))
    assert frames == sse_reference(data)
    assert b"".join(frames) == data


@pytest.mark.parametrize(
    ("dialect", "frame"),
    [
        ("sse", b'data: {"b64":"' + b"A" * (4 << 20) + b'"}\n\n'),
        ("ndjson", b'{"b64":"' + b"A" * (4 << 20) + b'"}\n'),
    ],
)
def test_a_big_frame_in_small_reads_is_split_in_linear_time(dialect: Dialect, frame: bytes) -> None:
    # Rescanning the whole pending frame on every read took seconds here (quadratic).
    started = time.perf_counter()
    frames = split(dialect, [frame[i : i + 4096] for i in range(0, len(frame), 4096)])
    assert time.perf_counter() - started < 1.0
    assert frames == [frame]


@pytest.mark.parametrize("dialect", ["sse", "ndjson"])
@given(data=streams, points=st.lists(st.integers(min_value=0), max_size=12))
def test_any_chunking_gives_the_same_frames_holding_every_byte(
    dialect: Dialect, data: bytes, points: list[int]
) -> None:
    whole = split(dialect, [data])
    assert split(dialect, cut(data, points)) == whole
    assert b"".join(whole) == data
    assert all(whole)


@pytest.mark.parametrize("dialect", ["sse", "ndjson"])
@given(data=streams)
def test_byte_by_byte_feeding_gives_the_same_frames(dialect: Dialect, data: bytes) -> None:
    assert split(dialect, [data[i : i + 1] for i in range(len(data))]) == split(dialect, [data])


@pytest.mark.parametrize(
    ("content_type", "chunked", "dialect"),
    [
        ("text/event-stream", False, "sse"),
        ("text/event-stream; charset=utf-8", True, "sse"),
        ("TEXT/EVENT-STREAM", False, "sse"),
        ("application/x-ndjson", True, "ndjson"),
        ("application/jsonl", False, "ndjson"),
        ("application/json", True, None),
        ("application/json", False, None),
        ("text/plain", True, "chunks"),
        ("", True, "chunks"),
        ("text/plain", False, None),
    ],
)
def test_dialect_for(content_type: str, chunked: bool, dialect: Dialect | None) -> None:
    assert dialect_for(content_type, chunked) == dialect


@pytest.mark.parametrize(
    ("content_type", "chunked", "asks_stream", "dialect"),
    [
        ("application/json; charset=UTF-8", True, True, "json"),
        ("application/json", True, False, None),
        ("application/json", False, True, None),
        ("text/event-stream", False, True, "sse"),
        ("text/plain", True, True, "chunks"),
    ],
)
def test_a_chunked_json_answer_is_a_stream_only_when_the_request_asked_for_one(
    content_type: str, chunked: bool, asks_stream: bool, dialect: Dialect | None
) -> None:
    assert dialect_for(content_type, chunked, asks_stream) == dialect


@pytest.mark.parametrize(
    ("dialect", "frame", "payload"),
    [
        ("sse", 'data: {"a": 1}\n\n', {"a": 1}),
        ("sse", 'data:{"a":1}\r\n\r\n', {"a": 1}),
        ("sse", 'event: message_start\ndata: {"type": "x"}\n\n', {"type": "x"}),
        ("sse", 'data: {"a":\ndata: 2}\n\n', {"a": 2}),
        ("sse", "data: [DONE]\n\n", None),
        ("sse", ": keep-alive\n\n", None),
        ("sse", "event: ping\n\n", None),
        ("sse", "data: not json\n\n", None),
        ("sse", 'data: {"a": "x\u2028y"}\n\n', {"a": "x\u2028y"}),
        ("sse", "data:  [DONE]\r\r", None),
        ("ndjson", '{"done": false, "response": "hi"}\n', {"done": False, "response": "hi"}),
        ("ndjson", "\n", None),
        ("ndjson", "{broken\n", None),
        ("chunks", '{"a": 1}', None),
    ],
)
def test_frame_payload(dialect: Dialect, frame: str, payload: Any) -> None:
    assert frame_payload(dialect, frame) == payload


@pytest.mark.parametrize(
    ("dialect", "frame", "said"),
    [
        ("sse", 'event: message_stop\ndata: {"type":"x"}\n\n', ("message_stop", '{"type":"x"}')),
        ("sse", "data: [DONE]\r\n\r\n", ("message", "[DONE]")),
        ("sse", "event: error\ndata: a\ndata: b\n\n", ("error", "a\nb")),
        ("sse", "data:\n\n", ("message", "")),
        ("sse", "data: \n\n", ("message", "")),
        ("sse", "data:  two spaces\n\n", ("message", " two spaces")),
        ("sse", "data: a\rdata: b\n\n", ("message", "a\nb")),
        ("sse", "data: a\ndata: b\n\n", ("message", "a\nb")),
        ("sse", "data: a\n\n\n", ("message", "a")),
        ("sse", "data: {}\n", ("message", "{}")),
        ("sse", ": keep-alive\n\n", ("message", None)),
        ("sse", "event: ping\n\n", ("ping", None)),
        ("ndjson", ' {"done": true}\r\n', ("message", '{"done": true}')),
        ("ndjson", "\n", ("message", None)),
        ("chunks", "data: [DONE]\n\n", ("message", None)),
        ("json", '[{"a": 1}', ("message", None)),
    ],
)
def test_frame_data_is_the_event_type_and_the_data_text(
    dialect: Dialect, frame: str, said: tuple[str, str | None]
) -> None:
    assert frame_data(dialect, frame) == said


def said_end(event: str, payload: Any, data: str) -> bool:
    return event == "end" or data == "END" or payload == {"end": True}


def said_bad(event: str, payload: Any, data: str) -> bool:
    return event == "bad" or payload == {"bad": True}


def said_ping(event: str, payload: Any, data: str) -> bool:
    return bool(payload == {"ping": True})


# A made-up provider's signs: framing knows none of its own.
SIGNS = FrameSigns(final=said_end, error=said_bad, idle=said_ping)


@pytest.mark.parametrize(
    ("dialect", "frame", "error", "final"),
    [
        ("sse", "event: end\ndata: {}\n\n", False, True),
        ("sse", "data: END\n\n", False, True),
        ("sse", 'data: {"end": true}\r\n\r\n', False, True),
        ("sse", "event: bad\ndata: not json\n\n", True, True),
        ("sse", 'data: {"bad": true}\n\n', True, True),
        ("sse", 'data: {"more": true}\n\n', False, False),
        ("sse", "data: [DONE]\n\n", False, False),
        ("ndjson", '{"end": true}\n', False, True),
        ("ndjson", "END\n", False, True),
        ("ndjson", '{"bad": true}\n', True, True),
        ("ndjson", '{"end": false}\n', False, False),
        ("chunks", "END", False, False),
    ],
)
def test_read_frame_asks_the_providers_signs_and_an_error_is_final(
    dialect: Dialect, frame: str, error: bool, final: bool
) -> None:
    meaning = read_frame(dialect, frame, SIGNS)
    assert (meaning.error, meaning.final) == (error, final)
    assert meaning.payload == frame_payload(dialect, frame)


def test_a_json_documents_item_is_read_by_its_payload_alone() -> None:
    assert read_item({"bad": True}, SIGNS).error is True
    assert read_item({"end": True}, SIGNS).final is True
    assert read_item({"more": 1}, SIGNS).final is False


def test_frame_signs_with_none_declared_see_nothing() -> None:
    meaning = read_frame("sse", "event: error\ndata: [DONE]\n\n", FrameSigns())
    assert (meaning.error, meaning.final) == (False, False)


def test_a_union_of_signs_holds_where_one_of_them_does() -> None:
    other = FrameSigns(final=said_bad)
    union = FrameSigns.union([SIGNS, other])
    assert union.final("bad", None, "") and union.final("end", None, "")
    assert union.error("bad", None, "") and not union.error("end", None, "")
    assert union.idle("message", {"ping": True}, "") and not union.idle("message", None, "")
    assert not FrameSigns.union([]).final("end", None, "END")


@pytest.mark.parametrize(
    ("body", "items"),
    [
        (b'[{"a":1},\r\n{"b":2}]', [{"a": 1}, {"b": 2}]),
        (b'{"a":1}', [{"a": 1}]),
        (b'[{"a":1},\r\n{"b":2}', None),
        (b'[{"a":1},\r\n', None),
        (b"", None),
        (b"[" * 5_000 + b"]" * 5_000, None),  # past json's recursion limit: no crash
    ],
)
def test_json_document_is_the_items_of_a_whole_document_only(
    body: bytes, items: list[Any] | None
) -> None:
    assert json_document(body) == items


@pytest.mark.parametrize(
    ("dialect", "newest_first", "ends"),
    [
        ("sse", ["data: END\n\n"], True),
        ("sse", [": keep-alive\n\n", "\n", "event: ping\n\n", "data: END\n\n"], True),
        ("sse", ['data: {"ping": true}\n\n', 'data: {"end": true}\n\n'], True),
        ("sse", ["event: bad\ndata: x\n\n"], True),
        ("sse", ['data: {"more": 1}\n\n', "data: END\n\n"], False),
        ("sse", ["data:\n\n", "data: END\n\n"], False),  # an empty data line says something
        ("sse", [], False),
        ("ndjson", ["\n", '{"end": true}\n'], True),
        ("ndjson", ['{"end": false}\n', '{"end": true}\n'], False),
    ],
)
def test_the_answer_ends_with_the_last_frame_that_says_anything(
    dialect: Dialect, newest_first: list[str], ends: bool
) -> None:
    assert ends_answer(dialect, newest_first, SIGNS) is ends


def test_ends_answer_stops_at_the_last_meaningful_frame_however_long_the_stream() -> None:
    def newest_first() -> Iterator[str]:
        yield ": keep-alive\n\n"
        yield 'data: {"more": 1}\n\n'
        raise AssertionError("read past the last meaningful frame")

    assert ends_answer("sse", newest_first(), SIGNS) is False


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(VALUES, max_size=6), st.lists(st.integers(1, 9), min_size=1), st.booleans())
@example([10], [1], False)  # `[1` then `0]`: the 1 ends its piece, yet the number goes on
@example([1.5e-7, True, None], [2], False)
def test_json_items_reads_an_array_in_any_pieces(
    items: list[Any], cuts: list[int], spaced: bool
) -> None:
    data = json.dumps(items, indent=1 if spaced else None, ensure_ascii=False).encode()
    pieces, at, n = [], 0, 0
    while at < len(data):
        size = cuts[n % len(cuts)]
        pieces.append(data[at : at + size])
        at, n = at + size, n + 1
    assert list(json_items(pieces)) == items


def test_json_items_stops_at_a_cut_and_reads_no_plain_value() -> None:
    assert list(json_items([b'[{"a": 1}, {"b": ', b"2"])) == [{"a": 1}]
    assert list(json_items([b'{"a": 1}'])) == []


@pytest.mark.parametrize("depth", [1000, 1024, 1025, 5000])
def test_a_frame_nested_past_any_parsers_limit_reads_as_no_json_and_raises_nothing(
    depth: int,
) -> None:
    # orjson stops at 1024 levels, json at the interpreter's recursion limit (RecursionError,
    # not a ValueError): an upstream's hostile frame must not stop its stream's recording
    deep = "[" * depth + "]" * depth
    payload = frame_payload("sse", f"data: {deep}\n\n")
    levels = 0
    while isinstance(payload, list) and payload:
        payload, levels = payload[0], levels + 1
    assert payload is None or (payload == [] and levels == depth - 1)


_NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?\Z")
_TEXT = st.recursive(
    _NUMBER | st.sampled_from(['"\\ud800"', '"\\u00e9\\n"', "NaN", "-0", "1E5", '"a"', "true"]),
    lambda kids: (
        st.lists(kids, max_size=3).map(lambda v: "[" + ", ".join(v) + "]")
        | st.lists(kids, max_size=3).map(lambda v: "{" + ",".join(f'"k":{x}' for x in v) + "}")
    ),
    max_leaves=12,
)


@given(_TEXT)
@example('{"a": 1, "a": -0.0, "b": 12345678901234567890}')
def test_a_frames_json_is_the_value_json_reads(text: str) -> None:
    # orjson is tried first for speed: its value must be json's, to the type and the sign
    assert repr(frame_payload("sse", f"data: {text}\n\n")) == repr(json.loads(text))
