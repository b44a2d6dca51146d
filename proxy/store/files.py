"""The filesystem cassette store: one folder per cassette, one file per exchange, atomic writes."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from pydantic import ValidationError

from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange.model import Exchange, NewerSchema, dump_exchange, load_exchange
from tapeproxy.store import state
from tapeproxy.store.durable import fsync_folder, write_atomic
from tapeproxy.store.names import check_folder_name
from tapeproxy.store.protocol import exchange_file, is_leftover, parse_exchange_file

if TYPE_CHECKING:
    from tapeproxy.store.lastrun import LastRun


class FileStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

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
        path = self.path(cassette, key, ordinal)
        try:
            return load_exchange(path.read_bytes())
        except NewerSchema as exc:
            raise CassetteCorrupt(f"cannot read {path}: {exc}") from exc
        except (OSError, ValueError, ValidationError) as exc:
            raise CassetteCorrupt(
                f"cannot read {path}: {exc}; run `tapeproxy verify {cassette}` to check it"
            ) from exc

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        path = self.path(cassette, exchange.key, exchange.ordinal)
        if not fresh and _unchanged(path, exchange):
            return False
        write_atomic(path, dump_exchange(exchange))
        return True

    def write_pieces(self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes]) -> None:
        write_atomic(self.path(cassette, key, ordinal), pieces)

    def scratch(self, cassette: str) -> BinaryIO:
        """An anonymous file beside the cassette, on the same disk as its exchanges: it has
        no name (nothing to clean up after a kill) and is gone once closed."""
        folder = self.folder(cassette)
        folder.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryFile(dir=folder, prefix=".tapeproxy-spool.", suffix=".tmp")

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        path = self.path(cassette, key, ordinal)
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

        from tapeproxy.store.lastrun import load_last_run

        try:
            raw = state.read_note(self.root, cassette)
            return None if raw is None else load_last_run(raw)
        except (OSError, ValueError, ValidationError) as exc:
            path = state.note_path(self.root, cassette)
            raise CassetteCorrupt(
                f"cannot read {path}: {exc}; delete it, and replay the cassette again"
            ) from exc

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        from tapeproxy.store.lastrun import dump_last_run

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


def _unchanged(path: Path, exchange: Exchange) -> bool:
    """Whether `path` holds the same recording (`Exchange.same_recording`), so that it is not
    written again. Nothing readable there, or a file in an older schema_version (written
    again: upgraded), is not the same."""
    try:
        stored = load_exchange(path.read_bytes())
    except (OSError, ValueError, ValidationError):
        return False
    return stored.read_as == stored.schema_version and stored.same_recording(exchange)


def sweep_leftovers(root: Path, older_than: float = 60.0) -> list[Path]:
    """Delete the temp files that killed writes left in the library, and say which: those
    of a process of this machine that has ended, and any older than `older_than` seconds
    (a tapeproxy in another container, whose process this machine does not see, may be
    writing the newer ones right now)."""
    swept: list[Path] = []
    cutoff = time.time() - older_than
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not is_leftover(name):  # the name alone: no path built, no stat, per file
                continue
            path = Path(folder) / name
            with contextlib.suppress(FileNotFoundError):
                if _writer_gone(name) or path.stat().st_mtime < cutoff:
                    path.unlink()
                    swept.append(path)
    return swept


def _writer_gone(name: str) -> bool:
    """Whether the process that made the temp file `.<file>.<pid>-<n>.tmp` has ended."""
    pid, dash, _ = name.removesuffix(".tmp").rpartition(".")[2].partition("-")
    if not dash or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # there, but another user's
        return False
    return False
