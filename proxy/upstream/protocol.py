"""What the engine needs of an upstream client, with no HTTP library in it: the request as it
goes out (`Outbound`), the answer as it comes (`UpstreamResponse`), and the one-method
`Upstream` that turns the one into the other (tapeproxy.upstream.client, on aiohttp)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tapeproxy.upstream.hopheaders import forward_headers


@dataclass
class Outbound:
    """Built for every live request, so not frozen (see tapeproxy.engine.inbound)."""

    upstream: str
    method: str
    url: str
    headers: Sequence[tuple[bytes, bytes]]  # each byte as the client sent it
    body: bytes
    host: bytes = b""  # the Host the client sent (a signature may cover it)

    @classmethod
    def of(
        cls, upstream: str, method: str, url: str, raw: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> Outbound:
        """The client's request as it goes upstream: same method and body, headers cleaned."""
        host = next((v for k, v in raw if k.lower() == b"host"), b"")
        return cls(upstream, method, url, forward_headers(raw), body, host)


class UpstreamResponse(Protocol):
    status: int
    headers: Sequence[tuple[str, str]]
    chunked: bool

    def chunks(self) -> AsyncIterator[bytes]: ...
    def close(self) -> None: ...
    @property
    def ended(self) -> bool:
        """Whether the chunk just handed over was the last: the answer is all in. May say
        False when it cannot tell without waiting."""
        ...

    @property
    def whole(self) -> bool:
        """Whether every byte of the answer has come in, read or not, and goes on unchanged (not
        inflated). May say False when it cannot tell."""
        ...


class Upstream(Protocol):
    async def open(self, request: Outbound) -> UpstreamResponse: ...


@dataclass(frozen=True)
class Closed:
    """How a WebSocket ended: a close frame's code and reason, or a cut (`code` None: the
    connection dropped with no close frame)."""

    code: int | None
    reason: str = ""

    @property
    def cut(self) -> bool:
        return self.code is None


# A WebSocket data frame: text as str, binary as bytes.
Message = str | bytes


class UpstreamSocket(Protocol):
    """A WebSocket open to the upstream: the subprotocol it chose; frames each way."""

    subprotocol: str | None

    async def receive(self) -> Message | Closed: ...
    async def send(self, message: Message) -> None: ...
    async def close(self, code: int, reason: str = "") -> None: ...


@runtime_checkable
class SocketUpstream(Protocol):
    async def connect(
        self, request: Outbound, protocols: Sequence[str], max_frame: int
    ) -> UpstreamSocket: ...
