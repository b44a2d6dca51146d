"""HTTP/1.1 to upstreams, lean: keep-alive connections pooled per origin, each answer parsed by
httptools (llhttp, the parser uvicorn reads requests with).

It does what a proxy needs and no more: one exchange at a time per connection, a request body
already whole in memory, an answer handed over as its bytes come with a cap on what waits
unread, and timeouts to connect and between reads. No redirects, cookies, proxies or
decompression: tapeproxy.upstream builds the request and reads the answer. Errors are Python's
own (OSError, TimeoutError) or BadAnswer; tapeproxy.upstream translates them.

Why not aiohttp's client: it costs ~0.19 ms of CPU per request on these machines, more than
everything else a recording adds but the disk (bench/RESULTS.md, stop 12)."""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from typing import NamedTuple, cast

import httptools

# Bytes read from an upstream but not yet taken by the client's side: past this, the socket
# is not read until they are (the upstream then waits on TCP), so a fast upstream and a slow
# client hold at most this much.
HIGH_WATER = 256 * 1024
# An idle connection is reused for this long: less than the 5 s after which uvicorn and Node
# close theirs, so a request seldom goes out on a connection its upstream is closing.
IDLE_SECONDS = 4.0
IDLE_MAX = 100  # idle connections kept, over every origin
# Bytes of an answer that are not its body (its head, 1xx answers before it, chunk sizes and
# trailers) are capped: httptools holds a header line whole, however long, and an endless
# head would keep the read timeout from firing (aiohttp refused 8 KiB a line). Each chunk
# allows CHUNK_FRAMING more (its size line and CRLFs; an extension is rarely longer).
MAX_FRAMING = 64 * 1024
CHUNK_FRAMING = 64
LIMIT = 100  # connections in use at once; more requests wait for one (aiohttp's default)


class BadAnswer(Exception):
    """The upstream's bytes are not an HTTP/1.x answer to our request."""


class Origin(NamedTuple):
    secure: bool
    host: str  # as getaddrinfo takes it: no brackets around an IPv6 address
    port: int


class Connection(asyncio.Protocol):
    """One connection to an origin, carrying one exchange at a time: `send`, `head`, then
    `read` until it gives b"". Bytes that came before a cut are handed over before the cut."""

    def __init__(self, pool: Pool, origin: Origin) -> None:
        self._pool = pool
        self.origin = origin
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.open = False
        self.reused = False  # it carried an exchange before this one
        self.idle_since = 0.0
        self._begin(None)

    def _begin(self, parser: httptools.HttpResponseParser | None) -> None:
        self._parser = parser
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunked = False  # chunked is the answer's last transfer coding
        self.heard = False  # any byte of this exchange's answer came in
        self.complete = False  # every byte of the answer came in
        self._headed = False
        self._interim = False  # a 1xx answer is being read: dropped, the real one follows
        self._no_body = False  # the answer to a HEAD: its head is all of it
        self._until_close = False  # no length and not chunked: the body ends with the connection
        self._keep = False
        self._error: BaseException | None = None
        self._chunks: list[bytes] = []
        self._held = 0
        self._paused = False
        self._framing = MAX_FRAMING  # what may still come that is not body (see MAX_FRAMING)
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0  # loop time of the last bytes in, or of the request out

    # The exchange, as tapeproxy.upstream drives it

    def send(self, head: bytes, body: bytes, no_body: bool) -> None:
        if self._transport is None or not self.open:
            raise ConnectionResetError("the connection to the upstream closed")
        self._begin(httptools.HttpResponseParser(self))
        self._no_body = no_body
        self._last = self._loop.time()
        if len(body) > 16 * 1024:
            self._transport.write(head)
            self._transport.write(body)
        else:
            self._transport.write(head + body)

    async def head(self) -> None:
        """Until the answer's status and headers are in."""
        while not self._headed:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self) -> bytes:
        """What came in since the last read, at once if anything did; b"" once it all came."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.complete:
                return b""
            await self._wait()
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._held = 0
        if self._paused:
            self._paused = False
            self._last = self._loop.time()  # its silence while paused was ours
            if self._transport is not None:
                self._transport.resume_reading()
        return data

    @property
    def pending(self) -> bool:
        """Bytes came in that `read` has not handed over."""
        return bool(self._chunks)

    @property
    def reusable(self) -> bool:
        """The exchange ended cleanly and the connection may carry another."""
        return self.complete and self._keep and self.open and not self._chunks

    def close(self) -> None:
        self.open = False
        if self._parser is not None and not self.complete:
            # Closed by us mid-answer (the pool at shutdown): a cut, even for a body that
            # ends with the connection, which connection_lost would take for whole.
            self._fail(ConnectionAbortedError("tapeproxy closed the connection mid-answer"))
        self._cancel_timer()
        if self._transport is not None:
            self._transport.close()

    # Waiting, with the read timeout: one timer per wait, moved on only when it fires.

    async def _wait(self) -> None:
        waiter = self._waiter = self._loop.create_future()
        if self._timer is None:
            self._timer = self._loop.call_at(self._last + self._pool.read_timeout, self._check)
        try:
            await waiter
        finally:
            self._waiter = None

    def _check(self) -> None:
        self._timer = None
        if self._waiter is None or self.complete or self._error is not None:
            return  # nobody waits: the next wait sets a timer again
        due = self._last + self._pool.read_timeout
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
            return
        timeout = self._pool.read_timeout
        self._fail(TimeoutError(f"the upstream sent nothing for {timeout:g} s"))
        self.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._keep = False
        if self._error is None and not self.complete:
            self._error = exc
        self._cancel_timer()
        self._wake()

    def _finish(self, keep: bool) -> None:
        self.complete = True
        self._keep = keep and self._error is None
        self._cancel_timer()
        self._wake()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop may call this after create_connection has returned: _connect calls it first.
        if self._transport is None:
            self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
            self.open = not self._transport.is_closing()
            self._pool.made(self)

    def data_received(self, data: bytes) -> None:
        self._last = self._loop.time()
        parser = self._parser
        if parser is None or self.complete:
            self._keep = False  # bytes nobody asked for: this connection is not trusted again
            if parser is None:
                self.close()
            return
        self.heard = True
        self._framing -= len(data)  # on_body gives back what was body
        try:
            parser.feed_data(data)
        except Exception as exc:  # httptools' errors, or a status on_headers_complete refused
            if not self.complete:
                self._fail(_bad(exc))
            self.close()
            return
        if self._framing < 0 and not self.complete:
            where = "trailers or chunk sizes" if self._headed else "head"
            self._fail(BadAnswer(f"the answer's {where} passed {MAX_FRAMING // 1024} KiB"))
            self.close()

    def eof_received(self) -> bool | None:
        # Not handed out again from now: connection_lost may come a loop pass later.
        self.open = False
        return None  # the transport closes; connection_lost ends the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._pool.lost(self)
        if self._parser is None or self.complete:
            self._cancel_timer()
            return
        if self._headed and self._until_close and exc is None and self._error is None:
            self._finish(keep=False)
        else:
            self._fail(exc or ConnectionResetError(self._closed_why()))

    def _closed_why(self) -> str:
        if not self.heard:
            return "the upstream closed the connection before it answered"
        if not self._headed:
            return "the upstream closed the connection mid-head"
        return "the upstream closed the connection mid-body"

    # httptools' callbacks

    # After the answer is complete, more bytes in the same read are not ours: the connection
    # is not reused (they would be taken for the next request's answer).

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            self._keep = False
            return
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete or self._parser is None:
            self._keep = False
            return
        status = self._parser.get_status_code()
        if status < 100:  # llhttp takes any three digits; a 0xx is no interim answer
            raise BadAnswer(f"status {status:03d}, not an HTTP status")
        if status < 200:
            if status == 101:
                raise BadAnswer("101 Switching Protocols, to a request that asked for no upgrade")
            self.headers = []
            self._interim = True
            return
        self.status = status
        self._headed = True
        self.chunked, length_given = _framing_of(self.headers)
        if self._no_body:
            self._finish(keep=self._parser.should_keep_alive())
            self._parser = None  # later bytes are not this answer's (data_received drops them)
            return
        if status not in (204, 304):
            self._until_close = not length_given and not self.chunked
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            self._keep = False
            return
        self._chunks.append(body)
        self._held += len(body)
        self._framing += len(body)
        if self._held > HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_chunk_header(self) -> None:
        self._framing += CHUNK_FRAMING

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        if not self.complete and self._parser is not None:
            self._finish(keep=self._parser.should_keep_alive())


def _bad(exc: Exception) -> BadAnswer:
    """httptools' error as a BadAnswer; one raised by a callback is what httptools raises
    from (its own says only "User callback error")."""
    if isinstance(exc, BadAnswer):
        return exc
    if isinstance(exc.__context__, BadAnswer):
        return exc.__context__
    return BadAnswer(str(exc))


def _framing_of(headers: list[tuple[bytes, bytes]]) -> tuple[bool, bool]:
    """In one pass: whether chunked is the last transfer coding, as llhttp reads it (an answer
    whose last coding is another ends with the connection, RFC 9112 6.3), and whether a
    Content-Length is given."""
    codings: list[bytes] = []
    length_given = False
    for name, value in headers:
        low = name.lower()
        if low == b"transfer-encoding":
            codings.append(value)
        elif low == b"content-length":
            length_given = True
    last = b",".join(codings).rpartition(b",")[2].strip().lower()
    return last == b"chunked", length_given


class Pool:
    """Connections per origin: at most `limit` in use, idle ones reused for IDLE_SECONDS."""

    def __init__(self, connect_timeout: float, read_timeout: float, limit: int = LIMIT) -> None:
        self.connect_timeout = connect_timeout
        self.limit = limit
        self.read_timeout = read_timeout
        self._idle: dict[Origin, list[Connection]] = {}
        self._idle_count = 0
        self._in_use = 0
        self._queue: deque[asyncio.Future[None]] = deque()
        self._every: set[Connection] = set()
        self._tls: ssl.SSLContext | None = None

    async def connection(self, origin: Origin) -> Connection:
        """A connection to `origin` for one exchange: give it back with `release`."""
        await self._slot()
        try:
            return self._reuse(origin) or await self._connect(origin)
        except BaseException:
            self._free()
            raise

    def release(self, conn: Connection) -> None:
        """The exchange is over: the connection is kept for the next one, or closed."""
        self._free()
        if conn.reusable and self._idle_count < IDLE_MAX:
            conn.reused = True
            conn.idle_since = asyncio.get_running_loop().time()
            conn._begin(None)
            self._idle.setdefault(conn.origin, []).append(conn)
            self._idle_count += 1
        else:
            conn.close()

    def close(self) -> None:
        for conn in list(self._every):
            conn.close()
        self._idle.clear()
        self._idle_count = 0

    def made(self, conn: Connection) -> None:
        self._every.add(conn)

    def lost(self, conn: Connection) -> None:
        self._every.discard(conn)
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
            self._idle_count -= 1

    def _reuse(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            self._idle_count -= 1
            if conn.open and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    async def _connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        tls = self._context() if origin.secure else None
        async with asyncio.timeout(self.connect_timeout):
            transport, conn = await loop.create_connection(
                lambda: Connection(self, origin),
                origin.host,
                origin.port,
                ssl=tls,
                server_hostname=origin.host if tls is not None else None,
            )
        conn.connection_made(transport)
        return conn

    def _context(self) -> ssl.SSLContext:
        """The system's trust store (SSL_CERT_FILE and SSL_CERT_DIR are honoured), made once:
        loading it takes milliseconds and a few MB, which a local-only setup never pays."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    async def _slot(self) -> None:
        if self._in_use < self.limit and not self._queue:
            self._in_use += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._queue.append(waiter)
        try:
            await waiter  # _free counted us in when it set the result
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._free()  # handed a slot just as we were cancelled: pass it on
            else:
                self._queue.remove(waiter)
            raise

    def _free(self) -> None:
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._in_use -= 1
