"""A plain-HTTP request for a host that is not decrypted, passed on as it came but for the
proxy's own headers, with `Connection: close`: one request per connection, since a client
keeping its connection to the proxy alive may name another host next (h11 reads the framing)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import h11

from tapeproxy.forward.tunnel import Pipe

# The proxy's, not the host's: never passed on (the first holds the admin token).
OURS = frozenset({b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive"})


class OneRequest(Pipe):
    """The client's side of a plain-HTTP tunnel: its first request goes to `peer`, reframed by
    h11 with its proxy headers dropped. Bytes after it (a next request, maybe for another
    host) end the connection; an upgrade (a WebSocket) is carried as bytes after its request."""

    def __init__(self, client: asyncio.Transport, peer: asyncio.Transport) -> None:
        super().__init__(peer)
        self.client = client
        self.reader = h11.Connection(h11.SERVER)
        self.writer = h11.Connection(h11.CLIENT)
        self.state = "request"  # then "done", or "raw" after an upgrade's request

    def data_received(self, data: bytes) -> None:
        if self.state == "raw":
            super().data_received(data)
        elif self.state == "done":
            self._end()  # a second request: this connection is the first host's only
        else:
            self.reader.receive_data(data)
            self._relay()

    def _relay(self) -> None:
        assert self.peer is not None
        while True:
            try:
                event = self.reader.next_event()
            except h11.RemoteProtocolError:
                self._end()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                event = outgoing(event)
            try:
                self.peer.write(self.writer.send(event) or b"")  # type: ignore[arg-type]
            except h11.LocalProtocolError:  # (what h11 will not send on, it could not frame)
                self._end()
                return
            if isinstance(event, h11.EndOfMessage):
                upgrade = self.reader.their_state is not h11.DONE  # (it might switch protocol)
                self.state = "raw" if upgrade else "done"
                if upgrade and self.reader.trailing_data[0]:
                    self.peer.write(self.reader.trailing_data[0])
                elif not upgrade and self.reader.trailing_data[0]:
                    self._end()
                return

    def _end(self) -> None:
        self.state = "done"
        self.client.close()
        if self.peer is not None:
            self.peer.close()


def outgoing(request: h11.Request) -> h11.Request:
    """`request` as the host gets it: in origin-form (`/path?query`), the proxy's headers
    (and those its Connection names) dropped; `Connection: close`, unless it asks for an
    upgrade."""
    named = {
        token.strip().lower()
        for name, value in request.headers
        if name == b"connection"
        for token in value.split(b",")
    }
    upgrade = b"upgrade" in named and any(name == b"upgrade" for name, _ in request.headers)
    dropped = OURS | (named - {b"upgrade"} if upgrade else named)
    if any(name == b"transfer-encoding" for name, _ in request.headers):
        dropped |= {b"content-length"}  # (h11 frames by the chunks: a host reading the length
        # would take the rest for another request)
    headers = [(name, value) for name, value in request.headers if name not in dropped]
    headers.append((b"connection", b"upgrade" if upgrade else b"close"))
    url = urlsplit(request.target.decode("latin-1"))
    if not any(name == b"host" for name, _ in headers):  # (HTTP/1.0 needs none; h11 does)
        headers.append((b"host", url.netloc.encode()))
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")  # origin-form
    return h11.Request(method=request.method, target=target.encode("latin-1"), headers=headers)
