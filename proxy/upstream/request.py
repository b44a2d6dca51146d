"""A request as aiohttp sends it: its URL with the path and query byte for byte, its headers as
text aiohttp writes back as the client's bytes, and its Authorization (`Credentials`, an
aiohttp middleware). No I/O."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from functools import lru_cache
from string import printable
from urllib.parse import quote_from_bytes

import aiohttp
from yarl import URL

from tapeproxy import __version__

USER_AGENT = f"tapeproxy/{__version__}"  # for a request that came without a User-Agent


class Credentials:
    """The Authorization a request goes with: the client's own, else the upstream URL's
    `user:pass@` as basic auth, never one from ~/.netrc (aiohttp's trust_env would read it).
    An aiohttp middleware, so it is set after aiohttp's own (which would otherwise refuse a
    client's Authorization next to a .netrc entry for that host)."""

    def __init__(self, headers: Sequence[tuple[str, str]]) -> None:
        self.headers = headers  # (name, value): the name in the client's case

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        request.headers.popall("Authorization", None)
        for name, value in self.headers:
            request.headers.add(name, value)
        return await handler(request)


def prepare(
    url: str, raw: Sequence[tuple[bytes, bytes]]
) -> tuple[URL, list[tuple[str, str]], Credentials]:
    """Where a request goes, its headers (`raw`, already cleaned by forward_headers) as aiohttp
    takes them, and its Authorization. ValueError for a URL tapeproxy cannot call. The URL's
    path and query go as they came (no re-quoting: `%zz` stays `%zz`); aiohttp writes the
    head as UTF-8, so a header's bytes go as they came when they are UTF-8 (a value that is
    not is read as latin-1, and goes as that text in UTF-8)."""
    prefix, target = _split(url)
    origin, basic = _origin(prefix)
    headers: list[tuple[str, str]] = []
    authorization: list[tuple[str, str]] = []
    agent = False
    for name, value in raw:
        low = name.lower()
        pair = (name.decode("latin-1"), header_text(value))
        if low == b"authorization":
            authorization.append(pair)
            continue
        agent = agent or low == b"user-agent"
        headers.append(pair)
    if not authorization and basic is not None:
        authorization.append(("Authorization", basic))
    if not agent:
        headers.append(("User-Agent", USER_AGENT))
    return URL(origin + _target(target), encoded=True), headers, Credentials(authorization)


def _split(url: str) -> tuple[str, str]:
    """An upstream URL as its scheme and authority, and the rest (path and query)."""
    start = url.find("://")
    start = start + 3 if start != -1 else 0
    end = len(url)
    for mark in "/?#":
        at = url.find(mark, start)
        if at != -1 and at < end:
            end = at
    return url[:end], url[end:]


@lru_cache(maxsize=256)
def _origin(prefix: str) -> tuple[str, str | None]:
    """An upstream URL's scheme and authority, once: as aiohttp connects to it (a host name
    in IDNA), and the basic auth its `user:pass@` makes. ValueError for one not usable."""
    url = URL(prefix)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("tapeproxy calls http:// and https:// URLs only")
    basic = None
    if url.user is not None:
        pair = f"{url.user}:{url.password or ''}".encode()
        basic = "Basic " + base64.b64encode(pair).decode("ascii")
    return str(url.with_user(None).with_path("")), basic


_SAFE = "".join(c for c in printable if c.isprintable() and c != " ")


def _target(target: str) -> str:
    """The client's path and query (latin-1 text of its bytes) as text aiohttp writes back as
    those bytes: UTF-8 ones as they are, any other byte past ASCII percent-encoded."""
    if not target.startswith("/"):
        target = "/" + target
    if target.isascii():
        return target
    try:
        raw = target.encode("latin-1")
    except UnicodeEncodeError:
        return target  # a configured URL's path, already text
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return quote_from_bytes(raw, safe=_SAFE)


def header_text(value: bytes) -> str:
    """A header value as the text aiohttp writes back as its bytes: UTF-8, else latin-1."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")
