"""uvicorn's httptools protocol with a cap and a deadline on each request's head (request line
and headers), which uvicorn 0.54 does not bound: httptools buffers a header whole however
large, and no timer runs before a connection's first request.

What this relies on inside uvicorn (tests/unit/test_head_limits.py fails if it changes): the
httptools callbacks `on_message_begin`, `on_headers_complete` and `on_body` are methods of
the protocol and run inside `data_received`, which feeds its bytes to `self.parser`;
`self.loop`, `self.transport`, `self.scope` (a dict made by `on_message_begin`, handed to the
app as it is); `self.cycle` (None before a first request) and its
`response_complete`; `self.flow.read_paused` (uvicorn stops reading while a pipelined request
waits for the one before it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tapeproxy.doors.sending import DROP_EXTENSION

log = logging.getLogger("tapeproxy")

# 4 times node's 16 KiB, 2 times nginx's 32 KiB: a head an upstream would take is never
# refused (an SDK's is 1-2 KB, a big bearer token a few KB), and httptools holds at most this.
HEAD_LIMIT = 64 * 1024
# From the connection, or from a later request's first byte (uvicorn's 5 s keep-alive timer
# closes a connection idle before it), to the head's last byte. Loopback takes microseconds.
HEAD_SECONDS = 10.0


def answer(status: str, kind: str, message: str) -> bytes:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
    return f"{head}content-length: {len(body)}\r\n\r\n".encode() + body


class HeadLimitedProtocol(HttpToolsProtocol):
    """Counts each head's bytes as they come (431 past HEAD_LIMIT) and times it (408, or a
    plain close when nothing came, past HEAD_SECONDS). One timer per connection."""

    # Bytes fed since the parser last showed progress (a head's end, a body byte): what
    # httptools may be holding of a header, or of a chunked body's trailers. What follows a
    # body's last byte counts towards the next head (a chunked body's end and trailers); what
    # follows it in the same read is not counted, so a pipelined head or trailers may pass the
    # cap by that share of one read (at most 256 KiB, what asyncio and uvloop read at once).
    _head = 0
    _since = 0.0  # loop time the open head began; 0 when no head is open

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        joined = Coalescing(transport, self.loop)  # type: ignore[arg-type]
        super().connection_made(joined)  # type: ignore[arg-type]
        # Given to each request's scope: lets the app drop the connection (a fault).
        self._extensions = {DROP_EXTENSION: {"drop": joined.abort}}
        self._since = self.loop.time()
        self._timer = self.loop.call_at(self._since + HEAD_SECONDS, self._tick)

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes | memoryview) -> None:
        head = self._head + len(data)
        if head <= HEAD_LIMIT:  # the common case: whole reads, one addition
            self._head = head
            HttpToolsProtocol.data_received(self, data)  # type: ignore[arg-type]
            return
        # The cap falls inside these bytes: feed the parser up to it, then the rest only if
        # the parser made progress (a callback moved `_head` off the cap): a head that ended
        # there, or body bytes, which a 30 MB upload brings here a few times per read.
        room, self._head = HEAD_LIMIT - self._head, HEAD_LIMIT
        view = memoryview(data)
        HttpToolsProtocol.data_received(self, view[:room])  # type: ignore[arg-type]
        if self._head == HEAD_LIMIT:
            log.warning("refused a request whose headers passed %d bytes (431)", HEAD_LIMIT)
            message = f"the request line and headers passed {HEAD_LIMIT // 1024} KiB"
            self._close(answer("431 Request Header Fields Too Large", "headers_too_large", message))
        elif not self.transport.is_closing() and not self.parser.should_upgrade():
            self.data_received(view[room:])  # (after an upgrade uvicorn drops it too)

    # The parser's callbacks, run inside HttpToolsProtocol.data_received, on every request's
    # path: each calls its base by name, with no super() lookup.
    def on_message_begin(self) -> None:
        HttpToolsProtocol.on_message_begin(self)
        self.scope["extensions"] = self._extensions  # type: ignore[typeddict-item]
        if not self._since:  # (the first head runs from the connection)
            self._since = self.loop.time()

    def on_headers_complete(self) -> None:
        self._head = 0
        self._since = 0.0
        HttpToolsProtocol.on_headers_complete(self)

    def on_body(self, body: bytes) -> None:
        self._head = 0
        HttpToolsProtocol.on_body(self, body)

    def _tick(self) -> None:
        if self.transport.is_closing():
            return
        now, since = self.loop.time(), self._since
        if since and self.flow.read_paused:
            # uvicorn stopped reading (a request queued behind one still answering): the rest
            # of this head waits unread through no fault of the client, and its deadline would
            # cut the answer in progress. Its clock starts again; the bytes are read at resume.
            since = self._since = now
        if since and now >= since + HEAD_SECONDS:
            message = f"the request line and headers did not come within {HEAD_SECONDS:g} s"
            self._close(answer("408 Request Timeout", "request_timeout", message))
        else:
            self._timer = self.loop.call_at((since or now) + HEAD_SECONDS, self._tick)

    def _close(self, refusal: bytes) -> None:
        """Answer with `refusal` and close. A socket that sent nothing is closed unanswered:
        there is no request to answer (so uvicorn's keep-alive timer does too). A pipelined
        head cannot be answered in the middle of an earlier answer: that one is cut."""
        cycle = self.cycle
        if self._head > 0 and (cycle is None or cycle.response_complete):
            self.transport.write(refusal)
        self.transport.close()


class Coalescing:
    """A transport that holds a write until the next one, or the end of the loop's pass: an
    answer's head and body, which uvicorn writes apart, reach the socket in one send (one
    system call and one wake-up of the client less; replay at 32 connections: +35% requests
    per second). A write with no other after it goes at the end of the pass, before the loop
    waits for anything. Closing sends what is held first; aborting drops it."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held = b""
        self._due = False  # a _flush is scheduled

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._held:
            held, self._held = self._held, b""
            self._transport.write(held + data)
            return
        self._held = bytes(data)
        if not self._due:
            self._due = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._due = False
        held, self._held = self._held, b""
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = b""
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held)

    def __getattr__(self, name: str) -> Any:  # the rest: the transport's own
        return getattr(self._transport, name)
