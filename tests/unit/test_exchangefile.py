"""The exchange file written without pydantic (exchangefile.py): every Record a capture makes
renders to the very bytes the pydantic model writes of it, and a stored file is judged the
same recording, without the model, only where the model would judge it so."""

from __future__ import annotations

import json
import tempfile
from typing import Any
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tapeproxy.bodies import Payload
from tapeproxy.capture import Capture, Finished, settle
from tapeproxy.exchangefile import STREAMED, Record, frames_json, render, render_around
from tapeproxy.models import Exchange, Frame, dump_around, dump_exchange, load_exchange
from tapeproxy.normalize import RequestParts
from tapeproxy.providers import anthropic, gemini, ollama, openai
from tapeproxy.providers.base import Provider
from tapeproxy.scrub import Scrubber
from tapeproxy.spool import Spool
from tapeproxy.store.base import same_as_stored

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
def records(draw: st.DrawFn) -> Record:
    """A Record as the server or its scribe settles one: any answer, split anywhere, cut
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
        "tapeproxy.capture.time.monotonic", side_effect=lambda: capture.started + next(times)
    ):
        for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            capture.add(data[start:end])
    redact = draw(st.booleans())
    scrubber = Scrubber.build(["stream", "x"], ["hide me", r"\d{3}"]) if redact else Scrubber()
    with patch("tapeproxy.capture.time.monotonic", return_value=capture.started + 7.5):
        done = settle(capture, cut, scrubber, keep_failures=True)
    assert isinstance(done, Finished)
    return {**done.record, "ordinal": draw(st.integers(1, 3))}


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(record=records())
def test_a_record_renders_to_the_bytes_the_model_writes_and_reads_back(record: Record) -> None:
    """The one source of truth: a Record is what the model dumps of itself, so the server
    and its scribe (which write Records) write what every reader and tool writes."""
    raw = render(record)
    exchange = Exchange.model_validate(record)
    assert raw == dump_exchange(exchange)
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
    assert b"".join(dump_around(model, lambda ascii: frames_json(frames, ascii))) == render(whole)


# What the pydantic model says of a stored file (the way FileStore judged before Records).
def model_says_same(raw: bytes, new: Record) -> bool:
    try:
        stored = load_exchange(raw)
    except (ValueError, ValidationError):
        return False
    if stored.read_as != stored.schema_version:
        return False

    def untimed(exchange: Exchange) -> Exchange:
        response = exchange.response
        frames = response.frames
        if frames is not None:
            frames = [Frame(ms=0, text=f.text, base64=f.base64) for f in frames]
        return exchange.model_copy(
            update={"response": response.model_copy(update={"frames": frames, "end_ms": None})}
        )

    fresh = untimed(Exchange.model_validate(new)).model_copy(update={"seq": stored.seq})
    return dump_exchange(untimed(stored)) == dump_exchange(fresh)


MUTANTS = st.sampled_from(
    ["drop", "null", "str", "float", "true", "neg", "extra", "text", "nested"]
)


def mutate(data: Any, path: list[Any], how: str) -> Any:
    """`data` with the value at `path` changed as `how` says (a hand-edited file)."""
    if not path:
        if how == "str":
            return str(data)
        if how == "float" and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        if how == "extra" and isinstance(data, dict):
            return {**data, "extra": 1}
        if how == "text" and isinstance(data, str):
            return data + "!"
        return {"null": None, "true": True, "neg": -1, "nested": [data]}.get(how, data)
    head, rest = path[0], path[1:]
    copy: Any = list(data) if isinstance(data, list) else dict(data)
    if not rest and how == "drop" and isinstance(copy, dict):
        del copy[head]
        return copy
    copy[head] = mutate(data[head], rest, how)
    return copy


# The model's own fields, where it coerces or fills in a default: drawn more often than a
# path into a body.
FIELDS: list[list[Any]] = [
    ["outcome"], ["seq"], ["usage"], ["schema_version"], ["request", "query"],
    ["request", "headers"], ["response", "status"], ["response", "headers"],
    ["response", "end_ms"], ["response", "dialect"], ["response", "body"],
    ["response", "frames"], ["response", "frames", 0, "ms"], ["response", "frames", 0, "text"],
]  # fmt: skip


def has(data: Any, path: list[Any]) -> bool:
    for step in path:
        inside = isinstance(data, dict) and step in data
        inside |= isinstance(data, list) and isinstance(step, int) and step < len(data)
        if not inside:
            return False
        data = data[step]
    return True


def paths(data: Any, at: list[Any]) -> list[list[Any]]:
    found = [at]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, [*at, key])
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths(value, [*at, index])
    return found


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(record=records(), other=records(), same=st.booleans(), data=st.data())
def test_a_stored_file_is_judged_without_the_model_only_where_the_model_agrees(
    record: Record, other: Record, same: bool, data: st.DataObject
) -> None:
    """`same_as_stored` answers True or False only as the model would (else None: the store
    then asks the model): for files as tapeproxy writes them, with other timings and seqs,
    other answers, and files changed by hand (a value coerced, dropped, nulled, added)."""
    new = record if same else {**other, "key": record["key"], "ordinal": record["ordinal"]}
    stored: Any = {**record, "seq": data.draw(st.integers(0, 9))}
    response = dict(stored["response"])
    if "frames" in response:
        ms = data.draw(st.lists(st.integers(0, 99), min_size=len(response["frames"])))
        response["frames"] = [{**f, "ms": m} for f, m in zip(response["frames"], ms, strict=False)]
    stored["response"] = response
    for _ in range(data.draw(st.integers(0, 2))):
        path = data.draw(st.sampled_from(FIELDS) | st.sampled_from(paths(stored, [])))
        if not has(stored, path):
            continue
        stored = mutate(stored, path, data.draw(MUTANTS))
    try:
        raw = render(stored) if data.draw(st.booleans()) else json.dumps(stored).encode()
    except (AttributeError, KeyError, TypeError):  # no response left to lay out
        raw = json.dumps(stored).encode()
    verdict = same_as_stored(raw, new)
    if verdict is not None:
        assert verdict == model_says_same(raw, new)
