"""Files made ahead for a recording server's journal, so that putting a new exchange file in
place costs a write and a link, not the making of a file.

Making a file is the one step of a recording whose cost the disk sets: 15-40 us on a quiet
disk, and up to a millisecond on ext4 without a journal of its own when many files were
deleted in the last half minute (it steps over each of their inodes; bench/RESULTS.md,
stop 13). A thread makes spares ahead instead, off every answer's path: unnamed files
(`O_TMPFILE`) in the journal's folder, which a crash frees by itself (no name, nothing to
sweep, nothing for git to see). An exchange file is then written into one and linked under
its name, whole at once as a rename would put it.

A file takes more than its name from the folder it is made in: a setgid folder's group (a
team's shared cassettes), a default ACL's mode in place of the umask, a security label. A
spare was made in the journal's folder and has that folder's: it is placed only in a folder
that would give a new file the same (looked at once per folder), else the file is made
there the usual way.

Where `O_TMPFILE` or `/proc/self/fd` is missing (macOS, Windows, an older overlayfs), or
the cassette's folder is on another mount, `place` says no and the file is made the usual
way (durable.put).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from pathlib import Path

from tapeproxy.store.durable import temp_name

log = logging.getLogger("tapeproxy")

WANT = 16  # spares kept ready: a batch of 32 answers uses half, then makes the rest
LOW = WANT // 2  # the thread tops them up once fewer are ready: a burst, not a wake-up each
MAX_FOLDERS = 4096  # folders remembered at most: cassettes are named by a header (bounded)
_TMPFILE = getattr(os, "O_TMPFILE", 0)
SUPPORTED = bool(_TMPFILE) and os.path.isdir("/proc/self/fd")
# A link that no spare can make to that folder: another mount, a filesystem without links.
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK}
# What else a new file takes from its folder: the mode and ACL a default ACL gives (in place
# of the umask), the label of the folder's security context.
_INHERITED = ("system.posix_acl_default", "security.selinux")
_NO_ATTRIBUTE = {errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP}


class Spares:
    """Unnamed files on the filesystem of `folder`, made ahead by a thread of their own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cond = threading.Condition()
        self._ready: list[int] = []
        self._closing = False
        self._broken = not SUPPORTED
        # Folder -> whether a spare may be placed there: False where no link reaches it
        # (another mount) or a file made there would differ (see _fits). Bounded.
        self._folders: dict[Path, bool] = {}
        self._gid: int | None = None  # the spares' group (the journal folder's, if setgid)
        self._inherits: tuple[bytes | None, ...] = ()  # the journal folder's _INHERITED
        self._folder_fd = -1
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """The thread makes the first spares; until they are ready `place` says no."""
        if self._broken:
            return
        try:
            self._folder_fd = os.open(self.folder, os.O_RDONLY | os.O_CLOEXEC)
            self._inherits = _inherited(self._folder_fd)
        except OSError as exc:
            self._give_up(exc)
            return
        self._thread = threading.Thread(target=self._run, name="tapeproxy-spares", daemon=True)
        self._thread.start()

    def place(self, path: Path, data: bytes) -> bool:
        """`data` as the file at `path`, unsynced (as durable.put puts it): written into a
        spare, then linked under its name. False, having done nothing, when no spare is
        ready or none can reach `path`'s folder; an OSError as durable.put would raise it."""
        folder = path.parent
        fits = self._folders.get(folder)
        if fits is None:
            fits = self._fits(folder)
            if fits is None:
                return False
            self._remember(folder, fits)
        if not fits:
            return False
        fd = self._take()
        if fd is None:
            return False
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            return self._link(fd, path)
        finally:
            os.close(fd)

    def close(self) -> None:
        """The thread stops; the spares not used are freed (unnamed: nothing is left)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._cond:
            ready, self._ready = self._ready, []
        for fd in ready:
            os.close(fd)
        if self._folder_fd >= 0:
            os.close(self._folder_fd)
            self._folder_fd = -1

    @property
    def ready(self) -> int:
        with self._cond:
            return len(self._ready)

    def _take(self) -> int | None:
        with self._cond:
            if not self._ready:
                self._cond.notify()
                return None
            fd = self._ready.pop()
            if len(self._ready) < LOW:
                self._cond.notify()
            return fd

    def _link(self, fd: int, path: Path) -> bool:
        """The spare `fd` named `path`. A file already there is replaced as a rename would
        (linked beside it under a temp name, renamed over it)."""
        source = f"/proc/self/fd/{fd}"
        linked = self._link_as(source, str(path), path.parent)
        if linked is not None:
            return linked
        # A link cannot replace a file: linked under a temp name, renamed over.
        temp = temp_name(path)
        while (linked := self._link_as(source, temp, path.parent)) is None:
            temp = temp_name(path)  # taken: another
        if not linked:
            return False
        try:
            os.replace(temp, path)
        except FileNotFoundError:  # the folder went after the link: put makes it
            Path(temp).unlink(missing_ok=True)
            return False
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return True

    def _link_as(self, source: str, name: str, folder: Path) -> bool | None:
        """The spare at `source` linked as `name` in `folder`: True; None when `name` is
        taken; False when the usual write is to make it (the folder gone, or one no link
        reaches: remembered)."""
        try:
            # A dir fd makes os.link call linkat, which follows the /proc link with
            # follow_symlinks (plain link(2) would try to link the /proc link itself).
            os.link(source, name, src_dir_fd=self._folder_fd, follow_symlinks=True)
            return True
        except FileExistsError:
            return None
        except FileNotFoundError:  # the folder is gone (deleted meanwhile): put makes it
            return False
        except OSError as exc:
            # Linux says EEXIST before EXDEV: a bind mount may show only at the temp name.
            if exc.errno not in _NO_LINK:
                raise
            self._remember(folder, False)
            return False

    def _fits(self, folder: Path) -> bool | None:
        """Whether a file made in `folder` would be given what a spare was: its group and
        its _INHERITED attributes. None, not to be remembered, when no spare was made yet
        or `folder` is gone (put makes it)."""
        gid = self._gid
        if gid is None:
            return None
        try:
            found = os.stat(folder)
            inherits = _inherited(folder)
        except FileNotFoundError:
            return None
        except OSError:
            return False
        # A new file takes its folder's group where the folder is setgid (or the mount is
        # `grpid`), else the process's own: a spare's must be both to be the same.
        same_group = found.st_gid == gid and (
            bool(found.st_mode & stat.S_ISGID) or os.getegid() == gid
        )
        return same_group and inherits == self._inherits

    def _remember(self, folder: Path, fits: bool) -> None:
        if len(self._folders) >= MAX_FOLDERS:
            self._folders.clear()
        self._folders[folder] = fits

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or len(self._ready) < LOW)
                if self._closing:
                    return
                missing = WANT - len(self._ready)
            made: list[int] = []
            gid = None
            try:
                for _ in range(missing):
                    made.append(os.open(self.folder, _TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666))
                gid = os.fstat(made[0]).st_gid  # the group each file made there is given
            except OSError as exc:
                self._give_up(exc)
            with self._cond:
                closing = self._closing
                if not closing and gid is not None:
                    self._gid = gid
                    self._ready += made
            if closing or gid is None:
                for fd in made:
                    os.close(fd)
            if closing:
                return
            if self._broken:
                return

    def _give_up(self, exc: OSError) -> None:
        """No spare can be made here (the filesystem has no O_TMPFILE): files are made the
        usual way, as before."""
        log.debug("tapeproxy's journal makes no spare files in %s: %s", self.folder, exc)
        with self._cond:
            self._broken = True


def _inherited(at: int | Path) -> tuple[bytes | None, ...]:
    """The _INHERITED attributes of a folder (None for each it has not)."""
    found: list[bytes | None] = []
    for name in _INHERITED:
        try:
            found.append(os.getxattr(at, name))
        except OSError as exc:
            if exc.errno not in _NO_ATTRIBUTE:
                raise
            found.append(None)
    return tuple(found)
