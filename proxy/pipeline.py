"""The mode table as a pure function, and the Recorder that turns a live answer into an Exchange."""

from __future__ import annotations

import base64
import itertools
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from llmtape.bodies import Payload, payload_bytes, response_payload
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
from llmtape.settings import Mode
from llmtape.upstream import answer_headers


class Action(Enum):
    SERVE = "serve"  # answer from the cassette
    FORWARD_RECORD = "record"  # go live and write the exchange
    FORWARD = "forward"  # go live, write nothing
    REFUSE = "refuse"  # cassette miss: no upstream call


def plan(mode: Mode, hit: bool, live: bool) -> Action:
    """CONTRACT.md's mode table. `live` is partial replay: that upstream runs live in replay."""
    if mode is Mode.RECORD:
        return Action.FORWARD_RECORD
    if mode is Mode.PASSTHROUGH:
        return Action.FORWARD
    if mode is Mode.REPLAY and live:
        return Action.FORWARD_RECORD
    if hit:
        return Action.SERVE
    return Action.FORWARD_RECORD if mode is Mode.AUTO else Action.REFUSE


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


def header_pairs(headers: dict[str, str | list[str]]) -> list[tuple[str, str]]:
    return [(k, one) for k, v in headers.items() for one in (v if isinstance(v, list) else [v])]


def is_failure_status(status: int) -> bool:
    return status == 429 or status >= 500


@dataclass
class Recorder:
    """Captures a live answer, chunk by chunk with its arrival time, into one Exchange."""

    provider: Provider
    request: RequestParts
    key: str
    seq: int
    rules: str
    status: int
    headers: list[tuple[str, str]]
    chunked: bool
    started: float = field(default_factory=time.monotonic)
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
        return Exchange(
            key=self.key,
            ordinal=1,
            seq=self.seq,
            rules=self.rules,
            outcome=self._outcome(cut, error),
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

    def _outcome(self, cut: bool, error: bool) -> Outcome:
        if cut:
            return Outcome.UPSTREAM_CUT
        if is_failure_status(self.status):
            return Outcome.FAILURE_STATUS
        return Outcome.STREAM_ERROR if error else Outcome.COMPLETE


def _frame(ms: int, raw: bytes) -> Frame:
    try:
        return Frame(ms=ms, text=raw.decode("utf-8"))
    except UnicodeDecodeError:
        return Frame(ms=ms, base64=base64.b64encode(raw).decode("ascii"))


def frame_bytes(frame: Frame) -> bytes:
    if frame.text is not None:
        return frame.text.encode("utf-8")
    return base64.b64decode(frame.base64 or "")


def _needs_length(exchange: Exchange, cut: bool) -> bool:
    """Whether a replayed body gets a Content-Length: not a cut one (it goes chunked, so the
    client sees it end short), not one recorded with its own (HEAD), and never on an answer
    that may not carry one or had none (1xx, 204, 304, a HEAD answered chunked)."""
    status = exchange.response.status
    return not (
        cut
        or "content-length" in exchange.response.headers
        or status < 200
        or status in (204, 304)
        or exchange.request.method == "HEAD"
    )


@dataclass(frozen=True)
class Replay:
    """A recording made ready to send: built once per run from its file, sent many times."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    frames: tuple[tuple[int, bytes], ...]  # (ms from the start of the answer, bytes)
    cut: bool
    end_ms: int | None = None  # when a recorded cut came, if known

    @classmethod
    def of(cls, exchange: Exchange, key: str) -> Replay:
        response = exchange.response
        headers = [*header_pairs(response.headers), ("x-llmtape-key", key)]
        frames: tuple[tuple[int, bytes], ...]
        cut = exchange.outcome is Outcome.UPSTREAM_CUT
        if response.frames is None:
            body = payload_bytes(Payload.from_dict(response.body))
            if _needs_length(exchange, cut):
                headers.append(("content-length", str(len(body))))
            frames = ((0, body),) if body else ()
        else:
            frames = tuple((frame.ms, frame_bytes(frame)) for frame in response.frames)
        return cls(
            status=response.status,
            headers=tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers),
            frames=frames,
            cut=cut,
            end_ms=response.end_ms if cut else None,
        )
