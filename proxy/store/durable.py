"""Writing files so that a crash leaves the old one or the new one, never a torn one."""

from __future__ import annotations

import errno
import itertools
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path


def write_atomic(
    path: Path, data: bytes | Iterable[bytes], sync_folder: Callable[[Path], None] | None = None
) -> None:
    """Temp file in the same folder, write, fdatasync, rename over, fsync the folder (with
    `sync_folder`, else alone): a crash leaves the old file or the new one, never a torn one.
    `data` may come in pieces (an exchange too large to hold). The temp name is one that
    `is_leftover` knows."""
    put(path, data, sync=True)
    (sync_folder or fsync_folder)(path.parent)


def put(path: Path, data: bytes | Iterable[bytes], sync: bool) -> None:
    """`data` in a temp file renamed over `path`, its bytes synced first with `sync`
    (without, it is durable only once something syncs the filesystem: see journal.py)."""
    fd, temp = create_temp(path)
    try:
        if isinstance(data, bytes) and not sync:
            # The common case (an exchange the journal holds): open, write, close, rename
            # and no more system calls, each a moment the GIL changes hands under load
            # (a buffered file object adds an fstat, an ioctl and an lseek).
            _write_all(fd, data)
            os.replace(temp, path)
            return
        with open(fd, "wb", closefd=True) as handle:
            for piece in [data] if isinstance(data, bytes) else data:
                handle.write(piece)
            if sync:
                handle.flush()
                # The data and what reading it back needs (its size): a new file's mtime is
                # not worth a second journal write.
                datasync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _write_all(fd: int, data: bytes) -> None:
    """`data` written to `fd`, which is then closed."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def create_temp(path: Path) -> tuple[int, str]:
    """A new, empty `.<name>.<pid>-<n>.tmp` beside `path` (its folder made if need be), with
    the mode a plain open gives (0666 less the umask: a cassette recorded by one user must
    replay as another). Numbered, not random: no syscall for entropy on every write; a
    name a crashed process with the same pid left is skipped."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        temp = temp_name(path)
        try:
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)


def temp_name(path: Path) -> str:
    """A name for a temp file beside `path`, `.<name>.<pid>-<n>.tmp` (see `is_leftover`)."""
    return f"{path.parent}/.{path.name}.{_PID[0]}-{next(_TEMP_NUMBERS)}.tmp"


_TEMP_NUMBERS = itertools.count()  # next() on a count is atomic under the GIL
_PID = [os.getpid()]  # a system call each time otherwise; a forked child asks anew
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def fsync_folder(folder: Path) -> None:
    """Make a rename or unlink in `folder` durable."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


class GroupSync:
    """One sync shared by the threads that ask for it together: `sync()` returns once a run
    of `do` that began after the call has ended, and one run covers every caller that came
    before it began. A run that fails fails every caller it covered: a retry would not do
    (a failed fsync may have dropped the pages it could not write, and Linux reports the
    error once: the next fsync of the file succeeds without them)."""

    def __init__(self, do: Callable[[], None]) -> None:
        self.do = do
        self.cond = threading.Condition()
        self.asked = 0  # each caller's ticket is the count when it asked
        self.done = 0  # every ticket up to this one is covered
        self.busy = False  # a run is under way
        self.failed: list[tuple[int, int, int, str]] = []  # tickets (after, upto]: errno, why

    def sync(self) -> None:
        with self.cond:
            self.asked += 1
            ticket = self.asked
            while self.done < ticket:
                if self.busy:  # began before this call, maybe: wait, then look again
                    self.cond.wait()
                    continue
                self.busy, after, covers = True, self.done, self.asked
                self.cond.release()
                error: BaseException | None = None
                try:
                    self.do()
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    self.cond.acquire()
                    self.busy = False
                    self.done = max(self.done, covers)
                    if error is not None:
                        code = error.errno if isinstance(error, OSError) else None
                        self.failed.append((after, covers, code or errno.EIO, str(error)))
                    self.cond.notify_all()
            for after, upto, code, why in self.failed:
                if after < ticket <= upto:
                    raise OSError(code, f"a sync failed: {why}")


class FolderSyncs:
    """Group commit of folder fsyncs, for the writer threads of one store: writes whose
    renames finish together share one fsync of their folder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folders: dict[Path, GroupSync] = {}

    def sync(self, folder: Path) -> None:
        with self._lock:
            group = self._folders.get(folder)
            if group is None:
                group = self._folders[folder] = GroupSync(lambda: fsync_folder(folder))
        group.sync()
