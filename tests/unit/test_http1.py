"""tapeproxy.http1's pool and connections against real loopback sockets: the cap on connections
in use, the cap on bytes read ahead of the reader, and the timeout between reads."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest

from tapeproxy.http1 import HIGH_WATER, BadAnswer, Origin, Pool

REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def server(handle: Handler, secure: bool = False) -> AsyncIterator[Origin]:
    """A loopback upstream that runs `handle` for each connection, as the Origin to call."""

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
        yield Origin(secure, "127.0.0.1", port)
    finally:
        listening.close()


async def one_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await reader.readuntil(b"\r\n\r\n"):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


def test_past_its_limit_a_request_waits_for_a_connection_to_be_given_back() -> None:
    async def main() -> None:
        async with server(one_ok) as origin:
            pool = Pool(5, 5, limit=2)
            first = await pool.connection(origin)
            second = await pool.connection(origin)
            third = asyncio.ensure_future(pool.connection(origin))
            await asyncio.sleep(0.1)
            assert not third.done()
            first.send(REQUEST, b"", no_body=False)
            await first.head()
            assert await first.read() == b"ok" and await first.read() == b""
            pool.release(first)
            assert await asyncio.wait_for(third, 5) is first  # the kept connection, reused
            cancelled = asyncio.ensure_future(pool.connection(origin))
            await asyncio.sleep(0.05)
            cancelled.cancel()  # a waiter that gives up takes no slot with it
            pool.release(second)
            fourth = await asyncio.wait_for(pool.connection(origin), 5)
            assert fourth is not first
            pool.close()

    asyncio.run(main())


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

    async def main() -> None:
        async with server(flood) as origin:
            pool = Pool(5, 30)
            conn = await pool.connection(origin)
            conn.send(REQUEST, b"", no_body=False)
            await conn.head()
            await asyncio.sleep(1.0)  # nobody reads: the upstream must stall
            stalled = sum(sent)
            assert stalled < 24 * 1024 * 1024, stalled  # socket buffers and HIGH_WATER, no more
            assert conn._held <= HIGH_WATER + 1024 * 1024
            got = 0
            while chunk := await conn.read():
                got += len(chunk)
            assert got == size and conn.complete
            pool.release(conn)
            pool.close()

    asyncio.run(main())


def test_an_upstream_silent_past_the_read_timeout_fails_the_wait_with_a_timeout() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await asyncio.sleep(5)

    async def main() -> None:
        async with server(stall) as origin:
            pool = Pool(5, 0.3)
            conn = await pool.connection(origin)
            conn.send(REQUEST, b"", no_body=False)
            await conn.head()
            assert await conn.read() == b"abc"
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=r"sent nothing for 0\.3 s"):
                await conn.read()
            assert 0.25 < time.monotonic() - started < 3
            assert not conn.reusable
            pool.release(conn)
            pool.close()

    asyncio.run(main())


@contextmanager
def refusing_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]  # bound, not listening: connections are refused
    finally:
        sock.close()


def test_a_refused_connection_is_an_oserror_and_frees_its_slot() -> None:
    async def main() -> None:
        with refusing_port() as port:
            pool = Pool(5, 5, limit=1)
            for _ in range(3):  # with one slot: each failure gave it back
                with pytest.raises(OSError):
                    await pool.connection(Origin(False, "127.0.0.1", port))
            pool.close()

    asyncio.run(main())


def endless(prefix: bytes, piece: bytes) -> Handler:
    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(prefix)
        with contextlib.suppress(OSError):
            for _ in range(4096):  # 4 MB at most, in 1 KB writes
                writer.write(piece)
                await writer.drain()

    return send


@pytest.mark.parametrize(
    ("prefix", "piece", "where"),
    [
        (b"HTTP/1.1 200 OK\r\nX-Endless: ", b"v" * 1024, "head"),
        (b"HTTP/1.1 200 OK\r\n", b"X-Many: header\r\n" * 64, "head"),
        (b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 100 Continue\r\n\r\n" * 40, "head"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-Trailer: ",
            b"t" * 1024,
            "trailers or chunk sizes",
        ),
    ],
)
def test_an_answer_whose_head_or_trailers_never_end_is_refused_past_64_kib(
    prefix: bytes, piece: bytes, where: str
) -> None:
    async def main() -> None:
        async with server(endless(prefix, piece)) as origin:
            pool = Pool(5, 5)
            conn = await pool.connection(origin)
            conn.send(REQUEST, b"", no_body=False)
            with pytest.raises(BadAnswer, match=f"answer's {where} passed 64 KiB"):
                await conn.head()
                while await conn.read():
                    pass
            pool.release(conn)
            pool.close()

    asyncio.run(main())


def test_many_small_chunks_are_body_not_framing() -> None:
    async def tiny(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"1;e=1\r\nx\r\n" * 50_000 + b"0\r\n\r\n")  # 500 KB of framing, 50 KB body

    async def main() -> None:
        async with server(tiny) as origin:
            pool = Pool(5, 5)
            conn = await pool.connection(origin)
            conn.send(REQUEST, b"", no_body=False)
            await conn.head()
            body = b""
            while chunk := await conn.read():
                body += chunk
            assert body == b"x" * 50_000 and conn.reusable
            pool.release(conn)
            pool.close()

    asyncio.run(main())
