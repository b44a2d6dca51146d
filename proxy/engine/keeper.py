"""Where a recording goes once its answer is in (`Target`), and the `Keeper` that finishes,
numbers, writes and counts it in writer threads, off the event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tapeproxy.engine.capture import Capture
from tapeproxy.engine.finish import Finished, settle
from tapeproxy.engine.ledger import Ledger
from tapeproxy.engine.replay import ReplayCache
from tapeproxy.engine.run import Run
from tapeproxy.engine.stats import Counters
from tapeproxy.exchange.model import Exchange, Outcome, dump_around
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.store.blobs import blobber_for
from tapeproxy.store.protocol import CassetteStore

# Threads that write recordings. Many, since each mostly waits on its fsync: 32 clients
# recording at once are not queued behind a handful of writes.
WRITERS = 32
# Ordinals a recording tries when other servers on the same library take each one first.
MAX_TAKEN = 100
log = logging.getLogger("tapeproxy")


@dataclass
class Target:
    """Where a live answer is recorded: a cassette's run, its seq there, and whether the run
    records the cassette anew (record mode, a .derived cassette) or adds to it (auto)."""

    run: Run
    seq: int
    anew: bool


@dataclass(frozen=True)
class Kept:
    """What a writer thread did with a recording: the log line's outcome, and where it went
    (no ordinal when it was not written)."""

    outcome: str
    key: str = ""
    ordinal: int | None = None
    failed: bool = False  # the write failed


class Keeper:
    """Finishes, numbers, writes and counts recordings, in its pool of writer threads."""

    def __init__(
        self,
        store: CassetteStore,
        ledger: Ledger,
        replays: ReplayCache,
        counters: Counters,
        scrubber: Scrubber,
        record_failures: bool,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.replays = replays
        self.counters = counters
        self.scrubber = scrubber
        self.record_failures = record_failures
        self.writer = ThreadPoolExecutor(WRITERS, thread_name_prefix="tapeproxy-writer")

    async def keep(self, target: Target, capture: Capture, cut: bool) -> str:
        """Finish, number and write a recording, in one trip to a writer thread; the outcome
        for the log line. Its ordinal is given then, not when it was asked, so an answer that
        is not kept (a 429 the SDK retried) leaves no gap in the numbering."""
        loop = asyncio.get_running_loop()
        kept = await loop.run_in_executor(self.writer, self._write, target, capture, cut)
        return self._counted(target, kept)

    async def keep_whole(self, target: Target, build: Callable[[], Finished]) -> str:
        """Number and write what `build` makes in a writer thread (a WebSocket session,
        its frames read back from their spool as they are written); the log line's outcome."""

        def write() -> Kept:
            try:
                finished = build()
                return self._store(target.run, finished.exchange.key, target.anew, finished)
            except OSError as exc:
                log.error("recording a session: its scratch file failed: %s", exc)
                return Kept("not recorded (write failed)", failed=True)

        loop = asyncio.get_running_loop()
        kept = await loop.run_in_executor(self.writer, write)
        return self._counted(target, kept)

    def _counted(self, target: Target, kept: Kept) -> str:
        if kept.failed:
            self.counters.errors += 1
            self.counters.write_failures += 1
        if kept.ordinal is None:
            return kept.outcome
        run = target.run
        run.add(kept.key, kept.ordinal)
        self.replays.discard((run.cassette, kept.key, kept.ordinal))
        self.counters.recorded += 1
        return kept.outcome

    def _write(self, target: Target, capture: Capture, cut: bool) -> Kept:
        """In a writer thread: the exchange captured, scrubbed, numbered, written durably.
        The capture's spool is dropped either way."""
        run = target.run
        try:
            try:  # a spooled answer's last bytes are written to its scratch file and read back
                finished = settle(capture, cut, self.scrubber, self.record_failures)
            except OSError as exc:
                log.error("recording an answer: its scratch file failed: %s", exc)
                return Kept("not recorded (write failed)", failed=True)
            if not isinstance(finished, Finished):
                return Kept(finished)
            return self._store(run, capture.key, target.anew, finished)
        finally:
            capture.spool.discard()

    def _store(self, run: Run, key: str, anew: bool, finished: Finished) -> Kept:
        self.ledger.forget_note(run)  # before the write: a crash between leaves no stale note
        for _ in range(MAX_TAKEN):
            ordinal = run.next_ordinal(key, anew)
            exchange = finished.exchange.model_copy(update={"ordinal": ordinal})
            try:
                placed = self._place(run, exchange, finished)
            except OSError as exc:
                log.error("could not write to cassette %r: %s", run.cassette, exc)
                return Kept("not recorded (write failed)", failed=True)
            if placed or anew:
                break
            # Another server on the same library recorded this request at that ordinal
            # since this run listed the cassette: this recording takes the next one.
            run.found(key, ordinal)
        else:
            log.error("cassette %r: %d ordinals of %s taken", run.cassette, MAX_TAKEN, key[:12])
            return Kept("not recorded (write failed)", failed=True)
        outcome = exchange.outcome
        if not placed:  # record mode: the same request, recorded at once by another server
            return Kept("recorded (another server's copy kept)", key, ordinal)
        return Kept(
            "recorded" if outcome is Outcome.COMPLETE else f"recorded {outcome.value}", key, ordinal
        )

    def _place(self, run: Run, exchange: Exchange, finished: Finished) -> bool:
        """Write one recording: over what the run listed at its place, else only where
        nothing is (False when another writer got there first)."""
        anew = not run.on_disk(exchange.key, exchange.ordinal)
        if finished.middle is not None:
            pieces = dump_around(exchange, finished.middle, blobber_for(self.store, run.cassette))
            return self.store.write_pieces(
                run.cassette, exchange.key, exchange.ordinal, pieces, create=anew
            )
        if not anew:
            self.store.write(run.cassette, exchange)
            return True
        return self.store.create(run.cassette, exchange)

    async def spill(self, capture: Capture) -> None:
        """Write what the capture's spool holds to its scratch file, off the event loop."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.writer, capture.spool.flush)
        except OSError as exc:
            capture.lost = f"its scratch file could not be written ({exc})"
            self.counters.write_failures += 1
            log.error("recording an answer: %s", capture.lost)
            self.drop(capture)

    def drop(self, capture: Capture) -> None:
        """Drop a capture that will not be kept."""
        if capture.spool.spilled:  # closing a large scratch file frees its blocks: off the loop
            self.writer.submit(capture.spool.discard)
        else:
            capture.spool.discard()

    async def close(self) -> None:
        """Wait for the writes under way, then let the threads go."""
        await asyncio.to_thread(self.writer.shutdown)
