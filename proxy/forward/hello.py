"""Whether a tunnel's client speaks HTTP/2 only (gRPC): its TLS ClientHello, peeked at in the
socket's buffer (left there for the real handshake, or for a byte tunnel), is shown to a
throw-away server-side `ssl` object offering `http/1.1` then `h2`; OpenSSL picks `h2` only
when the client does not offer `http/1.1`. No hand-written TLS parsing."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

# A ClientHello that arrives in pieces (a slow network) is looked at again this often.
PIECE_SECONDS = 0.002
# More than any ClientHello (a post-quantum key share makes one ~2 KB).
HELLO_LIMIT = 64 * 1024


async def offers_h2_only(
    transport: asyncio.BaseTransport, probe: ssl.SSLContext, seconds: float
) -> bool:
    """Whether the client on `transport` (paused: nothing is read from it here) offers ALPN
    `h2` and not `http/1.1`. False when that cannot be told within `seconds` (the real
    handshake then fails or times out on its own) or the bytes are no TLS hello."""
    raw = transport.get_extra_info("socket")
    if raw is None:
        return False
    peer = socket.socket(fileno=os.dup(raw.fileno()))  # the same socket: a peek leaves the bytes
    try:
        return await _h2_only(peer, probe, asyncio.get_running_loop().time() + seconds)
    finally:
        peer.close()  # the duplicate only: the connection stays open


async def _h2_only(peer: socket.socket, probe: ssl.SSLContext, deadline: float) -> bool:
    loop = asyncio.get_running_loop()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = probe.wrap_bio(incoming, outgoing, server_side=True)
    seen = 0
    while (left := deadline - loop.time()) > 0:
        if seen == 0 and not await _readable(peer, left):  # the hello's first bytes
            return False
        try:
            data = peer.recv(HELLO_LIMIT, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            data = b""
        except OSError:
            return False
        if not data or (seen == 0 and data[:1] != b"\x16"):  # closed, or no TLS handshake
            return False
        if len(data) > seen:
            incoming.write(data[seen:])
            seen = len(data)
            try:
                server.do_handshake()
            except ssl.SSLWantReadError:
                if outgoing.pending:  # the hello was read whole: OpenSSL answered it
                    return server.selected_alpn_protocol() == "h2"
            except ssl.SSLError:
                return False
        if seen >= HELLO_LIMIT:
            return False
        await asyncio.sleep(PIECE_SECONDS)  # the rest of the hello is on its way
    return False


async def _readable(peer: socket.socket, seconds: float) -> bool:
    """Whether `peer` has bytes to read within `seconds`. Watched through the duplicate's own
    descriptor: the connection's transport, paused, does not watch its own."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def woken() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(peer.fileno(), woken)
    try:
        await asyncio.wait_for(ready, seconds)
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(peer.fileno())
    return True
