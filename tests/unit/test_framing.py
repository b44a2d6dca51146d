"""Stream framing: frames are the same however the bytes arrive, and keep every byte."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.framing import Dialect, FrameSplitter, dialect_for, frame_payload


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


def test_sse_frame_waits_for_its_blank_line_across_chunks() -> None:
    splitter = FrameSplitter("sse")
    assert splitter.feed(b"data: a\r\n\r") == []
    assert splitter.feed(b"\ndata: b") == [b"data: a\r\n\r\n"]
    assert splitter.flush() == [b"data: b"]
    assert splitter.flush() == []


def test_ndjson_splits_after_each_newline() -> None:
    assert split("ndjson", [b'{"a":1}\n{"b"', b':2}\n{"c":3}']) == [
        b'{"a":1}\n', b'{"b":2}\n', b'{"c":3}',
    ]


def test_chunks_dialect_keeps_each_chunk_and_drops_empty_ones() -> None:
    assert split("chunks", [b"ab", b"", b"c"]) == [b"ab", b"c"]


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
        ("ndjson", '{"done": false, "response": "hi"}\n', {"done": False, "response": "hi"}),
        ("ndjson", "\n", None),
        ("ndjson", "{broken\n", None),
        ("chunks", '{"a": 1}', None),
    ],
)
def test_frame_payload(dialect: Dialect, frame: str, payload: Any) -> None:
    assert frame_payload(dialect, frame) == payload
