"""tapeproxy.upstream.client on aiohttp against real loopback sockets: a request it refuses to send,
the answer's backpressure, the timeouts, the errors each failure becomes, and what `ended`
and `whole` say."""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tapeproxy.errors import UpstreamCut, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from tapeproxy.upstream.client import AiohttpResponse, AiohttpUpstream
from tapeproxy.upstream.lazy import LazyUpstream
from tapeproxy.upstream.protocol import Outbound
from tests.support import closed_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def server(handle: Handler) -> AsyncIterator[str]:
    """A loopback upstream that runs `handle` for each connection, as its URL."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        listening.close()


def run(main: Callable[[AiohttpUpstream], Coroutine[Any, Any, None]], **timeouts: float) -> None:
    """`main` with a client made in the running loop (as the app's lifespan makes it)."""

    async def wrapped() -> None:
        upstream = AiohttpUpstream(timeouts.get("connect", 5), timeouts.get("read", 5))
        try:
            await main(upstream)
        finally:
            await upstream.close()

    asyncio.run(wrapped())


def get(url: str, headers: list[tuple[bytes, bytes]] | None = None) -> Outbound:
    return Outbound.of("tool", "GET", url, headers or [], b"")


async def body(answer: AiohttpResponse) -> bytes:
    try:
        return b"".join([chunk async for chunk in answer.chunks()])
    finally:
        answer.close()


@pytest.mark.parametrize(
    ("name", "value"), [(b"x-a", b"a\r\nx-evil: 1"), (b"x-a", b"a\nb"), (b"x-a", b"a\0b")]
)
def test_a_header_with_cr_lf_or_nul_is_refused_and_never_sent(name: bytes, value: bytes) -> None:
    heard: list[bytes] = []

    async def listen(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heard.append(await reader.read(65536))

    async def main(upstream: AiohttpUpstream) -> None:
        async with server(listen) as url:
            with pytest.raises(UpstreamError, match="cannot send this request"):
                await upstream.open(get(url + "/p", [(name, value)]))
            await asyncio.sleep(0.1)
        assert b"evil" not in b"".join(heard) and not any(heard)

    run(main)


def test_a_reader_that_does_not_read_holds_the_upstream_back_not_its_bytes() -> None:
    size = 64 * 1024 * 1024
    sent: list[int] = []

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        block = b"x" * (1024 * 1024)
        for _ in range(size // len(block)):
            writer.write(block)
            await writer.drain()
            sent.append(len(block))

    async def main(upstream: AiohttpUpstream) -> None:
        async with server(flood) as url:
            answer = await upstream.open(get(url))
            await asyncio.sleep(1.0)  # nobody reads: the upstream must stall
            stalled = sum(sent)
            assert stalled < 24 * 1024 * 1024, stalled  # socket buffers and aiohttp's, no more
            assert not answer.whole
            got = 0
            async for chunk in answer.chunks():
                got += len(chunk)
            assert got == size and answer.ended and answer.whole
            answer.close()

    run(main, read=30)


def test_silence_before_the_head_is_a_timeout_and_mid_body_a_cut() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        if b" /mid " in request:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await asyncio.sleep(5)

    async def main(upstream: AiohttpUpstream) -> None:
        async with server(stall) as url:
            started = time.monotonic()
            with pytest.raises(UpstreamTimeout, match=r"did not answer in time \(nothing for 0\.3"):
                await upstream.open(get(url + "/head"))
            answer = await upstream.open(get(url + "/mid"))
            with pytest.raises(
                UpstreamCut, match=r"stopped mid-answer: it sent nothing for 0\.3 s"
            ):
                await body(answer)
            assert 0.5 < time.monotonic() - started < 4

    run(main, read=0.3)


def test_a_tls_handshake_that_never_comes_is_a_connect_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async def main(upstream: AiohttpUpstream) -> None:
        async with server(silent) as url:
            started = time.monotonic()
            request = get(url.replace("http://", "https://"))
            with pytest.raises(UpstreamTimeout, match=r"no connection in 0\.3 s"):
                await upstream.open(request)
            assert time.monotonic() - started < 3

    run(main, connect=0.3)


def test_a_refused_connection_is_unreachable_each_time() -> None:
    async def main(upstream: AiohttpUpstream) -> None:
        port = closed_port()
        for _ in range(3):
            with pytest.raises(UpstreamUnreachable, match=f"127.0.0.1:{port}"):
                await upstream.open(get(f"http://127.0.0.1:{port}/x?key=AIzaQuery"))

    run(main)


def test_a_kept_connection_outlives_the_read_timeout_while_idle() -> None:
    connections = 0

    async def ok_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def main(upstream: AiohttpUpstream) -> None:
        async with server(ok_forever) as url:
            assert await body(await upstream.open(get(url))) == b"ok"
            await asyncio.sleep(0.5)  # past the read timeout, within IDLE_SECONDS
            assert await body(await upstream.open(get(url))) == b"ok"
        assert connections == 1

    run(main, read=0.2)


def test_ended_and_whole_say_when_the_answer_is_all_in() -> None:
    packed = gzip.compress(b'{"a": 1}')

    async def answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        if b" /plain " in request:
            writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{"a": 1}')
        elif b" /gzip " in request:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%b"
                % (len(packed), packed)
            )
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            await writer.drain()
            await asyncio.sleep(0.3)
            writer.write(b"4\r\nlast\r\n0\r\n\r\n")
        await writer.drain()

    async def main(upstream: AiohttpUpstream) -> None:
        async with server(answers) as url:
            plain = await upstream.open(get(url + "/plain"))
            await asyncio.sleep(0.1)
            assert plain.whole and not plain.chunked
            assert [(c, plain.ended) async for c in plain.chunks()] == [(b'{"a": 1}', True)]
            plain.close()
            stream = await upstream.open(get(url + "/stream"))
            assert stream.chunked
            assert [(c, stream.ended) async for c in stream.chunks()] == [
                (b"first", False),
                (b"last", True),
            ]
            stream.close()
            inflated = await upstream.open(get(url + "/gzip"))
            await asyncio.sleep(0.1)
            assert not inflated.whole  # what goes on is not what came
            assert await body(inflated) == b'{"a": 1}' and not inflated.ended

    run(main)


def test_the_lazy_client_is_made_once_by_concurrent_first_requests_and_closed_with_them() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        await writer.drain()

    async def main() -> None:
        lazy = LazyUpstream(5, 5)
        async with server(answer) as url:
            answers = await asyncio.gather(*(lazy.open(get(url + "/x")) for _ in range(5)))
            made = lazy._client
            assert made is not None
            assert [await body(a) for a in answers] == [b"ok"] * 5  # type: ignore[arg-type]
            await lazy.open(get(url + "/y"))
            assert lazy._client is made, "one client for the server's life"
        await lazy.close()
        assert made._session.closed

    asyncio.run(main())


def test_a_lazy_client_never_asked_is_never_made() -> None:
    async def main() -> None:
        lazy = LazyUpstream(5, 5)
        await lazy.close()
        assert lazy._client is None

    asyncio.run(main())


def test_a_request_that_races_the_servers_shutdown_gets_a_clear_error() -> None:
    async def main() -> None:
        lazy = LazyUpstream(5, 5)
        await lazy.close()
        with pytest.raises(UpstreamError, match="stopping"):
            await lazy.open(get("http://127.0.0.1:9/x"))
        assert lazy._client is None, "no client made for a server that has stopped"

    asyncio.run(main())
