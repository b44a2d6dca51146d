"""The WebSocket door: an ASGI `websocket` scope -> an `Inbound` (routed exactly as HTTP is)
and a `Peer` the engine's session drives (accept, frames each way, close)."""

from __future__ import annotations

import contextlib
import logging

from starlette.types import Receive, Scope, Send

from tapeproxy.doors.front import named, text
from tapeproxy.doors.routing import CASSETTE_HEADER, live_names, resolve
from tapeproxy.engine.core import Engine
from tapeproxy.engine.inbound import Inbound
from tapeproxy.engine.keyed import LIVE_HEADER
from tapeproxy.engine.session import SHUTDOWN
from tapeproxy.engine.timing import TIMING_HEADER
from tapeproxy.errors import TapeproxyError
from tapeproxy.faults.schedule import FAULT_HEADER
from tapeproxy.upstream.protocol import Closed, Message

log = logging.getLogger("tapeproxy")
POLICY_CLOSE = 1008
# What uvicorn tells the app when the server shuts down mid-session (a client never sends
# it: "service restart" is a server's code): the session was cut, it did not end.
SERVICE_RESTART = 1012


class AsgiPeer:
    """The client's side of a session over ASGI's WebSocket messages."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.accepted = False
        self.closed = False

    async def accept(self, subprotocol: str | None) -> None:
        await self._send({"type": "websocket.accept", "subprotocol": subprotocol})
        self.accepted = True

    async def receive(self) -> Message | Closed:
        if self.closed:
            return Closed(None)
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            self.closed = True
            code = message.get("code")
            if code == SERVICE_RESTART:
                return Closed(None, SHUTDOWN)
            reason = message.get("reason") or ""
            return Closed(None if code in (None, 1005, 1006) else int(code), reason)
        data = message.get("text")
        return data if data is not None else bytes(message.get("bytes") or b"")

    async def send(self, message: Message) -> None:
        if self.closed:
            return
        key = "text" if isinstance(message, str) else "bytes"
        try:
            await self._send({"type": "websocket.send", key: message})
        except OSError:  # the client has gone: its receive says so
            self.closed = True

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        # A close frame's reason holds at most 123 bytes of UTF-8: cut on a character.
        reason = reason.encode("utf-8")[:123].decode("utf-8", "ignore")
        with contextlib.suppress(OSError):
            await self._send({"type": "websocket.close", "code": code, "reason": reason})


async def serve_socket(engine: Engine, scope: Scope, receive: Receive, send: Send) -> None:
    """One WebSocket session through the engine."""
    first = await receive()
    if first["type"] != "websocket.connect":
        return
    peer = AsgiPeer(receive, send)
    headers = tuple(scope["headers"])
    lookup = dict(reversed(headers))
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
    try:
        provider, path = resolve(raw_path.decode("latin-1"), headers, engine.providers)
        inbound = Inbound(
            upstream=provider.name,
            method="GET",
            path=path,
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=headers,
            body=b"",
            cassette=named(lookup, CASSETTE_HEADER),
            live=live_names(text(lookup, LIVE_HEADER) or ""),
            timing=text(lookup, TIMING_HEADER),
            fault=text(lookup, FAULT_HEADER),
        )
        await engine.sessions.run(inbound, list(scope.get("subprotocols") or ()), peer)
    except TapeproxyError as exc:
        message = engine.scrubber.text(exc.message)
        log.warning("%s", message)
        if not peer.accepted:
            await peer.accept(None)  # so the client reads why, not a bare 403
        await peer.send(message)
        await peer.close(POLICY_CLOSE, message[:120])
