"""The folder backend: one folder per cassette, one file per exchange, atomic writes, the
last-run notes in the library's state folder."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange.model import Exchange
from tapeproxy.store import folders, state, upkeep
from tapeproxy.store.blobs import BLOBS, fetcher, is_blob, packed
from tapeproxy.store.durable import create_atomic, fsync_folder, write_atomic
from tapeproxy.store.lastrun import dump_last_run, read_note, unreadable_note
from tapeproxy.store.names import check_folder_name, named_cassettes
from tapeproxy.store.protocol import (
    EXCHANGE_FILE,
    entries_of,
    exchange_file,
    holds_same,
    read_exchange,
    state_name,
    unreadable,
)

if TYPE_CHECKING:
    from tapeproxy.exchange.blobs import Fetch
    from tapeproxy.store.lastrun import LastRun

log = logging.getLogger("tapeproxy")
RACY = 3.0  # seconds: see `stamps`


class FileStore:
    """A library folder (`BACKENDS["file"]`: a plain folder, or a `file://` URL)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)

    def cassettes(self, skipped: dict[str, str] | None = None) -> list[str]:
        """Every folder holding exchange files, or what an interrupted write left behind, whose
        name a cassette may have (see `named_cassettes`)."""
        names = []
        unlisted: dict[str, str] = {}

        def unlistable(exc: OSError) -> None:  # permission denied: said, not passed over
            if exc.filename is None or isinstance(exc, FileNotFoundError):
                return  # no library (yet), or a folder removed during the walk
            folder = Path(exc.filename)
            if folder != self._root:
                why = f"cannot list {folder}: {exc.strerror or exc}; its recordings are left out"
                unlisted[folder.relative_to(self._root).as_posix()] = why

        blob_folders = set()  # a cassette's blobs: a killed write's temp file makes none
        for folder, holds, left in folders.walk(self._root, unlistable):  # a folder first
            # A cassette named `<cassette>/blobs` (its files beside the blobs) is one too.
            if holds or (left and folder not in blob_folders):
                names.append(folder or ".")
                blob_folders.add(f"{folder}/{BLOBS}" if folder else BLOBS)
        for name, why in sorted(unlisted.items()):
            if skipped is not None:
                skipped[name] = why
            else:
                log.warning("skipped %s", why)
        return named_cassettes(names, str(self._root), skipped)

    def entries(self, cassette: str) -> dict[str, list[int]]:
        return entries_of(self._names(cassette))

    def names(self, cassette: str) -> list[str]:
        return sorted(self._names(cassette))

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        path = self._path(cassette, key, ordinal)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise unreadable(str(path), cassette, exc) from exc
        return read_exchange(raw, str(path), cassette, self._fetch(cassette))

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        path = self._path(cassette, exchange.key, exchange.ordinal)
        data, blobs, version = packed(exchange)
        if not fresh and holds_same(_bytes(path), exchange, self._fetch(cassette), version):
            return False
        self._put_blobs(cassette, blobs)
        write_atomic(path, data)
        return True

    def create(self, cassette: str, exchange: Exchange) -> bool:
        path = self._path(cassette, exchange.key, exchange.ordinal)
        data, blobs, _ = packed(exchange)
        self._put_blobs(cassette, blobs)  # first: a file never refers to a blob not there
        return create_atomic(path, data)

    def stamps(self, cassette: str) -> dict[str, str]:
        found = {}
        # A file changed in the last RACY seconds could change again within its mtime's
        # resolution (2 s on FAT, 1 s on some others) keeping size and mtime: its stamp is
        # one never seen again, so what is kept by it is never trusted (git's racy check).
        racy, now = int(RACY * 1e9), time.time_ns()
        try:
            with _listing(self._folder(cassette)) as listing:
                for entry in listing:
                    name = entry.name
                    if name.endswith(".json") and EXCHANGE_FILE.match(name):
                        with contextlib.suppress(OSError):  # gone since it was listed
                            st = entry.stat()
                            # The change time too: an mtime given back (cp -p, touch -r)
                            # cannot hide a change from it.
                            found[name] = (
                                f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
                            )
                            if now - st.st_mtime_ns < racy:
                                found[name] += f":racy-{now}"
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return found

    def read_state(self, name: str) -> bytes | None:
        return state.read_state(self._root, name)

    def write_state(self, name: str, data: bytes) -> None:
        state.write_state(self._root, name, data)

    def blobs(self, cassette: str) -> list[str]:
        try:
            with os.scandir(self._folder(cassette) / BLOBS) as listing:
                return sorted(e.name for e in listing if is_blob(e.name) and e.is_file())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_blob(self, cassette: str, digest: str) -> bytes | None:
        return _bytes(self._folder(cassette) / BLOBS / digest)

    def delete_blob(self, cassette: str, digest: str) -> None:
        path = self._folder(cassette) / BLOBS / digest
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        fsync_folder(path.parent)

    def blob_age(self, cassette: str, digest: str) -> float | None:
        try:
            return time.time() - (self._folder(cassette) / BLOBS / digest).stat().st_mtime
        except OSError:
            return None

    def _fetch(self, cassette: str) -> Fetch:
        return fetcher(lambda digest: self.read_blob(cassette, digest))

    def _put_blobs(self, cassette: str, blobs: dict[str, bytes]) -> None:
        for digest, data in blobs.items():
            self.write_blob(cassette, digest, len(data), (data,))

    def write_blob(self, cassette: str, digest: str, size: int, pieces: Iterable[bytes]) -> None:
        """Written unless it is already there whole (its name is its content's: hashed as
        it is read, in pieces, so a blob of any size is checked in bounded memory)."""
        path = self._folder(cassette) / BLOBS / digest
        try:
            with path.open("rb") as held:
                whole = os.fstat(held.fileno()).st_size == size
                if whole and hashlib.file_digest(held, "sha256").hexdigest() == digest:
                    os.utime(path)  # in use again: young, so no prune deletes it now
                    return
        except OSError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, pieces)

    def write_pieces(
        self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes], create: bool = False
    ) -> bool:
        path = self._path(cassette, key, ordinal)
        if create:
            return create_atomic(path, pieces)
        write_atomic(path, pieces)
        return True

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        path = self._path(cassette, key, ordinal)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        fsync_folder(path.parent)

    def read_last_run(self, cassette: str) -> LastRun | None:
        where = str(state.note_path(self._root, cassette))
        try:
            raw = state.read_note(self._root, cassette)
        except OSError as exc:
            raise unreadable_note(where, exc) from exc
        return None if raw is None else read_note(raw, where)

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        if record is None:
            state.remove_note(self._root, cassette)
        else:
            state.write_note(self._root, cassette, dump_last_run(record))

    def read_report(self, name: str) -> bytes | None:
        try:
            return (self._root / state_name(name)).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def write_report(self, name: str, data: bytes) -> None:
        path = self._root / state_name(name)
        state.make_folder(self._root)
        write_atomic(path, data, durable=False)

    def where(self, cassette: str | None = None) -> str:
        return str(self._root if cassette is None else self._folder(cassette))

    def exists(self) -> bool:
        return self._root.is_dir()

    def unwritable(self, cassette: str) -> str | None:
        return upkeep.unwritable(self._root, self._folder(cassette))

    def sweep(self, cassette: str | None = None) -> int:
        place = self._root if cassette is None else self._folder(cassette)
        return len(upkeep.sweep_leftovers(place))

    def _folder(self, cassette: str) -> Path:
        return self._root / check_folder_name(cassette)

    def _path(self, cassette: str, key: str, ordinal: int) -> Path:
        return self._folder(cassette) / exchange_file(key, ordinal)

    def _names(self, cassette: str) -> list[str]:
        """The files (not folders: those are nested cassettes) of a cassette's folder."""
        folder = self._folder(cassette)
        try:
            with os.scandir(folder) as listing:
                return [entry.name for entry in listing if entry.is_file()]
        except FileNotFoundError:
            return []
        except NotADirectoryError as exc:
            raise CassetteCorrupt(
                f"{folder} is a file, not a folder: a cassette is a folder of exchange files; "
                "move the file away or pick another cassette name"
            ) from exc
        except OSError as exc:  # permission denied, a symlink loop: a 422 too, not a 500
            raise CassetteCorrupt(
                f"cannot list the cassette folder {folder}: {exc.strerror or exc}"
                + (f" (tapeproxy runs as uid {os.getuid()})" if exc.errno == errno.EACCES else "")
            ) from exc


def _bytes(path: Path) -> bytes | None:
    """What is stored at `path`, or None when nothing can be read there."""
    try:
        return path.read_bytes()
    except OSError:
        return None


@contextlib.contextmanager
def _listing(folder: Path) -> Iterator[Iterator[os.DirEntry[str]]]:
    """A folder's entries, their stats taken relative to the folder's descriptor where the
    platform can (no path looked up again per file: a quarter less time over 100,000)."""
    if os.scandir not in os.supports_fd:
        with os.scandir(folder) as listing:
            yield listing
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        with os.scandir(fd) as by_fd:
            yield by_fd
    finally:
        os.close(fd)
