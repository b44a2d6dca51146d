"""The record/replay engine: one request in (`Inbound`), one answer out (`Serve`, `Refuse` or
`Live`). It keys the request, asks its cassette's run, follows `plan()`, and counts; it
switches the current cassette and mode, and ends runs."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

from tapeproxy.engine import jsonrpc
from tapeproxy.engine.forward import forward
from tapeproxy.engine.inbound import Answer, Inbound, Live, Refuse, Serve
from tapeproxy.engine.keeper import Keeper, Target
from tapeproxy.engine.keyed import Current, Keyed, Keyer
from tapeproxy.engine.plan import Action, Step, plan, stream_goes_live
from tapeproxy.engine.refusals import miss_report, out_of_order, refusal
from tapeproxy.engine.replay import Replay, ReplayCache
from tapeproxy.engine.run import Run
from tapeproxy.engine.runs import Opened, Runs
from tapeproxy.engine.session import Parts
from tapeproxy.engine.sessions import Sessions
from tapeproxy.engine.stats import Counters, RunSummary, Snapshot
from tapeproxy.errors import CassetteCorrupt, TapeproxyError
from tapeproxy.faults.layer import Faults
from tapeproxy.faults.spec import FaultSpec
from tapeproxy.modes import SERVES_RECORDINGS, Mode
from tapeproxy.providers import Rulebook
from tapeproxy.providers.base import Provider
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.settings import Settings
from tapeproxy.store.names import check_cassette_name, derived_name
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.upstream.protocol import SocketUpstream, Upstream

MAX_MISSES = 50
log = logging.getLogger("tapeproxy")


class Engine:
    """Owns the runs, the replay cache, the counters and the miss journal of one server."""

    def __init__(
        self, settings: Settings, providers: Mapping[str, Provider], store: CassetteStore
    ) -> None:
        self.settings = settings
        self.providers = providers
        self.rules = Rulebook.build(providers, settings.ignore)
        self.scrubber = Scrubber.build(
            settings.redact_field, settings.redact_pattern, settings.redact_keep
        )
        self.store = store
        self.current = Current(settings.cassette, settings.mode)
        # Every cassette the server was told to serve (start-up, PUT), with its modes then:
        # one no request reached fails --fail-on-unused (an agent that bypassed tapeproxy).
        self.told: dict[str, set[Mode]] = {settings.cassette: {settings.mode}}
        self.named: set[str] = set()  # the cassettes a PUT named
        self.counters = Counters()
        self.keyer = Keyer(settings, providers, self.rules, self.scrubber)
        self.replays = ReplayCache()
        self.runs = Runs(store, self.replays, settings.strict_order, self.keyer.live)
        self.runs.watch(settings.cassette)
        self.misses: deque[dict[str, Any]] = deque(maxlen=MAX_MISSES)
        self.upstream: Upstream | None = None  # set while the server runs
        self.faults = Faults(settings.fault, settings.fault_seed, store, self.counters)
        failures = settings.record_failures
        self.keeper = Keeper(
            store, self.runs.ledger, self.replays, self.counters, self.scrubber, failures
        )
        self.sessions = Sessions(self._session_parts(), self.current)  # WebSockets

    def _session_parts(self) -> Parts:
        upstream = lambda: self.upstream if isinstance(self.upstream, SocketUpstream) else None  # noqa: E731
        return Parts(
            self.settings, self.keyer, self.runs, self.store, self.counters, self.keeper,
            self.scrubber, self.rules, self.faults, self.misses, self._target, upstream,
        )  # fmt: skip

    async def exchange(self, inbound: Inbound) -> Answer:
        """Serve it from the cassette, refuse it, or go live (and record, as planned)."""
        try:
            keyed = self.keyer.key(inbound, self.current)
            run = self.runs.loaded(keyed.cassette)
            if run is None:
                run = await self.runs.get(keyed.cassette, keyed.mode)
            if jsonrpc.standalone_stream(keyed.parts.method, inbound.header_map):
                if not stream_goes_live(keyed.mode, keyed.runs_live, run.held):
                    return Serve(jsonrpc.NO_STREAM, 0, None)
                return await self._forward(keyed, None)  # and never recorded
            fault = self.faults.schedule.draw(keyed.key, inbound.fault)
            if fault is not None:
                return await self._faulted(keyed, run, fault)
            ask, seq = run.ask(keyed.key)
            ordinal = run.pick(keyed.key, ask, self.settings.repeat)
            step = plan(keyed.mode, ordinal is not None, keyed.runs_live, run.held)
            run.replayed_from |= step.action is Action.SERVE or step.action is Action.REFUSE
            if step.action is Action.SERVE and ordinal is not None:
                return await self._serve(keyed, run, ordinal)
            if step.action is Action.REFUSE:
                return await self._refuse(keyed, run, ask)
            return await self._forward(keyed, await self._target(keyed, step, run, seq))
        except TapeproxyError as exc:
            if exc.status >= 500 or isinstance(exc, CassetteCorrupt):
                self.counters.errors += 1
            raise

    def abandoned(self, inbound_path: str, method: str) -> None:
        """A client that hung up while sending its request: counted, nothing sent upstream."""
        self.counters.aborted += 1
        log.info(
            "%s %s: the client hung up before its request was whole; nothing sent upstream",
            method,
            inbound_path,
        )

    async def _target(self, keyed: Keyed, step: Step, run: Run, seq: int) -> Target | None:
        if step.action is not Action.RECORD:
            return None
        if step.derived:
            # Partial replay: live answers go beside the cassette, never into it, and this
            # upstream's recordings are neither expected in order nor counted as unused.
            run.live.add(keyed.provider.name)
            run = await self.runs.get(derived_name(keyed.cassette))
            _, seq = run.ask(keyed.key)
        return Target(run, seq, step.anew)

    async def _serve(self, keyed: Keyed, run: Run, ordinal: int) -> Serve:
        if run.order is not None and (wrong := out_of_order(keyed, run, ordinal)) is not None:
            self.counters.misses += 1
            run.misses += 1
            raise wrong
        replay = await self._replay(keyed, ordinal)
        run.served.add((keyed.key, ordinal))
        self.counters.replayed += 1
        keyed.trace.log("replayed", replay.status)
        return Serve(replay, ordinal, keyed.timing)

    async def _replay(self, keyed: Keyed, ordinal: int) -> Replay:
        cached = (keyed.cassette, keyed.key, ordinal)
        replay = self.replays.get(cached)  # a small cassette's were read as its run began
        if replay is None:
            replay = await asyncio.to_thread(jsonrpc.read_ready, self.store, *cached)
            self.replays.put(cached, replay)
        return jsonrpc.answer(replay, keyed.parts.body, keyed.inbound.header_map)

    async def _faulted(self, keyed: Keyed, run: Run, fault: FaultSpec) -> Answer:
        """`fault`'s answer, never written: the run uses up no recording (a retry gets it)."""
        ask = run.asked[keyed.key] + 1
        ordinal = run.pick(keyed.key, ask, self.settings.repeat)
        step = plan(keyed.mode, ordinal is not None, keyed.runs_live, run.held)
        run.replayed_from |= step.action is Action.SERVE or step.action is Action.REFUSE
        if step.action is Action.SERVE and ordinal is not None:  # asked for: prune keeps it
            run.wanted.add((keyed.key, ordinal))
        answer: Serve | Live | None = await self.faults.stand_in(keyed, fault)
        if answer is None:  # a fault that spoils the answer: the one the request would get
            if step.action is Action.REFUSE:
                return await self._refuse(keyed, run, ask)
            if step.action is Action.SERVE and ordinal is not None:
                answer = Serve(await self._replay(keyed, ordinal), ordinal, None)
            else:
                answer = await self._forward(keyed, None)
        return self.faults.served(fault, answer, keyed, run)

    async def _refuse(self, keyed: Keyed, run: Run, ask: int) -> Refuse:
        self.counters.misses += 1
        run.misses += 1
        report = self.scrubber.strings(await miss_report(keyed, run, ask, self.store, self.rules))
        self.misses.appendleft(report)
        log.warning("%s", report["message"])
        return refusal(keyed.provider, report, keyed.parts.body)

    async def _forward(self, keyed: Keyed, target: Target | None) -> Live:
        return await forward(
            self.upstream, self.counters, self.keeper, self.settings, keyed, target
        )

    async def switch(
        self, cassette: str | None, mode: Mode | None, opened: Opened | None = None
    ) -> None:
        """Make `cassette` and `mode` current (None keeps either), end the run of the one it
        leaves and start a new one of the one it names (from `opened`, if nothing changed
        since: see Runs.offer). A new mode starts a new run of every cassette (those picked
        by header too); otherwise other clients' header-picked runs are left alone."""
        before = self.current.cassette
        if cassette is not None:
            self.current.cassette = check_cassette_name(cassette)
            self.named.add(self.current.cassette)
        new_mode = mode is not None and mode is not self.current.mode
        if mode is not None:
            self.current.mode = mode
        self.told.setdefault(self.current.cassette, set()).add(self.current.mode)
        self.runs.watch(self.current.cassette)
        names = {before, self.current.cassette}
        names |= {derived_name(name) for name in names}
        # A new mode restarts every run, but only the runs of the cassettes this PUT names are
        # over for `tapeproxy prune`: other clients' header-picked ones carry on in their next.
        await (self.runs.restart_all if new_mode else self.runs.restart)(*names)
        self.replays.clear()  # another tapeproxy may have re-recorded what the new runs read
        self.faults.restart()
        if opened is not None and opened.cassette == self.current.cassette:
            self.runs.offer(opened)

    def set_faults(self, specs: list[str] | None, seed: int | None = None) -> None:
        """A new run of `specs` from `seed` (None: as in force); BadFault for a bad spec."""
        self.faults.restart(specs, seed)

    async def take_run(self, cassette: str) -> list[tuple[str, Run | None]]:
        """End the runs of `cassette`'s derived cassette and of `cassette`: each, settled,
        for `close_run`. The next request to either starts a new run."""
        names = [derived_name(cassette), check_cassette_name(cassette)]
        return [(name, await self.runs.take(name)) for name in names]

    def close_run(
        self, taken: list[tuple[str, Run | None]], prune: bool, supersede: bool, failed: bool
    ) -> RunSummary | None:
        """Close the runs `take_run` ended (`prune`, `supersede`, `failed`: see `Runs.close`):
        the cassette's summary, None when it had no run. Blocking: the pytest plugin calls it
        from its own thread, which waits anyway (a trip to a worker thread and back saved)."""
        (derived, derived_run), (cassette, run) = taken
        self.runs.close(derived, derived_run, failed=failed)
        return self.runs.close(cassette, run, prune, supersede, failed)

    async def snapshot(self) -> Snapshot:
        runs = await self.runs.summaries()
        return Snapshot(
            counters=self.counters.copy(),
            cassette=self.current.cassette,
            mode=self.current.mode.value,
            runs=runs,
            ended_runs=list(self.runs.ledger.ended),
            unused_total=self.runs.ledger.ended_unused + sum(run.unused_count for run in runs),
            untouched=self.untouched(),
            fault_seed=self.faults.schedule.seed,
        )

    def untouched(self) -> list[str]:
        """The cassettes the server was told to serve that no request has reached: each one a
        PUT named, and the start-up one (`--cassette`) while no request reached any cassette
        (clients that pick theirs by header never meant to use it)."""
        touched = self.runs.touched
        return sorted(n for n in self.told if n not in touched and (n in self.named or not touched))

    async def close(self) -> Snapshot:
        """End every run (dropping what record runs superseded); count the recordings of every
        cassette it was told to serve in a replaying mode and no request reached as unused;
        the final snapshot."""
        self.upstream = None
        await self.runs.end_all()
        await self.keeper.close()
        self.replays.clear()
        for name in self.untouched():
            replaying = bool(self.told[name] & SERVES_RECORDINGS)
            try:
                await asyncio.to_thread(self.runs.ledger.untouched, name, replaying)
            except TapeproxyError as exc:
                log.error("cassette %r: %s", name, exc.message)
        return await self.snapshot()
