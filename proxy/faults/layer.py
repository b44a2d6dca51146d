"""The fault layer of an engine (`Faults`): which request gets a fault, the answer that stands
in for its own or its own spoiled, and the counting and the log line of each."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from tapeproxy.engine.inbound import Answer, Live, Serve
from tapeproxy.engine.keyed import Keyed
from tapeproxy.engine.relay import Relay
from tapeproxy.engine.run import Run
from tapeproxy.engine.stats import Counters
from tapeproxy.faults.schedule import Schedule
from tapeproxy.faults.spec import FaultSpec
from tapeproxy.faults.standins import (
    DROPS,
    ERRORS,
    STAND_INS,
    Dropping,
    RecordedErrors,
    error_answer,
    status_of,
)
from tapeproxy.faults.wrappers import spoiled
from tapeproxy.store.protocol import CassetteStore


class Faults:
    """The schedule of faults, the real error answers found in cassettes, and the counts."""

    def __init__(
        self, specs: Iterable[str], seed: int | None, store: CassetteStore, counters: Counters
    ) -> None:
        self.schedule = Schedule(specs, seed)
        self.recorded = RecordedErrors(store)
        self.counters = counters

    def restart(self, specs: Iterable[str] | None = None, seed: int | None = None) -> None:
        """A new run of faults (of `specs` when given, checked whole first; from `seed` when
        given)."""
        self.schedule.restart(specs, seed)
        self.recorded.clear()  # the cassettes may have been recorded anew since

    async def stand_in(self, keyed: Keyed, fault: FaultSpec) -> Serve | Live | None:
        """The answer in place of the request's own, or None for a fault that spoils it."""
        if fault.kind in DROPS:  # (no status is sent: the door drops the connection)
            wait = fault["after"] if fault.kind == "timeout" else 0.0
            return Live(504, [], Dropping(wait, keyed.inbound.gone, keyed.trace), held=True)
        if fault.kind not in ERRORS:
            return None
        provider = keyed.provider
        status = status_of(fault, provider)
        found = await asyncio.to_thread(self.recorded.find, keyed.cassette, provider.name, status)
        return Serve(error_answer(fault, provider, keyed.key, found), 0, None)

    def served(self, fault: FaultSpec, answer: Serve | Live, keyed: Keyed, run: Run) -> Answer:
        """`answer` (spoiled by `fault` if it is the request's own), counted and logged: one
        line, a live answer's own when it ends."""
        keyed.trace.fault = fault.text
        relay = answer.chunks if isinstance(answer, Live) else None
        relayed = isinstance(relay, Relay)
        status = answer.replay.status if isinstance(answer, Serve) else answer.status
        if fault.kind not in STAND_INS:
            if isinstance(answer, Serve):  # a recording spoiled is used (not up): prune keeps it
                run.served.add((keyed.key, answer.ordinal))
            # A live answer the fault cuts ends its relay with the line saying so.
            ended = relay.abandon if isinstance(relay, Relay) else None
            answer = spoiled(fault, answer, keyed.inbound.gone, ended)
        self.counters.faults += 1
        by_kind = self.counters.faults_by_kind
        by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
        run.faults[fault.kind] += 1
        if not relayed and fault.kind not in DROPS:  # (a drop says when it happens)
            keyed.trace.log("faulted", status)
        return answer
