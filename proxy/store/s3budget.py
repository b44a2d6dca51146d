"""The S3 cache's bound shared by every process using one cache folder: what its objects take,
counted in one file under an exclusive lock (`fcntl.flock`), and the least recently used out
first once a put would pass the limit.

One count for all, not one per process: a `serve`, an `ls` and the workers of a pytest-xdist
run that share a cache each counted only what they added, and together held several times the
limit. A put reads and updates the count (no walk of a folder that may hold hundreds of
thousands of files); the folder is walked only to evict (then down to 80% of the limit, so that
is not paid at every put), when the count is missing or damaged, and when it was last checked
against a walk RECOUNT_AFTER ago (what may leave it wrong: a process killed between its rename
and the count's update, an older tapeproxy that does not count, entries deleted by hand).

Readers take no lock: an entry is renamed into place whole and checked by its digest, so a
reader sees the old entry, the new one or none. A put waits LOCK_WAIT at most for the lock,
then keeps nothing (its object is read from the store again next time); for HURRIED after
that, puts take the lock only if it is free at once.

Where `fcntl` is missing (Windows) the lock is no lock: puts made at the same instant may lose
one another's counting, so the cache may pass its limit by what they lost until the next walk
(about as far as before this count); no entry is ever damaged by it."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOW_WATER = 0.8  # eviction leaves at most this share of the limit (with room for the put)
RECOUNT_AFTER = 600.0  # seconds: a count older than this is checked against a walk
LOCK_WAIT = 10.0  # seconds: the longest a put waits for another's (an eviction walks the folder)
# Seconds after a put waited LOCK_WAIT in vain in which puts take the lock only if it is free at
# once: a stopped holder costs a server opening a cassette of N objects one wait, not N.
HURRIED = 60.0
COUNT = b"tapeproxy-cache-count 1"  # the count file's first word and version


class Budget:
    """The bytes the files under `folder` take, counted in `count_file` (which is also the
    lock), kept at most `limit`: each method holds the lock for its whole work."""

    def __init__(self, folder: Path, count_file: Path, limit: int) -> None:
        self.folder, self.count_file, self.limit = folder, count_file, limit
        self._hurried_until = 0.0  # time.monotonic() until which the lock is not waited for

    def admit(self, path: Path, size: int, write: Callable[[], object]) -> None:
        """Make room for a file of about `size` bytes at `path` (the least recently used out,
        the old file at `path` still counted: it stays until the new one is renamed over it),
        then `write` it and count what changed. The folder so never holds more than the limit,
        whoever looks at it meanwhile."""
        with self._locked() as fd:
            total, checked = self._read(fd)
            if total + size > self.limit:
                total, checked = self._evict(int(self.limit * LOW_WATER) - size), time.time()
            before = _size(path)
            write()
            _save(fd, total + _size(path) - before, checked)

    def remove(self, path: Path) -> None:
        """Delete the file at `path` (if any), and count it out."""
        with self._locked() as fd:
            total, checked = self._read(fd)
            before = _size(path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            _save(fd, total - before, checked)

    def _read(self, fd: int) -> tuple[int, float]:
        """The count and when it was last checked against a walk; a walk's own when it is
        missing, damaged or checked too long ago."""
        os.lseek(fd, 0, os.SEEK_SET)  # not pread: Windows has none
        words = os.read(fd, 256).split()
        if len(words) == 4 and b" ".join(words[:2]) == COUNT:
            with contextlib.suppress(ValueError):
                total, checked = int(words[2]), float(words[3])
                if total >= 0 and 0 <= time.time() - checked <= RECOUNT_AFTER:
                    return total, checked
        return sum(size for _, size, _ in self._entries()), time.time()

    def _evict(self, target: int) -> int:
        """Remove the least recently used (oldest mtime: a read touches it) until the rest
        takes at most `target` bytes: what it takes then, as walked."""
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            total -= size
        return total

    def _entries(self) -> list[tuple[int, int, Path]]:
        """Each file under the folder: (mtime in ns, size, path)."""
        found = []
        for folder, _, names in os.walk(self.folder):
            for name in names:
                path = Path(folder, name)
                with contextlib.suppress(OSError):
                    st = path.stat()
                    found.append((st.st_mtime_ns, st.st_size, path))
        return found

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The count file open (made if need be) and locked; closing it unlocks it. A lock per
        open, not per process: two threads of one process exclude each other too."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(self.count_file, flags, 0o666)
        except FileNotFoundError:
            self.count_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.count_file, flags, 0o666)
        try:
            try:
                _lock(fd, LOCK_WAIT if time.monotonic() >= self._hurried_until else 0.0)
            except TimeoutError:
                self._hurried_until = time.monotonic() + HURRIED
                raise
            self._hurried_until = 0.0
            yield fd
        finally:
            os.close(fd)


def _lock(fd: int, wait: float) -> None:
    """Wait for the lock, `wait` seconds at most: a holder stopped (SIGSTOP) or a hung mount must
    not hang a server, so then TimeoutError (an OSError: the caller keeps or drops nothing,
    as for a cache it cannot write). A file system that takes no locks (some FUSE mounts)
    answers another OSError: counted without the lock then, as where there is no fcntl."""
    if fcntl is None:
        return
    deadline, pause = time.monotonic() + wait, 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the S3 cache's lock was held over {wait:.0f} s") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        except OSError:
            return


def _save(fd: int, total: int, checked: float) -> None:
    """Written in place (a torn count reads as damaged: walked again)."""
    data = b"%s %d %.3f\n" % (COUNT, max(total, 0), checked)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.ftruncate(fd, len(data))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
