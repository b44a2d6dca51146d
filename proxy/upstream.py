"""The Upstream protocol, and its aiohttp implementation: one pooled session, explicit timeouts,
aiohttp errors translated to llmtape's at this boundary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from proxy.errors import UpstreamCut, UpstreamTimeout, UpstreamUnreachable
from proxy.redact import redact_url

# RFC 9110 hop-by-hop headers, plus what the proxy itself sets or changes on the way.
HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
        "trailers", "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
        "content-encoding",
    }
)


@dataclass(frozen=True)
class Outbound:
    upstream: str
    method: str
    url: str
    headers: Sequence[tuple[str, str]]
    body: bytes


class UpstreamResponse(Protocol):
    status: int
    headers: Sequence[tuple[str, str]]
    chunked: bool

    def chunks(self) -> AsyncIterator[bytes]: ...
    def close(self) -> None: ...


class Upstream(Protocol):
    async def open(self, request: Outbound) -> UpstreamResponse: ...


def forward_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Client headers as they go upstream: credentials kept, hop-by-hop and ours dropped."""
    kept = [
        (k, v) for k, v in headers
        if k.lower() not in HOP_BY_HOP and not k.lower().startswith("x-llmtape-")
    ]
    # We decompress for the client and the cassette; only ask for what aiohttp can decode.
    return [*kept, ("accept-encoding", "gzip, deflate")]


class AiohttpResponse:
    def __init__(self, upstream: str, response: aiohttp.ClientResponse) -> None:
        self._upstream = upstream
        self._response = response
        self.status = response.status
        # From the raw bytes, as latin-1: every byte passes through to the client unchanged.
        self.headers: Sequence[tuple[str, str]] = [
            (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.raw_headers
        ]
        self.chunked = response.headers.get("transfer-encoding", "").lower() == "chunked"

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise UpstreamCut(
                f"upstream {self._upstream!r} stopped mid-answer: {type(exc).__name__}: {exc}"
            ) from exc

    def close(self) -> None:
        self._response.close()


class AiohttpUpstream:
    """Sends through one pooled ClientSession; owned by the app's lifespan."""

    def __init__(self, session: aiohttp.ClientSession, connect: float, read: float) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)

    async def open(self, request: Outbound) -> AiohttpResponse:
        where = f"upstream {request.upstream!r} at {redact_url(request.url)}"
        try:
            response = await self._session.request(
                request.method,
                request.url,
                headers=request.headers,
                data=request.body or None,
                allow_redirects=False,
                timeout=self._timeout,
            )
        except TimeoutError as exc:
            raise UpstreamTimeout(f"{where} did not answer in time ({exc or 'timeout'})") from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"{where} is unreachable: {exc}") from exc
        return AiohttpResponse(request.upstream, response)
