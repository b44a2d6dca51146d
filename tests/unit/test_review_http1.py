"""An adversarial review of tapeproxy.http1's pool and connections, against real loopback
sockets: slots given back whatever stops a request, timers, and a pool closed mid-answer."""

from __future__ import annotations

import asyncio
import time

import pytest

from tapeproxy.http1 import Origin, Pool
from tests.unit.test_http1 import REQUEST, server


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(10)


async def ok_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await reader.readuntil(b"\r\n\r\n"):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


async def exchange(pool: Pool, origin: Origin) -> bytes:
    conn = await asyncio.wait_for(pool.connection(origin), 5)
    try:
        conn.send(REQUEST, b"", no_body=False)
        await conn.head()
        body = b""
        while chunk := await conn.read():
            body += chunk
        return body
    finally:
        pool.release(conn)


def test_a_tls_handshake_that_never_comes_is_a_connect_timeout_and_frees_its_slot() -> None:
    async def main() -> None:
        async with server(silent, secure=True) as stalled, server(ok_forever) as fine:
            pool = Pool(0.3, 5, limit=1)
            for _ in range(3):
                started = time.monotonic()
                with pytest.raises(TimeoutError):
                    await pool.connection(stalled)
                assert time.monotonic() - started < 3
            assert await exchange(pool, fine) == b"ok"
            pool.close()

    asyncio.run(main())


def test_requests_cancelled_at_each_wait_give_their_slot_back() -> None:
    async def main() -> None:
        async with (
            server(silent, secure=True) as handshake,
            server(silent) as no_head,
            server(ok_forever) as fine,
        ):
            pool = Pool(5, 5, limit=1)
            for origin in (handshake, no_head, handshake, no_head):
                task = asyncio.ensure_future(exchange(pool, origin))
                waiting = asyncio.ensure_future(exchange(pool, fine))  # for the one slot
                await asyncio.sleep(0.1)
                waiting.cancel()
                task.cancel()
                for gone in (task, waiting):
                    with pytest.raises(asyncio.CancelledError):
                        await gone
            assert await exchange(pool, fine) == b"ok"
            pool.close()

    asyncio.run(main())


def test_a_kept_connection_outlives_the_read_timeout_while_idle() -> None:
    async def main() -> None:
        async with server(ok_forever) as origin:
            pool = Pool(5, 0.2, limit=1)
            assert await exchange(pool, origin) == b"ok"
            await asyncio.sleep(0.5)  # past the read timeout, within IDLE_SECONDS
            conn = await pool.connection(origin)
            assert conn.reused and conn.open
            pool.release(conn)
            assert await exchange(pool, origin) == b"ok"
            pool.close()

    asyncio.run(main())


def test_a_body_cut_by_closing_the_pool_is_not_taken_for_one_the_upstream_ended() -> None:
    """A body without a length ends when the upstream closes; when tapeproxy closes it (at
    shutdown), the answer is cut, not whole."""

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n\r\npart")
        await asyncio.sleep(10)

    async def main() -> None:
        async with server(endless) as origin:
            pool = Pool(5, 5)
            conn = await pool.connection(origin)
            conn.send(REQUEST, b"", no_body=False)
            await conn.head()
            assert await conn.read() == b"part"
            pool.close()
            with pytest.raises(OSError):
                await asyncio.wait_for(conn.read(), 5)
            assert not conn.complete
            pool.release(conn)

    asyncio.run(main())
