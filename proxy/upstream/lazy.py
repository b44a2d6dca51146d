"""The upstream client made when the first request goes upstream, not when the server starts:
a replay-only run (most test suites, and every pytest worker that only replays) never
imports aiohttp (~0.25 s here, most of it the TLS contexts aiohttp builds as it is imported)
nor opens a session. The import runs in a worker thread, never on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tapeproxy.errors import UpstreamError
from tapeproxy.upstream.protocol import Outbound, UpstreamResponse, UpstreamSocket

if TYPE_CHECKING:
    from tapeproxy.upstream.client import AiohttpUpstream


class LazyUpstream:
    """An `Upstream` that makes its AiohttpUpstream at its first `open`, in the running loop."""

    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self._timeouts = (connect_timeout, read_timeout)
        self._client: AiohttpUpstream | None = None
        self._making = asyncio.Lock()
        self._closed = False

    async def open(self, request: Outbound) -> UpstreamResponse:
        client = self._client or await self._made_unless_closed()
        if self._closed:  # a request that raced the server's shutdown
            raise UpstreamError("tapeproxy is stopping: no request goes upstream now")
        return await client.open(request)

    async def connect(
        self, request: Outbound, protocols: Sequence[str], max_frame: int
    ) -> UpstreamSocket:
        client = self._client or await self._made_unless_closed()
        if self._closed:
            raise UpstreamError("tapeproxy is stopping: no session goes upstream now")
        return await client.connect(request, protocols, max_frame)

    async def _made_unless_closed(self) -> AiohttpUpstream:
        if self._closed:
            raise UpstreamError("tapeproxy is stopping: no request goes upstream now")
        return await self.make()

    async def make(self) -> AiohttpUpstream:
        """The client, made now if it is not yet (a server that starts in a mode that goes
        live makes it as it starts, so its first request waits for no import)."""
        async with self._making:  # concurrent first requests make one client
            if self._client is None:
                made = await asyncio.to_thread(_client_class)
                self._client = made(*self._timeouts)
                if self._closed:  # made as the server stopped: closed at once
                    await self._client.close()
        return self._client

    async def close(self) -> None:
        self._closed = True
        if self._client is not None:
            await self._client.close()


def _client_class() -> type[AiohttpUpstream]:
    from tapeproxy.upstream.client import AiohttpUpstream

    return AiohttpUpstream
