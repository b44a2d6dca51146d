"""The exchange file: every exchange a capture makes is written and read back unchanged in the
one layout (exchangefile.py), whole or piece by piece, and two recordings are the same
recording when only their timings and seq differ."""

from __future__ import annotations

import json
import tempfile
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapeproxy.engine.capture import Capture
from tapeproxy.engine.finish import Finished, settle
from tapeproxy.engine.keying import RequestParts
from tapeproxy.engine.spool import Spool
from tapeproxy.exchange.bodies import Payload
from tapeproxy.exchange.layout import STREAMED, Record, frames_json, render, render_around
from tapeproxy.exchange.model import Exchange, dump_around, dump_exchange, load_exchange
from tapeproxy.providers import anthropic, gemini, ollama, openai
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.scrubber import Scrubber

TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["hide me", "é\u2028"])
# A token count: `true` is read as 1 (and written so), a count past 64 bits as it is.
COUNT = st.sampled_from([True, False, 0, 7, 2**64, 2**70]) | st.integers(0, 2**70)
SCALAR = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | TEXT
GEMINI_COUNTS = ("promptTokenCount", "candidatesTokenCount")
JSON = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def sse(provider: str, texts: list[str], usage: tuple[Any, Any] | None, final: bool) -> bytes:
    if provider == "anthropic":
        events: list[tuple[str, Any]] = [
            ("content_block_delta", {"delta": {"text": t}}) for t in texts
        ]
        if usage is not None:
            events.insert(0, ("message_start", {"message": {"usage": {"input_tokens": usage[0]}}}))
        events += [("message_stop", {"type": "message_stop"})] if final else []
        return b"".join(
            f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode()
            for name, data in events
        )
    frames: list[Any] = [{"choices": [{"delta": {"content": t}}]} for t in texts]
    if usage is not None:
        counts = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        frames.insert(len(frames) // 2, {"choices": [], "usage": counts})
    out = b"".join(f"data: {json.dumps(f)}\r\n\r\n".encode() for f in frames)
    return out + (b"data: [DONE]\n\n" if final else b"")


@st.composite
def answers(draw: st.DrawFn) -> tuple[Provider, str, Any, str, bool, bytes]:
    """provider, path, request body, content type, chunked, the answer's bytes: every stream
    dialect (sse, ndjson, json, chunks) and plain JSON, text and binary bodies."""
    kind = draw(st.sampled_from(["sse", "anthropic", "ndjson", "json", "chunks", "plain"]))
    texts = draw(st.lists(TEXT, max_size=4))
    usage = draw(st.tuples(COUNT, COUNT) | st.none())
    final = draw(st.booleans())
    junk = draw(st.binary(max_size=6) | st.just(b"\xff\xfe"))
    if kind in ("sse", "anthropic"):
        provider = anthropic.PROVIDER if kind == "anthropic" else openai.PROVIDER
        path = "/v1/messages" if kind == "anthropic" else "/v1/chat/completions"
        data = sse(kind, texts, usage, final)
        return provider, path, {"stream": True}, "text/event-stream", True, data + junk
    if kind == "ndjson":
        lines = [{"message": {"content": t}, "done": False} for t in texts]
        lines += [{"done": True, "prompt_eval_count": usage[0] if usage else 1}] if final else []
        data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        return ollama.PROVIDER, "/api/chat", {"model": "m"}, "application/x-ndjson", True, data
    if kind == "json":
        items: list[Any] = [{"candidates": [{"content": {"parts": [{"text": t}]}}]} for t in texts]
        if usage is not None:
            items.insert(0, {"usageMetadata": dict(zip(GEMINI_COUNTS, usage, strict=True))})
        data = json.dumps(items, indent=draw(st.sampled_from([None, 2]))).encode()
        path = "/v1beta/models/g:streamGenerateContent"
        return gemini.PROVIDER, path, {"contents": []}, "application/json", True, data
    if kind == "chunks":
        data = b"".join(t.encode() for t in texts) + junk
        return openai.PROVIDER, "/v1/files", {"stream": True}, "text/plain", True, data
    body = draw(
        JSON.map(lambda v: json.dumps(v, indent=draw(st.sampled_from([None, 2]))).encode())
        | TEXT.map(str.encode)
        | st.binary(max_size=20)
    )
    content_type = draw(st.sampled_from(["application/json", "text/plain", "image/png"]))
    return openai.PROVIDER, "/v1/embeddings", {"model": "m"}, content_type, False, body


@st.composite
def records(draw: st.DrawFn) -> Exchange:
    """An exchange as the server settles one: any answer, split anywhere, cut
    or not, with redaction on or off, kept whatever its outcome."""
    provider, path, body, content_type, chunked, data = draw(answers())
    cut = draw(st.booleans())
    if cut:
        data = data[: draw(st.integers(0, len(data)))]
    status = draw(st.sampled_from([200, 200, 429, 500, 404]))
    headers = [("content-type", content_type), ("x-request-id", "r1")]
    headers += [("link", v) for v in draw(st.lists(st.sampled_from(["<a>", "<b>"]), max_size=3))]
    query = tuple(draw(st.lists(st.tuples(TEXT, TEXT), max_size=2)))
    request = RequestParts(
        "POST", provider.name, path, query, (("x-custom", "1"),), Payload("json", body, "compact")
    )
    capture = Capture(
        provider, request, "k" * 64, draw(st.integers(0, 5)), "r", status, headers, chunked,
        Spool(tempfile.TemporaryFile),
    )  # fmt: skip
    times = iter(draw(st.lists(st.floats(0, 5), min_size=9, max_size=9)))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=5)))
    with patch(
        "tapeproxy.engine.capture.time.monotonic", side_effect=lambda: capture.started + next(times)
    ):
        for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            capture.add(data[start:end])
    redact = draw(st.booleans())
    scrubber = Scrubber.build(["stream", "x"], ["hide me", r"\d{3}"]) if redact else Scrubber()
    with patch("tapeproxy.engine.capture.time.monotonic", return_value=capture.started + 7.5):
        done = settle(capture, cut, scrubber, keep_failures=True)
    assert isinstance(done, Finished)
    return done.exchange.model_copy(update={"ordinal": draw(st.integers(1, 3))})


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(exchange=records())
def test_a_captured_exchange_is_written_and_read_back_unchanged(exchange: Exchange) -> None:
    raw = dump_exchange(exchange)
    assert load_exchange(raw) == exchange
    assert dump_exchange(load_exchange(raw)) == raw


def test_a_record_too_large_to_hold_renders_piece_by_piece_as_whole() -> None:
    frames: list[Record] = [{"ms": 1, "text": "a\u2028"}, {"ms": 2, "base64": "/w=="}, {"ms": 3}]
    whole: Record = {
        "schema_version": 1, "key": "k", "ordinal": 1, "seq": 0, "rules": "r",
        "outcome": "complete",
        "request": {"method": "GET", "upstream": "o", "path": "/", "query": [], "headers": {}},
        "response": {"status": 200, "headers": {}, "dialect": "sse", "frames": frames},
    }  # fmt: skip
    skeleton = {**whole, "response": {**whole["response"], "frames": [{"ms": 0, "text": STREAMED}]}}
    pieces = render_around(skeleton, lambda ascii: frames_json(frames, ascii))
    assert b"".join(pieces) == render(whole)
    model = Exchange.model_validate(skeleton)
    assert b"".join(
        dump_around(model, lambda ascii, blobber: frames_json(frames, ascii))
    ) == render(whole)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(exchange=records(), other=records(), data=st.data())
def test_two_recordings_are_the_same_when_only_timings_and_seq_differ(
    exchange: Exchange, other: Exchange, data: st.DataObject
) -> None:
    response = exchange.response
    frames = response.frames
    if frames is not None:
        ms = data.draw(st.lists(st.integers(0, 99), min_size=len(frames), max_size=len(frames)))
        frames = [f.model_copy(update={"ms": m}) for f, m in zip(frames, ms, strict=True)]
    end_ms = data.draw(st.none() | st.integers(0, 99)) if response.end_ms is not None else None
    retimed = exchange.model_copy(
        update={
            "seq": data.draw(st.integers(0, 9)),
            "response": response.model_copy(update={"frames": frames, "end_ms": end_ms}),
        }
    )
    assert exchange.same_recording(retimed) and retimed.same_recording(exchange)
    moved = other.model_copy(update={"key": exchange.key, "ordinal": exchange.ordinal})
    written_alike = dump_exchange(moved.untimed(0)) == dump_exchange(exchange.untimed(0))
    assert exchange.same_recording(moved) == written_alike
