"""The write-ahead journal of a recording server.

A durable new file costs two commits of the filesystem's own journal: the file's fsync, then
its folder's (for its name). A recording server instead appends each exchange file to a
journal file that is already on disk, full size, and syncs only that: one flush of the
disk, and writes that finish together share it. The exchange file itself is then written
and renamed into place, unsynced; a thread makes those files durable a second or so later
in one `syncfs`, and only then lets their journal entries go.

So an exchange is on disk before its answer's last byte leaves, as ever; after a power cut,
the next `tapeproxy serve` on the library writes back every journaled file that is missing or
does not hold its journaled bytes. After a mere crash of the process (the half's header
names the machine's boot it was written in, and it is this one) the files are intact: the
kernel still writes them, so the next start syncs the filesystem and drops the journal
untouched. Writing it back then would undo what was done to the library since the crash
(`tapeproxy redact` scrubbing a secret, a cassette deleted, another server's re-recording).

Layout: `<library>/.tapeproxy/journal-<pid>-<tag>-<0|1>`, two halves per server (a random
tag: two servers of one process, or of two containers that are both pid 1), each
`HALF_SIZE` bytes of zeros written at start (so a sync changes no size and no extent). A
half starts with a header (magic, epoch, boot); entries follow, each
`ENTRY | epoch | length | crc32 | path length | path | bytes`. An entry counts only with its
half's epoch and a good crc: a torn or stale tail ends the half. The halves take turns:
every CHECKPOINT_S the one taking entries is swapped for the other, and once its files are
synced its epoch moves on, which empties it. The live server holds an flock on each half,
so another server starting on the same library leaves them alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import struct
import threading
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path

from tapeproxy.errors import BadCassetteName
from tapeproxy.store.base import parse_exchange_file
from tapeproxy.store.durable import GroupSync, datasync, fsync_folder, put, write_atomic
from tapeproxy.store.names import check_folder_name
from tapeproxy.store.spares import Spares

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("tapeproxy")

# Where a journal can be kept: flock (a live server's halves are left alone) and pwrite.
# Elsewhere (Windows) every exchange file is synced on its own, as the tools do.
SUPPORTED = fcntl is not None and hasattr(os, "pwrite")

JOURNAL_DIR = ".tapeproxy"  # dot folder: no cassette, skipped when listing; holds a .gitignore
HALF_SIZE = 2 * 2**20
MAX_HALF = 64 * 2**20  # what recovery reads of a half at most (HALF_SIZE may grow)
MAX_ENTRY = 256 * 2**10  # a larger exchange file is written and synced on its own
CHECKPOINT_S = 1.0

_HEAD = struct.Struct("<4sQ16s")  # magic, epoch, the machine's boot it was written in
_ENTRY = struct.Struct("<4sQIIH")  # magic, epoch, whole entry's length, crc32, path length
HEAD_MAGIC, ENTRY, VOID = b"LTJH", b"LTJE", b"LTJV"


def _syncfs_call() -> object:
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).syncfs
    return None


_SYNCFS = _syncfs_call()
NO_BOOT = bytes(16)  # not known: the half is written back on any start, as after a power cut


def _boot_id() -> bytes:
    """This boot of the machine (Linux), else NO_BOOT."""
    try:
        return uuid.UUID(Path("/proc/sys/kernel/random/boot_id").read_text().strip()).bytes
    except (OSError, ValueError):
        return NO_BOOT


BOOT = _boot_id()


def _head(epoch: int) -> bytes:
    return _HEAD.pack(HEAD_MAGIC, epoch, BOOT)


def sync_filesystem(fd: int) -> None:
    """Everything written to the filesystem holding `fd`, on disk (all disks without syncfs)."""
    if _SYNCFS is None:
        os.sync()
        return
    if _SYNCFS(fd) != 0:  # type: ignore[operator]
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class _Half:
    def __init__(self, path: Path, fd: int, epoch: int) -> None:
        self.path, self.fd, self.epoch = path, fd, epoch
        self.end = _HEAD.size  # where the next entry goes
        self.pending = 0  # entries journaled whose exchange files are not yet in place
        self.syncs = GroupSync(lambda: datasync(fd))
        self.paths: dict[str, int] = {}  # journaled path -> its newest entry's offset


class Journal:
    """The journal of one server on the library at `root` (see the module's text). Its
    halves are made by its thread when the first exchange comes (a replaying server never
    writes one); until they are ready, and for a file too large for them, `write` says no
    and the file is written the usual way."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folder = root / JOURNAL_DIR
        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        # A swap waits on this for the writers of a half: a condition of its own, so that a
        # write that ends does not wake the journal's thread for nothing.
        self._drained = threading.Condition(lock)
        self._halves: list[_Half] = []
        self._active = 0
        self._wanted = False  # an exchange came: make the halves
        # The halves could not be made, or a sync of the library failed: files are written
        # the usual way
        self._broken = False
        self._hurry = False  # the active half is full: swap now
        self._closing = False
        self._thread: threading.Thread | None = None
        self._name = f"journal-{os.getpid()}-{os.urandom(4).hex()}"
        self._devices: dict[Path, bool] = {}  # cassette folder -> on the journal's filesystem
        self._spares: Spares | None = None  # files made ahead, once the halves are

    def open(self) -> list[Path]:
        """Write back what crashed servers left in their journals; the paths written back."""
        restored = recover(self.root)
        self._thread = threading.Thread(target=self._run, name="tapeproxy-journal", daemon=True)
        self._thread.start()
        return restored

    def write(self, path: Path, data: bytes) -> bool:
        """Journal `data` as the file at `path`, durably, then put it in place (unsynced).
        False, having done nothing, when it does not fit: write it the usual way."""
        done = self.write_many([(path, data)])[0]
        if isinstance(done, OSError):
            raise done
        return done

    def write_many(self, files: Sequence[tuple[Path, bytes]]) -> list[bool | OSError]:
        """`write` for several files at once: one journal write and one sync for them all.
        Per file: True, False when it does not fit (nothing done), or why it could not be
        put in place (its entry is void: a file not written must not come back)."""
        done: list[bool | OSError] = [False] * len(files)
        wanted: list[tuple[int, bytes]] = []
        for n, (path, _) in enumerate(files):
            try:
                rel = path.relative_to(self.root).as_posix().encode()
            except ValueError:
                continue
            if self._beside(path.parent):
                wanted.append((n, rel))
        if not wanted:
            return done
        placed: list[tuple[int, str, int]] = []  # file, its path, its entry's offset
        with self._cond:
            if self._broken or not self._halves:
                if not self._halves and not self._broken and not self._wanted:
                    self._wanted = True
                    self._cond.notify_all()
                return done
            half = self._halves[self._active]
            start = at = half.end
            parts: list[bytes] = []
            for n, rel in wanted:
                data = files[n][1]
                size = _ENTRY.size + len(rel) + len(data)
                if size > MAX_ENTRY:
                    continue
                if at + size > HALF_SIZE:
                    self._hurry = True
                    self._cond.notify_all()
                    continue
                crc = zlib.crc32(data, zlib.crc32(rel, half.epoch))
                parts += [_ENTRY.pack(ENTRY, half.epoch, size, crc, len(rel)), rel, data]
                placed.append((n, rel.decode(), at))
                at += size
            if not placed:
                return done
            # Under the lock, so entries land in order: a sync covers every earlier entry.
            try:
                os.pwrite(half.fd, b"".join(parts), start)
            except OSError as exc:
                for n, _, _ in placed:
                    done[n] = exc
                return done
            half.end = at
            for _, name, entry in placed:
                half.paths[name] = entry
            half.pending += 1
        put_in_place = 0
        try:
            try:
                half.syncs.sync()
            except OSError as exc:
                for n, name, _ in placed:
                    self._void(half, name)
                    done[n] = exc
                return done
            spares = self._spares
            for n, name, _ in placed:
                path, data = files[n]
                try:
                    if spares is None or not spares.place(path, data):
                        put(path, data, sync=False)
                    done[n] = True
                except OSError as exc:
                    self._void(half, name)
                    done[n] = exc
                put_in_place += 1
        except BaseException:
            for _, name, _ in placed[put_in_place:]:
                self._void(half, name)
            raise
        finally:
            self._done(half)
        return done

    def _done(self, half: _Half) -> None:
        """A writer's files are in place (or given up): the half may be emptied."""
        with self._cond:
            half.pending -= 1
            if not half.pending:
                self._drained.notify_all()

    def _beside(self, folder: Path) -> bool:
        """Whether `folder` is on the journal's filesystem, which is all its `syncfs` syncs
        (a cassette folder may be a link to, or a mount of, another disk). Asked once per
        folder, which is made if need be (the checkpoint's sync covers its name too)."""
        same = self._devices.get(folder)
        if same is None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                same = os.stat(folder).st_dev == os.stat(self.root).st_dev
            except OSError:
                return False
            if len(self._devices) >= 4096:  # cassettes named by header: bounded
                self._devices.clear()
            self._devices[folder] = same
        return same

    def forget(self, path: Path) -> None:
        """`path` is being deleted, or was written and synced anew without the journal: its
        journaled bytes must not be written back."""
        with contextlib.suppress(ValueError):
            rel = path.relative_to(self.root).as_posix()
            for half in list(self._halves):
                self._void(half, rel)

    def _void(self, half: _Half, rel: str) -> None:
        with self._cond:
            at = half.paths.pop(rel, None)
            if at is None:
                return
            with contextlib.suppress(OSError):
                os.pwrite(half.fd, VOID, at)
        with contextlib.suppress(OSError):
            half.syncs.sync()

    def _run(self) -> None:
        """The journal's thread: makes the halves when wanted; every CHECKPOINT_S (or when
        the active half is full) swaps them and empties the one that took entries."""

        def wanted() -> bool:  # halves to make: not once they could not be (broken)
            return self._wanted and not self._halves and not self._broken

        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._hurry or self._closing or wanted(), CHECKPOINT_S)
                self._hurry, closing = False, self._closing
                if closing and not self._halves:
                    return
                make = wanted()
            if make:
                self._make_halves()
                continue
            for half in self._swapped():
                try:
                    self._checkpoint(half)
                except OSError as exc:
                    self._give_up(exc)
                    return
            if closing:
                return

    def _give_up(self, exc: OSError) -> None:
        """A sync of the library failed. The kernel may have dropped the pages it could not
        write (marked clean), so no later sync can vouch for them: the halves are never
        emptied, and marked to be written back by the next start even in this boot; from
        now on each file is synced on its own (and voids its older entries)."""
        log.error(
            "tapeproxy's journal: could not sync the library (%s); what it holds is kept for the "
            "next start to write back, and each exchange is now synced on its own",
            exc,
        )
        with self._cond:
            self._broken = True
            halves = list(self._halves)
        for half in halves:
            with contextlib.suppress(OSError):
                os.pwrite(half.fd, _HEAD.pack(HEAD_MAGIC, half.epoch, NO_BOOT), 0)

    def _swapped(self) -> list[_Half]:
        """The halves to empty: the active one, once its writers' files are in place (the
        other takes entries meanwhile), and the other one too when closing."""
        with self._cond:
            if not self._halves:
                return []
            half = self._halves[self._active]
            self._active = 1 - self._active
            self._drained.wait_for(lambda: half.pending == 0)
            found = [h for h in self._halves if h is half or self._closing]
            return [h for h in found if h.end > _HEAD.size]

    def _make_halves(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            ignore = self.folder / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# tapeproxy's write-ahead journal: never commit it\n*\n")
            halves = [self._make(n) for n in (0, 1)]
        except OSError as exc:
            log.warning(
                "tapeproxy's journal could not be made (%s): each exchange is synced on its own",
                exc,
            )
            with self._cond:
                self._broken = True
            return
        spares = Spares(self.folder)
        spares.start()
        with self._cond:
            self._halves, self._spares = halves, spares

    def _make(self, n: int) -> _Half:
        """A half under a temp name, locked, written full of zeros and synced, then renamed:
        a server starting meanwhile never takes a half being made for a crashed one's."""
        path = self.folder / f"{self._name}-{n}"
        temp = self.folder / f".{path.name}.new"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            zeros = bytes(2**20)
            for at in range(0, HALF_SIZE, len(zeros)):
                os.pwrite(fd, zeros, at)
            epoch = n + 1  # the halves' epochs never meet: 1, 3, 5 ... and 2, 4, 6 ...
            os.pwrite(fd, _head(epoch), 0)
            os.fsync(fd)
            os.replace(temp, path)
            fsync_folder(self.folder)
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        return _Half(path, fd, epoch)

    def _checkpoint(self, half: _Half) -> None:
        """Every file `half` journaled is on disk: empty it (a new epoch: old entries no
        longer count)."""
        sync_filesystem(half.fd)
        epoch = half.epoch + 2
        os.pwrite(half.fd, _head(epoch), 0)
        datasync(half.fd)
        with self._cond:
            half.epoch, half.end = epoch, _HEAD.size
            half.paths.clear()

    def close(self) -> None:
        """Sync what is journaled, then remove the halves: nothing is left to write back."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        thread.join()
        with self._cond:
            halves, self._halves = self._halves, []
            spares, self._spares = self._spares, None
        if spares is not None:  # no writer is left to place a file
            spares.close()
        for half in halves:
            if half.end == _HEAD.size:
                half.path.unlink(missing_ok=True)
            os.close(half.fd)
        if halves:
            _tidy(self.root)


def recover(root: Path) -> list[Path]:
    """Write back the journaled files of every server on `root` that is gone (its halves are
    not locked) in an earlier boot of the machine, then remove its halves; the paths written
    back. The halves of one that crashed in this boot are only removed (see the module's
    text), once the filesystem is synced: its files were not yet. One server at a time: a
    second one starting waits, so that it neither records under a write-back nor repeats it."""
    folder = root / JOURNAL_DIR
    # None kept here, none there, or a library nobody can read (replay never writes).
    if not SUPPORTED or not folder.is_dir():
        return []
    try:
        library = os.open(root, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        with contextlib.suppress(OSError):  # a filesystem without flock on folders: no wait
            fcntl.flock(library, fcntl.LOCK_EX)
        return _recover(root, folder, library)
    finally:
        os.close(library)


def _recover(root: Path, folder: Path, library: int) -> list[Path]:
    """`recover`, with the library's folder open (and locked) as `library`."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    halves: list[tuple[str, int, list[tuple[str, bytes | None]]]] = []  # server, epoch, entries
    done: list[Path] = []
    for name in filter(_journal_file, names):
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live server's
        with open(fd, "rb") as handle:
            raw = handle.read(MAX_HALF) if name.startswith("journal-") else b""
            if raw and not _this_boot(raw):
                epoch, found = entries(raw)
                halves.append((name.rpartition("-")[0], epoch, found))
        done.append(path)
    newest: dict[str, bytes | None] = {}  # a server's later entry of a path wins; a void erases
    for _, _, found in sorted(halves, key=lambda half: half[:2]):
        newest.update(found)
    restored = []
    for rel, data in newest.items():
        target = _inside(root, rel)
        if data is None or target is None or _holds(target, data):
            continue
        write_atomic(target, data)
        restored.append(target)
    if not done:
        return restored
    try:  # a killed server's files, on disk before its journal goes
        sync_filesystem(library)
    except OSError as exc:
        log.error("tapeproxy's journal: could not sync the library, journal kept: %s", exc)
        return restored
    for path in done:  # only once every file is back
        path.unlink(missing_ok=True)
    _tidy(root)
    return restored


def _tidy(root: Path) -> None:
    """No journal folder is left in the library once the last server on it is done."""
    folder = root / JOURNAL_DIR
    with contextlib.suppress(OSError):
        if os.listdir(folder) == [".gitignore"]:
            (folder / ".gitignore").unlink()
            folder.rmdir()  # fails if another server made its halves meanwhile
        fsync_folder(root)


def _journal_file(name: str) -> bool:
    """A half, or one a crash left half made."""
    return name.startswith("journal-") or (name.startswith(".journal-") and name.endswith(".new"))


def _this_boot(raw: bytes) -> bool:
    """A half written in this boot of the machine (its server was killed, not cut off)."""
    if len(raw) < _HEAD.size or BOOT == NO_BOOT:
        return False
    return bool(_HEAD.unpack_from(raw)[2] == BOOT)


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def entries(raw: bytes) -> tuple[int, list[tuple[str, bytes | None]]]:
    """A half's epoch and the entries that count, in order: (path, bytes, or None where
    voided)."""
    if len(raw) < _HEAD.size:
        return 0, []
    magic, epoch, _ = _HEAD.unpack_from(raw)
    if magic != HEAD_MAGIC:
        return 0, []
    found: list[tuple[str, bytes | None]] = []
    at = _HEAD.size
    while at + _ENTRY.size <= len(raw):
        kind, entry_epoch, size, crc, rel_size = _ENTRY.unpack_from(raw, at)
        if kind not in (ENTRY, VOID) or entry_epoch != epoch or size > len(raw) - at:
            break
        body = raw[at + _ENTRY.size : at + size]
        rel, data = body[:rel_size], body[rel_size:]
        if zlib.crc32(data, zlib.crc32(rel, epoch)) != crc or size < _ENTRY.size + rel_size:
            break  # torn: written, never synced
        found.append((rel.decode(errors="replace"), data if kind == ENTRY else None))
        at += size
    return epoch, found


def _inside(root: Path, rel: str) -> Path | None:
    """`root/rel` when `rel` names an exchange file of a cassette: nothing else is written back."""
    cassette, _, name = rel.rpartition("/")
    try:
        check_folder_name(cassette)
    except BadCassetteName:
        return None
    return root / cassette / name if parse_exchange_file(name) else None
