"""Which headers pass the proxy, each way (RFC 9110 7.6.1)."""

from __future__ import annotations

from collections.abc import Sequence

# RFC 9110 7.6.1: headers meant for one connection, never passed on; so is every header a
# Connection header names.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# What tapeproxy sets itself on the way up: the host, the length, the encodings it can decode;
# and no `Expect: 100-continue`, since the body is already read (an upstream that never
# sends 100 Continue would stall the upload).
SET_ON_REQUEST = frozenset({"host", "content-length", "accept-encoding", "expect"})
# And on the way down: the body is decompressed and framed anew.
SET_ON_ANSWER = frozenset({"content-length", "content-encoding"})


def connection_named(headers: Sequence[tuple[str, str]]) -> frozenset[str]:
    return frozenset(
        token.strip().lower()
        for k, v in headers
        if k.lower() == "connection"
        for token in v.split(",")
        if token.strip()
    )


def forward_headers(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Client headers (as bytes) as they go upstream: credentials and Content-Encoding kept
    (the body goes as it came), hop-by-hop and ours dropped."""
    named = {
        token.strip().lower()
        for k, v in headers
        if k.lower() == b"connection"
        for token in v.split(b",")
        if token.strip()
    }
    dropped = _DROPPED_UP | named if named else _DROPPED_UP
    kept = [
        (k, v)
        for k, v in headers
        if (low := k.lower()) not in dropped and not low.startswith(b"x-tapeproxy-")
    ]
    # We inflate for the client and the cassette (upstream.inflate): ask for what it can read.
    kept.append((b"accept-encoding", b"gzip, deflate"))
    return kept


_DROPPED_UP = frozenset(name.encode("latin-1") for name in HOP_BY_HOP | SET_ON_REQUEST)


def answer_headers(
    headers: Sequence[tuple[str, str]], keep_length: bool = False
) -> list[tuple[str, str]]:
    """Upstream answer headers (lowercase) as they go to the client. `keep_length` for a HEAD
    answer, whose Content-Length tells the size of a body that is not sent."""
    dropped = HOP_BY_HOP | SET_ON_ANSWER | connection_named(headers)
    if keep_length:
        dropped -= {"content-length"}
    return [(k, v) for k, v in headers if k not in dropped]
