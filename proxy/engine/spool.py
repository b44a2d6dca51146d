"""The bytes of one answer being recorded, in arrival order: in memory while the answer is
small (nearly every one), then in an anonymous temp file (the system's temp folder: a store
need not be a folder), so that no answer is ever held whole in memory, whatever its size."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

SPOOL_AFTER = 1024 * 1024  # an answer past this many bytes goes to a scratch file
FLUSH_EVERY = 256 * 1024  # bytes gathered past SPOOL_AFTER before they are written out
READ_PIECE = 1024 * 1024  # how much is read back at once

Opener = Callable[[], BinaryIO]


class Spool:
    """`write` runs on the event loop and never touches the disk: it says when enough waits
    to be written, and the caller runs `flush` off the loop (its await is the backpressure
    that keeps a fast upstream from filling memory). Once spilled, every byte is in the file
    after a `flush`; before that, every byte is in `memory`."""

    def __init__(self, opener: Opener, keep: int = SPOOL_AFTER) -> None:
        self._opener = opener
        self._keep = keep
        self.size = 0
        self._memory = bytearray()
        self._file: BinaryIO | None = None
        self.spilled = False  # past `keep`: the bytes go to the file
        self._dropped = False
        # A flush still running in a writer thread when its client left meets the discard.
        self._lock = threading.Lock()

    def write(self, data: bytes) -> bool:
        """Take `data`; True when a `flush` is due."""
        self.size += len(data)
        self._memory += data
        if not self.spilled and self.size > self._keep:
            self.spilled = True
        return self.spilled and len(self._memory) >= FLUSH_EVERY

    def flush(self) -> None:
        """Write what waits to the file (opened at the first spill). Off the event loop."""
        with self._lock:
            if not self.spilled or not self._memory or self._dropped:
                return
            if self._file is None:
                self._file = self._opener()
            waiting, self._memory = self._memory, bytearray()
            self._file.write(waiting)

    @property
    def memory(self) -> bytes:
        """Every byte, for a spool that never spilled."""
        if self.spilled:
            raise ValueError("the spool spilled to a file: read it with pieces()")
        return bytes(self._memory)

    def pieces(self, lengths: Iterator[int] | None = None) -> Iterator[bytes]:
        """Every byte in order, off the event loop: in READ_PIECE pieces, or in pieces of the
        given `lengths` (stream frames). Flushes first."""
        if not self.spilled:
            data = bytes(self._memory)
            yield from _cut(data, lengths)
            return
        self.flush()
        handle = self._file
        if handle is None:
            return
        handle.flush()
        handle.seek(0)
        if lengths is None:
            while piece := handle.read(READ_PIECE):
                yield piece
            return
        for length in lengths:
            yield handle.read(length)

    def discard(self) -> None:
        """Drop every byte and the scratch file (an anonymous file: nothing to delete)."""
        self._memory = bytearray()
        with self._lock:
            self._dropped = True
            if self._file is not None:
                # Closing flushes what a failed write left in its buffer, and fails again
                # (a full disk): the file is closed all the same, and gone.
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None

    def forget(self) -> None:
        """Let go of the bytes held in memory (on the loop: no file is touched)."""
        self._memory = bytearray()


def _cut(data: bytes, lengths: Iterator[int] | None) -> Iterator[bytes]:
    if lengths is None:
        for start in range(0, len(data), READ_PIECE):
            yield data[start : start + READ_PIECE]
        return
    start = 0
    for length in lengths:
        yield data[start : start + length]
        start += length
