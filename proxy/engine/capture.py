"""A live answer as it is captured: the Capture that turns its chunks (and their arrival
times) into an Exchange, and `settle`, which finishes one off the event loop, in a writer
thread."""

from __future__ import annotations

import base64
import codecs
import itertools
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tapeproxy.engine.keying import RequestParts
from tapeproxy.engine.spool import Spool
from tapeproxy.exchange.bodies import response_payload, textual
from tapeproxy.exchange.framing import (
    Dialect,
    FrameSigns,
    FrameSplitter,
    dialect_for,
    ends_answer,
    json_document,
    json_items,
    read_frame,
    read_item,
)
from tapeproxy.exchange.layout import (
    SCHEMA_VERSION,
    STREAMED,
    Outcome,
    Record,
    frame,
    frames_json,
    string_json,
)
from tapeproxy.exchange.model import Exchange
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.redaction.secrets import is_secret_header
from tapeproxy.upstream.hopheaders import answer_headers


def stored_headers(
    headers: list[tuple[str, str]], provider: Provider, keep_length: bool = False
) -> dict[str, str | list[str]]:
    """The response headers worth keeping: not the provider's volatile ones, nor secrets; a
    repeated one (`link`, `vary`) as a list."""
    kept: dict[str, str | list[str]] = {}
    for k, v in answer_headers(headers, keep_length):
        if provider.is_volatile(k) or is_secret_header(k):
            continue
        previous = kept.get(k)
        if previous is None:
            kept[k] = v
        else:
            kept[k] = [*previous, v] if isinstance(previous, list) else [previous, v]
    return kept


def is_failure_status(status: int) -> bool:
    return status == 429 or status >= 500


RECENT_FRAMES = 64  # the newest frames kept in memory, to tell whether the final one came
RECENT_BYTES = 1024 * 1024  # ... as long as they hold no more than this (the newest always)
# A larger frame is not parsed for its meaning: one json.loads of it would hold the GIL,
# and so the event loop, for as long as it takes.
MAX_PARSED = 1024 * 1024
USAGE_FROM = (8, 32)  # a spooled stream's usage is read from its first and last payloads
YIELD_EVERY = 256  # frames a writer thread turns over between two offers of the GIL


@dataclass(frozen=True)
class Finished:
    """A captured answer ready to number and write: the exchange whole, or (an answer too
    large to hold) a skeleton with STREAMED where `middle` writes its body or frames."""

    exchange: Exchange
    middle: Callable[[bool], Iterable[bytes]] | None = None


def settle(capture: Capture, cut: bool, scrubber: Scrubber, keep_failures: bool) -> Finished | str:
    """A finished capture, scrubbed, ready to number and write; or, for an answer that is
    not kept (a failure without --record-failures), the outcome for the log line. Off the
    event loop, in a writer thread."""
    finished = capture.finish(cut, whole=bool(scrubber))
    outcome = finished.exchange.outcome
    if outcome is not Outcome.COMPLETE and not keep_failures:
        return f"not recorded ({outcome.value})"
    if scrubber:  # the request was scrubbed when keyed; the answer is scrubbed here
        return Finished(scrubber.exchange(finished.exchange), finished.middle)
    return finished


@dataclass
class Capture:
    """Captures a live answer, chunk by chunk with its arrival time, into one Exchange. The
    bytes go to a Spool (memory, then a scratch file past SPOOL_AFTER); of each stream frame
    only its length and arrival time are kept, and the newest few frames."""

    provider: Provider
    request: RequestParts
    key: str
    seq: int
    rules: str
    status: int
    headers: list[tuple[str, str]]
    chunked: bool
    spool: Spool
    limit: int = 64 * 1024 * 1024  # --max-record: past this many bytes nothing is kept
    started: float = field(default_factory=time.monotonic)
    size: int = 0
    over: bool = False  # the answer passed `limit`: it goes on to the client, unrecorded
    lost: str | None = None  # why nothing can be kept (its spool could not be written)
    _lengths: array[int] = field(default_factory=lambda: array("q"))
    _times: array[int] = field(default_factory=lambda: array("q"))
    _recent: deque[bytes] = field(default_factory=deque)
    _recent_bytes: int = 0
    _splitter: FrameSplitter | None = None

    def __post_init__(self) -> None:
        # An error answer to a stream request is a plain body, even when sent chunked.
        asks = 200 <= self.status < 300 and self.provider.asks_to_stream(self.request)
        dialect = dialect_for(self.content_type, self.chunked, asks)
        self._splitter = FrameSplitter(dialect) if dialect else None

    def doomed(self, cut: bool) -> Outcome | None:
        """The outcome, when it is known to be a failure before the answer is finished."""
        failed = self._outcome(cut, error=False)
        return None if failed in (Outcome.COMPLETE, Outcome.TRUNCATED) else failed

    @property
    def content_type(self) -> str:
        return next((v for k, v in self.headers if k == "content-type"), "")

    def add(self, chunk: bytes) -> bool:
        """Take the next chunk; True when the spool wants a `flush` (off the loop)."""
        if self.over or self.lost is not None:
            return False
        self.size += len(chunk)
        if self.size > self.limit:
            self.over = True  # nothing more is kept; the spool is dropped when the answer ends
            self._splitter = None
            self._recent.clear()
            self._recent_bytes = 0
            self.spool.forget()
            return False
        if self._splitter is None:
            return self.spool.write(chunk)
        ms = self._ms()
        due = False
        for raw in self._splitter.feed(chunk):
            due = self._keep_frame(raw, ms) or due
        return due

    def _keep_frame(self, raw: bytes, ms: int) -> bool:
        self._lengths.append(len(raw))
        self._times.append(ms)
        recent = self._recent
        recent.append(raw)
        self._recent_bytes += len(raw)
        # Frames of megabytes (images as base64) must not keep the answer whole in memory.
        while len(recent) > RECENT_FRAMES or (
            self._recent_bytes > RECENT_BYTES and len(recent) > 1
        ):
            self._recent_bytes -= len(recent.popleft())
        return self.spool.write(raw)

    def final_seen(self) -> bool:
        """Whether the answer so far holds its dialect's final frame: a client that had it may
        hang up before the upstream's end-of-body marker, and the answer is whole all the same."""
        splitter = self._splitter
        if splitter is None or splitter.dialect == "chunks":
            return False
        if splitter.dialect == "json":
            return self._json_whole(splitter.pending)
        # Newest first. An event that ends in a CR is held back (an LF may follow, making it
        # CRLF), yet its client has it whole: it counts too.
        pending = splitter.pending
        held = pending.decode("utf-8", "replace") if pending.endswith(b"\r") else ""
        frames = (raw.decode("utf-8", "replace") for raw in reversed(self._recent))
        signs = self.provider.frame_signs
        return ends_answer(splitter.dialect, itertools.chain([held], frames), signs)

    def _json_whole(self, pending: bytes) -> bool:
        """A streamed JSON document is whole when it parses; one spooled past SPOOL_AFTER is
        taken as whole when it ends its array (parsing it again would stall the loop)."""
        if self.spool.spilled:
            tail = b"".join(self._recent) + pending
            return tail.rstrip().endswith(b"]")
        return json_document(self.spool.memory + pending) is not None

    def finish(self, cut: bool, whole: bool = False) -> Finished:
        """The exchange as captured (off the event loop); `cut` marks an upstream that stopped
        mid-answer, and keeps when it did. Its ordinal is 1 until the recording is committed
        and numbered. An answer spooled to disk is written piece by piece, unless `whole`
        (redaction rules need it whole)."""
        ms = self._ms()
        if self._splitter is not None:
            for raw in self._splitter.flush():
                self._keep_frame(raw, ms)
        # After the flush: a final frame with no line end after it (`data: [DONE]` at EOF) counts.
        truncated = self._truncated()
        if self.spool.spilled and not whole:
            return self._finish_spooled(cut, truncated, ms)
        data = self.spool.memory if not self.spool.spilled else b"".join(self.spool.pieces())
        body = frames = None
        dialect: Dialect | None = None
        if self._splitter is not None:
            dialect = self._splitter.dialect
            frames = list(self._frames())
            payloads, error = _stream_meaning(dialect, data, frames, self.provider.frame_signs)
        else:
            payload = response_payload(data, self.content_type)
            body = payload.to_dict()
            payloads, error = ([payload.value] if payload.kind == "json" else []), False
        return Finished(self._record(cut, error, truncated, payloads, ms, body, dialect, frames))

    def _finish_spooled(self, cut: bool, truncated: bool, ms: int) -> Finished:
        """An answer too large to hold: read back from the spool twice, in pieces, once for
        what it says and once to write it. A body is kept as text (or base64), not parsed."""
        if self._splitter is None:
            kind = "text" if textual(self.content_type) and self._utf8() else "base64"
            skeleton = self._record(cut, False, False, [], ms, {kind: STREAMED}, None, None)
            pieces = self._text_pieces() if kind == "text" else self._base64_pieces()
            return Finished(skeleton, partial(string_json, pieces))
        dialect = self._splitter.dialect
        first, last = USAGE_FROM
        head: list[Any] = []
        tail: deque[Any] = deque(maxlen=last)
        error = False
        signs = self.provider.frame_signs
        for item in json_items(self.spool.pieces()) if dialect == "json" else ():
            meaning = read_item(item, signs)
            error |= meaning.error
            (head if len(head) < first else tail).append(item)
        for one in self._frames() if dialect != "json" else ():
            text = one.get("text")
            if text is None or len(text) > MAX_PARSED:
                continue
            meaning = read_frame(dialect, text, signs)
            error |= meaning.error
            if meaning.payload is not None:
                (head if len(head) < first else tail).append(meaning.payload)
        payloads = [*head, *tail]
        marker = [frame(0, STREAMED)]
        skeleton = self._record(cut, error, truncated, payloads, ms, None, dialect, marker)
        return Finished(skeleton, partial(frames_json, self._frames()))

    def _frames(self) -> Iterator[Record]:
        pieces = self.spool.pieces(iter(self._lengths))
        for count, (ms, raw) in enumerate(zip(self._times, pieces, strict=True)):
            if count % YIELD_EVERY == YIELD_EVERY - 1:
                # A writer thread turning a million frames over holds the GIL for seconds,
                # and the event loop's thread, once it lets go of it, barely gets it back
                # (health took 1.4 s): hand it over now and then.
                time.sleep(0)
            yield _frame(ms, raw)

    def _utf8(self) -> bool:
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            for piece in self.spool.pieces():
                decoder.decode(piece)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
        return True

    def _text_pieces(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        for piece in self.spool.pieces():
            yield decoder.decode(piece)
        yield decoder.decode(b"", final=True)

    def _base64_pieces(self) -> Iterator[str]:
        rest = b""
        for piece in self.spool.pieces():
            data = rest + piece
            whole = len(data) - len(data) % 3  # base64 of whole 3-byte groups joins cleanly
            rest = data[whole:]
            yield base64.b64encode(data[:whole]).decode("ascii")
        yield base64.b64encode(rest).decode("ascii")

    def _record(
        self,
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
        request = self.request.to_dict()
        if request["body"] is None:
            del request["body"]
        response: Record = {
            "status": self.status,
            "headers": stored_headers(self.headers, self.provider, self.request.method == "HEAD"),
        }
        for name, value in (("body", body), ("dialect", dialect), ("frames", frames)):
            if value is not None:
                response[name] = value
        if cut:
            response["end_ms"] = ms
        record: Record = {
            "schema_version": SCHEMA_VERSION,
            "key": self.key,
            "ordinal": 1,
            "seq": self.seq,
            "rules": self.rules,
            "outcome": self._outcome(cut, error, truncated),
        }
        usage = self.provider.usage(payloads)
        if usage is not None:
            record["usage"] = usage
        record["request"] = request
        record["response"] = response
        return Exchange.model_validate(record)

    def _ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def _truncated(self) -> bool:
        """A stream that ended cleanly but without its dialect's final frame (no `[DONE]`,
        `message_stop`, `response.completed`, `"done": true`, Gemini finish): cut short, not
        whole. Only where the provider says its streams always end with one."""
        splitter = self._splitter
        return (
            splitter is not None
            and splitter.dialect != "chunks"
            and 200 <= self.status < 300
            and self.provider.ends_streams(self.request.path)
            and not self.final_seen()
        )

    def _outcome(self, cut: bool, error: bool, truncated: bool = False) -> Outcome:
        if cut:
            return Outcome.UPSTREAM_CUT
        if is_failure_status(self.status):
            return Outcome.FAILURE_STATUS
        if error:
            return Outcome.STREAM_ERROR
        return Outcome.TRUNCATED if truncated else Outcome.COMPLETE


def _stream_meaning(
    dialect: Dialect, data: bytes, frames: list[Record], signs: FrameSigns
) -> tuple[list[Any], bool]:
    """The JSON payloads of a stream, in order, and whether one of its frames is an error."""
    if dialect == "json":
        payloads = json_document(data) or []
        return payloads, any(read_item(p, signs).error for p in payloads)
    meanings = [read_frame(dialect, f.get("text") or "", signs) for f in frames]
    return [m.payload for m in meanings], any(m.error for m in meanings)


def _frame(ms: int, raw: bytes) -> Record:
    try:
        return frame(ms, raw.decode("utf-8"))
    except UnicodeDecodeError:
        return frame(ms, base64=base64.b64encode(raw).decode("ascii"))
