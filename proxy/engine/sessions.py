"""The engine's door for WebSocket sessions: an upgrade keyed as a request (its subprotocols
that are not credentials as its body), its run asked, `plan()` followed: replayed
(engine/session.py), refused with the provider's error event and close 1008, or relayed live
and recorded (engine/socketrelay.py)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from tapeproxy.engine.inbound import Inbound
from tapeproxy.engine.keyed import Current, Keyed
from tapeproxy.engine.plan import Action, plan
from tapeproxy.engine.refusals import miss_report, out_of_order
from tapeproxy.engine.run import Run
from tapeproxy.engine.session import (
    ERROR_CLOSE,
    Parts,
    Peer,
    Replay,
    count_miss,
    kept_protocols,
    ready,
    refuse,
)
from tapeproxy.engine.socketrelay import Relay
from tapeproxy.faults.spec import FaultSpec


class Sessions:
    """Every WebSocket session of one server."""

    def __init__(self, parts: Parts, current: Current) -> None:
        self.p = parts
        self.current = current

    async def run(self, inbound: Inbound, protocols: list[str], peer: Peer) -> None:
        """One session, from its upgrade to its close."""
        p = self.p
        kept = kept_protocols(protocols, p.scrubber)
        body = json.dumps({"subprotocols": kept}).encode()
        keying = replace(
            inbound, body=body, headers=(*inbound.headers, (b"content-type", b"application/json"))
        )
        keyed = p.keyer.key(keying, self.current)
        keyed.inbound = inbound
        run = p.runs.loaded(keyed.cassette) or await p.runs.get(keyed.cassette, keyed.mode)
        fault = p.faults.schedule.draw(keyed.key, inbound.fault)
        if fault is not None and await self._stand_in(keyed, run, fault, peer):
            return
        ask, seq = run.ask(keyed.key)
        ordinal = run.pick(keyed.key, ask, p.settings.repeat)
        step = plan(keyed.mode, ordinal is not None, keyed.runs_live, run.held)
        run.replayed_from |= step.action in (Action.SERVE, Action.REFUSE)
        if step.action is Action.SERVE and ordinal is not None:
            if run.order is not None and (wrong := out_of_order(keyed, run, ordinal)):
                p.counters.misses += 1  # --strict-order: refused as an HTTP request is
                run.misses += 1
                await peer.accept(None)
                await refuse(keyed, peer, p.scrubber.text(wrong.message))
                return
            recorded = await asyncio.to_thread(ready, p.store, keyed.cassette, keyed.key, ordinal)
            run.served.add((keyed.key, ordinal))
            p.counters.replayed += 1
            keyed.trace.log("replayed", 101)
            await Replay(self.p, keyed, recorded, peer, fault).run()
        elif step.action is Action.REFUSE:
            report = await self._report(keyed, run, ask)
            await peer.accept(None)
            await refuse(keyed, peer, report["message"])
        else:  # a session a fault spoils is never written, as an HTTP answer is not
            target = None if fault is not None else await p.target(keyed, step, run, seq)
            await Relay(self.p, keyed, target, peer, fault).run(protocols)

    async def _stand_in(self, keyed: Keyed, run: Run, fault: FaultSpec, peer: Peer) -> bool:
        """Count `fault`; answer in place of the session (True) for those that stand in:
        `reset` and `timeout` refuse the upgrade, `server_error`, `rate_limit` and
        `overloaded` send the provider's error event and close 1011. Else (`cut`, `slow`)
        the session goes on, spoiled as it runs."""
        counters = self.p.counters
        counters.faults += 1
        counters.faults_by_kind[fault.kind] = counters.faults_by_kind.get(fault.kind, 0) + 1
        run.faults[fault.kind] += 1
        keyed.trace.fault = fault.text
        why = f"tapeproxy fault: {fault.kind}"
        if fault.kind in ("reset", "timeout"):
            keyed.trace.log("faulted", 403)
            await peer.close(ERROR_CLOSE, why)  # before accept: the upgrade is refused
            return True
        if fault.kind in ("server_error", "rate_limit", "overloaded"):
            keyed.trace.log("faulted", 101)
            await peer.accept(None)
            await refuse(keyed, peer, why, ERROR_CLOSE, why)
            return True
        return False

    async def _report(self, keyed: Keyed, run: Run, ask: int) -> dict[str, Any]:
        report = await miss_report(keyed, run, ask, self.p.store, self.p.rules)
        return count_miss(self.p, run, report)
