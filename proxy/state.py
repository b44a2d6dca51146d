"""Server state owned by one app: the current cassette and mode, per-cassette runs, counters."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeVar

from proxy.matching import Recorded, pick_ordinal
from proxy.normalize import RequestParts
from proxy.pipeline import Replay
from proxy.settings import Mode, RepeatPolicy
from proxy.store.base import CassetteStore, exchange_file

MAX_LISTED = 50
log = logging.getLogger("llmtape")
MAX_PREPARED = 512

K = TypeVar("K")
V = TypeVar("V")


class LruCache(OrderedDict[K, V]):
    """A dict that forgets its least recently used entries beyond `size`."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get(self, key: K, default: Any = None) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass
class Stats:
    upstream_calls: int = 0
    replayed: int = 0
    recorded: int = 0
    misses: int = 0
    errors: int = 0
    aborted: int = 0  # clients that left mid-answer


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
    anew: bool = False  # recorded the cassette anew (record mode, a .derived cassette)
    requests: int = 0
    replayed_from: bool = False  # answered a request from disk, or refused one: it is an input
    order: list[Recorded] | None = None  # recorded order, loaded only for --strict-order
    cursor: int = 0  # position in `order` of the next recording to serve
    # Recorded requests in canonical form, read on the first miss and kept for the next ones.
    candidates: list[tuple[str, int, RequestParts]] | None = None
    # Recordings ready to send, so a request replayed again reads and renders nothing.
    prepared: LruCache[tuple[str, int], Replay] = field(
        default_factory=lambda: LruCache(MAX_PREPARED)
    )

    def ask(self, key: str) -> tuple[int, int]:
        """Count one more request for `key`: (its 1-based ask number, its seq in the run)."""
        self.asked[key] += 1
        self.requests += 1
        return self.asked[key], self.requests - 1

    def pick(self, key: str, ask: int, policy: RepeatPolicy) -> int | None:
        return pick_ordinal(self.ordinals.get(key, ()), ask, policy)

    def next_ordinal(self, key: str, anew: bool) -> int:
        """The ordinal of the next recording of `key`: counted from 1 in a run that records
        the cassette anew, after the highest one on disk in a run that adds to it."""
        self.committed[key] += 1
        self.anew |= anew
        if anew:
            return self.committed[key]
        return max(self.ordinals.get(key) or [0]) + 1

    def superseded(self) -> list[tuple[str, int]]:
        """Recordings this run made obsolete: the 3rd recording of a request that this run
        re-recorded and asked only twice. Left on disk, replay would serve them."""
        return [
            (key, ordinal)
            for key, count in self.committed.items()
            for ordinal in self.ordinals.get(key, ())
            if ordinal > count
        ]

    def add(self, key: str, ordinal: int) -> None:
        ordinals = self.ordinals.setdefault(key, [])
        if ordinal not in ordinals:
            ordinals.append(ordinal)
            ordinals.sort()
            self.candidates = None
        self.prepared.pop((key, ordinal), None)
        self.recorded.append((key, ordinal))

    def unused(self) -> list[str]:
        recorded = set(self.recorded)
        return [
            exchange_file(key, ordinal)
            for key, ordinals in sorted(self.ordinals.items())
            for ordinal in ordinals
            if (key, ordinal) not in self.served and (key, ordinal) not in recorded
        ]

    def summary(self) -> dict[str, Any]:
        """Counts for /__llmtape/stats and the shutdown log. Unused recordings count only for
        a cassette replayed from, not for one that was only written (a `.derived` one)."""
        unused = self.unused() if self.replayed_from else []
        return {
            "cassette": self.cassette,
            "requests": self.requests,
            "served": len(self.served),
            "recorded": [exchange_file(k, o) for k, o in self.recorded[:MAX_LISTED]],
            "recorded_count": len(self.recorded),
            "unused": unused[:MAX_LISTED],
            "unused_count": len(unused),
        }


class Runs:
    """The runs of every cassette touched since start, loaded lazily off the event loop."""

    def __init__(self, store: CassetteStore, strict_order: bool = False) -> None:
        self._store = store
        self._strict_order = strict_order
        self._runs: dict[str, Run] = {}
        self._loading: dict[str, asyncio.Task[Run]] = {}

    async def get(self, cassette: str) -> Run:
        run = self._runs.get(cassette)
        if run is not None:
            return run
        task = self._loading.get(cassette)
        if task is None:
            task = asyncio.create_task(self._load(cassette))
            self._loading[cassette] = task
        try:
            return await asyncio.shield(task)
        finally:
            self._loading.pop(cassette, None)

    async def _load(self, cassette: str) -> Run:
        ordinals = await asyncio.to_thread(self._store.entries, cassette)
        order = None
        if self._strict_order:
            order = await asyncio.to_thread(self._recorded_order, cassette, ordinals)
        return self._runs.setdefault(cassette, Run(cassette, ordinals, order=order))

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

    async def restart(self, cassette: str) -> None:
        """End a cassette's run: the next request reloads it from disk and starts afresh."""
        run = self._runs.pop(cassette, None)
        if run is not None:
            await asyncio.to_thread(self._finish, run)

    async def finish_all(self) -> None:
        for run in list(self._runs.values()):
            await asyncio.to_thread(self._finish, run)

    def _finish(self, run: Run) -> None:
        """A run that recorded a cassette anew drops the repeats it superseded."""
        if not run.anew:
            return
        stale = run.superseded()
        for key, ordinal in stale:
            self._store.delete(run.cassette, key, ordinal)
        if stale:
            names = ", ".join(exchange_file(k, o) for k, o in stale[:10])
            log.info("cassette %r: removed %d recording(s) this run superseded: %s",
                     run.cassette, len(stale), names)

    def all(self) -> list[Run]:
        return list(self._runs.values())


@dataclass
class ServerState:
    cassette: str
    mode: Mode
    stats: Stats = field(default_factory=Stats)
