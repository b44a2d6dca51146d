"""The scribe's own process (scribe.py starts it: `python -m tapeproxy.scribe_process FD FD`):
it takes the answers its server sends, settles each into an exchange file's Record and
writes them through its journal, a batch at a time, and answers each.

It imports no more than that work needs: no pydantic (an exchange is a plain Record,
exchangefile.py), no asyncio; its server's side of the wire is in scribe.py.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import struct
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tapeproxy.capture import Capture, Finished, settle
from tapeproxy.exchangefile import Outcome, Record
from tapeproxy.logs import configure_logging
from tapeproxy.providers import provider_table
from tapeproxy.providers.base import Provider
from tapeproxy.scrub import Scrubber
from tapeproxy.store.fs import FileStore

# Frames of a 4-byte length and a pickle, both ways (see scribe.py).
LENGTH = struct.Struct(">I")
READY, KEEP, CLOSE = "ready", "keep", "close"


def frame(message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return LENGTH.pack(len(data)) + data


def serve(work: socket.socket, forgets: socket.socket) -> None:
    """Answer the server until it closes the scribe, or goes away."""
    inbox = _Inbox(work)
    batch = inbox.batch()
    if not batch:
        return
    root, upstream, fields, patterns, keep_failures, level = batch.pop(0)
    configure_logging(level)
    store = FileStore(Path(root))
    store.open()
    providers = provider_table(upstream)
    scrubber = Scrubber.build(fields, patterns)
    closing = threading.Lock()  # held by a forget under way, and once the journal closes
    closed = threading.Event()  # the journal is closed: synced and removed
    forgetting = (forgets, store, closing, closed)
    threading.Thread(target=_forgetting, args=forgetting, daemon=True).start()
    try:
        work.sendall(frame(READY))
        while True:
            keeps = [message[1:] for message in batch if message[0] == KEEP]
            if keeps:
                replies = _keep_all(store, providers, scrubber, keep_failures, keeps)
                work.sendall(frame(replies))
            if any(message[0] == CLOSE for message in batch):
                return
            batch = inbox.batch()  # what came while this batch was written
            if batch is None:
                return  # the server went away: close the journal (the files are written)
    except OSError:  # the server went away (killed) before a reply: no traceback in its log
        return
    finally:
        closing.acquire()  # for good: no forget touches a journal being closed
        try:
            store.close()
        finally:
            closed.set()


def _keep_all(
    store: FileStore,
    providers: Mapping[str, Provider],
    scrubber: Scrubber,
    keep_failures: bool,
    keeps: Sequence[tuple[Any, ...]],
) -> list[tuple[Any, ...]]:
    """One batch: each capture finished and numbered, then all written together; a reply
    for each, its number and its Written as a plain tuple."""
    replies: list[tuple[Any, ...]] = []
    writes: list[tuple[int, str, Record, bool]] = []
    for number, cassette, cut, ordinal, fresh, packed in keeps:
        try:
            settled = settle(Capture.unpacked(packed, providers), cut, scrubber, keep_failures)
        except Exception as exc:  # one bad answer must not stop the others
            why = f"recording an answer failed: {exc!r}"
            replies.append((number, "not recorded (write failed)", False, True, why))
            continue
        if not isinstance(settled, Finished):
            replies.append((number, settled, False, False, None))
            continue
        writes.append((number, cassette, {**settled.record, "ordinal": ordinal}, fresh))
    try:
        done = store.write_many([(cassette, ex, fresh) for _, cassette, ex, fresh in writes])
    except Exception as exc:  # rendering failed: tell each
        done = [OSError(f"{exc!r}")] * len(writes)
    for (number, cassette, record, _), result in zip(writes, done, strict=True):
        if isinstance(result, OSError):
            why = f"could not write to cassette {cassette!r}: {result}"
            replies.append((number, "not recorded (write failed)", False, True, why))
            continue
        failed = record["outcome"] is not Outcome.COMPLETE
        outcome = f"recorded {record['outcome'].value}" if failed else "recorded"
        replies.append((number, outcome, True, False, None))
    return replies


class _Inbox:
    """The messages the server sends, as they come."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def batch(self) -> list[Any] | None:
        """The next message and every other one already here; None when the server is gone."""
        found = self._parsed()
        while not found:
            if not self._fill(0):
                return None
            found = self._parsed()
        with contextlib.suppress(BlockingIOError):
            while self._fill(socket.MSG_DONTWAIT):
                found += self._parsed()
        return found

    def _fill(self, flags: int) -> bool:
        try:
            data = self._sock.recv(1 << 20, flags)
        except BlockingIOError:
            raise
        except OSError:
            return False
        self._buffer += data
        return bool(data)

    def _parsed(self) -> list[Any]:
        found = []
        buffer = self._buffer
        at = 0
        while len(buffer) - at >= LENGTH.size:
            size = LENGTH.unpack_from(buffer, at)[0]
            if len(buffer) - at < LENGTH.size + size:
                break
            found.append(pickle.loads(buffer[at + LENGTH.size : at + LENGTH.size + size]))
            at += LENGTH.size + size
        del buffer[:at]
        return found


def _forgetting(
    sock: socket.socket, store: FileStore, closing: threading.Lock, closed: threading.Event
) -> None:
    """Serves the forgets. A forget that comes while the journal closes is answered once it
    is closed (synced and removed: nothing in it can be written back any more)."""
    inbox = _Inbox(sock)
    while (paths := inbox.batch()) is not None:
        for path in paths:
            if closing.acquire(blocking=False):
                try:
                    store.forget(Path(path))
                finally:
                    closing.release()
            else:
                closed.wait()
            try:
                sock.sendall(b"\x01")
            except OSError:  # the server went away
                return


def main(argv: list[str]) -> None:
    # A signal to every process of the server (systemd's SIGTERM to the unit, a ^C to the
    # group it started in) must not stop it: the server closes it when it stops (and it ends
    # by itself once the server is gone), so it writes what it holds.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    work, forgets = (socket.socket(fileno=int(fd)) for fd in argv[1:3])
    serve(work, forgets)
    os._exit(0)  # no atexit work: the journal is closed and every reply sent


if __name__ == "__main__":
    main(sys.argv)
