"""A live answer on its way to a cassette: the Recording of one answer (feed, final frame
seen, commit, abort, refuse), ended exactly once, with its log line."""

from __future__ import annotations

from tapeproxy.engine.capture import Capture
from tapeproxy.engine.keeper import Keeper, Target
from tapeproxy.engine.stats import Trace


class Recording:
    """One live answer passing through to its client. Its relay (tapeproxy.engine.relay)
    feeds it every chunk (and awaits `spill` when `feed` says so), asks it whether the
    stream's final frame has come (a client may hang up after it), and then ends it exactly
    once: `commit(cut)` once the upstream is done (before the client sees the end, so the
    exchange is on disk first), `abort(why)` when the answer will not be whole, or
    `refuse(why)` when it broke a limit. Without a target (passthrough) nothing is captured
    or written; the log line is the same."""

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

    @property
    def writes(self) -> bool:
        """Whether committing it writes the answer (else it only ends with its log line)."""
        return self._target is not None

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk; True when `spill` is due before the next one."""
        return self._capture is not None and self._capture.add(chunk)

    async def spill(self) -> None:
        if self._capture is not None:
            await self._keeper.spill(self._capture)

    def final_seen(self) -> bool:
        return self._capture is not None and self._capture.final_seen()

    def over(self) -> bool:
        """Whether the answer passed --max-record: it will not be kept."""
        return self._capture is not None and self._capture.over

    async def commit(self, cut: bool) -> None:
        """The upstream finished (`cut`: it stopped mid-answer). Capturing, rendering and
        writing run off the event loop."""
        if not self._end():
            return
        outcome = "cut" if cut else "live"
        if cut:
            self._keeper.counters.errors += 1
        capture = self._capture
        try:
            if capture is not None and capture.over:
                self._keeper.drop(capture)
                self._keeper.counters.too_large += 1
                outcome = f"passed on, not recorded: over --max-record ({capture.limit:,} bytes)"
            elif capture is not None and capture.lost is not None:
                self._keeper.drop(capture)
                outcome = f"passed on, not recorded: {capture.lost}"
            elif capture is not None and self._target is not None:
                outcome = await self._keeper.keep(self._target, capture, cut)
        finally:
            self._close(outcome)

    def abort(self, why: str, client_left: bool = True) -> None:
        """Nothing is recorded: the client left mid-answer, or a shutdown cut it."""
        if self._end():
            if self._capture is not None:
                self._keeper.drop(self._capture)
            if client_left:
                self._keeper.counters.aborted += 1
            self._close(why)

    def refuse(self, why: str) -> None:
        """Nothing is recorded: the answer broke a limit on its way (a compression bomb)."""
        if self._end():
            if self._capture is not None:
                self._keeper.drop(self._capture)
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
