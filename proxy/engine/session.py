"""WebSocket sessions, beside the HTTP relay: an upgrade keyed as a request, then replayed
causally from its cassette, refused (the provider's error event, close 1008), or relayed
live to the upstream and recorded whole when it ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tapeproxy.engine.frames import decoded, matchable, message_of, readable, recorded_value
from tapeproxy.engine.keeper import Keeper, Target
from tapeproxy.engine.keyed import Keyed, Keyer
from tapeproxy.engine.matching import diff
from tapeproxy.engine.plan import Step
from tapeproxy.engine.run import Run
from tapeproxy.engine.runs import Runs
from tapeproxy.engine.stats import Counters
from tapeproxy.exchange.model import (
    Exchange,
    Session,
    SessionEnd,
    SocketFrame,
)
from tapeproxy.faults.layer import Faults
from tapeproxy.faults.spec import FaultSpec
from tapeproxy.faults.wrappers import broken
from tapeproxy.providers import Rulebook
from tapeproxy.redaction.scrubber import Scrubber
from tapeproxy.settings import Settings
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.upstream.protocol import Closed, Message, SocketUpstream

log = logging.getLogger("tapeproxy")
CREDENTIAL_PROTOCOL = "openai-insecure-api-key."  # a browser's key, as a subprotocol
MISS_CLOSE, TOO_BIG_CLOSE, ERROR_CLOSE = 1008, 1009, 1011
INBOX = 16  # client frames read ahead of a replay
SHUTDOWN = "tapeproxy shut down mid-session"  # a client's leg cut by the server's shutdown


class Peer(Protocol):
    """The client's side of a session, as its door gives it: accept, frames each way, close."""

    async def accept(self, subprotocol: str | None) -> None: ...
    async def receive(self) -> Message | Closed: ...
    async def send(self, message: Message) -> None: ...
    async def close(self, code: int, reason: str) -> None: ...


@dataclass
class Parts:
    """What the engine shares with its sessions."""

    settings: Settings
    keyer: Keyer
    runs: Runs
    store: CassetteStore
    counters: Counters
    keeper: Keeper
    scrubber: Scrubber
    rules: Rulebook
    faults: Faults
    misses: deque[dict[str, Any]]
    target: Callable[[Keyed, Step, Run, int], Awaitable[Target | None]]
    upstream: Callable[[], SocketUpstream | None]


def kept_protocols(protocols: list[str], scrubber: Scrubber) -> list[str]:
    """The subprotocols that key and are stored: none that is a credential."""
    return [p for p in protocols if not p.startswith(CREDENTIAL_PROTOCOL) and scrubber.text(p) == p]


RESERVED_CLOSE = frozenset({1004, 1005, 1006, 1015})  # never sent in a close frame (RFC 6455)


def sendable(code: int | None, cut: int = ERROR_CLOSE) -> int:
    """A close code a close frame may carry: `cut` for none (the other side dropped), 1000
    for one RFC 6455 reserves for what was seen, not sent (1005 "no status", 1006...)."""
    if code is None:
        return cut
    return 1000 if code in RESERVED_CLOSE or not 1000 <= code <= 4999 else code


def count_miss(parts: Parts, run: Run, report: dict[str, Any]) -> dict[str, Any]:
    """A miss counted, journalled and logged like an HTTP miss; the report, scrubbed."""
    parts.counters.misses += 1
    run.misses += 1
    report = parts.scrubber.strings(report)
    parts.misses.appendleft(report)
    log.warning("%s", report["message"])
    return report


async def refuse(
    keyed: Keyed, peer: Peer, message: str, code: int = MISS_CLOSE, why: str = ""
) -> None:
    """The provider's error event with the report, then a close naming the cassette (a
    miss) or saying `why`."""
    event_id = f"event_tapeproxy_{secrets.token_hex(8)}"
    kind = "cassette_miss" if code == MISS_CLOSE else "server_error"
    event = keyed.provider.sockets.error_event(kind, message, event_id)
    await peer.send(json.dumps(event))
    # Where the report is before the cassette's name, which may be cut (a reason holds 123
    # bytes): Gemini Live's SDK shows the reason only, not the error event.
    reason = why or f"tapeproxy: cassette miss (report: /__tapeproxy/misses) in {keyed.cassette!r}"
    await peer.close(code, reason)


# A recorded session read back, with each server frame as it goes on the wire (made in the
# worker thread that reads the file, not frame by frame on the event loop).
Ready = tuple[Exchange, list[Message | None]]


def ready(store: CassetteStore, cassette: str, key: str, ordinal: int) -> Ready:
    """Blocking: recording `ordinal` of `key`, its server frames made ready to send."""
    exchange = store.read(cassette, key, ordinal)
    frames = exchange.session.frames if exchange.session is not None else []
    return exchange, [message_of(f) if f.direction == "server" else None for f in frames]


class Replay:
    """A recorded session played back causally: the server frames before the first client
    frame at once, then for each client frame that matches the next recorded one, the server
    frames recorded after it."""

    def __init__(
        self, parts: Parts, keyed: Keyed, ready: Ready, peer: Peer, fault: FaultSpec | None
    ) -> None:
        self.p, self.keyed, self.peer, self.fault = parts, keyed, peer, fault
        exchange, self.wire = ready
        self.session = exchange.session or Session(end=SessionEnd(ms=0, cut=True))
        self.sent = 0
        self.matched = 0  # client frames matched so far
        # A server frame is due at its offset from the anchor (the start, or the client frame
        # that set it off): waits from frame to frame add their lateness up along a turn.
        self.clock, self.anchor = 0, 0.0  # the anchor's recorded ms; when it came (loop s)
        self.spoil = fault is not None and fault.kind == "malformed"
        self.inbox: asyncio.Queue[Message | Closed] = asyncio.Queue(INBOX)
        self.gone = asyncio.Event()  # the client has left: no server frame waits its time

    async def run(self) -> None:
        await self.peer.accept(self.session.subprotocol)
        reader = asyncio.ensure_future(self._read())
        try:
            await self._play()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read(self) -> None:
        """The client's frames as they come (a few ahead; TCP holds a flood back), so that a
        client that leaves ends a wait for a server frame's recorded time at once."""
        try:
            while not isinstance(got := await self.peer.receive(), Closed):
                await self.inbox.put(got)
        finally:
            self.gone.set()

    async def _next(self) -> Message | Closed:
        """The client's next frame, or how it left."""
        if not self.inbox.empty():
            return self.inbox.get_nowait()
        if self.gone.is_set():
            return Closed(None)
        get = asyncio.ensure_future(self.inbox.get())
        left = asyncio.ensure_future(self.gone.wait())
        await asyncio.wait((get, left), return_when=asyncio.FIRST_COMPLETED)
        left.cancel()
        if get.done():
            return get.result()
        get.cancel()
        return await self._next()

    async def _play(self) -> None:
        frames = self.session.frames
        self.anchor = asyncio.get_running_loop().time()
        at = 0
        while at < len(frames):
            frame = frames[at]
            if frame.direction == "server":
                if not await self._send(frame, self.wire[at]):
                    return
                at += 1
                continue
            got = await self._next()
            if isinstance(got, Closed):
                return
            if not self._matches(frame, got):
                await self._miss(frame, got)
                return
            self.matched += 1
            self.clock = max(self.clock, frame.ms)  # the gaps count from the client's frame
            self.anchor = asyncio.get_running_loop().time()
            at += 1
        await self._end()

    def _incoming(self, got: Message) -> Any:
        """A client frame as matched: scrubbed as recording scrubbed the recorded one."""
        scrubber = self.p.scrubber
        text = readable(got)
        seen = scrubber.json_text(text) if scrubber and text is not None else got
        ids, rules = self.keyed.provider.sockets.event_ids, self.keyed.rules
        return matchable(decoded(seen), ids, rules)

    def _matches(self, frame: SocketFrame, got: Message) -> bool:
        ids, rules = self.keyed.provider.sockets.event_ids, self.keyed.rules
        return bool(self._incoming(got) == matchable(recorded_value(frame), ids, rules))

    async def _send(self, frame: SocketFrame, message: Message | None) -> bool:
        """Send one server frame at its time; False when a fault cut the session here."""
        timing = self.keyed.timing
        if timing is not None and frame.ms > self.clock:
            due = self.anchor + (frame.ms - self.clock) * timing / 1000
            wait = due - asyncio.get_running_loop().time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.gone.wait(), wait)
        if self.gone.is_set() and self.inbox.empty():
            return False  # the client has left: nobody to send to
        if self.fault is not None and not await fault_step(self.fault, self.sent):
            await self.peer.close(ERROR_CLOSE, "tapeproxy fault: cut")
            return False
        out = message_of(frame) if message is None else message
        if self.spoil and (bad := broken_message(out)) is not None:
            self.spoil, out = False, bad
        await self.peer.send(out)
        self.sent += 1
        return True

    async def _miss(self, frame: SocketFrame | None, got: Message) -> None:
        """`got` is not `frame`, the next client frame recorded (None: none was)."""
        ids, rules = self.keyed.provider.sockets.event_ids, self.keyed.rules
        recorded = None if frame is None else matchable(recorded_value(frame), ids, rules)
        found = [] if frame is None else diff(recorded, self._incoming(got))[:12]
        why = "it differs in:" if frame is not None else "the recorded session had no more."
        lines = [
            f"cassette miss: cassette {self.keyed.cassette!r} (mode {self.keyed.mode.value}): "
            f"client frame #{self.matched + 1} of the WebSocket session {self.keyed.inbound.path} "
            f"(key {self.keyed.key[:12]}) is not the one recorded; {why}",
            *(f"  {d.render()}" for d in found),
            # (not --mode auto: there the recorded upgrade is replayed again, frame by frame)
            "To record it again, run with --mode record.",
        ]
        report: dict[str, Any] = {
            "message": "\n".join(lines),
            "cassette": self.keyed.cassette,
            "request": f"WEBSOCKET {self.keyed.provider.name} {self.keyed.inbound.path}",
            "key": self.keyed.key,
            "closest": {
                "frame": self.matched + 1,
                "differences": [d.to_dict() for d in found],
            },
        }
        run = self.p.runs.loaded(self.keyed.cassette)
        if run is not None:
            report = count_miss(self.p, run, report)
        await refuse(self.keyed, self.peer, report["message"])

    async def _end(self) -> None:
        end = self.session.end
        if end.cut or end.code is None:
            await self.peer.close(ERROR_CLOSE, "")
        elif end.by == "server":
            await self.peer.close(sendable(end.code), end.reason)
        else:  # the client closed it: wait for its close; a frame instead is a miss
            got = await self._next()
            if not isinstance(got, Closed):
                await self._miss(None, got)
                return
            await self.peer.close(sendable(end.code), end.reason)


async def fault_step(fault: FaultSpec, sent: int) -> bool:
    """A session fault before server frame `sent`: False when it ends the session here
    (`cut:after=N`: after N server frames); `slow` waits its ttfb before the first frame
    and its gap before each other (ms)."""
    if fault.kind == "cut":
        return sent < int(fault["after"])
    if fault.kind == "slow":
        wait = fault["ttfb"] if sent == 0 else fault["gap"]
        if wait:
            await asyncio.sleep(wait / 1000)
    return True


def broken_message(message: Message) -> Message | None:
    """A server frame whose JSON the `malformed` fault cuts in half (as it does an HTTP
    body; Gemini Live's JSON comes as binary frames); None when it holds no JSON object."""
    data = message.encode("utf-8") if isinstance(message, str) else message
    if not data.lstrip().startswith(b"{"):
        return None
    bad = broken(data)
    return bad.decode("utf-8", "ignore") if isinstance(message, str) else bad
