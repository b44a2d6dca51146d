"""A live answer on its way to a cassette: the Capture that turns its chunks into an Exchange,
and the Recording that the engine hands a door (feed, final frame seen, commit, abort)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmtape.bodies import response_payload
from llmtape.framing import (
    Dialect,
    FrameSplitter,
    dialect_for,
    ends_answer,
    json_document,
    read_frame,
    read_item,
)
from llmtape.models import Exchange, Frame, Outcome, StoredRequest, StoredResponse
from llmtape.normalize import RequestParts
from llmtape.providers.base import Provider
from llmtape.redact import is_secret_header
from llmtape.replays import frame_bytes
from llmtape.runs import Run
from llmtape.stats import Counters, Trace
from llmtape.upstream import answer_headers


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


@dataclass
class Capture:
    """Captures a live answer, chunk by chunk with its arrival time, into one Exchange."""

    provider: Provider
    request: RequestParts
    key: str
    seq: int
    rules: str
    status: int
    headers: list[tuple[str, str]]
    chunked: bool
    limit: int = 64 * 1024 * 1024  # --max-record: past this many bytes nothing is kept
    started: float = field(default_factory=time.monotonic)
    size: int = 0
    over: bool = False  # the answer passed `limit`: it goes on to the client, unrecorded
    _chunks: list[bytes] = field(default_factory=list)
    _frames: list[Frame] = field(default_factory=list)
    _splitter: FrameSplitter | None = None

    def __post_init__(self) -> None:
        # An error answer to a stream request is a plain body, even when sent chunked.
        asks = 200 <= self.status < 300 and self.provider.asks_to_stream(self.request)
        dialect = dialect_for(self.content_type, self.chunked, asks)
        self._splitter = FrameSplitter(dialect) if dialect else None

    @property
    def content_type(self) -> str:
        return next((v for k, v in self.headers if k == "content-type"), "")

    def add(self, chunk: bytes) -> None:
        if self.over:
            return
        self.size += len(chunk)
        if self.size > self.limit:
            self.over = True  # what was held goes now: memory stays bounded by the limit
            self._chunks.clear()
            self._frames.clear()
            self._splitter = None
            return
        if self._splitter is None:
            self._chunks.append(chunk)
            return
        ms = self._ms()
        self._frames += [_frame(ms, raw) for raw in self._splitter.feed(chunk)]

    def final_seen(self) -> bool:
        """Whether the answer so far holds its dialect's final frame: a client that had it may
        hang up before the upstream's end-of-body marker, and the answer is whole all the same."""
        splitter = self._splitter
        if splitter is None or splitter.dialect == "chunks":
            return False
        if splitter.dialect == "json":
            return json_document(self._joined() + splitter.pending) is not None
        # Newest first. An event that ends in a CR is held back (an LF may follow, making it
        # CRLF), yet its client has it whole: it counts too.
        pending = splitter.pending
        held = pending.decode("utf-8", "replace") if pending.endswith(b"\r") else ""
        frames = (frame.text or "" for frame in reversed(self._frames))
        signs = self.provider.frame_signs
        return ends_answer(splitter.dialect, itertools.chain([held], frames), signs)

    def finish(self, cut: bool) -> Exchange:
        """The exchange as captured; `cut` marks an upstream that stopped mid-answer, and keeps
        when it did. Its ordinal is 1 until the recording is committed and numbered."""
        ms = self._ms()
        dialect: Dialect | None = None
        body = frames = None
        if self._splitter is not None:
            dialect = self._splitter.dialect
            self._frames += [_frame(ms, raw) for raw in self._splitter.flush()]
            frames = self._frames
            payloads, error = self._stream_meaning(dialect)
        else:
            payload = response_payload(b"".join(self._chunks), self.content_type)
            body = payload.to_dict()
            payloads, error = ([payload.value] if payload.kind == "json" else []), False
        # After the flush: a final frame with no line end after it (`data: [DONE]` at EOF) counts.
        truncated = self._truncated()
        return Exchange(
            key=self.key,
            ordinal=1,
            seq=self.seq,
            rules=self.rules,
            outcome=self._outcome(cut, error, truncated),
            usage=self.provider.usage(payloads),
            request=StoredRequest.model_validate(self.request.to_dict()),
            response=StoredResponse(
                status=self.status,
                headers=stored_headers(self.headers, self.provider, self.request.method == "HEAD"),
                body=body,
                dialect=dialect,
                frames=frames,
                end_ms=ms if cut else None,
            ),
        )

    def _ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def _joined(self) -> bytes:
        return b"".join(frame_bytes(f) for f in self._frames)

    def _stream_meaning(self, dialect: Dialect) -> tuple[list[Any], bool]:
        """The JSON payloads of a stream, in order, and whether one of its frames is an error."""
        signs = self.provider.frame_signs
        if dialect == "json":
            payloads = json_document(self._joined()) or []
            return payloads, any(read_item(p, signs).error for p in payloads)
        meanings = [read_frame(dialect, f.text or "", signs) for f in self._frames]
        return [m.payload for m in meanings], any(m.error for m in meanings)

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


def _frame(ms: int, raw: bytes) -> Frame:
    try:
        return Frame(ms=ms, text=raw.decode("utf-8"))
    except UnicodeDecodeError:
        return Frame(ms=ms, base64=base64.b64encode(raw).decode("ascii"))


@dataclass(frozen=True)
class Target:
    """Where a live answer is recorded: a cassette's run, its seq there, and whether the run
    records the cassette anew (record mode, a .derived cassette) or adds to it (auto)."""

    run: Run
    seq: int
    anew: bool


class Keeper(Protocol):
    """Who numbers, writes and counts a finished recording: the engine."""

    counters: Counters

    async def keep(self, target: Target, exchange: Exchange) -> str:
        """Write the exchange into its target's cassette; the outcome for the log line."""
        ...


class Recording:
    """One live answer passing through to its client. The door feeds it every chunk, asks it
    whether the stream's final frame has come (a client may hang up after it), and then ends
    it exactly once: `commit(cut)` once the upstream is done (before the client sees the end,
    so the exchange is on disk first), or `abort(why)` when the answer will not be whole.
    Without a target (passthrough) nothing is captured or written; the log line is the same."""

    def __init__(
        self,
        trace: Trace,
        status: int,
        keeper: Keeper,
        capture: Capture | None = None,
        target: Target | None = None,
    ) -> None:
        self._trace = trace
        self._status = status
        self._keeper = keeper
        self._capture = capture if target is not None else None
        self._target = target
        self._ended = False
        if target is not None:
            target.run.begin_recording()  # a PUT that ends the run waits for this answer

    def feed(self, chunk: bytes) -> None:
        if self._capture is not None:
            self._capture.add(chunk)

    def final_seen(self) -> bool:
        return self._capture is not None and self._capture.final_seen()

    async def commit(self, cut: bool) -> None:
        """The upstream finished (`cut`: it stopped mid-answer). Capturing, rendering and
        writing run off the event loop."""
        if not self._end():
            return
        outcome = "cut" if cut else "live"
        if cut:
            self._keeper.counters.errors += 1
        try:
            if self._capture is not None and self._capture.over:
                self._keeper.counters.too_large += 1
                limit = self._capture.limit
                outcome = f"passed on, not recorded: over --max-record ({limit:,} bytes)"
            elif self._capture is not None and self._target is not None:
                exchange = await asyncio.to_thread(self._capture.finish, cut)
                outcome = await self._keeper.keep(self._target, exchange)
        finally:
            self._close(outcome)

    def abort(self, why: str, client_left: bool = True) -> None:
        """Nothing is recorded: the client left mid-answer, or a shutdown cut it."""
        if self._end():
            if client_left:
                self._keeper.counters.aborted += 1
            self._close(why)

    def refuse(self, why: str) -> None:
        """Nothing is recorded: the answer broke a limit on its way (a compression bomb)."""
        if self._end():
            self._keeper.counters.errors += 1
            self._keeper.counters.bombs += 1
            self._close(why)

    def _end(self) -> bool:
        ended, self._ended = self._ended, True
        return not ended

    def _close(self, outcome: str) -> None:
        if self._target is not None:
            self._target.run.end_recording()
        self._trace.log(outcome, self._status)
