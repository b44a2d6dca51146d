"""The filesystem cassette store: one folder per cassette, one file per exchange, atomic writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from llmtape.errors import CassetteCorrupt
from llmtape.models import Exchange, Frame, dump_exchange, load_exchange
from llmtape.store.base import exchange_file, parse_exchange_file
from llmtape.store.names import check_folder_name


class FileStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, cassette: str) -> Path:
        return self.root / check_folder_name(cassette)

    def entries(self, cassette: str) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        try:
            with os.scandir(self.folder(cassette)) as listing:
                for entry in listing:
                    parsed = parse_exchange_file(entry.name)
                    if parsed is not None and entry.is_file():
                        found.setdefault(parsed[0], []).append(parsed[1])
        except FileNotFoundError:
            return {}
        except NotADirectoryError as exc:
            raise CassetteCorrupt(
                f"{self.folder(cassette)} is a file, not a folder: a cassette is a folder of "
                "exchange files; move the file away or pick another cassette name"
            ) from exc
        for ordinals in found.values():
            ordinals.sort()
        return found

    def path(self, cassette: str, key: str, ordinal: int) -> Path:
        return self.folder(cassette) / exchange_file(key, ordinal)

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        path = self.path(cassette, key, ordinal)
        try:
            return load_exchange(path.read_bytes())
        except (OSError, ValueError, ValidationError) as exc:
            raise CassetteCorrupt(
                f"cannot read {path}: {exc}; run `llmtape verify {cassette}` to check the cassette"
            ) from exc

    def write(self, cassette: str, exchange: Exchange) -> bool:
        path = self.path(cassette, exchange.key, exchange.ordinal)
        if _same_recording(path, exchange):
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, dump_exchange(exchange))
        return True

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        self.path(cassette, key, ordinal).unlink(missing_ok=True)
        _fsync_folder(self.folder(cassette))

    def cassettes(self) -> list[str]:
        """Every folder holding exchange files, or what an interrupted write left behind."""
        names = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if any(parse_exchange_file(name) or is_leftover(name) for name in files):
                names.append(Path(folder).relative_to(self.root).as_posix())
        return sorted(names)


def is_leftover(name: str) -> bool:
    """A temp file of `write_atomic` that a killed process never renamed."""
    return name.startswith(".") and name.endswith(".tmp")


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same folder, flush, fsync, rename over, fsync the folder: a crash
    leaves the old file or the new one, never a torn one."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename or unlink in `folder` durable."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _untimed(exchange: Exchange) -> bytes:
    """The exchange as bytes with its timings (frame arrivals, when a cut came) left out."""
    response = exchange.response
    frames = response.frames
    untimed = (
        None if frames is None else [Frame(ms=0, text=f.text, base64=f.base64) for f in frames]
    )
    response = response.model_copy(update={"frames": untimed, "end_ms": None})
    return dump_exchange(exchange.model_copy(update={"response": response}))


def _same_recording(path: Path, exchange: Exchange) -> bool:
    """True when `path` already holds this exchange but for frame timing, so a re-record
    of the same answers leaves the file (and git) untouched."""
    try:
        existing = load_exchange(path.read_bytes())
    except (OSError, ValueError, ValidationError):
        return False
    return _untimed(existing) == _untimed(exchange)
