"""The Upstream protocol, and its aiohttp implementation: one pooled session, explicit timeouts,
aiohttp errors translated to llmtape's at this boundary."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from yarl import URL

from llmtape.errors import UpstreamCut, UpstreamError, UpstreamTimeout, UpstreamUnreachable
from llmtape.hopheaders import forward_headers
from llmtape.inflate import CAPS, INFLATABLE, InflateLimits, Inflater, unknown_encoding
from llmtape.redact import redact_text, redact_url


@dataclass
class Outbound:
    """Built for every live request, so not frozen (see llmtape.inbound)."""

    upstream: str
    method: str
    url: str
    headers: Sequence[tuple[str, str]]
    body: bytes

    @classmethod
    def of(
        cls, upstream: str, method: str, url: str, raw: Sequence[tuple[bytes, bytes]], body: bytes
    ) -> Outbound:
        """The client's request as it goes upstream: same method and body, headers cleaned."""
        headers = forward_headers([(k.decode("latin-1"), _text(v)) for k, v in raw])
        return cls(upstream, method, url, headers, body)


def _text(value: bytes) -> str:
    """A header value as aiohttp wants it: it sends str values as UTF-8."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


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


class AiohttpResponse:
    """An answer read as its raw bytes came (aiohttp's own decompression is off), a gzip or
    deflate body inflated here with its caps (llmtape.inflate)."""

    def __init__(
        self,
        upstream: str,
        response: aiohttp.ClientResponse,
        limits: InflateLimits = CAPS,
        named: str | None = None,  # its content_encoding(), when worked out already
    ) -> None:
        self._upstream = upstream
        self._response = response
        encoding = (content_encoding(response) if named is None else named).strip().lower()
        self._inflater = Inflater(encoding, limits) if encoding in INFLATABLE else None
        self.status = response.status
        # From the raw bytes, as latin-1: every byte passes through to the client unchanged.
        self.headers: Sequence[tuple[str, str]] = [
            (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.raw_headers
        ]
        self.chunked = response.headers.get("transfer-encoding", "").lower() == "chunked"

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                if self._inflater is None:  # the common case, with no generator per chunk
                    if chunk:
                        yield chunk
                    continue
                for piece in self._inflater.feed(chunk):
                    yield piece
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, TimeoutError) as exc:
            for piece in self._inflated(_unread(self._response.content)):
                yield piece
            raise UpstreamCut(
                f"upstream {self._upstream!r} stopped mid-answer: {type(exc).__name__}: "
                f"{_told(exc)}"
            ) from exc
        if self._inflater is not None and (tail := self._inflater.end()):
            yield tail

    @property
    def ended(self) -> bool:
        return self._inflater is None and self._response.content.at_eof()

    @property
    def whole(self) -> bool:
        return self._inflater is None and self._response.content.is_eof()

    def _inflated(self, chunk: bytes) -> Iterator[bytes]:
        if self._inflater is None:
            if chunk:
                yield chunk
        elif chunk:
            yield from self._inflater.feed(chunk)

    def close(self) -> None:
        self._response.close()


def _unread(content: aiohttp.StreamReader) -> bytes:
    """Bytes that came in with a cut but were not read yet. aiohttp's readers raise the cut
    before they hand over what is buffered, so the last frames an upstream sent before it
    dropped would be lost to the client and the cassette alike."""
    buffer = getattr(content, "_buffer", None)
    if not buffer:
        return b""
    rest = b"".join(bytes(piece) for piece in buffer)
    buffer.clear()
    return rest


class AiohttpUpstream:
    """Sends through one pooled ClientSession; owned by the app's lifespan."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        connect: float,
        read: float,
        limits: InflateLimits = CAPS,
    ) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
        self._limits = limits

    async def open(self, request: Outbound) -> AiohttpResponse:
        try:
            url, headers = _userinfo_as_auth(request)
            response = await self._session.request(
                request.method,
                url,
                headers=headers,
                data=request.body or None,
                allow_redirects=False,
                timeout=self._timeout,
                auto_decompress=False,  # inflated in AiohttpResponse, with caps
            )
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"{_where(request)} did not answer in time ({_told(exc) or 'timeout'})"
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"{_where(request)} is unreachable: {_told(exc)}") from exc
        named = content_encoding(response)
        encoding = unknown_encoding(named)
        if encoding is not None and _has_body(request.method, response.status):
            response.close()
            raise UpstreamError(
                f"{_where(request)} answered, but compressed with {encoding}, which llmtape cannot "
                "decode, so the answer was not passed on or recorded. llmtape asks for gzip or "
                "deflate (accept-encoding); this upstream ignored that."
            )
        return AiohttpResponse(request.upstream, response, self._limits, named)


def _where(request: Outbound) -> str:
    """The upstream a message names (worked out only for one: redacting a URL costs 2 us)."""
    return f"upstream {request.upstream!r} at {redact_url(request.url)}"


def content_encoding(response: aiohttp.ClientResponse) -> str:
    """Every Content-Encoding the answer names, in order: two header lines are one list
    (RFC 9110 5.3), so `gzip` twice is `gzip, gzip`, not one gzip to inflate."""
    return ", ".join(response.headers.getall("content-encoding", []))


def _has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status >= 200 and status not in (204, 304)


def _userinfo_as_auth(request: Outbound) -> tuple[URL, Sequence[tuple[str, str]]]:
    """The URL as it came (no re-quoting: `%zz` stays `%zz`), and the headers. An upstream URL's
    `user:pass@` goes as basic auth, unless the client sent its own Authorization."""
    url = URL(request.url, encoded=True)
    if url.user is None:
        return url, request.headers
    bare = url.with_user(None)
    if any(name.lower() == "authorization" for name, _ in request.headers):
        return bare, request.headers
    pair = f"{url.user}:{url.password or ''}".encode()
    auth = "Basic " + base64.b64encode(pair).decode("ascii")
    return bare, [*request.headers, ("Authorization", auth)]


def _told(exc: BaseException) -> str:
    """An aiohttp exception's own text, which quotes the URL: with its secrets taken out."""
    return redact_text(str(exc))
