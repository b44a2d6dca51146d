"""Writing files so that a crash leaves the old one or the new one, never a torn one."""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: Path, data: bytes | Iterable[bytes], durable: bool = True) -> None:
    """Temp file in the same folder, write, fdatasync, rename over, fsync the folder: a crash
    leaves the old file or the new one, never a torn one. `data` may come in pieces (an
    exchange too large to hold). The temp name is one that `is_leftover` knows. Without
    `durable` there is no fsync at all: still renamed into place whole, but a power cut may
    lose the new file (or, on some file systems, leave it empty): for state that may be lost."""
    temp = _written_aside(path, data, durable)
    try:
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_folder(path.parent)


def create_atomic(path: Path, data: bytes | Iterable[bytes]) -> bool:
    """As `write_atomic`, but only where no file is: the temp file is linked into place, which
    fails when one is there (another process got there first); False then, nothing changed.
    On a filesystem without hard links (FAT, exFAT, some network and FUSE mounts) the temp
    file is renamed into place when no file is there: still whole or not at all, though two
    processes creating the same file at the same instant may then both succeed."""
    temp = _written_aside(path, data, durable=True)
    try:
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            if os.path.lexists(path):
                return False
            os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)
    fsync_folder(path.parent)
    return True


def _written_aside(path: Path, data: bytes | Iterable[bytes], durable: bool) -> str:
    """A temp file beside `path` holding `data`, synced when `durable`: its name. Nothing is
    left behind when writing it fails."""
    fd, temp = create_temp(path)
    try:
        with open(fd, "wb", closefd=True) as handle:
            for piece in [data] if isinstance(data, bytes) else data:
                handle.write(piece)
            handle.flush()
            # The bytes and what reading them back needs (the size): a new file's times are
            # not worth a second write to the disk's journal.
            if durable:
                datasync(handle.fileno())
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return temp


# What link() answers on a filesystem that has no hard links.
NO_HARD_LINKS = frozenset(
    getattr(errno, name)
    for name in ("EPERM", "EOPNOTSUPP", "ENOTSUP", "ENOSYS", "EMLINK")
    if hasattr(errno, name)
)


datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def create_temp(path: Path) -> tuple[int, str]:
    """A new, empty `.<name>.<pid>-<n>.tmp` beside `path` (its folder made if need be), with
    the mode a plain open gives (0666 less the umask: a cassette recorded by one user must
    replay as another). A name a crashed process with the same pid left is skipped."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        temp = f"{path.parent}/.{path.name}.{os.getpid()}-{next(_TEMP_NUMBERS)}.tmp"
        try:
            return os.open(temp, flags, 0o666), temp
        except FileExistsError:
            continue
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)


_TEMP_NUMBERS = itertools.count()  # next() on a count is atomic under the GIL


def fsync_folder(folder: Path) -> None:
    """Make a rename or unlink in `folder` durable."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
