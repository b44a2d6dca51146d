"""One run of one cassette (`Run`): what the cassette holds, and what this run asked, served and
recorded; the ordinals of what it records, numbered in writer threads."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tapeproxy.engine.matching import Recorded, pick_ordinal
from tapeproxy.engine.misses import Candidate
from tapeproxy.modes import Mode
from tapeproxy.settings import RepeatPolicy

_ASKS = itertools.count(1)  # orders runs by their last request
SETTLE_SECONDS = 5.0  # how long ending a run waits for answers still being recorded into it


@dataclass
class Run:
    """One run of one cassette: what is on disk, and what this run asked, served and recorded.
    A PUT on the control API starts a new run."""

    cassette: str
    ordinals: dict[str, list[int]]
    asked: Counter[str] = field(default_factory=Counter)
    served: set[tuple[str, int]] = field(default_factory=set)
    recorded: list[tuple[str, int]] = field(default_factory=list)
    committed: Counter[str] = field(default_factory=Counter)  # recordings made, per key
    # Ordinals handed to answers still being written, so concurrent ones never share one;
    # shared by the runs of one cassette, as a write may outlive the run that began it.
    pending: dict[str, set[int]] = field(default_factory=dict)
    recording: int = 0  # answers being recorded into this run right now
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    anew: bool = False  # recorded the cassette anew (record mode, a .derived cassette)
    held: bool = False  # the cassette held recordings when this run began (`once` mode)
    requests: int = 0
    misses: int = 0  # requests no recording answered (a miss, or out of recorded order)
    last_asked: int = 0  # when it was last asked, in asks counted over every run
    replayed_from: bool = False  # answered a request from disk, or refused one: it is an input
    live: set[str] = field(default_factory=set)  # upstreams that ran live in this replay run
    # key -> upstream of recordings read for unused accounting under partial replay only
    upstreams: dict[str, str] = field(default_factory=dict)
    order: list[Recorded] | None = None  # recorded order, loaded only for --strict-order
    cursor: int = 0  # position in `order` of the next recording to serve
    # Recorded requests in canonical form, read on the first miss and kept for the next ones.
    candidates: list[Candidate] | None = None
    # Used by the runs of this cassette that another client's mode change (or the cap on runs
    # under way) ended: one run as far as the last-run note goes, see Ledger.finish.
    inherited: set[tuple[str, int]] = field(default_factory=set)
    faults: Counter[str] = field(default_factory=Counter)  # faults served in it, by kind
    # Recordings a fault stood in for (a 429, a reset, ...): asked for, so used as far as
    # prune and --fail-on-unused go, though neither served nor used up (a retry gets them).
    wanted: set[tuple[str, int]] = field(default_factory=set)
    mode: Mode | None = None  # the server's mode for it (a new mode starts new runs)
    started: float = field(default_factory=time.time)  # wall clock, for prune's messages
    note_dropped: bool = False  # the cassette's last-run note was removed at the first write
    # Writer threads number recordings (next_ordinal) while the event loop adds them (add):
    # one lock, shared like `pending`, around both.
    numbering: threading.Lock = field(default_factory=threading.Lock)

    def ask(self, key: str) -> tuple[int, int]:
        """Count one more request for `key`: (its 1-based ask number, its seq in the run)."""
        self.asked[key] += 1
        self.requests += 1
        self.last_asked = next(_ASKS)
        return self.asked[key], self.requests - 1

    def pick(self, key: str, ask: int, policy: RepeatPolicy) -> int | None:
        return pick_ordinal(self.ordinals.get(key, ()), ask, policy)

    def next_ordinal(self, key: str, anew: bool) -> int:
        """The ordinal of the next recording of `key`: counted from 1 in a run that records
        the cassette anew, after the highest one on disk or being written in a run that adds
        to it. Called from writer threads."""
        with self.numbering:
            return self._next_ordinal(key, anew)

    def _next_ordinal(self, key: str, anew: bool) -> int:
        self.committed[key] += 1
        self.anew |= anew
        pending = self.pending.setdefault(key, set())
        if anew:
            ordinal = self.committed[key]
            while ordinal in pending:  # still being written by the run before this one
                ordinal += 1
        else:
            ordinal = max([*self.ordinals.get(key, ()), *pending, 0]) + 1
        pending.add(ordinal)
        return ordinal

    def begin_recording(self) -> None:
        self.recording += 1
        self.settled.clear()

    def end_recording(self) -> None:
        self.recording -= 1
        if self.recording <= 0:
            self.recording = 0
            self.settled.set()

    async def settle(self) -> None:
        """Wait, for SETTLE_SECONDS at most, for the answers still being recorded into this
        run (a stream the client closed at its final frame is read to its end first)."""
        if self.recording:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled.wait(), SETTLE_SECONDS)

    def superseded(self) -> list[tuple[str, int]]:
        """Recordings this run made obsolete: the 3rd recording of a request that this run
        re-recorded and asked only twice. Left on disk, replay would serve them."""
        with self.numbering:  # a write that outlived the settling may still number one
            return self._superseded()

    def _superseded(self) -> list[tuple[str, int]]:
        return [
            (key, ordinal)
            for key, count in self.committed.items()
            for ordinal in self.ordinals.get(key, ())
            if ordinal > count
        ]

    def on_disk(self, key: str, ordinal: int) -> bool:
        """Whether a recording of `key` numbered `ordinal` was on disk when the run began or
        was written since (a new one has nothing there to compare with)."""
        with self.numbering:
            return ordinal in self.ordinals.get(key, ())

    def add(self, key: str, ordinal: int) -> None:
        with self.numbering:
            ordinals = self.ordinals.setdefault(key, [])
            self.pending.get(key, set()).discard(ordinal)
            if ordinal not in ordinals:
                ordinals.append(ordinal)
                ordinals.sort()
                self.candidates = None
            self.recorded.append((key, ordinal))

    def found(self, key: str, ordinal: int) -> None:
        """The ordinal this run numbered was taken meanwhile by another server on the same
        library: the cassette holds a recording there, and no write of this run is pending."""
        with self.numbering:
            self.pending.get(key, set()).discard(ordinal)
            ordinals = self.ordinals.setdefault(key, [])
            if ordinal not in ordinals:
                ordinals.append(ordinal)
                ordinals.sort()
                self.candidates = None

    def used(self) -> set[tuple[str, int]]:
        """Recordings served, written or asked for under a fault in this run, or in the runs
        it carries on from."""
        return {*self.served, *self.recorded, *self.wanted, *self.inherited}

    def unused(self) -> list[tuple[str, int]]:
        """Recordings neither served nor written in this run (nor the runs it carries on
        from)."""
        used = self.used()
        return [
            (key, ordinal)
            for key, ordinals in sorted(self.ordinals.items())
            for ordinal in ordinals
            if (key, ordinal) not in used
        ]
