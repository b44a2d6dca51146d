"""Inflating answers: every gzip or deflate body inflates to its bytes however it is cut into
chunks; a bomb is refused past the ratio or the cap, in bounded memory."""

from __future__ import annotations

import gzip
import itertools
import zlib
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.errors import AnswerRefused, UpstreamCut
from tapeproxy.upstream.inflate import PIECE, InflateLimits, Inflater, unknown_encoding

LOOSE = InflateLimits(ratio=10**9)


def deflate(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


ENCODED = {
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "x-gzip": lambda data: gzip.compress(data, mtime=0),
    "deflate": lambda data: deflate(data, zlib.MAX_WBITS),  # with its zlib header (RFC 1950)
    "raw-deflate": lambda data: deflate(data, -zlib.MAX_WBITS),  # without, as some send it
}


def inflate(inflater: Inflater, data: bytes, cuts: list[int]) -> bytes:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [p for a, b in itertools.pairwise(edges) for p in inflater.feed(data[a:b])]
    assert all(len(p) <= PIECE for p in pieces)
    return b"".join(pieces) + inflater.end()


@given(
    st.binary(max_size=3000) | st.text(max_size=3000).map(str.encode),
    st.sampled_from(sorted(ENCODED)),
    st.lists(st.integers(0, 10**6), max_size=6),
    st.integers(1, 3),
)
def test_any_body_inflates_to_its_bytes_however_it_is_cut(
    body: bytes, encoding: str, cuts: list[int], members: int
) -> None:
    members = members if encoding == "gzip" else 1  # several members: gzip's (RFC 1952 2.2)
    encoded = b"".join(ENCODED[encoding](body) for _ in range(members))
    name = "deflate" if encoding == "raw-deflate" else encoding
    assert inflate(Inflater(name, LOOSE), encoded, cuts) == body * members


def bomb(inflated: int) -> Iterator[bytes]:
    """A gzip body of `inflated` zero bytes, made 64 KiB at a time (about 1,000:1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(64 * 1024)
    for _ in range(inflated // len(block)):
        if out := packer.compress(block):
            yield out
    yield packer.flush()


def test_a_bomb_is_refused_just_past_the_floor_not_inflated() -> None:
    inflater = Inflater("gzip", InflateLimits(ratio=100, floor=1024 * 1024))
    out = 0
    with pytest.raises(AnswerRefused, match=r"past 100:1 .*compression bomb"):
        for chunk in bomb(256 * 1024 * 1024):
            for piece in inflater.feed(chunk):
                out += len(piece)
    assert 1024 * 1024 - PIECE <= out <= 1024 * 1024 + PIECE


def test_an_answer_past_the_cap_is_refused_whatever_its_ratio() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB; any ratio passes here
    inflater = Inflater("gzip", InflateLimits(ratio=10**9, floor=0, cap=512 * 1024))
    with pytest.raises(AnswerRefused, match="past the cap of 524,288 bytes"):
        inflate(inflater, gzip.compress(body), [])
    assert inflater.given <= 512 * 1024 + PIECE


def test_an_ordinary_answer_under_the_ratio_passes_whole() -> None:
    text = b"".join(b'{"n": %d, "word": "w%d"}\n' % (n, n * 7919 % 10007) for n in range(200_000))
    assert len(text) > 5 * 1024 * 1024
    assert inflate(Inflater("gzip"), gzip.compress(text), [65536 * k for k in range(200)]) == text


def test_garbled_or_cut_bodies_are_upstream_cuts() -> None:
    with pytest.raises(UpstreamCut, match="does not decode"):
        inflate(Inflater("gzip"), b"this is not gzip", [])
    with pytest.raises(UpstreamCut, match="ended before its end"):
        inflate(Inflater("deflate"), deflate(b"x" * 1000, zlib.MAX_WBITS)[:-4], [])
    with pytest.raises(UpstreamCut, match="gzip answer ended before its end"):
        inflate(Inflater("gzip"), gzip.compress(b"x" * 1000)[:-4], [])


def test_encodings_it_cannot_inflate_are_named() -> None:
    assert [unknown_encoding(v) for v in ("", "identity", " GZIP", "x-gzip", "deflate")] == [
        None
    ] * 5
    assert unknown_encoding("br") == "brotli (br)" and unknown_encoding("zstd") == "zstd"
    assert unknown_encoding("gzip, br") == "'gzip, br'"


def test_zeros_after_a_gzip_member_are_padding_even_split_across_chunks() -> None:
    body = gzip.compress(b"first") + bytes(5) + gzip.compress(b"second") + bytes(7)
    member = len(gzip.compress(b"first"))
    for cuts in ([], [member + 2], [member, member + 5], [len(body) - 3]):
        assert inflate(Inflater("gzip"), body, cuts) == b"firstsecond"
    with pytest.raises(UpstreamCut, match="does not decode"):
        inflate(Inflater("gzip"), gzip.compress(b"x") + b"\0\0junk", [])
