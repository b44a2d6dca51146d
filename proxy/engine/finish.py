"""A captured answer finished, off the event loop, in a writer thread: `finish` turns a Capture
into an Exchange (whole, or for an answer too large to hold a skeleton and its pieces, read
back from the spool), with what it says (payloads, usage, an error frame); `settle` scrubs it
by the [redact] rules, or says why it is not kept."""

from __future__ import annotations

import base64
import codecs
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.capture import Capture
from tapeproxy.exchange import eventframes
from tapeproxy.exchange.blobstream import Middle, frames_middle, mapped, text_json
from tapeproxy.exchange.bodies import response_payload, textual
from tapeproxy.exchange.framing import (
    Dialect,
    FrameSigns,
    json_document,
    read_frame,
    read_item,
)
from tapeproxy.exchange.jsonitems import json_items
from tapeproxy.exchange.layout import (
    SCHEMA_VERSION,
    STREAMED,
    Outcome,
    Record,
    frame,
)
from tapeproxy.exchange.model import Exchange
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.formats import may_hold_key
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import is_secret_header
from tapeproxy.redaction.streams import spaced, windowed
from tapeproxy.upstream.hopheaders import answer_headers

# A larger frame is not parsed for its meaning: one json.loads of it would hold the GIL,
# and so the event loop, for as long as it takes.
MAX_PARSED = 1024 * 1024
USAGE_FROM = (8, 32)  # a spooled stream's usage is read from its first and last payloads
YIELD_EVERY = 256  # frames a writer thread turns over between two offers of the GIL


def stored_headers(
    headers: list[tuple[str, str]], provider: Provider, keep_length: bool = False
) -> dict[str, str | list[str]]:
    """The response headers worth keeping: not the provider's volatile ones, nor secrets; a
    repeated one (`link`, `vary`) as a list."""
    kept: dict[str, str | list[str]] = {}
    for k, v in answer_headers(headers, keep_length):
        if k == jsonrpc.SESSION_HEADER:
            v = jsonrpc.RECORDED_SESSION  # the server's own id is not kept: replay mints one
        elif provider.is_volatile(k) or is_secret_header(k):
            continue
        previous = kept.get(k)
        if previous is None:
            kept[k] = v
        else:
            kept[k] = [*previous, v] if isinstance(previous, list) else [previous, v]
    return kept


@dataclass(frozen=True)
class Finished:
    """A captured answer ready to number and write: the exchange whole, or (an answer too
    large to hold) a skeleton with STREAMED where `middle` writes its body or frames."""

    exchange: Exchange
    middle: Middle | None = None


def settle(capture: Capture, cut: bool, scrubber: Scrubber, keep_failures: bool) -> Finished | str:
    """A finished capture, scrubbed, ready to number and write; or, for an answer that is
    not kept (a failure without --record-failures), the outcome for the log line. Off the
    event loop, in a writer thread."""
    finished = finish(capture, cut, whole=scrubber.whole)
    outcome = finished.exchange.outcome
    if outcome is not Outcome.COMPLETE and not keep_failures:
        return f"not recorded ({outcome.value})"
    if finished.middle is not None and scrubber:
        # Too large to hold, and only the key formats to scrub: a window of frames at a time
        # (or piece by piece), as it is written. Its skeleton holds only the answer's head.
        text = "text" in (finished.exchange.response.body or {})
        skeleton = _scrubbed_head(finished.exchange, scrubber)
        return Finished(skeleton, _scrubbed_middle(capture, scrubber, text))
    if scrubber and (scrubber.whole or not _holds_no_key(finished.exchange)):
        # The request was scrubbed when keyed; the answer is scrubbed here.
        return Finished(scrubber.exchange(finished.exchange), finished.middle)
    return finished


def _scrubbed_head(exchange: Exchange, scrubber: Scrubber) -> Exchange:
    """A skeleton with its answer's header values scrubbed (its request was, when keyed)."""
    response = exchange.response
    headers = scrubber.headers(response.headers)
    if headers == response.headers:
        return exchange
    scrubbed = exchange.model_copy(
        update={"response": response.model_copy(update={"headers": headers})}
    )
    scrubbed._read_as = exchange.read_as
    return scrubbed


def _holds_no_key(exchange: Exchange) -> bool:
    """An answer in one piece (no frames or chunks: no key split across two) holding none of
    the key formats' hints, as most do: with only the key formats to scrub, it is written as
    it is, not rebuilt (some 50 us instead of 500, while the client waits for its last byte)."""
    response = exchange.response
    return response.frames is None and not may_hold_key(response.model_dump_json())


def _scrubbed_middle(capture: Capture, scrubber: Scrubber, text: bool) -> Middle:
    """A spooled answer's frames or body (`text`: kept as text) as `finish` writes them,
    each frame or piece scrubbed alone; a binary body as it is."""
    if capture.splitter is not None:
        dialect = capture.splitter.dialect
        if dialect == "json":  # (a document's items are parsed, so joined, only whole)
            frames = scrubber.each(_frames(capture), dialect)
        else:  # a window of frames at a time: a key split across two is matched whole
            frames = windowed(_frames(capture), partial(scrubber.frames, dialect=dialect))
        return partial(frames_middle, frames)
    if text:  # (read twice when its large runs are blobs: `mapped` scrubs a piece once;
        # cut after a space, so a key across two read pieces is whole in one)
        return partial(text_json, mapped(scrubber.text, lambda: spaced(_text_pieces(capture))))
    return partial(text_json, partial(_base64_pieces, capture))


def finish(capture: Capture, cut: bool, whole: bool = False) -> Finished:
    """The exchange as captured (off the event loop); `cut` marks an upstream that stopped
    mid-answer, and keeps when it did. Its ordinal is 1 until the recording is committed
    and numbered. An answer spooled to disk is written piece by piece, unless `whole`
    (redaction rules need it whole)."""
    ms = capture.ms()
    if capture.splitter is not None:
        for raw in capture.splitter.flush():
            capture.keep_frame(raw, ms)
    # After the flush: a final frame with no line end after it (`data: [DONE]` at EOF) counts.
    truncated = capture.truncated()
    if capture.spool.spilled and not whole:
        return _finish_spooled(capture, cut, truncated, ms)
    data = capture.spool.memory if not capture.spool.spilled else b"".join(capture.spool.pieces())
    body = frames = None
    dialect: Dialect | None = None
    if capture.splitter is not None:
        dialect = capture.splitter.dialect
        frames = list(_frames(capture))
        payloads, error = _stream_meaning(dialect, data, frames, capture.provider.frame_signs)
    else:
        payload = response_payload(data, capture.content_type)
        body = payload.to_dict()
        payloads, error = ([payload.value] if payload.kind == "json" else []), False
    return Finished(_record(capture, cut, error, truncated, payloads, ms, body, dialect, frames))


def _finish_spooled(capture: Capture, cut: bool, truncated: bool, ms: int) -> Finished:
    """An answer too large to hold: read back from the spool twice, in pieces, once for
    what it says and once to write it. A body is kept as text (or base64), not parsed."""
    if capture.splitter is None:
        kind = "text" if textual(capture.content_type) and _utf8(capture) else "base64"
        skeleton = _record(capture, cut, False, False, [], ms, {kind: STREAMED}, None, None)
        pieces = partial(_text_pieces if kind == "text" else _base64_pieces, capture)
        return Finished(skeleton, partial(text_json, pieces))
    dialect = capture.splitter.dialect
    first, last = USAGE_FROM
    head: list[Any] = []
    tail: deque[Any] = deque(maxlen=last)
    error = False
    signs = capture.provider.frame_signs
    for item in json_items(capture.spool.pieces()) if dialect == "json" else ():
        meaning = read_item(item, signs)
        error |= meaning.error
        (head if len(head) < first else tail).append(item)
    for one in _frames(capture) if dialect != "json" else ():
        text = one.get("text")
        if text is None or len(text) > MAX_PARSED:
            continue
        meaning = read_frame(dialect, text, signs)
        error |= meaning.error
        if meaning.payload is not None:
            (head if len(head) < first else tail).append(meaning.payload)
    payloads = [*head, *tail]
    marker = [frame(0, STREAMED)]
    skeleton = _record(capture, cut, error, truncated, payloads, ms, None, dialect, marker)
    return Finished(skeleton, partial(frames_middle, _frames(capture)))


def _frames(capture: Capture) -> Iterator[Record]:
    dialect = capture.splitter.dialect if capture.splitter is not None else "chunks"
    pieces = capture.spool.pieces(iter(capture.lengths))
    for count, (ms, raw) in enumerate(zip(capture.times, pieces, strict=True)):
        if count % YIELD_EVERY == YIELD_EVERY - 1:
            # A writer thread turning a million frames over holds the GIL for seconds,
            # and the event loop's thread, once it lets go of it, barely gets it back
            # (health took 1.4 s): hand it over now and then.
            time.sleep(0)
        yield _frame(ms, raw, dialect)


def _utf8(capture: Capture) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for piece in capture.spool.pieces():
            decoder.decode(piece)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _text_pieces(capture: Capture) -> Iterator[str]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    for piece in capture.spool.pieces():
        yield decoder.decode(piece)
    yield decoder.decode(b"", final=True)


def _base64_pieces(capture: Capture) -> Iterator[str]:
    rest = b""
    for piece in capture.spool.pieces():
        data = rest + piece
        whole = len(data) - len(data) % 3  # base64 of whole 3-byte groups joins cleanly
        rest = data[whole:]
        yield base64.b64encode(data[:whole]).decode("ascii")
    yield base64.b64encode(rest).decode("ascii")


def _record(
    capture: Capture,
    cut: bool,
    error: bool,
    truncated: bool,
    payloads: list[Any],
    ms: int,
    body: dict[str, Any] | None,
    dialect: Dialect | None,
    frames: list[Record] | None,
) -> Exchange:
    """The exchange as captured, ordinal 1 until it is numbered."""
    request = capture.request.to_dict()
    if request["body"] is None:
        del request["body"]
    response: Record = {
        "status": capture.status,
        "headers": stored_headers(
            capture.headers, capture.provider, capture.request.method == "HEAD"
        ),
    }
    for name, value in (("body", body), ("dialect", dialect), ("frames", frames)):
        if value is not None:
            response[name] = value
    if cut:
        response["end_ms"] = ms
    record: Record = {
        "schema_version": SCHEMA_VERSION,
        "key": capture.key,
        "ordinal": 1,
        "seq": capture.seq,
        "rules": capture.rules,
        "outcome": capture.outcome(cut, error, truncated),
    }
    usage = capture.provider.usage(payloads)
    if usage is not None:
        record["usage"] = usage
    record["request"] = request
    record["response"] = response
    return Exchange.model_validate(record)


def _stream_meaning(
    dialect: Dialect, data: bytes, frames: list[Record], signs: FrameSigns
) -> tuple[list[Any], bool]:
    """The JSON payloads of a stream, in order, and whether one of its frames is an error."""
    if dialect == "json":
        payloads = json_document(data) or []
        return payloads, any(read_item(p, signs).error for p in payloads)
    meanings = [read_frame(dialect, f.get("text") or "", signs) for f in frames]
    return [m.payload for m in meanings], any(m.error for m in meanings)


def _frame(ms: int, raw: bytes, dialect: Dialect) -> Record:
    if dialect == "eventstream":  # readable where that gives back its very bytes, else bytes
        text = eventframes.readable(raw)  # UTF-8 or not: a frame's text replays as a message
        return frame(ms, text) if text else frame(ms, base64=base64.b64encode(raw).decode())
    try:
        return frame(ms, raw.decode("utf-8"))
    except UnicodeDecodeError:
        return frame(ms, base64=base64.b64encode(raw).decode("ascii"))
