"""Inflating a gzip or deflate answer for its client and its cassette, in bounded pieces, and
refusing a compression bomb: an answer that inflates past a ratio to its compressed bytes, or
past a hard cap, is cut there."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from tapeproxy.errors import AnswerRefused, UpstreamCut

# The most one call inflates: the consumer sends each piece on (and waits for the client)
# before more is inflated, so memory holds a piece, not the answer.
PIECE = 64 * 1024
MiB = 1024 * 1024

# Content-Encoding values inflated here; `x-gzip` is gzip's old name (RFC 9110 8.4.1.3).
INFLATABLE = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
# Those that mean the body is as it is.
IDENTITY = frozenset({"", "identity"})
# What the others are called in a message.
NAMES = {"br": "brotli (br)", "zstd": "zstd", "compress": "compress (LZW)"}


@dataclass(frozen=True)
class InflateLimits:
    """Past `floor` inflated bytes an answer may inflate to at most `ratio` times its
    compressed bytes; never past `cap`. Text and JSON compress 3:1 to 20:1; a bomb of zeros
    over 1000:1."""

    ratio: int = 100
    floor: int = 1 * MiB
    cap: int = 1024 * MiB


CAPS = InflateLimits()


class Inflater:
    """One answer's body, fed as its compressed bytes come, given back inflated in pieces of
    at most PIECE bytes. Gzip answers of several members (concatenated) inflate whole, like a
    deflate answer sent with or without its zlib header, as aiohttp's client did."""

    def __init__(self, encoding: str, limits: InflateLimits = CAPS) -> None:
        self.encoding = INFLATABLE[encoding]
        self.limits = limits
        self.taken = 0  # compressed bytes consumed
        self.given = 0  # inflated bytes given back
        self._zlib: zlib._Decompress | None = None

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The inflated pieces of `data`; raises AnswerRefused past a limit, UpstreamCut for
        bytes that do not decode."""
        pending, full = data, False
        while pending or full:
            if self._zlib is None:
                if self.encoding == "gzip" and self.taken:
                    # Zeros after a member are padding, skipped as gzip tools skip them.
                    padded, pending = len(pending), pending.lstrip(b"\0")
                    self.taken += padded - len(pending)
                    if not pending:
                        break
                self._zlib = zlib.decompressobj(self._wbits(pending[0]))
            inflating = self._zlib
            try:
                piece = inflating.decompress(pending, PIECE)
            except zlib.error as exc:
                raise self._garbled(exc) from exc
            if inflating.eof:  # a member ends; what follows is the next one
                rest, self._zlib = inflating.unused_data, None
            else:
                rest = inflating.unconsumed_tail
            self.taken += len(pending) - len(rest)
            pending, full = rest, len(piece) == PIECE
            if piece:
                self._count(len(piece))
                yield piece
            if not pending and self._zlib is None:
                break

    def end(self) -> bytes:
        """What the inflater still holds once the upstream finished (nothing, for a whole
        body). A gzip or deflate body that ends before its end of stream is a cut: an answer
        framed by the connection's close (or a short Content-Length) shows it no other way."""
        inflating = self._zlib
        if inflating is None:
            return b""
        try:
            tail = inflating.flush()
        except zlib.error as exc:
            raise self._garbled(exc) from exc
        self._count(len(tail))
        if not inflating.eof:
            raise UpstreamCut(
                f"the upstream's {self.encoding} answer ended before its end of stream"
            )
        return tail

    def _wbits(self, first: int) -> int:
        if self.encoding == "gzip":
            return 16 + zlib.MAX_WBITS
        # RFC 1950: a zlib header's low nibble is 8 (deflate); without one it is raw deflate.
        return zlib.MAX_WBITS if first & 0x0F == 8 else -zlib.MAX_WBITS

    def _count(self, size: int) -> None:
        self.given += size
        limits, given, taken = self.limits, self.given, self.taken
        if given > limits.cap:
            raise AnswerRefused(
                f"its {self.encoding} body inflated past the cap of {limits.cap:,} bytes "
                f"(from {taken:,} compressed)"
            )
        if given > limits.floor and given > limits.ratio * taken:
            raise AnswerRefused(
                f"its {self.encoding} body inflated past {limits.ratio}:1 ({given:,} bytes "
                f"from {taken:,}), a compression bomb"
            )

    def _garbled(self, exc: zlib.error) -> UpstreamCut:
        return UpstreamCut(f"the upstream's {self.encoding} answer does not decode: {exc}")


def unknown_encoding(value: str) -> str | None:
    """The name of a Content-Encoding this module cannot inflate, or None."""
    token = value.strip().lower()
    if token in IDENTITY or token in INFLATABLE:
        return None
    return NAMES.get(token, repr(value.strip()))
