"""Blobs put out as an exchange file too large to hold is written piece by piece: a
stream's frames one at a time (each is whole in memory already), and an answer kept as
text or base64 in two passes over its spool (where its large runs are, then the file with
each run handed to the store as it is met), so memory stays bounded whatever the size."""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tapeproxy.exchange.blobs import BLOB_MIN, JOIN, PREFIX, REF, SIZE, pack_value
from tapeproxy.exchange.jsontext import indent2
from tapeproxy.exchange.layout import Record, frames_json, string_json

# A blob stored: its digest, its size in bytes, its bytes in pieces (the store reads them
# all, or leaves them when it holds that blob already).
Put = Callable[[str, int, Iterable[bytes]], None]
Source = Callable[[], Iterable[str]]  # a long text's pieces, the same each time it is called
# What a file too large to hold is written around (`model.dump_around`): the JSON of its
# body's text or its frames, given whether to escape all but ASCII and where to put blobs.
Middle = Callable[[bool, "Blobber | None"], Iterable[bytes]]
BODY_INDENT = " " * 6  # a body's text sits at exchange -> response -> body -> text


class Blobber:
    """Puts out the blobs of one exchange file being written, and says whether it did (the
    file is then written in version 2)."""

    def __init__(self, put: Put) -> None:
        self.put = put
        self.marked = False

    def value(self, value: Any) -> Any:
        """A value held whole (a frame) as its file holds it; its blobs stored first."""
        packed = pack_value(value)
        for digest, data in packed.blobs.items():
            self.put(digest, len(data), (data,))
        self.marked |= packed.marked
        return packed.record["value"]


def frames_middle(
    frames: Iterable[Record], ascii: bool, blobber: Blobber | None
) -> Iterator[bytes]:
    """`frames_json`, each frame's large runs put out as blobs (with a blobber)."""
    return frames_json(frames, ascii, None if blobber is None else blobber.value)


def mapped(change: Callable[[str], str], source: Source) -> Source:
    """`source` with `change` (a scrubbing) applied to each piece, for `text_json`, which
    reads it twice: the second time only the pieces the first changed are changed again
    (scrubbing 200 MB with the key formats takes seconds; most pieces hold no key)."""
    changed: list[bool] = []

    def pieces() -> Iterator[str]:
        first = not changed
        for index, piece in enumerate(source()):
            if first:
                out = change(piece)
                changed.append(out != piece)
                yield out
            else:
                yield change(piece) if changed[index] else piece

    return pieces


@dataclass(frozen=True)
class Run:
    """A run of a long text between two double quotes, of BLOB_MIN bytes or more."""

    start: int  # in UTF-8 bytes from the text's start
    size: int
    digest: str


def text_json(
    source: Source, ascii: bool = False, blobber: Blobber | None = None
) -> Iterator[bytes]:
    """A long text as its exchange file holds it (`blobs.pack`): the JSON string
    (`string_json`) with no blobber or no large run, else a reference or a join, each run's
    bytes stored (`Blobber.put`) as they are met."""
    found, total = ([], 0) if blobber is None else large_runs(source)
    if blobber is None or not found:
        yield from string_json(source(), ascii)
        return
    blobber.marked = True
    if len(found) == 1 and found[0].size == total:
        _stored(blobber, found[0], _Reader(source()))
        yield _reference(found[0], BODY_INDENT)
        return
    inner = BODY_INDENT + "    "
    yield f'{{\n{BODY_INDENT}  "{JOIN}": [\n'.encode()
    for index, item in enumerate(_items(found, total, _Reader(source()), blobber, ascii)):
        yield (f",\n{inner}" if index else inner).encode()
        yield from item
    yield f"\n{BODY_INDENT}  ]\n{BODY_INDENT}}}".encode()


def _items(
    found: list[Run], total: int, reader: _Reader, blobber: Blobber, ascii: bool
) -> Iterator[Iterable[bytes]]:
    """A join's items in order, each written before the next is made: the texts between
    the runs, and each run (stored as it is met) as a reference."""
    at = 0
    for run in found:
        if run.start > at:
            yield string_json(reader.text(run.start - at), ascii)
        _stored(blobber, run, reader)
        yield (_reference(run, BODY_INDENT + "    "),)
        at = run.start + run.size
    if total > at:
        yield string_json(reader.text(total - at), ascii)


def _reference(run: Run, indent: str) -> bytes:
    ref = {REF: PREFIX + run.digest, SIZE: run.size}
    return indent2(ref, sort_keys=True).replace(b"\n", b"\n" + indent.encode())


def _stored(blobber: Blobber, run: Run, reader: _Reader) -> None:
    """The run's bytes handed to the store, then whatever it left unread skipped."""
    pieces = reader.take(run.size)
    blobber.put(run.digest, run.size, pieces)
    for _ in pieces:
        pass


def large_runs(source: Source) -> tuple[list[Run], int]:
    """The runs of BLOB_MIN bytes or more of the text, each hashed as it is read (only a
    run's first BLOB_MIN bytes are held), and the text's size in bytes."""
    runs = _Runs()
    for piece in source():
        runs.feed(piece.encode("utf-8", "surrogatepass"))
    return runs.done()


class _Runs:
    """`large_runs` between pieces: where the run under way started, and its first bytes
    (while under BLOB_MIN) or its hash so far."""

    def __init__(self) -> None:
        self.found: list[Run] = []
        self.at = self.start = 0
        self.head = bytearray()
        self.hasher: Any = None

    def feed(self, data: bytes) -> None:
        view, pos = memoryview(data), 0
        while True:
            if self.hasher is None:
                need = BLOB_MIN - len(self.head)
                # The last quote in the next `need` bytes ends every run before it short:
                # all skipped at once (a step per BLOB_MIN bytes of short strings, not a
                # step of Python per quote: a 200 MB JSONL answer took 25 s more).
                quote = data.rfind(b'"', pos, pos + need)
                if quote >= 0:
                    self.head.clear()
                    self.start, pos = self.at + quote + 1, quote + 1
                    continue
                if pos + need > len(data):  # the run goes on into the next piece
                    self.head += view[pos:]
                    break
                self.head += view[pos : pos + need]
                self.hasher, self.head = hashlib.sha256(self.head), bytearray()
                pos += need
            quote = data.find(b'"', pos)
            self.hasher.update(view[pos : len(data) if quote < 0 else quote])
            if quote < 0:
                break
            self._close(self.at + quote)
            pos = quote + 1
        self.at += len(data)

    def _close(self, end: int) -> None:
        self.found.append(Run(self.start, end - self.start, self.hasher.hexdigest()))
        self.hasher, self.start = None, end + 1

    def done(self) -> tuple[list[Run], int]:
        if self.hasher is not None:
            self._close(self.at)
        return self.found, self.at


class _Reader:
    """A text's UTF-8 bytes read in order, by count: as bytes, or as text."""

    def __init__(self, pieces: Iterable[str]) -> None:
        self._pieces = iter(pieces)
        self._rest = b""

    def take(self, count: int) -> Iterator[bytes]:
        while count > 0:
            if not self._rest:
                piece = next(self._pieces, None)
                if piece is None:
                    return
                self._rest = piece.encode("utf-8", "surrogatepass")
            out, self._rest = self._rest[:count], self._rest[count:]
            count -= len(out)
            yield out

    def text(self, count: int) -> Iterator[str]:
        """`count` bytes as text (they start and end at a quote or the text's ends: whole
        characters), decoded as they come."""
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        for data in self.take(count):
            yield decoder.decode(data)
        yield decoder.decode(b"", final=True)
