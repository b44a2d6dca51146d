"""Bytes between two transports (a tunnel to a host that is not decrypted), and the protocol
that holds what a freshly decrypted tunnel reads until its HTTP protocol takes over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Pipe(asyncio.Protocol):
    """One side of a tunnel: what it reads goes to `peer`. When `peer`'s buffer fills, this
    side stops reading (asyncio's flow control both ways)."""

    def __init__(self, peer: asyncio.Transport | None = None) -> None:
        self.peer = peer

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.write(data)

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.can_write_eof():
            self.peer.write_eof()
            return True  # half-closed: the other way may still carry the answer
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()


async def tunnel(
    client: asyncio.Transport,
    host: str,
    port: int,
    reply: bytes,
    first: bytes,
    seconds: float,
    near: Callable[[asyncio.Transport, asyncio.Transport], Pipe] | None = None,
) -> None:
    """Connect to `host:port` (OSError if it cannot be reached within `seconds`), send the
    client `reply` and the host `first`, then carry bytes both ways until either side ends;
    what the client sends goes through `near(client, far)` (default: a Pipe, as it came)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(seconds):
            far, _ = await loop.create_connection(lambda: Pipe(client), host, port)
    except TimeoutError:
        raise OSError(f"no connection within {seconds:g} s") from None
    if reaches_itself(client, far):
        far.close()
        raise OSError("that address is this proxy")
    side = Pipe(far) if near is None else near(client, far)
    client.set_protocol(side)
    if reply:
        client.write(reply)
    if first:
        side.data_received(first)
    client.resume_reading()


def reaches_itself(client: asyncio.BaseTransport, far: asyncio.BaseTransport) -> bool:
    """Whether `far` went back to this proxy's own port: to the address the client reached,
    or by another of this machine's names (a connection to a local address leaves from that
    same address; not to 127.0.0.2, which it leaves from 127.0.0.1)."""
    own, peer, source = (
        client.get_extra_info("sockname"),
        far.get_extra_info("peername"),
        far.get_extra_info("sockname"),
    )
    if not (own and peer and source) or peer[1] != own[1]:
        return False
    return peer[0] in (source[0], own[0])


class Pending(asyncio.Protocol):
    """What a decrypted tunnel reads between its handshake and the moment its HTTP protocol
    is attached (asyncio may deliver the client's first request in that gap)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False
        self.lost: tuple[Exception | None] | None = None

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (exc,)

    def hand_to(self, protocol: asyncio.Protocol) -> None:
        if self.data:
            protocol.data_received(bytes(self.data))
        if self.eof:
            protocol.eof_received()
        if self.lost is not None:
            protocol.connection_lost(self.lost[0])
