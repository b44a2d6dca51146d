"""Per-cassette runs: what each cassette holds, what a run of it asked, served and recorded, and
what the runs that ended left unused."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections import Counter, deque
from dataclasses import dataclass, field

from tapeproxy.engine.matching import Recorded, pick_ordinal
from tapeproxy.engine.misses import Candidate
from tapeproxy.engine.stats import RunSummary
from tapeproxy.errors import TapeproxyError
from tapeproxy.settings import RepeatPolicy
from tapeproxy.store.lastrun import LastRun, recording_digest
from tapeproxy.store.protocol import CassetteStore, exchange_file

MAX_LISTED = 50
MAX_OPEN_RUNS = 256  # cassettes under way at once; the least recently asked ends past that
_ASKS = itertools.count(1)  # orders runs by their last request
MAX_ENDED = 200  # ended runs kept for stats and the shutdown log (those with news only)
# Unused recordings a run's note lists for prune, each read and digested when the run ends:
# 100,000 of them took the server over 20 s to stop (and a SIGKILL).
MAX_NOTED = 5_000
# Cassettes a request reached (by header) before the server was told to serve them, the
# newest kept: a later PUT of one of them finds it touched even once its run has ended.
MAX_REACHED_UNTOLD = 1_024
SETTLE_SECONDS = 5.0  # how long ending a run waits for answers still being recorded into it
log = logging.getLogger("tapeproxy")


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
    # under way) ended: one run as far as the last-run note goes, see Runs._finish.
    inherited: set[tuple[str, int]] = field(default_factory=set)
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

    def used(self) -> set[tuple[str, int]]:
        """Recordings served or written in this run, or in the runs it carries on from."""
        return {*self.served, *self.recorded, *self.inherited}

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


class Touched:
    """Which of the cassettes the server was told to serve (`watch`) a request reached, and
    whether any request reached any cassette: what --fail-on-unused needs, bounded by the
    told names however many names clients send by header (`add` takes every one), and by
    the newest MAX_REACHED_UNTOLD names reached before they were told."""

    def __init__(self) -> None:
        self._watched: set[str] = set()
        self._reached: set[str] = set()
        self._untold: dict[str, None] = {}  # reached, not told (yet): oldest first
        self._any = False

    def watch(self, cassette: str, reached: bool = False) -> None:
        self._watched.add(cassette)
        if cassette in self._untold:  # a request reached it before it was told
            del self._untold[cassette]
            reached = True
        if reached:
            self._reached.add(cassette)

    def add(self, cassette: str) -> None:
        self._any = True
        if cassette in self._watched:
            self._reached.add(cassette)
        elif cassette not in self._untold:
            self._untold[cassette] = None
            if len(self._untold) > MAX_REACHED_UNTOLD:
                del self._untold[next(iter(self._untold))]

    def __contains__(self, cassette: object) -> bool:
        return cassette in self._reached

    def __bool__(self) -> bool:
        return self._any


class Runs:
    """The runs of every cassette touched since start, loaded lazily off the event loop, and
    what the runs that ended left behind (for stats, the shutdown log and --fail-on-unused)."""

    def __init__(
        self, store: CassetteStore, strict_order: bool = False, live: frozenset[str] = frozenset()
    ) -> None:
        self._store = store
        self._strict_order = strict_order
        self._live = live
        self._runs: dict[str, Run] = {}
        self._loading: dict[str, asyncio.Task[Run]] = {}
        self._pending: dict[str, dict[str, set[int]]] = {}  # per cassette, see Run.pending
        self._numbering: dict[str, threading.Lock] = {}  # per cassette, see Run.numbering
        # What the runs that ended without their own note used, per cassette: the next run
        # of it carries on from them (Run.inherited). Recordings on disk only: bounded.
        self._carried: dict[str, set[tuple[str, int]]] = {}
        self.ended: deque[RunSummary] = deque(maxlen=MAX_ENDED)
        self.ended_unused = 0  # unused recordings over every ended run, listed or not
        self.touched = Touched()  # which told cassettes a request reached since start
        self._notes_failed = False  # a note could not be kept: said once (_write_note)

    def watch(self, cassette: str) -> None:
        """The server was told to serve `cassette`: from now on, note whether a request
        reaches it (a run of it under way means one already has)."""
        self.touched.watch(cassette, reached=cassette in self._runs)

    def loaded(self, cassette: str) -> Run | None:
        """The run of `cassette` if it is under way: what `get` gives, without a coroutine
        for every request of a run that is already loaded."""
        self.touched.add(cassette)
        return self._runs.get(cassette)

    async def get(self, cassette: str) -> Run:
        self.touched.add(cassette)
        run = self._runs.get(cassette)
        if run is not None:
            return run
        task = self._loading.get(cassette)
        if task is None:
            task = asyncio.create_task(self._load(cassette))
            self._loading[cassette] = task
        try:
            run = await asyncio.shield(task)
        finally:
            self._loading.pop(cassette, None)
        await self._end_idle(keep=run)
        return run

    async def _end_idle(self, keep: Run) -> None:
        """Past MAX_OPEN_RUNS cassettes under way (clients may name any number by header),
        end the idle ones asked longest ago (not the start-up cassette a client uses all
        along): their summaries go to the bounded list of ended runs, and a later request to
        one starts a new run of it."""
        while len(self._runs) > MAX_OPEN_RUNS:
            idle = min(
                (r for r in self._runs.values() if r is not keep and not r.recording),
                key=lambda run: run.last_asked,
                default=None,
            )
            if idle is None:
                return
            del self._runs[idle.cassette]
            await self._end([idle], carry=True)

    async def _load(self, cassette: str) -> Run:
        ordinals = await asyncio.to_thread(self._store.entries, cassette)
        order = None
        if self._strict_order:
            order = await asyncio.to_thread(self._recorded_order, cassette, ordinals)
        pending = self._pending.setdefault(cassette, {})
        numbering = self._numbering.setdefault(cassette, threading.Lock())
        run = self._runs.get(cassette)
        if run is None:
            run = self._runs[cassette] = Run(
                cassette,
                ordinals,
                order=order,
                pending=pending,
                numbering=numbering,
                held=bool(ordinals),
                inherited=self._carried.pop(cassette, set()),
            )
        return run

    def _recorded_order(self, cassette: str, ordinals: dict[str, list[int]]) -> list[Recorded]:
        """Every recording by its position in the recording run (reads every file once)."""
        placed = []
        for key, numbers in ordinals.items():
            for ordinal in numbers:
                exchange = self._store.read(cassette, key, ordinal)
                request = exchange.request
                summary = f"{request.method} {request.upstream} {request.path}"
                placed.append((exchange.seq, Recorded(key, ordinal, request.upstream, summary)))
        placed.sort(key=lambda item: (item[0], item[1].key, item[1].ordinal))
        return [recorded for _, recorded in placed]

    async def restart(self, *cassettes: str) -> None:
        """End these cassettes' runs: the next request to one reloads it and starts afresh."""
        await self._end([run for name in cassettes if (run := self._runs.pop(name, None))])

    async def restart_all(self, *named: str) -> None:
        """End every run (a new mode). Only the runs of the `named` cassettes are over for
        `tapeproxy prune`: each other one (picked by header, its client never asked for this)
        leaves no note, and the next run of its cassette carries on from what it used."""
        runs, self._runs = list(self._runs.values()), {}
        await self._end([run for run in runs if run.cassette in named])
        await self._end([run for run in runs if run.cassette not in named], carry=True)

    async def end_all(self) -> None:
        """End every run for good (the server stops): each leaves its note."""
        runs, self._runs = list(self._runs.values()), {}
        await self._end(runs)

    async def _end(self, runs: list[Run], carry: bool = False) -> None:
        await asyncio.gather(*(run.settle() for run in runs))
        for run in runs:
            await asyncio.to_thread(self._finish, run, carry=carry)

    async def end(
        self, cassette: str, prune: bool = False, supersede: bool = True
    ) -> RunSummary | None:
        """End the run of one cassette, if it has one: its summary. `prune` also deletes the
        recordings the run neither served nor wrote, so a record run leaves the cassette
        holding exactly what it recorded (the pytest plugin's `record` mode). Without
        `supersede` a record run leaves the repeats it did not ask for (a cassette shared by
        several tests: another one asked for them)."""
        run = self._runs.pop(cassette, None)
        if run is None:
            return None
        await run.settle()
        return await asyncio.to_thread(self._finish, run, prune, supersede=supersede)

    async def summaries(self) -> list[RunSummary]:
        return await asyncio.to_thread(lambda: [self.summary(run) for run in self.all()])

    def _finish(
        self, run: Run, prune: bool = False, carry: bool = False, supersede: bool = True
    ) -> RunSummary:
        """Close a run: drop the repeats a record run superseded (with `prune`, every
        recording it did not use), note what a replay run used (for `tapeproxy prune`), keep its
        summary. With `carry` the run is not over for prune: it writes no note (and removes an
        older one, which no longer says what is in use), and the next run of the cassette
        carries on from what it used."""
        if run.anew and supersede:
            self._drop_superseded(run)
        unused = self._unused(run) if run.replayed_from else []
        if not carry:
            self._note(run, unused)
        else:
            if used := run.used():
                self._carried[run.cassette] = used
            if used or run.replayed_from:
                self._write_note(run.cassette, None)
        summary = self.summary(run, unused)
        self.ended_unused += summary.unused_count
        if summary.unused_count or summary.recorded_count:
            self.ended.append(summary)
        if prune:
            self._drop(run, run.unused(), "it did not make")
        return summary

    def _note(self, run: Run, unused: list[tuple[str, int]]) -> None:
        """A replay run leaves the note of what it used and did not, with a digest of each
        unused recording as it is now. A run that only recorded into the cassette removes an
        older note: it no longer says what is on disk."""
        if run.replayed_from:
            noted = unused[:MAX_NOTED]
            if len(unused) > len(noted):
                log.info(
                    "cassette %r: the run left %d recordings unused; its note for `tapeproxy "
                    "prune` lists the first %d (replay and prune again for the others)",
                    run.cassette,
                    len(unused),
                    len(noted),
                )
            note: LastRun | None = LastRun(
                used=[exchange_file(k, o) for k, o in sorted(run.used())],
                unused=[exchange_file(k, o) for k, o in noted],
                digests=self._digests(run.cassette, noted),
            )
        elif run.recorded:
            note = None
        else:
            return
        self._write_note(run.cassette, note)

    def _digests(self, cassette: str, places: list[tuple[str, int]]) -> dict[str, str]:
        """The digest of each recording that can be read (one that cannot gets none, so
        prune keeps it)."""
        digests = {}
        for key, ordinal in places:
            with contextlib.suppress(TapeproxyError):
                exchange = self._store.read(cassette, key, ordinal)
                digests[exchange_file(key, ordinal)] = recording_digest(exchange)
        return digests

    def forget_note(self, run: Run) -> None:
        """Remove the cassette's last-run note before this run first writes into it: from
        then on the note no longer says what is on disk, so a prune while this run is under
        way (or after it crashed) must not act on it. Call it off the event loop."""
        if not run.note_dropped:
            self._write_note(run.cassette, None)
            run.note_dropped = True

    def _write_note(self, cassette: str, note: LastRun | None) -> None:
        """Keep (or, None, remove) the note in the library's state folder. A library that
        takes no writes still replays: one warning for the server's life, not one per run.
        A note that cannot be removed is an error each time: it no longer says what is on
        disk."""
        try:
            self._store.write_last_run(cassette, note)
        except (OSError, TapeproxyError) as exc:
            if note is None:
                log.error("cassette %r: could not remove its last-run note: %s", cassette, exc)
            elif not self._notes_failed:
                self._notes_failed = True
                log.warning(
                    "the cassette library %s takes no notes for `tapeproxy prune` (%s): "
                    "replay goes on, and prune will find no finished replay run",
                    self._store.where(),
                    exc,
                )

    def untouched(self, cassette: str, replaying: bool) -> RunSummary:
        """A cassette the server was told to serve that no request reached: in a replaying
        mode, every recording it holds went unused. Call it off the event loop."""
        found = self._store.entries(cassette) if replaying else {}
        names = [exchange_file(k, o) for k, ordinals in sorted(found.items()) for o in ordinals]
        summary = RunSummary(cassette, 0, 0, [], 0, names[:MAX_LISTED], len(names))
        self.ended_unused += summary.unused_count
        if summary.unused_count:
            self.ended.append(summary)
        return summary

    def _drop_superseded(self, run: Run) -> None:
        self._drop(run, run.superseded(), "this run superseded")

    def _drop(self, run: Run, stale: list[tuple[str, int]], why: str) -> None:
        for key, ordinal in stale:
            self._store.delete(run.cassette, key, ordinal)
        if stale:
            names = ", ".join(exchange_file(k, o) for k, o in stale[:10])
            log.info(
                "cassette %r: removed %d recording(s) %s: %s", run.cassette, len(stale), why, names
            )

    def summary(self, run: Run, unused: list[tuple[str, int]] | None = None) -> RunSummary:
        """Counts for /__tapeproxy/stats and the shutdown log. Unused recordings count only for
        a cassette replayed from (not for a `.derived` one that was only written), and not
        for upstreams that ran live (partial replay), whose recordings could not be used.
        May read files (to learn a recording's upstream): call it off the event loop."""
        if unused is None:
            unused = self._unused(run) if run.replayed_from else []
        names = [exchange_file(k, o) for k, o in unused]
        return RunSummary(
            cassette=run.cassette,
            requests=run.requests,
            served=len(run.served),
            recorded=[exchange_file(k, o) for k, o in run.recorded[:MAX_LISTED]],
            recorded_count=len(run.recorded),
            unused=names[:MAX_LISTED],
            unused_count=len(names),
        )

    def _unused(self, run: Run) -> list[tuple[str, int]]:
        unused = run.unused()
        live = self._live | run.live
        if not live:
            return unused
        return [(k, o) for k, o in unused if self._upstream_of(run, k, o) not in live]

    def _upstream_of(self, run: Run, key: str, ordinal: int) -> str | None:
        if key not in run.upstreams:
            try:
                run.upstreams[key] = self._store.read(run.cassette, key, ordinal).request.upstream
            except TapeproxyError:
                return None
        return run.upstreams[key]

    def all(self) -> list[Run]:
        return list(self._runs.values())
