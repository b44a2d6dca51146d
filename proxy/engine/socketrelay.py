"""A WebSocket session relayed live: frames each way between the client and the upstream,
teed into a `Tape`, and written whole when it ends with a close (never when the upstream
dropped without one, unless --record-failures; never past --max-record)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Literal

from tapeproxy.engine.finish import Finished
from tapeproxy.engine.frames import Tape
from tapeproxy.engine.keeper import Target
from tapeproxy.engine.keyed import Keyed
from tapeproxy.engine.session import (
    ERROR_CLOSE,
    SHUTDOWN,
    Parts,
    Peer,
    broken_message,
    fault_step,
    kept_protocols,
    refuse,
    sendable,
)
from tapeproxy.errors import TapeproxyError, UpstreamError
from tapeproxy.exchange.model import (
    Exchange,
    Outcome,
    Session,
    SessionEnd,
    StoredRequest,
    StoredResponse,
)
from tapeproxy.faults.spec import FaultSpec
from tapeproxy.upstream.protocol import Closed, Outbound, UpstreamSocket

log = logging.getLogger("tapeproxy")
Side = Literal["client", "server"]
# A session closed for a frame either side could not take is a failure, not an ending.
BAD_FRAME = {1007: "a text frame not UTF-8", 1009: "a frame too big"}


class Relay:
    """One live session: `run` connects, relays both ways, and records at the end."""

    def __init__(
        self, parts: Parts, keyed: Keyed, target: Target | None, peer: Peer, fault: FaultSpec | None
    ) -> None:
        self.p, self.keyed, self.target, self.peer, self.fault = parts, keyed, target, peer, fault
        self.tape = Tape(parts.settings.max_record, parts.scrubber, keyed.provider.tokens)
        self.sent = 0
        self.spoil = fault is not None and fault.kind == "malformed"

    async def run(self, protocols: list[str]) -> None:
        try:
            sock = await self._connect(protocols)
        except TapeproxyError as exc:
            message = self.p.scrubber.text(exc.message)
            log.warning("%s", message)
            self.p.counters.errors += 1
            await self.peer.accept(None)  # accepted, so the client reads why
            await refuse(self.keyed, self.peer, message, ERROR_CLOSE, "tapeproxy: upstream error")
            self.tape.discard()
            return
        await self.peer.accept(sock.subprotocol)
        if self.target is not None:
            self.target.run.begin_recording()
        try:
            end, by = await self._pump(sock)
            await self._keep(end, by, sock.subprotocol)
            if by == "server":  # on disk before the client sees the end, as an HTTP answer is
                await self.peer.close(sendable(end.code), end.reason)
        finally:
            if self.target is not None:
                self.target.run.end_recording()
            self.tape.discard()
            await sock.close(1000)  # a fault's cut, a shutdown: the upstream's leg ends too

    async def _connect(self, protocols: list[str]) -> UpstreamSocket:
        upstream = self.p.upstream()
        if upstream is None:
            raise UpstreamError("tapeproxy is not started: no upstream client yet")
        self.p.counters.upstream_calls += 1
        inbound = self.keyed.inbound
        query = f"?{inbound.query}" if inbound.query else ""
        url = self.keyed.provider.base_url + inbound.path + query
        outbound = Outbound.of(self.keyed.provider.name, "GET", url, inbound.headers, b"")
        return await upstream.connect(outbound, protocols, self.p.settings.max_frame)

    async def _pump(self, sock: UpstreamSocket) -> tuple[Closed, Side]:
        """Relay until one side ends: how it ended, and which side ended it."""
        down = asyncio.ensure_future(self._down(sock))
        up = asyncio.ensure_future(self._up(sock))
        try:
            done, _ = await asyncio.wait((down, up), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (down, up):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if down in done:  # the client is told once the session is written (run)
            return down.result(), "server"
        closed = up.result()
        await sock.close(sendable(closed.code, 1000), closed.reason)
        return closed, "client"

    async def _down(self, sock: UpstreamSocket) -> Closed:
        while True:
            got = await sock.receive()
            if isinstance(got, Closed):
                return got
            if self.fault is not None and not await fault_step(self.fault, self.sent):
                return Closed(None, "tapeproxy fault: cut")
            self.tape.add("server", got)
            if self.spoil and (bad := broken_message(got)) is not None:
                self.spoil, got = False, bad
            await self.peer.send(got)
            self.sent += 1

    async def _up(self, sock: UpstreamSocket) -> Closed:
        while True:
            got = await self.peer.receive()
            if isinstance(got, Closed):
                return got
            self.tape.add("client", got)
            await sock.send(got)

    async def _keep(self, end: Closed, by: Side, subprotocol: str | None) -> None:
        """Write the session, or say why not."""
        keyed, target = self.keyed, self.target
        if target is None:
            keyed.trace.log("relayed", 101)
            return
        why = None
        if self.tape.over:
            self.p.counters.too_large += 1
            why = f"over --max-record ({self.tape.size:,} bytes)"
        elif end.cut and by == "client":
            shutdown = end.reason == SHUTDOWN  # not whole: the rest was never said
            self.p.counters.aborted += 0 if shutdown else 1
            why = SHUTDOWN if shutdown else "the client dropped the session without a close"
        elif (end.cut or end.code in BAD_FRAME) and not self.p.settings.record_failures:
            why = BAD_FRAME.get(end.code or 0, "the upstream dropped it without a close")
        if why is not None:
            keyed.trace.log(f"not recorded ({why})", 101)
            return
        ending = SessionEnd(
            ms=self.tape.ms(),
            by=None if end.cut else by,
            code=end.code,
            reason=self.p.scrubber.text(end.reason),  # the upstream's words: "bad key sk-..."
            cut=end.cut,
        )
        outcome = Outcome.UPSTREAM_CUT if end.cut else Outcome.COMPLETE
        build = self._builder(ending, subprotocol, outcome)
        keyed.trace.log(await self.p.keeper.keep_whole(target, build), 101)

    def _builder(
        self, end: SessionEnd, subprotocol: str | None, outcome: Outcome
    ) -> Callable[[], Finished]:
        """What the writer thread writes: the session's skeleton, its frames in pieces."""
        keyed, tape, target = self.keyed, self.tape, self.target
        assert target is not None
        kept = kept_protocols([subprotocol] if subprotocol else [], self.p.scrubber)
        headers: dict[str, str | list[str]] = {"sec-websocket-protocol": kept[0]} if kept else {}
        skeleton = Exchange(
            schema_version=2 if tape.marked else 1,  # its frames hold a blob: dump_around
            key=keyed.key,
            ordinal=1,
            seq=target.seq,
            rules=keyed.rules.fingerprint(),
            outcome=outcome,
            usage=None if tape.tokens is None else tape.tokens.stored(),
            request=StoredRequest.model_validate(keyed.parts.to_dict()),
            response=StoredResponse(status=101, headers=headers),
            kind="websocket",
            session=Session(subprotocol=kept[0] if kept else None, end=end),
        )
        return lambda: Finished(skeleton, tape.pieces if tape.count else None)
