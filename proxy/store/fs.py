"""The filesystem cassette store: one folder per cassette, one file per exchange, atomic writes."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchangefile import NewerSchema, Record, record_of, render
from tapeproxy.store import journal, state
from tapeproxy.store.base import (
    exchange_file,
    is_leftover,
    parse_exchange_file,
    same_as_stored,
    same_recording,
)
from tapeproxy.store.durable import FolderSyncs, fsync_folder, write_atomic
from tapeproxy.store.names import check_folder_name

if TYPE_CHECKING:
    from tapeproxy.lastrun import LastRun
    from tapeproxy.models import Exchange


class FileStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._folder_syncs = FolderSyncs()
        self._journal: journal.Journal | None = None
        # Another process's journal on this library that may hold a file this store is
        # about to write without its own journal, or to delete (the scribe's, scribe.py):
        # told first, so that its older bytes are never written back over the newer file.
        self.elsewhere: Callable[[Path], None] | None = None

    def open(self) -> list[Path]:
        """From now on exchange files go through a write-ahead journal (a recording
        server's store; see journal.py); first, write back what a crashed one left in
        its journal. The paths written back."""
        if not journal.SUPPORTED:
            return []
        kept = journal.Journal(self.root)
        restored = kept.open()
        self._journal = kept
        return restored

    def close(self) -> None:
        """Every exchange written is synced and the journal removed."""
        kept, self._journal = self._journal, None
        if kept is not None:
            kept.close()

    def folder(self, cassette: str) -> Path:
        return self.root / check_folder_name(cassette)

    def entries(self, cassette: str) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for name in self._names(cassette):
            parsed = parse_exchange_file(name)
            if parsed is not None:
                found.setdefault(parsed[0], []).append(parsed[1])
        for ordinals in found.values():
            ordinals.sort()
        return found

    def path(self, cassette: str, key: str, ordinal: int) -> Path:
        return self.folder(cassette) / exchange_file(key, ordinal)

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        # Imported here: the scribe's FileStore never reads, and carries no pydantic.
        from pydantic import ValidationError

        from tapeproxy.models import load_exchange

        path = self.path(cassette, key, ordinal)
        try:
            return load_exchange(path.read_bytes())
        except NewerSchema as exc:
            raise CassetteCorrupt(f"cannot read {path}: {exc}") from exc
        except (OSError, ValueError, ValidationError) as exc:
            raise CassetteCorrupt(
                f"cannot read {path}: {exc}; run `tapeproxy verify {cassette}` to check it"
            ) from exc

    def write(self, cassette: str, exchange: Exchange | Record, fresh: bool = False) -> bool:
        done = self.write_many([(cassette, exchange, fresh)])[0]
        if isinstance(done, OSError):
            raise done
        return done

    def write_many(
        self, items: Sequence[tuple[str, Exchange | Record, bool]]
    ) -> list[bool | OSError]:
        """`write` for several (cassette, exchange, fresh) at once, sharing one journal write
        and one sync; per item, what `write` returns or the error it would raise."""
        done: list[bool | OSError] = [False] * len(items)
        files: list[tuple[Path, bytes]] = []
        where: list[int] = []
        for n, (cassette, exchange, fresh) in enumerate(items):
            record = record_of(exchange)
            path = self.path(cassette, record["key"], record["ordinal"])
            if fresh or not _unchanged(path, record):
                files.append((path, render(record)))
                where.append(n)
        journaled = self._journal.write_many(files) if self._journal is not None else []
        for at, (path, data) in enumerate(files):
            outcome = journaled[at] if at < len(journaled) else False
            if outcome is False:
                try:
                    self._write_synced(path, data)
                    outcome = True
                except OSError as exc:
                    outcome = exc
            done[where[at]] = outcome
        return done

    def write_pieces(self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes]) -> None:
        self._write_synced(self.path(cassette, key, ordinal), pieces)

    def _write_synced(self, path: Path, data: bytes | Iterable[bytes]) -> None:
        """Written and synced on its own, then any older bytes of it that the journal holds
        are voided: they must not be written back over this newer file."""
        self._forget_elsewhere(path)
        write_atomic(path, data, self._folder_syncs.sync)
        if self._journal is not None:
            self._journal.forget(path)

    def forget(self, path: Path) -> None:
        """The journal no longer holds `path` (another process writes or deletes it)."""
        if self._journal is not None:
            self._journal.forget(path)

    def _forget_elsewhere(self, path: Path) -> None:
        elsewhere = self.elsewhere
        if elsewhere is not None:
            elsewhere(path)

    def scratch(self, cassette: str) -> BinaryIO:
        """An anonymous file beside the cassette, on the same disk as its exchanges: it has
        no name (nothing to clean up after a kill) and is gone once closed."""
        folder = self.folder(cassette)
        folder.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryFile(dir=folder, prefix=".tapeproxy-spool.", suffix=".tmp")

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        path = self.path(cassette, key, ordinal)
        self._forget_elsewhere(path)
        if self._journal is not None:
            self._journal.forget(path)
        path.unlink(missing_ok=True)
        fsync_folder(path.parent)

    def cassettes(self) -> list[str]:
        """Every folder holding exchange files, or what an interrupted write left behind."""
        names = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if any(parse_exchange_file(name) or is_leftover(name) for name in files):
                names.append(Path(folder).relative_to(self.root).as_posix())
        return sorted(names)

    def files(self, cassette: str) -> list[str]:
        return sorted(self._names(cassette))

    def exists(self, cassette: str | None = None) -> bool:
        return self._place(cassette).is_dir()

    def where(self, cassette: str | None = None) -> str:
        return str(self._place(cassette))

    def read_last_run(self, cassette: str) -> LastRun | None:
        from pydantic import ValidationError

        from tapeproxy.lastrun import load_last_run

        try:
            raw = state.read_note(self.root, cassette)
            return None if raw is None else load_last_run(raw)
        except (OSError, ValueError, ValidationError) as exc:
            path = state.note_path(self.root, cassette)
            raise CassetteCorrupt(
                f"cannot read {path}: {exc}; delete it, and replay the cassette again"
            ) from exc

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        from tapeproxy.lastrun import dump_last_run

        if record is None:
            state.remove_note(self.root, cassette)
        else:
            state.write_note(self.root, cassette, dump_last_run(record))

    def _place(self, cassette: str | None) -> Path:
        return self.root if cassette is None else self.folder(cassette)

    def _names(self, cassette: str) -> list[str]:
        """The files (not folders: those are nested cassettes) of a cassette's folder."""
        try:
            with os.scandir(self.folder(cassette)) as listing:
                return [entry.name for entry in listing if entry.is_file()]
        except FileNotFoundError:
            return []
        except NotADirectoryError as exc:
            raise CassetteCorrupt(
                f"{self.folder(cassette)} is a file, not a folder: a cassette is a folder of "
                "exchange files; move the file away or pick another cassette name"
            ) from exc


def _unchanged(path: Path, record: Record) -> bool:
    """Whether `path` holds the same recording as `record` (`same_recording`), so that it is
    not written again. Nothing readable there, or a file in an older schema_version (written
    again: upgraded), is not the same."""
    try:
        raw = path.read_bytes()
    except OSError:
        return False
    same = same_as_stored(raw, record)
    if same is not None:
        return same
    # A file not as tapeproxy writes them: read by the model (the scribe imports it only now).
    from pydantic import ValidationError

    from tapeproxy.models import load_exchange

    try:
        stored = load_exchange(raw)
    except (ValueError, ValidationError):
        return False
    return stored.read_as == stored.schema_version and same_recording(stored, record)


def sweep_leftovers(root: Path, older_than: float = 60.0) -> list[Path]:
    """Delete the temp files that killed writes left in the library, and say which. Only
    those older than `older_than` seconds: another tapeproxy on the same library may be
    writing the newer ones right now."""
    swept: list[Path] = []
    cutoff = time.time() - older_than
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not is_leftover(name):  # the name alone: no path built, no stat, per file
                continue
            path = Path(folder) / name
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                swept.append(path)
    return swept
