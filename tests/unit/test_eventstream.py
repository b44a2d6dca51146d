"""The eventstream codec, judged by botocore's own parser: what it encodes botocore reads, what
botocore reads it decodes the same, and bytes go back byte for byte; malformed input is refused."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.exchange import eventframes
from tapeproxy.exchange.eventstream import (
    BYTE,
    BYTES,
    INT,
    LONG,
    MAX_PAYLOAD,
    SHORT,
    TIMESTAMP,
    UUID,
    EventStreamError,
    Message,
    Typed,
    decode,
    encode,
    split,
)
from tapeproxy.exchange.framing import FrameSplitter, dialect_for
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import MARKER

_RANGES = {BYTE: 7, SHORT: 15, INT: 31, LONG: 63, TIMESTAMP: 63}


def _typed() -> st.SearchStrategy[Any]:
    ints = [
        st.builds(Typed, st.just(kind), st.integers(-(2**bits), 2**bits - 1))
        for kind, bits in _RANGES.items()
    ]
    return st.one_of(
        st.text(max_size=40),
        st.booleans(),
        st.binary(max_size=40).map(lambda v: Typed(BYTES, v)),
        st.binary(min_size=16, max_size=16).map(lambda v: Typed(UUID, v)),
        *ints,
    )


MESSAGES = st.builds(
    Message,
    st.dictionaries(st.text(min_size=1, max_size=20), _typed(), max_size=6).map(
        lambda d: tuple(d.items())
    ),
    st.binary(max_size=300),
)


def _botocore(data: bytes) -> list[Any]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return list(buffer)


def _plain(value: Any) -> Any:
    """A header value as botocore gives it."""
    return value.value if isinstance(value, Typed) else value


@given(st.lists(MESSAGES, max_size=4))
def test_botocore_reads_what_it_encodes_and_it_decodes_the_bytes_back(
    messages: list[Message],
) -> None:
    data = b"".join(encode(m) for m in messages)
    parsed = _botocore(data)
    assert [(dict(m.headers), m.payload) for m in parsed] == [
        ({k: _plain(v) for k, v in m.headers}, m.payload) for m in messages
    ]
    frames = split(data)
    assert [decode(f) for f in frames] == messages
    assert b"".join(encode(decode(f)) for f in frames) == data


@given(MESSAGES, st.lists(st.integers(1, 64), max_size=30))
def test_the_splitter_cuts_a_stream_read_in_any_pieces_into_its_messages(
    message: Message, cuts: list[int]
) -> None:
    data = encode(message) * 3
    splitter = FrameSplitter("eventstream")
    frames, at = [], 0
    for size in [*cuts, len(data)]:
        frames += splitter.feed(data[at : at + size])
        at += size
    assert frames == [encode(message)] * 3
    assert splitter.flush() == []


@given(MESSAGES)
def test_a_readable_frame_goes_back_to_the_very_bytes(message: Message) -> None:
    raw = encode(message)
    text = eventframes.readable(raw)
    if text is not None:
        assert eventframes.wire(text) == raw
        json.loads(text)


def _bedrock_chunk(inner: dict[str, Any]) -> bytes:
    payload = {"bytes": base64.b64encode(json.dumps(inner, separators=(",", ":")).encode())}
    body = json.dumps({"bytes": payload["bytes"].decode(), "p": "abcd"}, separators=(",", ":"))
    headers = (
        (":event-type", "chunk"),
        (":content-type", "application/json"),
        (":message-type", "event"),
    )
    return encode(Message(headers, body.encode()))


def test_an_invoke_model_chunk_is_stored_with_its_bytes_decoded_and_read_as_its_json() -> None:
    inner = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "héllo"}}
    raw = _bedrock_chunk(inner)
    text = eventframes.readable(raw)
    assert text is not None
    record = json.loads(text)
    assert record["headers"][":event-type"] == "chunk"
    assert record["payload"]["json"]["bytes"] == inner
    assert eventframes.wire(text) == raw
    assert eventframes.meaning(text) == ("chunk", inner, "")
    # botocore reads the replayed bytes as Bedrock's own
    (parsed,) = _botocore(eventframes.wire(text))
    assert json.loads(base64.b64decode(json.loads(parsed.payload)["bytes"])) == inner


def test_eventstream_is_the_dialect_of_bedrocks_content_type() -> None:
    assert dialect_for("application/vnd.amazon.eventstream", chunked=True) == "eventstream"


def _message(payload: bytes = b"{}") -> bytes:
    return encode(Message(((":event-type", "chunk"),), payload))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (_message()[:-1] + bytes([_message()[-1] ^ 1]), "message's CRC"),
        (_message()[:9] + bytes([_message()[9] ^ 1]) + _message()[10:], "prelude's CRC"),
        (_message()[:-3], "cut short"),
        (_message()[:5], "cut short in its prelude"),
        (_message() + b"x", "cut short or joined"),
    ],
)
def test_a_malformed_message_is_refused_in_one_line(raw: bytes, reason: str) -> None:
    with pytest.raises(EventStreamError, match=reason):
        decode(raw)
    assert eventframes.readable(raw) is None


def _prelude(total: int, headers: int) -> bytes:
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))


def test_a_length_over_the_limit_is_refused_before_anything_is_buffered() -> None:
    huge = _prelude(2**32 - 1, 0)
    with pytest.raises(EventStreamError, match="payload exceeds"):
        split(huge + b"x" * 100)
    with pytest.raises(EventStreamError, match="headers exceed"):
        decode(_prelude(1000, 200 * 1024) + b"x" * 988)
    # The live splitter stops waiting for such a message: what follows passes as it comes.
    splitter = FrameSplitter("eventstream")
    assert splitter.feed(huge) == [huge]
    assert splitter.broken
    assert splitter.feed(b"more") == [b"more"]
    assert MAX_PAYLOAD < 2**32


def test_a_truncated_stream_is_refused_and_a_frame_text_that_is_no_message_too() -> None:
    with pytest.raises(EventStreamError, match="ends inside a message"):
        split(_message() + _message()[:20])
    with pytest.raises(EventStreamError, match="not JSON"):
        eventframes.wire("not json")
    with pytest.raises(EventStreamError, match="no headers"):
        eventframes.wire('{"payload": {"text": ""}}')
    with pytest.raises(EventStreamError, match="header value"):
        eventframes.wire('{"headers": {"a": {"int99": 1}}, "payload": {"text": ""}}')


def test_a_frame_text_nested_past_the_parsers_depth_is_a_one_line_refusal() -> None:
    """Not a RecursionError, which no handler of a cassette's ValueErrors catches."""
    deep = "[" * 100_000 + "]" * 100_000
    text = '{"headers": {}, "payload": {"json": ' + deep + "}}"
    with pytest.raises(EventStreamError, match="not JSON"):
        eventframes.wire(text)
    assert eventframes.meaning(text) == ("", None, "")


@pytest.mark.parametrize(
    "shown",
    [{"int8": 128}, {"int16": -32769}, {"int64": 2**63}, {"uuid": "zz"}, {"bytes": "!!!"}],
)
def test_a_hand_edited_header_value_its_type_cannot_hold_is_a_one_line_refusal(
    shown: dict[str, Any],
) -> None:
    text = json.dumps({"headers": {":event-type": "chunk", "a": shown}, "payload": {"text": ""}})
    with pytest.raises(EventStreamError, match="header value"):
        eventframes.wire(text)


def _delta(text: str, index: int = 0) -> bytes:
    headers = (
        (":event-type", "contentBlockDelta"),
        (":content-type", "application/json"),
        (":message-type", "event"),
    )
    payload = {"contentBlockIndex": index, "delta": {"text": text}, "p": "abc"}
    return encode(Message(headers, json.dumps(payload, separators=(",", ":")).encode()))


def test_a_key_split_across_bedrock_events_is_scrubbed_whole_and_each_frame_still_encodes() -> None:
    key = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 3
    raws = [
        _delta("my key: " + key[:20]),
        _delta(key[20:]),
        _bedrock_chunk({"type": "content_block_delta", "delta": {"text": " " + key}}),
    ]
    frames = [{"ms": 0, "text": eventframes.readable(raw)} for raw in raws]
    scrubbed = Scrubber.build().frames(frames, "eventstream")
    joined = "".join(f["text"] for f in scrubbed)
    assert key[:12] not in joined and key[-12:] not in joined
    texts = [eventframes.meaning(f["text"])[1]["delta"]["text"] for f in scrubbed]
    assert texts[0].startswith("my key: ") and MARKER in texts[0] + texts[1]
    for one in scrubbed:  # valid messages still, botocore reads them
        (parsed,) = _botocore(eventframes.wire(one["text"]))
        assert json.loads(parsed.payload)


@pytest.mark.parametrize("field", ["delta.text", "headers", "payload", "bytes"])
def test_a_field_path_reaches_a_messages_json_and_never_breaks_the_stored_record(
    field: str,
) -> None:
    """`--redact-field delta.text` redacts a Bedrock delta as it does an SSE event's; a field
    named like the stored record's own keys (`headers`, `payload`, `bytes`) leaves it whole."""
    raws = [
        _delta("private words"),
        _bedrock_chunk({"type": "content_block_delta", "delta": {"text": "private words"}}),
    ]
    frames = [{"ms": 0, "text": eventframes.readable(raw)} for raw in raws]
    scrubbed = Scrubber.build(fields=[field]).frames(frames, "eventstream")
    for one in scrubbed:
        assert len(_botocore(eventframes.wire(one["text"]))) == 1
        assert ("private words" in one["text"]) == (field != "delta.text")
    assert Scrubber.build(fields=[field]).frames(scrubbed, "eventstream") == scrubbed
