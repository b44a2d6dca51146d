"""WebSocket sessions to upstreams on aiohttp's WebSocket client, through the same
ClientSession, proxies and trust store as HTTP requests: `connect` and `AiohttpSocket`."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Sequence
from typing import Protocol

import aiohttp
from yarl import URL

from tapeproxy.errors import UpstreamError
from tapeproxy.redaction.secrets import redact_url
from tapeproxy.upstream.protocol import Closed, Message, Outbound
from tapeproxy.upstream.request import prepare


class Proxies(Protocol):
    def of(self, url: URL) -> tuple[URL | None, dict[str, str] | None]: ...


class Client(Protocol):
    """What a session needs of the HTTP client (tapeproxy.upstream.client)."""

    connect_timeout: float

    @property
    def session(self) -> aiohttp.ClientSession: ...
    @property
    def proxies(self) -> Proxies: ...
    def tls(self) -> ssl.SSLContext: ...
    def failed(self, request: Outbound, exc: BaseException) -> UpstreamError: ...


# The client's own upgrade headers: aiohttp writes its own for the upstream leg.
UPGRADE_HEADERS = frozenset(
    {
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)


TOO_BIG = aiohttp.WSCloseCode.MESSAGE_TOO_BIG


class AiohttpSocket:
    """An aiohttp client WebSocket as an `UpstreamSocket`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.subprotocol: str | None = ws.protocol

    async def receive(self) -> Message | Closed:
        msg = await self._ws.receive()
        if msg.type is aiohttp.WSMsgType.TEXT:
            return str(msg.data)
        if msg.type is aiohttp.WSMsgType.BINARY:
            return bytes(msg.data)
        if msg.type is aiohttp.WSMsgType.CLOSE:
            return Closed(int(msg.data), str(msg.extra or ""))
        error = msg.data if msg.type is aiohttp.WSMsgType.ERROR else None
        if isinstance(error, aiohttp.WebSocketError) and error.code == TOO_BIG:
            return Closed(1009, "frame over --max-frame")
        # CLOSED (or ERROR): the connection ended with no close frame read.
        code = self._ws.close_code
        return Closed(None) if code in (None, 1006) else Closed(code)

    async def send(self, message: Message) -> None:
        try:
            if isinstance(message, str):
                await self._ws.send_str(message)
            else:
                await self._ws.send_bytes(message)
        except (ConnectionError, aiohttp.ClientError):
            pass  # the upstream has gone: its receive says how

    async def close(self, code: int, reason: str = "") -> None:
        with contextlib.suppress(ConnectionError, aiohttp.ClientError):
            await self._ws.close(code=code, message=reason.encode("utf-8"))


async def connect(
    client: Client, request: Outbound, protocols: Sequence[str], max_frame: int
) -> AiohttpSocket:
    """A WebSocket to `request.url` (http -> ws) with the client's headers and subprotocols."""
    raw = [(k, v) for k, v in request.headers if k.lower() not in UPGRADE_HEADERS]
    try:
        url, headers, credentials = prepare(request.url, raw)
    except ValueError as exc:
        raise UpstreamError(f"not a URL tapeproxy can call: {exc}") from exc
    headers += list(credentials.headers)
    proxy, proxy_headers = client.proxies.of(url)
    try:
        ws = await client.session.ws_connect(
            url,
            protocols=tuple(protocols),
            headers=headers,
            proxy=proxy,
            proxy_headers=proxy_headers,
            ssl=client.tls() if url.scheme == "https" else True,
            # aiohttp refuses a frame of max_msg_size bytes itself (`>=`): one at the limit passes
            max_msg_size=max_frame + 1,
            autoping=True,
            timeout=aiohttp.ClientWSTimeout(ws_close=client.connect_timeout),
        )
    except aiohttp.WSServerHandshakeError as exc:
        raise UpstreamError(
            f"upstream {request.upstream!r} at {redact_url(request.url)} refused the WebSocket "
            f"upgrade: {exc.status}"
        ) from exc
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        raise client.failed(request, exc) from exc
    return AiohttpSocket(ws)
