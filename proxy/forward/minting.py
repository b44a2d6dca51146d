"""The forward door's answer to a request for a mint's host: its token endpoint answered with a
synthetic, unexpired token where the run does not go live; sent live where it does. Never
handed to the engine, so never recorded, in any mode."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping

from starlette.types import Receive, Scope, Send

from tapeproxy.errors import TapeproxyError
from tapeproxy.forward.mints import MINTS, Mint, discovered, synthetic
from tapeproxy.upstream.hopheaders import answer_headers
from tapeproxy.upstream.protocol import Outbound, Upstream

log = logging.getLogger("tapeproxy")

# A mint's request (a signed JWT, a client secret) and answer (a token) are small: past
# this, they are refused rather than held.
MAX_BYTES = 1 << 20


class Minting:
    """What the forward door does with a request for a mint's host: its token endpoint
    answered synthetic (the mints in `live` go live instead: the request decrypted and sent
    with the server's upstream client to the mint's URL, the answer handed back unrecorded)."""

    def __init__(
        self,
        live: frozenset[str],
        upstream: Callable[[], Upstream | None],
        urls: Mapping[str, str],
    ) -> None:
        self.live = live
        self.upstream = upstream
        self.urls = {
            m.name: urls.get(m.name, f"https://{m.host}").rstrip("/") for m in MINTS.values()
        }

    async def __call__(self, name: str, scope: Scope, receive: Receive, send: Send) -> None:
        mint = MINTS[name]
        if name in self.live:
            await self._live(mint, scope, receive, send)
        elif mint.path.match(scope["path"]) and scope["method"] == "POST":
            await answer(send, 200, synthetic(), "application/json")
        elif (document := discovered(mint, scope["path"])) is not None:
            await answer(send, 200, document, "application/json")
        else:
            why = f"{mint.host} answers only its token endpoint in a replay (a synthetic token)"
            await answer(send, 403, f"tapeproxy: {why}\n".encode(), "text/plain")

    async def _live(self, mint: Mint, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive)
        upstream = self.upstream()
        if body is None or upstream is None:
            why = b"its client left, or its body passed 1 MiB\n"
            await answer(
                send, 502, b"tapeproxy: the token request did not go live: " + why, "text/plain"
            )
            return
        raw = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        target = raw.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        outbound = Outbound.of(
            mint.name, scope["method"], self.urls[mint.name] + target, scope["headers"], body
        )
        try:
            response = await upstream.open(outbound)
            try:
                whole = await read_answer(response.chunks())
            finally:
                response.close()
        except TapeproxyError as exc:
            log.warning("a %s token request went live and failed: %s", mint.host, exc.message)
            await answer(send, 502, f"tapeproxy: {exc.message}\n".encode(), "text/plain")
            return
        log.info("a %s token request went live (never recorded)", mint.host)
        await send_whole(send, response.status, answer_headers(response.headers), whole)


async def read_body(receive: Receive) -> bytes | None:
    """The request body, or None when the client left or it passed MAX_BYTES."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_answer(chunks: AsyncIterator[bytes]) -> bytes:
    """A live mint's whole answer, bounded by MAX_BYTES."""
    got, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > MAX_BYTES:
            raise TapeproxyError(f"the token answer passed {MAX_BYTES:,} bytes")
        got.append(chunk)
    return b"".join(got)


async def answer(send: Send, status: int, body: bytes, kind: str) -> None:
    """An answer of tapeproxy's own: `body` as `kind`."""
    await send_whole(send, status, [("content-type", kind)], body)


async def send_whole(send: Send, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    """A whole answer onto the ASGI wire, its length set."""
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
