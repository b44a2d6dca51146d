"""Stored bodies: every response body replays byte for byte; request bodies parse as JSON."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.exchange.bodies import (
    EMPTY,
    Payload,
    decode_content,
    looks_json,
    payload_bytes,
    render_json,
    request_payload,
    response_payload,
)

scalars = (
    st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.none()
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=25,
)
json_containers = st.lists(json_values, max_size=4) | st.dictionaries(
    st.text(max_size=6), json_values, max_size=6
)
STYLES: dict[str, dict[str, Any]] = {
    "compact": {"separators": (",", ":")},
    "indent2": {"indent": 2},
    "spaced": {},  # json.dumps' default: ", " and ": "
}


def replayed(raw: bytes, content_type: str) -> bytes:
    """What the client gets back after the body went to disk and came back."""
    stored = json.loads(json.dumps(response_payload(raw, content_type).to_dict()))
    return payload_bytes(Payload.from_dict(stored))


@given(
    value=json_containers,
    style=st.sampled_from(sorted(STYLES)),
    ensure_ascii=st.booleans(),
    newline=st.booleans(),
)
def test_json_in_every_known_layout_is_stored_as_json_and_replays_byte_exact(
    value: Any, style: str, ensure_ascii: bool, newline: bool
) -> None:
    raw = (json.dumps(value, ensure_ascii=ensure_ascii, **STYLES[style]) + "\n" * newline).encode()
    payload = response_payload(raw, "application/json")
    assert payload.kind == "json"
    assert payload.value == value
    assert payload_bytes(payload) == raw
    assert replayed(raw, "application/json") == raw


def every_style_in_order(value: Any, raw: bytes) -> str | None:
    """The style the recorder picked before it skipped styles that cannot match: each of the
    twelve rendered in order, the first that gives `raw` back."""
    for name in ("compact", "indent2", "spaced"):
        for flags in ("", "+ascii", "+newline", "+ascii+newline"):
            try:
                if render_json(value, name + flags) == raw:
                    return name + flags
            except UnicodeEncodeError:
                continue
    return None


@given(
    value=json_values,
    style=st.sampled_from(sorted(STYLES)),
    ensure_ascii=st.booleans(),
    newline=st.booleans(),
)
def test_the_stored_style_is_the_first_of_every_style_in_order(
    value: Any, style: str, ensure_ascii: bool, newline: bool
) -> None:
    """So a re-recording stores the same style as before, down to the flags, even where
    several styles render the same bytes (`{}`, `[1]`, a string)."""
    raw = (json.dumps(value, ensure_ascii=ensure_ascii, **STYLES[style]) + "\n" * newline).encode()
    payload = response_payload(raw, "application/json")
    if payload.kind == "json":
        assert payload.style == every_style_in_order(value, raw)
    else:  # `null` is stored as text; anything else must have had no style that fits
        assert value is None or every_style_in_order(value, raw) is None


def test_json_keeps_the_senders_key_order() -> None:
    raw = '{"z": 1, "é": "ü", "a": {"y": [1, 2], "b": null}}\n'.encode()
    payload = response_payload(raw, "application/json; charset=utf-8")
    assert (payload.kind, payload.style) == ("json", "spaced+newline")
    assert list(payload.value) == ["z", "é", "a"]
    assert list(payload.value["a"]) == ["y", "b"]
    assert replayed(raw, "application/json") == raw


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1.0e2}',
        b'{"a":1,"a":2}',
        b'{ "a" : 1 }',
        b'{\n    "a": 1\n}',
        b'{"a":1}\r\n',
        '{"a":"\\u00e9","b":"é"}'.encode(),
        b'{"a":"\\/"}',
        b'{"a":1}  ',
        b"null",
        b'{"a":',
    ],
)
def test_json_that_does_not_round_trip_falls_back_to_text_byte_exact(raw: bytes) -> None:
    payload = response_payload(raw, "application/json")
    assert payload.kind == "text"
    assert payload.value == raw.decode()
    assert replayed(raw, "application/json") == raw


@given(
    raw=st.binary(min_size=1),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "application/octet-stream", "image/png", "", "text/html"]
    ),
)
def test_any_response_body_replays_byte_exact(raw: bytes, content_type: str) -> None:
    assert replayed(raw, content_type) == raw


@given(text=st.text(min_size=1))
def test_text_is_stored_readable(text: str) -> None:
    payload = response_payload(text.encode(), "text/plain; charset=utf-8")
    assert payload == Payload("text", text)


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "image/png"),
        (b"plain ascii", "application/octet-stream"),
        (b"\xff\xfe{}", "application/json"),
        (b"\xc3\x28", "text/plain"),
    ],
)
def test_binary_is_stored_as_base64_byte_exact(raw: bytes, content_type: str) -> None:
    payload = response_payload(raw, content_type)
    assert payload == Payload("base64", base64.b64encode(raw).decode())
    assert replayed(raw, content_type) == raw


@pytest.mark.parametrize("read", [response_payload, request_payload])
def test_an_empty_body_is_empty(read: Any) -> None:
    payload = read(b"", "application/json")
    assert payload is EMPTY
    assert payload.to_dict() is None
    assert Payload.from_dict(None) is EMPTY
    assert payload_bytes(payload) == b""


@pytest.mark.parametrize(
    ("raw", "content_type", "expected"),
    [
        (b'{"b": 1, "a": [1, 2]}', "application/json", Payload("json", {"b": 1, "a": [1, 2]})),
        (b'  {"a": 1}', "application/json; charset=utf-8", Payload("json", {"a": 1})),
        (b'"just a string"', "application/json", Payload("json", "just a string")),
        (b'{"a": 1}', "", Payload("json", {"a": 1})),
        (b'{"a": 1}', "text/plain", Payload("json", {"a": 1})),
        (b"[1, 2]", "application/octet-stream", Payload("json", [1, 2])),
        (b"{not json", "application/json", Payload("text", "{not json")),
        (b"a=1&b=2", "application/x-www-form-urlencoded", Payload("text", "a=1&b=2")),
        (b"1", "text/plain", Payload("text", "1")),
        (b"\x00\xff", "application/octet-stream", Payload("base64", "AP8=")),
    ],
)
def test_request_payload_parses_json_by_content_type_or_leading_brace(
    raw: bytes, content_type: str, expected: Payload
) -> None:
    assert request_payload(raw, content_type) == expected


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/vnd.api+json", True),
        ("application/x-ndjson", False),
        ("application/jsonl", False),
        ("text/event-stream", False),
        ("", False),
    ],
)
def test_looks_json(content_type: str, expected: bool) -> None:
    assert looks_json(content_type) is expected


def test_from_dict_rejects_a_body_of_no_known_kind() -> None:
    with pytest.raises(ValueError, match="json, text or base64"):
        Payload.from_dict({"xml": "<a/>"})


def test_a_lone_surrogate_escape_in_a_response_replays_byte_exact() -> None:
    raw = b'{"text":"cut \\ud83d"}'
    payload = response_payload(raw, "application/json")
    assert payload_bytes(payload) == raw


def test_nan_and_infinity_survive_a_trip_through_the_exchange_file() -> None:
    from tapeproxy.exchange.model import (
        Exchange,
        StoredRequest,
        StoredResponse,
        dump_exchange,
        load_exchange,
    )

    raw = b'{"score": NaN, "max": Infinity}'
    payload = response_payload(raw, "application/json")
    exchange = Exchange(
        key="k" * 64,
        ordinal=1,
        seq=0,
        rules="r",
        request=StoredRequest(method="POST", upstream="t", path="/x"),
        response=StoredResponse(status=200, body=payload.to_dict()),
    )
    again = load_exchange(dump_exchange(exchange))
    assert payload_bytes(Payload.from_dict(again.response.body)) == raw


# --- compressed request bodies --------------------------------------------------------------


def deflated(raw: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(wbits=wbits)
    return packer.compress(raw) + packer.flush()


@given(raw=st.binary(max_size=200), mtime=st.integers(0, 2**32 - 1))
def test_a_gzip_body_decodes_to_the_same_bytes_whenever_it_was_compressed(
    raw: bytes, mtime: int
) -> None:
    assert decode_content(gzip.compress(raw, mtime=mtime), "gzip") == raw
    assert decode_content(gzip.compress(raw, mtime=mtime), " X-GZIP ") == raw


DOC = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.mark.parametrize(
    ("raw", "encoding"),
    [
        (deflated(DOC, zlib.MAX_WBITS), "deflate"),
        (deflated(DOC, -zlib.MAX_WBITS), "deflate"),  # bare deflate, as some clients send it
        (gzip.compress(DOC[:20]) + gzip.compress(DOC[20:]), "gzip"),  # two members
        (gzip.compress(deflated(DOC, zlib.MAX_WBITS)), "deflate, gzip"),  # applied in order
        (DOC, "identity"),
        (DOC, ""),
    ],
    ids=["zlib", "bare-deflate", "two-members", "stacked", "identity", "none"],
)
def test_gzip_and_deflate_request_bodies_are_decoded(raw: bytes, encoding: str) -> None:
    assert decode_content(raw, encoding) == DOC


@pytest.mark.parametrize(
    ("raw", "encoding"),
    [
        (b"not gzip at all", "gzip"),
        (gzip.compress(DOC)[:-6], "gzip"),  # cut short
        (gzip.compress(DOC) + b"trailing junk", "gzip"),
        (gzip.compress(DOC), "br"),  # an encoding tapeproxy cannot undo
        (gzip.compress(DOC), "gzip, br"),
        (b"\x78\x9c garbage", "deflate"),
    ],
    ids=["not-gzip", "cut-short", "trailing-junk", "brotli", "gzip-then-brotli", "bad-deflate"],
)
def test_a_body_that_cannot_be_decoded_is_kept_as_sent(raw: bytes, encoding: str) -> None:
    assert decode_content(raw, encoding) == raw


def test_a_body_that_would_unpack_beyond_the_bound_is_kept_as_sent() -> None:
    small, big = gzip.compress(b"a" * 1000), gzip.compress(b"a" * 1001)
    assert decode_content(small, "gzip", limit=1000) == b"a" * 1000
    assert decode_content(big, "gzip", limit=1000) == big
    two = gzip.compress(b"a" * 600) * 2  # each member fits, together they do not
    assert decode_content(two, "gzip", limit=1000) == two
