"""The Upstream protocol (tapeproxy.upstream.protocol) implemented on aiohttp's client: one
ClientSession per server that honours HTTP_PROXY, HTTPS_PROXY, NO_PROXY and SSL_CERT_FILE,
explicit timeouts, aiohttp's errors translated to tapeproxy's at this boundary."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Sequence

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from aiohttp.http_exceptions import LineTooLong
from yarl import URL

from tapeproxy.errors import UpstreamCut, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from tapeproxy.redaction.secrets import redact_text, redact_url
from tapeproxy.upstream.inflate import CAPS, INFLATABLE, InflateLimits, Inflater, unknown_encoding
from tapeproxy.upstream.protocol import Outbound, UpstreamSocket
from tapeproxy.upstream.request import prepare

# An answer's head is bounded: each line (the status line, a header's name and value) and
# the count of headers. aiohttp refuses more, so an endless head is never held whole.
MAX_LINE = 64 * 1024
MAX_HEADERS = 128
# An idle connection is reused for this long: less than the 5 s after which uvicorn and Node
# close theirs, so a request seldom goes out on a connection its upstream is closing (a POST
# that meets one is not sent again: aiohttp retries only idempotent methods).
IDLE_SECONDS = 4.0
LIMIT = 100  # connections in use at once; more requests wait for one
MAX_HOSTS = 256  # upstream hosts whose proxy is remembered
# Headers aiohttp adds on its own when a request has none: the request goes as the client
# sent it (forward_headers names the encodings tapeproxy inflates; `User-Agent` is ours only
# when the client sent none: tapeproxy.upstream.request).
NOT_ADDED = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class AiohttpResponse:
    """An answer read as its raw bytes come (aiohttp holds back the upstream past its read
    buffer until they are taken), a gzip or deflate body inflated here with its caps
    (tapeproxy.upstream.inflate). `close` gives its connection back to the pool, or closes it."""

    def __init__(
        self,
        upstream: str,
        response: aiohttp.ClientResponse,
        named: str,  # its Content-Encoding list (_encoding), worked out by `open` already
        read_timeout: float,
        limits: InflateLimits = CAPS,
    ) -> None:
        self._upstream = upstream
        self._response = response
        self._content = response.content
        self._read_timeout = read_timeout
        encoding = named.strip().lower()
        self._inflater = Inflater(encoding, limits) if encoding in INFLATABLE else None
        self.status = response.status
        raw = response.raw_headers
        # From the raw bytes, as latin-1: every byte passes through to the client unchanged.
        self.headers: Sequence[tuple[str, str]] = [
            (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw
        ]
        self.chunked = _chunked(raw)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._content.iter_any():
                if self._inflater is None:  # the common case, with no generator per chunk
                    yield chunk
                    continue
                for piece in self._inflater.feed(chunk):
                    yield piece
        except TimeoutError as exc:
            raise UpstreamCut(
                f"upstream {self._upstream!r} stopped mid-answer: it sent nothing for "
                f"{self._read_timeout:g} s"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamCut(
                f"upstream {self._upstream!r} stopped mid-answer: {type(exc).__name__}: "
                f"{_told(exc)}"
            ) from exc
        if self._inflater is not None and (tail := self._inflater.end()):
            yield tail

    @property
    def ended(self) -> bool:
        return self._inflater is None and self._content.at_eof()

    @property
    def whole(self) -> bool:
        return self._inflater is None and self._content.is_eof()

    def close(self) -> None:
        if self._content.at_eof():
            self._response.release()  # its connection back to the pool, if it may be kept
        else:
            self._response.close()  # an answer left unread: its connection is closed


class AiohttpUpstream:
    """Sends through one aiohttp ClientSession, made in the running loop by the app's lifespan,
    which closes it. Proxies come from HTTP_PROXY, HTTPS_PROXY and NO_PROXY (with credentials
    in the proxy's URL), as every HTTP tool on the user's machine takes them: as aiohttp's
    `trust_env` takes them, but worked out once per upstream host (`EnvProxies`), not in a
    thread hop per request (two with `trust_env`: ~0.9 ms a request on these machines)."""

    def __init__(self, connect: float, read: float, limits: InflateLimits = CAPS) -> None:
        self.connect_timeout = connect
        self.read_timeout = read
        self._limits = limits
        self._tls: ssl.SSLContext | None = None
        self._proxies = EnvProxies()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=LIMIT, keepalive_timeout=IDLE_SECONDS),
            trust_env=False,  # the environment's proxies: EnvProxies, once per host
            auto_decompress=False,  # inflated by tapeproxy.upstream.inflate, with its caps
            cookie_jar=aiohttp.DummyCookieJar(),  # a proxy, not a browser: no cookie kept
            skip_auto_headers=NOT_ADDED,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read),
            max_line_size=MAX_LINE,
            max_field_size=MAX_LINE,
            max_headers=MAX_HEADERS,
        )

    async def open(self, request: Outbound) -> AiohttpResponse:
        try:
            url, headers, credentials = prepare(request.url, request.headers)
        except ValueError as exc:
            raise UpstreamError(f"{_where(request)}: not a URL tapeproxy can call: {exc}") from exc
        proxy, proxy_headers = self._proxies.of(url)
        try:
            response = await self._session.request(
                request.method,
                url,
                proxy=proxy,
                proxy_headers=proxy_headers,
                headers=headers,
                data=request.body or None,
                allow_redirects=False,  # a redirect goes to the client, as the upstream sent it
                ssl=self._context() if url.scheme == "https" else True,
                middlewares=(credentials,),
            )
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise self._failed(request, exc) from exc
        status = response.status
        if status < 200:  # aiohttp reads past every other 1xx
            response.close()
            why = "101 Switching Protocols, to a request that asked for no upgrade"
            if status != 101:
                why = f"status {status:03d}, not an HTTP status"
            raise UpstreamError(f"{_where(request)} answered, but not in HTTP/1.1: {why}")
        named = _encoding(response.raw_headers)
        encoding = unknown_encoding(named)
        if encoding is not None and _has_body(request.method, status):
            response.close()
            raise UpstreamError(
                f"{_where(request)} answered, but compressed with {encoding}, which tapeproxy "
                "cannot decode, so the answer was not passed on or recorded. tapeproxy asks for "
                "gzip or deflate (accept-encoding); this upstream ignored that."
            )
        return AiohttpResponse(request.upstream, response, named, self.read_timeout, self._limits)

    async def connect(
        self, request: Outbound, protocols: Sequence[str], max_frame: int
    ) -> UpstreamSocket:
        """A WebSocket session to the upstream (tapeproxy.upstream.sockets)."""
        from tapeproxy.upstream.sockets import connect  # its few users pay for it

        return await connect(self, request, protocols, max_frame)

    @property
    def session(self) -> aiohttp.ClientSession:
        return self._session

    @property
    def proxies(self) -> EnvProxies:
        return self._proxies

    def tls(self) -> ssl.SSLContext:
        return self._context()

    def failed(self, request: Outbound, exc: BaseException) -> UpstreamError:
        return self._failed(request, exc)

    async def close(self) -> None:
        await self._session.close()

    def _failed(self, request: Outbound, exc: BaseException) -> UpstreamError:
        """aiohttp's error (or Python's) as tapeproxy's, saying what went wrong where."""
        where = _where(request)
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return UpstreamTimeout(
                f"{where} did not answer in time (no connection in {self.connect_timeout:g} s)"
            )
        if isinstance(exc, TimeoutError):
            return UpstreamTimeout(
                f"{where} did not answer in time (nothing for {self.read_timeout:g} s)"
            )
        if isinstance(exc, aiohttp.ClientHttpProxyError):
            return UpstreamUnreachable(
                f"{where} is unreachable: the proxy (HTTP_PROXY or HTTPS_PROXY) answered "
                f"{exc.status} {exc.message}"
            )
        if isinstance(exc, aiohttp.ClientResponseError):  # the answer's head did not parse
            if _head_too_big(exc):
                return UpstreamError(
                    f"{where} answered, but its head passed the cap of {MAX_LINE // 1024} KiB "
                    f"a line or {MAX_HEADERS} headers: {_told(exc)}"
                )
            return UpstreamError(f"{where} answered, but not in HTTP/1.1: {_told(exc)}")
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return UpstreamUnreachable(f"{where} closed the connection before it answered")
        if isinstance(exc, aiohttp.ClientConnectionError | OSError):
            why = _told(exc) or type(exc).__name__
            return UpstreamUnreachable(f"{where} is unreachable: {why}")
        return UpstreamError(f"{where}: tapeproxy cannot send this request: {_told(exc)}")

    def _context(self) -> ssl.SSLContext:
        """The system's trust store, made once, at the first HTTPS request: loading it takes
        milliseconds and a few MB, which a local-only setup never pays. Python's default
        context reads SSL_CERT_FILE and SSL_CERT_DIR as it is made; aiohttp's own is made
        when aiohttp is imported, before a test or a wrapper may have set them."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls


def _head_too_big(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, LineTooLong) or "Too many headers" in str(seen):
            return True
        seen = seen.__cause__
    return False


def _where(request: Outbound) -> str:
    """The upstream a message names (worked out only for one: redacting a URL costs 2 us)."""
    return f"upstream {request.upstream!r} at {redact_url(request.url)}"


def _encoding(headers: Sequence[tuple[bytes, bytes]]) -> str:
    """Every Content-Encoding the answer names, in order: two header lines are one list
    (RFC 9110 5.3), so `gzip` twice is `gzip, gzip`, not one gzip to inflate."""
    return ", ".join(v.decode("latin-1") for k, v in headers if k.lower() == b"content-encoding")


def _chunked(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether chunked is the answer's last transfer coding (an answer whose last coding is
    another ends with the connection, RFC 9112 6.3)."""
    codings = b",".join(v for k, v in headers if k.lower() == b"transfer-encoding")
    return codings.rpartition(b",")[2].strip().lower() == b"chunked"


def _has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status >= 200 and status not in (204, 304)


def _told(exc: BaseException) -> str:
    """An exception's own text, which may quote a URL: with its secrets taken out."""
    return redact_text(str(exc))


class EnvProxies:
    """The proxy of each upstream host, from the environment (HTTP_PROXY, HTTPS_PROXY,
    NO_PROXY, credentials in the proxy's URL or in ~/.netrc for the proxy), by aiohttp's own
    reading of it; read once per (scheme, host) for the life of the server."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[URL | None, dict[str, str] | None]] = {}

    def of(self, url: URL) -> tuple[URL | None, dict[str, str] | None]:
        """The proxy to send `url` through, and the headers that go to it (its credentials)."""
        place = (url.scheme, url.host or "")
        known = self._known.get(place)
        if known is None:
            try:
                proxy, auth = get_env_proxy_for_url(url)
                known = (proxy, None if auth is None else {"Proxy-Authorization": auth.encode()})
            except LookupError:  # no proxy for it, or NO_PROXY names it
                known = (None, None)
            if len(self._known) < MAX_HOSTS:  # upstreams are few; a bound all the same
                self._known[place] = known
        return known
