"""A live answer as it is captured, on the event loop: the Capture takes its chunks (and their
arrival times) into a Spool, keeps each stream frame's length and time and the newest frames,
and tells whether the final frame came. tapeproxy.engine.finish turns it into an Exchange."""

from __future__ import annotations

import itertools
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from tapeproxy.engine.keying import RequestParts
from tapeproxy.engine.spool import Spool
from tapeproxy.exchange import eventframes
from tapeproxy.exchange.framing import FrameSplitter, dialect_for, ends_answer, json_document
from tapeproxy.exchange.layout import Outcome
from tapeproxy.providers.base import Provider


def is_failure_status(status: int) -> bool:
    return status == 429 or status >= 500


RECENT_FRAMES = 64  # the newest frames kept in memory, to tell whether the final one came
RECENT_BYTES = 1024 * 1024  # ... as long as they hold no more than this (the newest always)


@dataclass
class Capture:
    """Captures a live answer, chunk by chunk with its arrival time. The bytes go to a Spool
    (memory, then a scratch file past SPOOL_AFTER); of each stream frame only its length and
    arrival time are kept, and the newest few frames."""

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
    # When each chunk came: a live answer's clock; an answer read whole from another format
    # (`tapeproxy import`) has none, and stands still at 0 so its frames' times do too.
    clock: Callable[[], float] = time.monotonic
    started: float = field(default_factory=time.monotonic)
    size: int = 0
    over: bool = False  # the answer passed `limit`: it goes on to the client, unrecorded
    lost: str | None = None  # why nothing can be kept (its spool could not be written)
    lengths: array[int] = field(default_factory=lambda: array("q"))
    times: array[int] = field(default_factory=lambda: array("q"))
    _recent: deque[bytes] = field(default_factory=deque)
    _recent_bytes: int = 0
    splitter: FrameSplitter | None = field(default=None, init=False)  # a stream's, by dialect

    def __post_init__(self) -> None:
        # An error answer to a stream request is a plain body, even when sent chunked.
        asks = 200 <= self.status < 300 and self.provider.asks_to_stream(self.request)
        dialect = dialect_for(self.content_type, self.chunked, asks)
        self.splitter = FrameSplitter(dialect) if dialect else None

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
            self.splitter = None
            self._recent.clear()
            self._recent_bytes = 0
            self.spool.forget()
            return False
        if self.splitter is None:
            return self.spool.write(chunk)
        ms = self.ms()
        due = False
        for raw in self.splitter.feed(chunk):
            due = self.keep_frame(raw, ms) or due
        return due

    def keep_frame(self, raw: bytes, ms: int) -> bool:
        self.lengths.append(len(raw))
        self.times.append(ms)
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
        splitter = self.splitter
        if splitter is None or splitter.dialect == "chunks":
            return False
        if splitter.dialect == "json":
            return self._json_whole(splitter.pending)
        # Newest first. An event that ends in a CR is held back (an LF may follow, making it
        # CRLF), yet its client has it whole: it counts too.
        pending = splitter.pending
        held = pending.decode("utf-8", "replace") if pending.endswith(b"\r") else ""
        frames = map(self._text, reversed(self._recent))
        signs = self.provider.frame_signs
        return ends_answer(splitter.dialect, itertools.chain([held], frames), signs)

    def _text(self, raw: bytes) -> str:
        """A frame as its dialect's tests read it: an eventstream message made readable
        (on the event loop: one larger than RECENT_BYTES is not, and says nothing)."""
        if self.splitter is not None and self.splitter.dialect == "eventstream":
            return (eventframes.readable(raw) if len(raw) <= RECENT_BYTES else None) or ""
        return raw.decode("utf-8", "replace")

    def _json_whole(self, pending: bytes) -> bool:
        """A streamed JSON document is whole when it parses; one spooled past SPOOL_AFTER is
        taken as whole when it ends its array (parsing it again would stall the loop)."""
        if self.spool.spilled:
            tail = b"".join(self._recent) + pending
            return tail.rstrip().endswith(b"]")
        return json_document(self.spool.memory + pending) is not None

    def ms(self) -> int:
        return int((self.clock() - self.started) * 1000)

    def truncated(self) -> bool:
        """A stream that ended cleanly but without its dialect's final frame (no `[DONE]`,
        `message_stop`, `response.completed`, `"done": true`, Gemini finish): cut short, not
        whole. Only where the provider says its streams always end with one."""
        splitter = self.splitter
        return (
            splitter is not None
            and splitter.dialect != "chunks"
            and 200 <= self.status < 300
            and self.provider.ends_streams(self.request.path)
            and not self.final_seen()
        )

    def outcome(self, cut: bool, error: bool, truncated: bool = False) -> Outcome:
        if cut:
            return Outcome.UPSTREAM_CUT
        if is_failure_status(self.status):
            return Outcome.FAILURE_STATUS
        if error:
            return Outcome.STREAM_ERROR
        return Outcome.TRUNCATED if truncated else Outcome.COMPLETE
