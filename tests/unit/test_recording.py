"""Stored headers, and what the Capture makes of a live answer."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tapeproxy.engine.capture import Capture, is_failure_status
from tapeproxy.engine.finish import finish, stored_headers
from tapeproxy.engine.keying import RequestParts
from tapeproxy.engine.replay import Replay, frame_bytes
from tapeproxy.engine.spool import SPOOL_AFTER, Spool
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.model import Outcome, dump_around, dump_exchange, load_exchange
from tapeproxy.providers import anthropic, gemini, generic, ollama, openai
from tapeproxy.providers.base import Provider


def test_stored_headers_keeps_what_describes_the_answer() -> None:
    headers = [
        ("content-type", "application/json"),
        ("openai-model", "gpt-x"),
        ("anthropic-version", "2023-06-01"),
        ("x-custom", "1"),
    ]
    assert stored_headers(headers, openai.PROVIDER) == dict(headers)


# An upstream of the user's, which knows every built-in's volatile headers.
TOOL = generic("tool", "http://127.0.0.1:9")


@pytest.mark.parametrize(
    "name",
    [
        # volatile: different on every call, so a re-record would show a diff
        "date",
        "server",
        "x-request-id",
        "request-id",
        "openai-processing-ms",
        "cf-ray",
        "etag",
        "x-ratelimit-remaining-tokens",
        "anthropic-ratelimit-requests-remaining",
        "x-tapeproxy-key",
        # hop-by-hop or reset by the proxy
        "connection",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "keep-alive",
        # secrets
        "set-cookie",
        "authorization",
        "x-api-key",
        "openai-organization",
        "x-session-token",
    ],
)
def test_stored_headers_drops_volatile_hop_by_hop_and_secret_headers(name: str) -> None:
    assert stored_headers([(name, "value"), ("content-type", "text/plain")], TOOL) == {
        "content-type": "text/plain"
    }


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (200, False),
        (201, False),
        (400, False),
        (404, False),
        (422, False),
        (429, True),
        (500, True),
        (503, True),
    ],
)
def test_is_failure_status(status: int, failure: bool) -> None:
    assert is_failure_status(status) is failure


def request(path: str = "/v1/chat/completions", body: Any = None) -> RequestParts:
    payload = Payload("json", body) if body is not None else Payload("empty")
    return RequestParts("POST", "openai", path, (), (), payload)


def recorder(
    chunks: list[bytes],
    content_type: str,
    *,
    status: int = 200,
    chunked: bool = True,
    req: RequestParts | None = None,
    provider: Provider = openai.PROVIDER,
    keep: int = SPOOL_AFTER,
) -> Capture:
    made = Capture(
        provider=provider,
        request=req or request(),
        key="k" * 64,
        seq=0,
        rules="r",
        status=status,
        headers=[("content-type", content_type)],
        chunked=chunked,
        spool=Spool(tempfile.TemporaryFile, keep=keep),
    )
    for chunk in chunks:
        made.add(chunk)
    return made


CHAT = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n"]
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
ANTHROPIC_PING = b'event: ping\ndata: {"type": "ping"}\n\n'
GEMINI_ARRAY = [
    b'[{"candidates":[{"content":{"parts":[{"text":"Hel"}]}}],'
    b'"usageMetadata":{"promptTokenCount":4}}\n',
    b',\r\n{"candidates":[{"content":{"parts":[{"text":"lo"}]},"finishReason":"STOP"}],'
    b'"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}}\n',
    b"]",
]


def test_a_chunked_json_answer_to_a_plain_request_is_stored_as_one_json_body() -> None:
    captured = recorder([b'{"id": "x",', b' "usage": {"prompt_tokens": 3}}'], "application/json")
    exchange = finish(captured, cut=False).exchange
    assert exchange.response.frames is None
    assert exchange.response.body == {
        "json": {"id": "x", "usage": {"prompt_tokens": 3}},
        "style": "spaced",
    }


def test_a_chunked_json_stream_is_kept_as_timed_pieces_with_its_usage() -> None:
    req = request("/v1beta/models/g:streamGenerateContent", {"contents": []})
    made = recorder(
        GEMINI_ARRAY, "application/json; charset=UTF-8", req=req, provider=gemini.PROVIDER
    )
    exchange = finish(made, cut=False).exchange
    assert exchange.response.dialect == "json"
    assert [frame_bytes(f) for f in exchange.response.frames or []] == GEMINI_ARRAY
    assert exchange.usage == {"input_tokens": 4, "output_tokens": 2}
    assert exchange.outcome is Outcome.COMPLETE


def test_an_error_answered_chunked_to_a_stream_request_stays_a_json_body() -> None:
    req = request(body={"model": "m", "stream": True})
    captured = recorder([b'{"error": {"message": "bad"}}'], "application/json", status=400, req=req)
    exchange = finish(captured, cut=False).exchange
    assert exchange.response.frames is None
    assert exchange.response.body == {"json": {"error": {"message": "bad"}}, "style": "spaced"}


@pytest.mark.parametrize(
    "error_frame",
    [
        b'event: error\ndata: {"message":"model overloaded","code":503}\n\n',
        b"event: error\ndata: upstream overloaded\n\n",
        b'data: {"error":{"message":"overloaded"}}\n\n',
    ],
)
def test_an_error_event_in_a_stream_marks_it_a_stream_error(error_frame: bytes) -> None:
    made = recorder([b'data: {"token":"a"}\n\n', error_frame], "text/event-stream")
    assert finish(made, cut=False).exchange.outcome is Outcome.STREAM_ERROR


@pytest.mark.parametrize(
    ("provider", "chunks", "content_type", "final"),
    [
        (openai.PROVIDER, CHAT[:1], "text/event-stream", False),
        (openai.PROVIDER, CHAT, "text/event-stream", True),
        (openai.PROVIDER, [*CHAT, b": keep-alive\n\n"], "text/event-stream", True),
        # not an event until its blank line
        (openai.PROVIDER, [b"data: [DONE]\n"], "text/event-stream", False),
        # held back for a possible LF
        (openai.PROVIDER, [b"data: [DONE]\r\r"], "text/event-stream", True),
        (anthropic.PROVIDER, [MESSAGE_STOP, ANTHROPIC_PING], "text/event-stream", True),
        (ollama.PROVIDER, [b'{"done":false}\n'], "application/x-ndjson", False),
        (ollama.PROVIDER, [b'{"done":false}\n', b'{"done":true}\n'], "application/x-ndjson", True),
        (gemini.PROVIDER, GEMINI_ARRAY[:2], "application/json", False),
        (gemini.PROVIDER, GEMINI_ARRAY, "application/json", True),
        (openai.PROVIDER, [b"all of it"], "text/plain", False),
    ],
)
def test_final_seen_once_the_providers_final_frame_came(
    provider: Provider, chunks: list[bytes], content_type: str, final: bool
) -> None:
    req = request("/v1beta/models/g:streamGenerateContent", {"stream": True})
    assert recorder(chunks, content_type, req=req, provider=provider).final_seen() is final


def test_final_seen_goes_by_the_providers_own_final_frames() -> None:
    # An Ollama `done` line ends an Ollama stream, not an OpenAI one.
    lines = [b'{"done":true}\n']
    assert recorder(lines, "application/x-ndjson", provider=openai.PROVIDER).final_seen() is False
    assert recorder(lines, "application/x-ndjson", provider=TOOL).final_seen() is True


def test_a_plain_body_never_has_a_final_frame() -> None:
    assert recorder([b'{"a": 1}'], "application/json", chunked=False).final_seen() is False


def test_a_cut_keeps_when_it_came_and_replays_it() -> None:
    made = recorder(CHAT[:1], "text/event-stream")
    made.started -= 1.25  # the answer began 1.25 s ago
    cut = finish(made, cut=True).exchange
    assert cut.outcome is Outcome.UPSTREAM_CUT
    assert 1250 <= (cut.response.end_ms or 0) < 5000
    assert Replay.of(cut, cut.key).end_ms == cut.response.end_ms
    whole = finish(recorder(CHAT, "text/event-stream"), cut=False).exchange
    assert whole.response.end_ms is None
    assert Replay.of(whole, whole.key).end_ms is None


@pytest.mark.parametrize(
    ("method", "status", "headers", "length"),
    [
        ("POST", 200, [], "2"),
        ("GET", 204, [], None),
        ("GET", 304, [], None),
        ("HEAD", 200, [("content-length", "42")], "42"),
        ("HEAD", 200, [], None),  # answered chunked: no length to tell
    ],
)
def test_a_replayed_answer_has_a_content_length_only_where_http_allows_one(
    method: str, status: int, headers: list[tuple[str, str]], length: str | None
) -> None:
    made = Capture(
        provider=openai.PROVIDER,
        request=replace(request(), method=method),
        key="k" * 64,
        seq=0,
        rules="r",
        status=status,
        headers=[("content-type", "application/json"), *headers],
        chunked=False,
        spool=Spool(tempfile.TemporaryFile),
    )
    if status == 200 and method == "POST":
        made.add(b"{}")
    replay = Replay.of(finish(made, cut=False).exchange, "k" * 64)
    lengths = [v.decode() for k, v in replay.headers if k == b"content-length"]
    assert lengths == ([length] if length else [])


@settings(max_examples=60, deadline=None)
@given(
    frames=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30), max_size=12
    ),
    kind=st.sampled_from(["text/event-stream", "application/x-ndjson", "text/plain", "bin"]),
    cut=st.booleans(),
)
def test_a_spooled_answer_is_written_as_the_same_bytes_as_a_held_one(
    frames: list[str], kind: str, cut: bool
) -> None:
    """Past SPOOL_AFTER an answer is read back from its scratch file and written in pieces;
    the file is byte for byte the one `dump_exchange` writes of the same answer held whole
    (a JSON body aside: spooled, it is kept as text rather than parsed)."""
    sep = "\n" if kind == "application/x-ndjson" else "\n\n"
    chunks = [(f"data: {text}{sep}" if kind != "bin" else text).encode() for text in frames]
    if kind == "bin":
        chunks.append(b"\xff\xfe")  # not UTF-8: base64
    content_type = "application/octet-stream" if kind == "bin" else kind
    chunked = kind in ("text/event-stream", "application/x-ndjson")
    with patch.object(Capture, "ms", return_value=5):  # the same timings in both
        whole = finish(recorder(chunks, content_type, chunked=chunked), cut)
        spooled = finish(recorder(chunks, content_type, chunked=chunked, keep=0), cut)
    assert whole.middle is None and (spooled.middle is not None or not b"".join(chunks))
    expected = dump_exchange(whole.exchange)
    if spooled.middle is None:
        assert dump_exchange(spooled.exchange) == expected
    else:
        assert b"".join(dump_around(spooled.exchange, spooled.middle)) == expected
    assert load_exchange(expected).response.frames == whole.exchange.response.frames


def test_frames_are_timed_by_the_captures_clock() -> None:
    """A live answer's clock is time.monotonic; an answer read whole (`tapeproxy import`)
    gives a clock that stands still, and its frames' times are what that clock says."""
    now = [10.0]
    made = Capture(
        provider=openai.PROVIDER,
        request=request(body={"stream": True}),
        key="k" * 64,
        seq=0,
        rules="r",
        status=200,
        headers=[("content-type", "text/event-stream")],
        chunked=True,
        spool=Spool(tempfile.TemporaryFile),
        clock=lambda: now[0],
        started=10.0,
    )
    made.add(b"data: {}\n\n")
    now[0] = 10.25
    made.add(b"data: [DONE]\n\n")
    frames = finish(made, cut=False).exchange.response.frames or []
    assert [f.ms for f in frames] == [0, 250]
