"""The runs of every cassette touched since start (`Runs`): loaded lazily, restarted by the
control API, ended (see tapeproxy.engine.ledger), at most MAX_OPEN_RUNS under way; and which
of the cassettes the server was told to serve a request reached (`Touched`)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.ledger import Ledger
from tapeproxy.engine.matching import Recorded
from tapeproxy.engine.replay import Replay, ReplayCache
from tapeproxy.engine.run import Run
from tapeproxy.engine.stats import RunSummary
from tapeproxy.exchange.model import Exchange
from tapeproxy.modes import SERVES_RECORDINGS, Mode
from tapeproxy.store.protocol import CassetteStore

# A cassette of at most READ_AHEAD recordings (a test's) is read whole as its run begins, in
# the same trip off the event loop as its listing: a trip per recording costs more than the
# read (two thread wake-ups, ~0.3 ms on a busy machine). At most READ_AHEAD_BYTES are held.
READ_AHEAD = 16
READ_AHEAD_BYTES = 1024 * 1024
MAX_OPEN_RUNS = 256  # cassettes under way at once; the least recently asked ends past that
# Cassettes a request reached (by header) before the server was told to serve them, the
# newest kept: a later PUT of one of them finds it touched even once its run has ended.
MAX_REACHED_UNTOLD = 1_024


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


@dataclass(frozen=True)
class Opened:
    """What a new run of a cassette starts from (see `Runs.open`). `changes`: the count of
    recordings written and runs ended (whose end may delete some) when it was read. `read`:
    the recordings read ahead (all when `whole`), for the pytest plugin's tokens and cost."""

    cassette: str
    ordinals: dict[str, list[int]]
    ahead: dict[tuple[str, int], Replay]
    order: list[Recorded] | None
    changes: int
    read: dict[tuple[str, int], Exchange]

    @property
    def whole(self) -> bool:
        return len(self.read) == sum(map(len, self.ordinals.values()))


class Runs:
    """The runs of every cassette touched since start, loaded lazily off the event loop, and
    (its `ledger`) what the runs that ended left behind."""

    def __init__(
        self,
        store: CassetteStore,
        replays: ReplayCache | None = None,
        strict_order: bool = False,
        live: frozenset[str] = frozenset(),
    ) -> None:
        self._store = store
        self._replays = ReplayCache() if replays is None else replays  # where reads ahead go
        self._strict_order = strict_order
        self.ledger = Ledger(store, live)
        self._runs: dict[str, Run] = {}
        self._loading: dict[str, asyncio.Task[Run]] = {}
        self._pending: dict[str, dict[str, set[int]]] = {}  # per cassette, see Run.pending
        self._numbering: dict[str, threading.Lock] = {}  # per cassette, see Run.numbering
        self._offered: Opened | None = None  # see `offer`
        self._ended = 0  # runs ended since start (see `changes`)
        self.touched = Touched()  # which told cassettes a request reached since start

    def watch(self, cassette: str) -> None:
        """The server was told to serve `cassette`: from now on, note whether a request
        reaches it (a run of it under way means one already has)."""
        self.touched.watch(cassette, reached=cassette in self._runs)

    def loaded(self, cassette: str) -> Run | None:
        """The run of `cassette` if it is under way: what `get` gives, without a coroutine
        for every request of a run that is already loaded."""
        self.touched.add(cassette)
        return self._runs.get(cassette)

    async def get(self, cassette: str, mode: Mode | None = None) -> Run:
        """The run of `cassette`, loaded if need be (read ahead in a mode that serves)."""
        self.touched.add(cassette)
        run = self._runs.get(cassette)
        if run is not None:
            return run
        task = self._loading.get(cassette)
        if task is None and (offered := self._take_offer(cassette)) is not None:
            run = self._begin(offered, mode)
            await self._end_idle(keep=run)
            return run
        if task is None:
            task = asyncio.create_task(self._load(cassette, mode))
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
        along): their summaries go to the bounded list of ended runs; the next request to
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

    async def _load(self, cassette: str, mode: Mode | None) -> Run:
        ahead = mode in SERVES_RECORDINGS
        return self._begin(await asyncio.to_thread(self.open, cassette, ahead), mode)

    def open(self, cassette: str, read_ahead: bool = False) -> Opened:
        """What a new run of `cassette` starts from: its recordings (key -> ordinals); for a
        small one with `read_ahead`, each made ready to send; with --strict-order, the order
        they were recorded in (the files read ahead are not read again). One that cannot be
        read ahead is left to be read when asked for: its error then. Blocking: the pytest
        plugin calls it from its own thread, which waits anyway, and `offer`s what it gives."""
        changes = self.changes()
        ordinals = self._store.entries(cassette)
        ahead: dict[tuple[str, int], Replay] = {}
        read: dict[tuple[str, int], Exchange] = {}
        if read_ahead and sum(map(len, ordinals.values())) <= READ_AHEAD:
            held = 0
            for key, ordinal in ((k, o) for k, numbers in ordinals.items() for o in numbers):
                try:
                    exchange = self._store.read(cassette, key, ordinal)
                    replay = jsonrpc.ready(exchange, key)
                except Exception:  # read again when asked for, and its error told then
                    continue
                held += replay.size
                if held > READ_AHEAD_BYTES:  # this one and the rest are read when asked for
                    break
                ahead[(key, ordinal)] = replay
                read[(key, ordinal)] = exchange
        order = self._recorded_order(cassette, ordinals, read) if self._strict_order else None
        return Opened(cassette, ordinals, ahead, order, changes, read)

    def changes(self) -> int:
        """Recordings written and runs ended since start: what `open` read holds while this
        stays the same (a run's end may delete recordings it superseded or did not use)."""
        return self._replays.discards + self._ended

    def offer(self, opened: Opened) -> None:
        """Keep what `open` gave for the next run of its cassette: its first request starts
        the run from it, with no trip off the event loop. Only the latest is kept, and only
        while nothing `changes` (else the cassette is listed again)."""
        self._offered = opened

    def _take_offer(self, cassette: str) -> Opened | None:
        offered = self._offered
        if offered is None or offered.cassette != cassette:
            return None
        self._offered = None
        return offered if offered.changes == self.changes() else None

    def _begin(self, opened: Opened, mode: Mode | None = None) -> Run:
        cassette = opened.cassette
        # What was read ahead goes to the replay cache, unless something changed since (a
        # recording written, a run ended): then it is read again when asked for.
        if opened.changes == self.changes():
            for (key, ordinal), replay in opened.ahead.items():
                self._replays.put((cassette, key, ordinal), replay)
        pending = self._pending.setdefault(cassette, {})
        numbering = self._numbering.setdefault(cassette, threading.Lock())
        run = self._runs.get(cassette)
        if run is None:
            run = self._runs[cassette] = Run(
                cassette,
                opened.ordinals,
                order=opened.order,
                pending=pending,
                numbering=numbering,
                held=bool(opened.ordinals),
                inherited=self.ledger.inherited(cassette),
                mode=mode,
            )
        return run

    def _recorded_order(
        self, cassette: str, ordinals: dict[str, list[int]], read: dict[tuple[str, int], Exchange]
    ) -> list[Recorded]:
        """Every recording by its place in the recording run (a file not `read` is read once)."""
        placed = []
        for key, numbers in ordinals.items():
            for ordinal in numbers:
                exchange = read.get((key, ordinal)) or self._store.read(cassette, key, ordinal)
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
        self._ended += len(runs)
        await asyncio.gather(*(run.settle() for run in runs))
        for run in runs:
            await asyncio.to_thread(self.ledger.finish, run, carry=carry)

    async def take(self, cassette: str) -> Run | None:
        """End the run of `cassette`, if it has one: the run, settled (no recording of it
        still being written), for `close` to close off the event loop. The next request to
        the cassette starts a new run."""
        self._take_offer(cassette)  # a test that made no request leaves no offer behind
        run = self._runs.pop(cassette, None)
        if run is not None:
            self._ended += 1
            await run.settle()
        return run

    def close(
        self,
        cassette: str,
        run: Run | None,
        prune: bool = False,
        supersede: bool = True,
        failed: bool = False,
    ) -> RunSummary | None:
        """Close a run `take` gave (None: the cassette had none): its summary. `prune` also
        deletes the recordings the run neither served nor wrote, so a record run leaves the
        cassette holding exactly what it recorded (the pytest plugin's `record` mode).
        Without `supersede` a record run leaves the repeats it did not ask for (a cassette
        shared by several tests: another one asked for them). A `failed` run (its test
        failed) leaves a note prune will not act on. Blocking: call it off the event loop."""
        if run is None:
            if failed:
                self.ledger.fail_note(cassette)
            return None
        return self.ledger.finish(run, prune, supersede=supersede, failed=failed)

    async def summaries(self) -> list[RunSummary]:
        return await asyncio.to_thread(lambda: [self.ledger.summary(run) for run in self.all()])

    def all(self) -> list[Run]:
        return list(self._runs.values())
