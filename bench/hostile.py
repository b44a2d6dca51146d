"""Hostile inputs: the server's peak RSS for each row of issue 11's table, one fresh tapeproxy
per row (record mode, default limits) against a hostile upstream in this process. Everything
on 127.0.0.1; every row is bounded in time and the whole run by --cap.

    .venv/bin/python bench/hostile.py [--only NAME] [--cap SECONDS]

Rows: a 200 MB chunked request body; a 500 MB JSON answer; a never-ending SSE stream read
for 15 s; a gzip bomb (1 MB -> 1 GiB); 10,000 cassette names by header; and two the table did
not have: a 64 MB request header, and idle sockets (after one request, never used, and
halfway through a head).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import Server, start_tapeproxy

MiB = 1024 * 1024
BLOCK = bytes(MiB)
SSE_SECONDS = 15.0
NAMES = 10_000
IDLE = 200  # sockets of each kind
IDLE_WAIT = 11.0  # past the 5 s keep-alive timeout and the 10 s head deadline


def gzip_bomb(inflated: int) -> bytes:
    """`inflated` zero bytes as gzip, built 1 MiB at a time (about 1 MB per GiB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(packer.compress(BLOCK) for _ in range(inflated // MiB)) + packer.flush()


class Hostile:
    """The upstream: a 500 MB JSON answer, an SSE stream that never ends, a gzip bomb."""

    def __init__(self) -> None:
        self.bomb = gzip_bomb(1024 * MiB)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/json", self._json)
        app.router.add_get("/sse", self._sse)
        app.router.add_get("/bomb", self._bomb)
        app.router.add_route("*", "/{tail:.*}", self._ok)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        listening = socket.create_server(("127.0.0.1", 0))
        self._loop.run_until_complete(web.SockSite(runner, listening).start())
        self.url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> Hostile:
        self._thread.start()
        self._ready.wait(30)
        return self

    async def _json(self, request: web.Request) -> web.StreamResponse:
        size = 500 * MiB
        response = web.StreamResponse(headers={"content-type": "application/json"})
        response.content_length = size
        await response.prepare(request)
        await response.write(b'{"data": "')
        filler = b"a" * MiB
        sent = 10
        while sent + len(filler) < size - 2:
            await response.write(filler)
            sent += len(filler)
        await response.write(b"a" * (size - 2 - sent) + b'"}')
        return response

    async def _sse(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        event = b'data: {"choices": [{"delta": {"content": "' + b"x" * 65536 + b'"}}]}\n\n'
        while True:  # until the client hangs up
            await response.write(event)

    async def _bomb(self, request: web.Request) -> web.Response:
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return web.Response(body=self.bomb, headers=headers)

    async def _ok(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"ok": True})


async def big_body(url: str) -> str:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(200):
            yield BLOCK

    async with aiohttp.ClientSession() as session:
        try:
            async with session.post(url + "/tool/upload", data=chunks()) as response:
                return f"status {response.status}"
        except aiohttp.ClientError as exc:  # refused before the whole body was sent
            return f"{type(exc).__name__} while sending"


async def read_all(url: str, seconds: float | None = None) -> str:
    timeout = aiohttp.ClientTimeout(total=120)
    received, started = 0, time.monotonic()
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        try:
            async with session.get(url) as response:
                async for data in response.content.iter_any():
                    received += len(data)
                    if seconds is not None and time.monotonic() - started > seconds:
                        break
                return f"status {response.status}, {received / MiB:,.0f} MiB read"
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__} after {received / MiB:,.1f} MiB"


async def many_names(url: str) -> str:
    statuses: dict[int, int] = {}
    names = iter(range(NAMES))

    async def worker(session: aiohttp.ClientSession) -> None:
        for n in names:
            headers = {"x-tapeproxy-cassette": f"hostile/name-{n:05d}"}
            async with session.post(url + "/tool/x", json={"n": 1}, headers=headers) as answer:
                await answer.read()
                statuses[answer.status] = statuses.get(answer.status, 0) + 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(8)))
    return ", ".join(f"{count:,} x {status}" for status, count in sorted(statuses.items()))


async def big_header(url: str) -> str:
    return await asyncio.to_thread(send_big_header, url)


def send_big_header(url: str) -> str:
    """64 MB of one header, 64 KiB at a time, then the answer's first line. A blocking socket:
    on Linux an answer that came before the server closed is still read after a send fails."""
    host, port = url.removeprefix("http://").split(":")
    sent, piece = 0, b"a" * 65536
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        try:
            sock.sendall(b"GET /tool/x HTTP/1.1\r\nhost: x\r\nx-big: ")
            while sent < 64 * MiB:
                sent += sock.send(piece)
            sock.sendall(b"\r\n\r\n")
        except OSError as exc:
            failed = f"{type(exc).__name__} after {sent / MiB:.2f} MiB sent"
        else:
            failed = f"all {sent / MiB:.0f} MiB sent"
        try:
            line = sock.recv(65536).split(b"\r\n")[0].decode(errors="replace")
        except OSError as exc:
            line = type(exc).__name__
    return f"{line or 'closed'}; {failed}"


async def idle_sockets(url: str) -> str:
    """Sockets left idle after one answer, never used, and left halfway through a head."""
    host, port = url.removeprefix("http://").split(":")
    used, unused, halfway = [], [], []
    for _ in range(IDLE):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\n\r\n")
        await reader.readuntil(b"}")
        used.append((reader, writer))
        unused.append(await asyncio.open_connection(host, int(port)))
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /__tapeproxy/health HTTP/1.1\r\nhost: x\r\n")
        halfway.append((reader, writer))
    await asyncio.sleep(IDLE_WAIT)

    async def closed(reader: asyncio.StreamReader) -> bytes | None:
        """What came before the server closed it, or None while it is open."""
        try:
            return await asyncio.wait_for(reader.read(), 0.05)  # to the end
        except TimeoutError:
            return None

    ends = [[await closed(r) for r, _ in kind] for kind in (used, unused, halfway)]
    gone = [sum(end is not None for end in kind) for kind in ends]
    told = sum(end is not None and end.startswith(b"HTTP/1.1 408") for end in ends[2])
    for _, writer in used + unused + halfway:
        writer.close()
    return (
        f"after one request: {gone[0]}/{IDLE} closed in {IDLE_WAIT:.0f} s; never used: "
        f"{gone[1]}/{IDLE}; halfway through a head: {gone[2]}/{IDLE} ({told} with a 408)"
    )


Row = tuple[str, list[str], Callable[[Server, str], Awaitable[str]]]


def rows(hostile: str) -> list[Row]:
    upstream = ["--upstream", f"tool={hostile}"]
    return [
        ("200 MB chunked request body", upstream, lambda s, h: big_body(s.url)),
        ("500 MB JSON answer", upstream, lambda s, h: read_all(s.url + "/tool/json")),
        (
            f"never-ending SSE, read for {SSE_SECONDS:.0f} s",
            upstream,
            lambda s, h: read_all(s.url + "/tool/sse", SSE_SECONDS),
        ),
        ("gzip bomb, 1 MB -> 1 GiB", upstream, lambda s, h: read_all(s.url + "/tool/bomb")),
        (
            f"{NAMES:,} cassette names by header (replay)",
            [*upstream, "--mode", "replay"],
            lambda s, h: many_names(s.url),
        ),
        ("64 MB request header", upstream, lambda s, h: big_header(s.url)),
        (f"{IDLE} x 3 idle sockets", upstream, lambda s, h: idle_sockets(s.url)),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the rows whose name holds this text")
    parser.add_argument("--cap", type=float, default=280.0, help="wall-clock cap, seconds")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.cap
    hostile = Hostile().start()
    print("| input | peak RSS (start) | what happened |\n| --- | --- | --- |", flush=True)
    with tempfile.TemporaryDirectory(prefix="tapeproxy-hostile-") as folder:
        work = Path(folder)
        for n, (name, options, run) in enumerate(rows(hostile.url)):
            if args.only and args.only not in name:
                continue
            if time.monotonic() > deadline:
                print(f"| {name} | | not run: past --cap |")
                continue
            library = str(work / f"library-{n}")
            server = start_tapeproxy(
                f"row{n}", work, "--mode", "record", "--cassettes", library, *options
            )
            try:
                start_rss = server.memory_mb()[0] or 0.0
                left = max(5.0, deadline - time.monotonic())
                try:
                    what = asyncio.run(asyncio.wait_for(run(server, hostile.url), left))
                except TimeoutError:
                    what = "stopped by --cap"
                peak = server.memory_mb()[1] or 0.0
                files = sum(1 for p in Path(library).rglob("*.json"))
                print(
                    f"| {name} | {peak:.0f} MB ({start_rss:.0f}) | {what}; "
                    f"{files} file(s) written |"
                )
            finally:
                server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
