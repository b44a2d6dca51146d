"""A forward-proxy connection: its first request line tells a forward request (a CONNECT,
an absolute-form URL) from a reverse one, which goes to uvicorn's protocol as before. An
intercepted host's tunnel is decrypted (`loop.start_tls`, the run CA's leaf for the host) and
handed to the same uvicorn protocol behind `Mapped`; any other host is tunnelled as bytes, or
refused where a replay must not reach the network."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp

from tapeproxy.doors.head_limits import HEAD_LIMIT, HEAD_SECONDS, HeadLimitedProtocol
from tapeproxy.forward.door import ForwardDoor, Mapped
from tapeproxy.forward.hello import offers_h2_only
from tapeproxy.forward.plain import OneRequest
from tapeproxy.forward.request import BadRequest, ProxyRequest, parse_head, proxy_auth_ok
from tapeproxy.forward.tunnel import Pending, tunnel

log = logging.getLogger("tapeproxy")

# A client that opens a tunnel and never finishes its TLS handshake is closed after this.
HANDSHAKE_SECONDS = 10.0
NOT_INTERCEPTED = "not intercepted"
H2_ONLY = "HTTP/2 only"
ESTABLISHED = b"HTTP/1.1 200 Connection Established\r\n\r\n"
# What a client that refuses our certificate says, in OpenSSL's words.
REJECTED = ("unknown ca", "bad certificate", "certificate unknown", "unsupported certificate")


def sniffing(door: ForwardDoor) -> Callable[..., asyncio.Protocol]:
    """uvicorn's protocol class for a server with a forward door."""

    def protocol(**uvicorn: Any) -> asyncio.Protocol:
        return Sniffing(door, uvicorn)

    return protocol


class Sniffing(asyncio.Protocol):
    """A connection's first bytes, up to its first request line (or its whole head for a
    CONNECT); then the connection is handed over, to uvicorn's protocol or to a tunnel."""

    def __init__(self, door: ForwardDoor, uvicorn: dict[str, Any]) -> None:
        self.door = door
        self.uvicorn = uvicorn
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.established = False  # a CONNECT was answered 200: no HTTP answer can follow

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.timer = self.loop.call_later(HEAD_SECONDS, self._too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        line_end = self.buffer.find(b"\r\n")
        if line_end < 0:
            if len(self.buffer) > HEAD_LIMIT:
                self._answer(431, "the request line passed 64 KiB")
            return
        first = bytes(self.buffer[:line_end])
        if not first.startswith(b"CONNECT ") and b" http://" not in first[:16]:
            self._hand_over(self.door.app)  # origin-form: the reverse proxy, as ever
            return
        if b"\r\n\r\n" not in self.buffer:  # a forward request: its whole head first
            if len(self.buffer) > HEAD_LIMIT:
                self._answer(431, "the request's head passed 64 KiB")
            return
        if self.timer is not None:
            self.timer.cancel()
        assert self.transport is not None
        self.transport.pause_reading()
        self.task = self.loop.create_task(self._forward(bytes(self.buffer)))  # (held: not GC'd)
        self.task.add_done_callback(self._done)

    async def _forward(self, head: bytes) -> None:
        try:
            request = parse_head(head)
        except BadRequest as exc:
            self._answer(400, exc.message)
            return
        if self.door.guarded and not proxy_auth_ok(request.headers, self.door.token):
            self._answer(
                407,
                "proxy authentication required: send Proxy-Authorization with the admin token",
                b'proxy-authenticate: Basic realm="tapeproxy"\r\n',
            )
            return
        if request.method == "CONNECT":
            await self._connect(request)
        else:
            await self._absolute(request)

    async def _connect(self, request: ProxyRequest) -> None:
        host, port, door = request.host, request.port, self.door
        if port not in door.hosts.ports:
            self._answer(
                403, f"CONNECT to port {port} is not allowed (443 and the upstreams' ports)"
            )
            return
        if self._is_self(host, port):
            self._answer(403, "CONNECT to the proxy itself is not allowed")
            return
        owner = door.hosts.owner(host)
        if owner is None:
            await self._pass(request, ESTABLISHED, request.rest)
            return
        if request.rest:  # a TLS hello sent before the answer: start_tls cannot be given it
            self._answer(400, "bytes came before the CONNECT was answered")
            return
        # A leaf is made in a worker thread (~1 ms of signing), once per host.
        context = door.ca.cached(host)
        if context is None:
            context = await asyncio.to_thread(door.ca.context, host)
        assert self.transport is not None
        self.transport.write(ESTABLISHED)
        self.established = True
        deadline = self.loop.time() + HANDSHAKE_SECONDS  # for the hello and the handshake
        if await offers_h2_only(self.transport, door.ca.probe(), HANDSHAKE_SECONDS):
            await self._pass(request, b"", b"", H2_ONLY)  # (gRPC: never decrypted)
            return
        pending = Pending()
        try:
            secured = await self.loop.start_tls(
                self.transport,
                pending,
                context,
                server_side=True,
                ssl_handshake_timeout=max(deadline - self.loop.time(), 0.001),
            )
        except (ssl.SSLError, ConnectionError, OSError, TimeoutError) as exc:
            self._handshake_failed(host, exc)
            return
        if secured is None:
            return
        self._hand_over(Mapped(door.app, owner, None, door.minting), secured, pending)

    async def _absolute(self, request: ProxyRequest) -> None:
        owner = self.door.hosts.owner(request.host)
        if owner is not None:  # plain HTTP to an intercepted host: uvicorn reads it as ever
            self._hand_over(Mapped(self.door.app, None, self.door.hosts, self.door.minting))
            assert self.transport is not None
            self.transport.resume_reading()  # (paused while the head was looked at)
            return
        await self._pass(request, b"", bytes(self.buffer), near=OneRequest)

    async def _pass(
        self,
        request: ProxyRequest,
        reply: bytes,
        first: bytes,
        why: str = NOT_INTERCEPTED,
        near: type[OneRequest] | None = None,
    ) -> None:
        """A host that is not decrypted: its bytes tunnelled, or refused in a replay (a 403,
        or a close when the CONNECT was answered already)."""
        target, door = f"{request.host}:{request.port}", self.door
        if not door.hosts.may_tunnel(request.host, await door.tunnels()):
            door.refuse(target, why)
            self._answer(
                403, f"{target} ({why}): a replay does not reach the network; --allow-host"
            )
            return
        assert self.transport is not None
        try:
            await tunnel(
                self.transport,
                request.host,
                request.port,
                reply,
                first,
                door.connect_timeout,
                near,
            )
        except OSError as exc:
            self._answer(502, f"could not reach {target}: {exc.strerror or exc}")
            return
        door.tunnelled.add(target if why == NOT_INTERCEPTED else f"{target} ({why})")

    def _hand_over(
        self,
        app: ASGIApp,
        transport: asyncio.BaseTransport | None = None,
        pending: Pending | None = None,
    ) -> None:
        """The connection to uvicorn's protocol (the reverse proxy's own), bytes read so far
        included; behind `app` (the server's, or a host's upstream in front of it)."""
        if self.timer is not None:
            self.timer.cancel()
        inner = HeadLimitedProtocol(**self.uvicorn)
        inner.app = app
        transport = transport or self.transport
        assert transport is not None
        transport.set_protocol(inner)
        inner.connection_made(transport)
        if pending is not None:
            pending.hand_to(inner)
        elif self.buffer:
            inner.data_received(bytes(self.buffer))
        self.buffer.clear()

    def _is_self(self, host: str, port: int) -> bool:
        """Whether `host:port` is this listener (a loop through the proxy)."""
        assert self.transport is not None
        own = self.transport.get_extra_info("sockname")
        names = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::")
        return bool(own) and port == own[1] and (host == own[0] or host in names)

    def _handshake_failed(self, host: str, exc: BaseException) -> None:
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__  # (a reset: "")
        if any(word in str(exc).lower() for word in REJECTED):
            log.warning(
                "a client refused tapeproxy's certificate for %s: trust the run's CA in %s",
                host,
                self.door.ca_file or "the file --ca-cert names",
            )
        elif isinstance(exc, TimeoutError) or "taking longer" in str(exc):
            log.warning(
                "closed a tunnel to %s whose TLS handshake did not finish within %g s",
                host,
                HANDSHAKE_SECONDS,
            )
        else:
            log.warning("TLS handshake for %s failed: %s", host, reason)
        if self.transport is not None:
            self.transport.abort()

    def _done(self, task: asyncio.Task[None]) -> None:
        """A forward request's task ended: what it did not foresee is logged, and the
        connection closed rather than left paused."""
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.warning("forward proxy: a connection failed: %s", exc)
            if self.transport is not None:
                self.transport.abort()

    def _too_slow(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if self.buffer:
                self._answer(408, f"the request line did not come within {HEAD_SECONDS:g} s")
            else:
                self.transport.close()

    def _answer(self, status: int, message: str, extra: bytes = b"") -> None:
        """A one-line refusal, and the connection closed (dropped, after a CONNECT's 200)."""
        if self.transport is None or self.transport.is_closing():
            return
        if self.established:
            self.transport.abort()
            return
        reason = {
            400: "Bad Request",
            403: "Forbidden",
            407: "Proxy Authentication Required",
            408: "Request Timeout",
            431: "Request Header Fields Too Large",
            502: "Bad Gateway",
        }[status]
        body = f"tapeproxy: {message}\n".encode()
        self.transport.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n".encode()
            + extra
            + b"\r\n"
            + body
        )
        self.transport.close()
