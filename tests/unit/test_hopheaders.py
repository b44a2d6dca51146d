"""Which headers pass the proxy: what `connection` names goes, in any case; tapeproxy's own
headers never go upstream; it asks only for the encodings it can inflate."""

from __future__ import annotations

from tapeproxy.upstream.hopheaders import forward_headers


def test_forward_headers_drops_what_connection_names_in_any_case() -> None:
    kept = forward_headers(
        [(b"connection", b"X-Foo, close"), (b"x-foo", b"1"), (b"X-FOO", b"2"), (b"x-bar", b"3"),
         (b"te", b"trailers"), (b"x-tapeproxy-cassette", b"c"), (b"Host", b"h")]
    )  # fmt: skip
    assert kept == [(b"x-bar", b"3"), (b"accept-encoding", b"gzip, deflate")]
