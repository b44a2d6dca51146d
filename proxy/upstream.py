"""The Upstream protocol, and its implementation over tapeproxy.http1: one pool of keep-alive
connections, explicit timeouts, low-level errors translated to tapeproxy's at this boundary."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol
from urllib.parse import unquote, urlsplit

from tapeproxy import __version__
from tapeproxy.errors import UpstreamCut, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from tapeproxy.hopheaders import forward_headers
from tapeproxy.http1 import BadAnswer, Connection, Origin, Pool
from tapeproxy.inflate import CAPS, INFLATABLE, InflateLimits, Inflater, unknown_encoding
from tapeproxy.redact import redact_text, redact_url


@dataclass
class Outbound:
    """Built for every live request, so not frozen (see tapeproxy.inbound)."""

    upstream: str
    method: str
    url: str
    headers: Sequence[tuple[bytes, bytes]]  # each byte as the client sent it
    body: bytes

    @classmethod
    def of(
        cls, upstream: str, method: str, url: str, raw: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> Outbound:
        """The client's request as it goes upstream: same method and body, headers cleaned."""
        return cls(upstream, method, url, forward_headers(raw), body)


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


class HttpResponse:
    """An answer read as its raw bytes came, a gzip or deflate body inflated here with its caps
    (tapeproxy.inflate). `close` gives its connection back to the pool, or closes it."""

    def __init__(
        self,
        upstream: str,
        pool: Pool,
        conn: Connection,
        named: str,  # its Content-Encoding list (_encoding), worked out by `open` already
        limits: InflateLimits = CAPS,
    ) -> None:
        self._upstream = upstream
        self._pool: Pool | None = pool
        self._conn = conn
        raw = conn.headers
        encoding = named.strip().lower()
        self._inflater = Inflater(encoding, limits) if encoding in INFLATABLE else None
        self.status = conn.status
        # From the raw bytes, as latin-1: every byte passes through to the client unchanged.
        self.headers: Sequence[tuple[str, str]] = [
            (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw
        ]
        self.chunked = conn.chunked

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        try:
            while chunk := await conn.read():
                if self._inflater is None:  # the common case, with no generator per chunk
                    yield chunk
                    continue
                for piece in self._inflater.feed(chunk):
                    yield piece
        except (OSError, TimeoutError, BadAnswer) as exc:
            raise UpstreamCut(
                f"upstream {self._upstream!r} stopped mid-answer: {type(exc).__name__}: "
                f"{_told(exc)}"
            ) from exc
        if self._inflater is not None and (tail := self._inflater.end()):
            yield tail

    @property
    def ended(self) -> bool:
        return self._inflater is None and self._conn.complete and not self._conn.pending

    @property
    def whole(self) -> bool:
        return self._inflater is None and self._conn.complete

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.release(self._conn)


class HttpUpstream:
    """Sends through one pool of keep-alive connections (tapeproxy.http1); owned by the app's
    lifespan, which closes it."""

    def __init__(self, connect: float, read: float, limits: InflateLimits = CAPS) -> None:
        self._pool = Pool(connect, read)
        self._limits = limits

    async def open(self, request: Outbound) -> HttpResponse:
        origin, head = _request_head(request)
        pool = self._pool
        for attempt in (1, 2):
            try:
                conn = await pool.connection(origin)
            except TimeoutError as exc:
                raise UpstreamTimeout(
                    f"{_where(request)} did not answer in time (no connection in "
                    f"{pool.connect_timeout:g} s)"
                ) from exc
            except OSError as exc:
                raise UpstreamUnreachable(
                    f"{_where(request)} is unreachable: {_told(exc) or type(exc).__name__}"
                ) from exc
            try:
                conn.send(head, request.body, no_body=request.method == "HEAD")
                await conn.head()
                break
            except BaseException as exc:
                conn.close()
                pool.release(conn)
                if isinstance(exc, TimeoutError):
                    raise UpstreamTimeout(
                        f"{_where(request)} did not answer in time ({_told(exc)})"
                    ) from exc
                if not isinstance(exc, OSError | BadAnswer):
                    raise
                # A kept connection its upstream closed as we sent: once more on a new one,
                # for a request that may be sent twice (RFC 9110 9.2.2).
                if attempt == 1 and _stale(conn, exc) and request.method in IDEMPOTENT:
                    continue
                if isinstance(exc, BadAnswer):
                    raise UpstreamError(
                        f"{_where(request)} answered, but not in HTTP/1.1: {_told(exc)}"
                    ) from exc
                raise UpstreamUnreachable(
                    f"{_where(request)} is unreachable: {_told(exc) or type(exc).__name__}"
                ) from exc
        named = _encoding(conn.headers)
        encoding = unknown_encoding(named)
        if encoding is not None and _has_body(request.method, conn.status):
            conn.close()
            pool.release(conn)
            raise UpstreamError(
                f"{_where(request)} answered, but compressed with {encoding}, which tapeproxy "
                "cannot decode, so the answer was not passed on or recorded. tapeproxy asks for "
                "gzip or deflate (accept-encoding); this upstream ignored that."
            )
        return HttpResponse(request.upstream, pool, conn, named, self._limits)

    def close(self) -> None:
        self._pool.close()


IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


def _stale(conn: Connection, exc: BaseException) -> bool:
    return conn.reused and not conn.heard and isinstance(exc, ConnectionError)


def _where(request: Outbound) -> str:
    """The upstream a message names (worked out only for one: redacting a URL costs 2 us)."""
    return f"upstream {request.upstream!r} at {redact_url(request.url)}"


def _encoding(headers: Sequence[tuple[bytes, bytes]]) -> str:
    """Every Content-Encoding the answer names, in order: two header lines are one list
    (RFC 9110 5.3), so `gzip` twice is `gzip, gzip`, not one gzip to inflate."""
    return ", ".join(v.decode("latin-1") for k, v in headers if k.lower() == b"content-encoding")


def _has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status >= 200 and status not in (204, 304)


def _request_head(request: Outbound) -> tuple[Origin, bytes]:
    """Where the request goes, and its request line and headers as bytes. The URL's path and
    query go as they came (no re-quoting: `%zz` stays `%zz`), the headers' bytes too; an
    upstream URL's `user:pass@` goes as basic auth, unless the client sent its own
    Authorization."""
    url = request.url
    scheme_end = url.find("://")
    end = len(url)
    for mark in "/?#":
        at = url.find(mark, scheme_end + 3)
        if at != -1 and at < end:
            end = at
    try:
        origin, host, auth = _origin(url[:end])
    except ValueError as exc:
        raise UpstreamError(f"{_where(request)}: not a URL tapeproxy can call: {exc}") from exc
    target = url[end:]
    if not target.startswith("/"):
        target = "/" + target
    try:
        line = f"{request.method} {target} HTTP/1.1\r\n".encode("latin-1")
    except UnicodeEncodeError:
        line = f"{request.method} {target} HTTP/1.1\r\n".encode()  # a configured URL's path
    headers = request.headers
    parts = [line, host]
    parts += [b"%s: %s\r\n" % pair for pair in headers]
    named = {name.lower() for name, _ in headers}
    if request.body or request.method not in BODILESS:
        parts.append(b"Content-Length: %d\r\n" % len(request.body))
    if auth is not None and b"authorization" not in named:
        parts.append(auth)
    if b"user-agent" not in named:
        parts.append(USER_AGENT)
    parts.append(b"\r\n")
    head = b"".join(parts)
    if head.count(b"\n") != len(parts) or head.count(b"\r") != len(parts) or b"\0" in head:
        raise UpstreamError(f"{_where(request)}: a header or the path holds CR, LF or NUL")
    return origin, head


@lru_cache(maxsize=256)
def _origin(prefix: str) -> tuple[Origin, bytes, bytes | None]:
    """An upstream URL's scheme and authority, once: where to connect, the Host header, and
    the Authorization its `user:pass@` makes. ValueError for one that is not usable."""
    parts = urlsplit(prefix)
    port = parts.port
    secure = parts.scheme == "https"
    if (not secure and parts.scheme != "http") or not parts.hostname:
        raise ValueError("tapeproxy calls http:// and https:// URLs only")
    host = parts.hostname
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    netloc = parts.netloc.rpartition("@")[2]
    if not netloc.isascii():
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{port}" if port is not None else ""
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        auth = b"Authorization: Basic %s\r\n" % base64.b64encode(pair)
    port = port if port is not None else (443 if secure else 80)
    return Origin(secure, host, port), f"Host: {netloc}\r\n".encode("ascii"), auth


BODILESS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "CONNECT"})
USER_AGENT = f"User-Agent: tapeproxy/{__version__}\r\n".encode()


def _told(exc: BaseException) -> str:
    """An exception's own text, which may quote a URL: with its secrets taken out."""
    return redact_text(str(exc))
