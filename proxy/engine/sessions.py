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
from tapeproxy.engine.refusals import miss_report
from tapeproxy.engine.run import Run
from tapeproxy.engine.session import (
    ERROR_CLOSE,
    Parts,
    Peer,
    Replay,
    count_miss,
    kept_protocols,
    refuse,
)
from tapeproxy.engine.socketrelay import Relay


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
        if fault is not None and fault.kind == "reset":
            p.counters.faults += 1
            await peer.close(ERROR_CLOSE, "tapeproxy fault: reset")  # before accept: refused
            return
        ask, seq = run.ask(keyed.key)
        ordinal = run.pick(keyed.key, ask, p.settings.repeat)
        step = plan(keyed.mode, ordinal is not None, keyed.runs_live, run.held)
        run.replayed_from |= step.action in (Action.SERVE, Action.REFUSE)
        if step.action is Action.SERVE and ordinal is not None:
            exchange = await asyncio.to_thread(p.store.read, keyed.cassette, keyed.key, ordinal)
            run.served.add((keyed.key, ordinal))
            p.counters.replayed += 1
            keyed.trace.log("replayed", 101)
            await Replay(self.p, keyed, exchange, peer, fault).run()
        elif step.action is Action.REFUSE:
            report = await self._report(keyed, run, ask)
            await peer.accept(None)
            await refuse(keyed, peer, report["message"])
        else:
            target = await p.target(keyed, step, run, seq)
            await Relay(self.p, keyed, target, peer, fault).run(protocols)

    async def _report(self, keyed: Keyed, run: Run, ask: int) -> dict[str, Any]:
        report = await miss_report(keyed, run, ask, self.p.store, self.p.rules)
        return count_miss(self.p, run, report)
