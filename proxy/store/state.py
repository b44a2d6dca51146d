"""The library's state folder, `<library>/.tapeproxy/`: what is kept between runs (each
cassette's last-run note, for `tapeproxy prune`; the summary cache of `ls` and others),
outside every cassette folder, so that a replay writes nothing into the cassettes it serves;
git-ignored by the `.gitignore` of `*` it is made with."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tapeproxy.store.durable import fsync_folder, write_atomic
from tapeproxy.store.lastrun import NOTES, note_name

STATE_DIR, RUNS_DIR = NOTES.split("/")
IGNORE = "# tapeproxy's state between runs (notes for `tapeproxy prune`): never commit it\n*\n"


def note_path(library: Path, cassette: str) -> Path:
    """`<library>/.tapeproxy/runs/<name>.json` (`lastrun.note_name`)."""
    return library / note_name(cassette)


def read_note(library: Path, cassette: str) -> bytes | None:
    """The note's bytes; None when there is none (nor a state folder)."""
    try:
        return note_path(library, cassette).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def write_note(library: Path, cassette: str, data: bytes) -> None:
    """Store the note atomically in the state folder (made first if need be); the same bytes
    already there are left as they are (no write, no new mtime). With no library folder
    nothing is made: nothing was recorded there to prune. No fsync: a replay run writes one
    note per cassette (per test with the pytest plugin), and a note a power cut lost or left
    unreadable only makes prune delete nothing (a torn note reads as CassetteCorrupt)."""
    path = note_path(library, cassette)
    if not library.is_dir():
        return
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    make_folder(library)
    write_atomic(path, data, durable=False)


def remove_note(library: Path, cassette: str) -> None:
    """Remove the note if there is one; with none, nothing is made or written."""
    path = note_path(library, cassette)
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):
        return
    fsync_folder(path.parent)


def make_folder(library: Path) -> Path:
    """The state folder and its folder of notes, made if need be; the `.gitignore` of `*`
    first, so git never sees a note."""
    folder = library / STATE_DIR
    folder.mkdir(exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        write_atomic(ignore, IGNORE.encode())
    (folder / RUNS_DIR).mkdir(exist_ok=True)
    return folder


# A cache file larger than this is no cache tapeproxy wrote (a summary is some 300 bytes an
# exchange file): not read, so memory stays bounded; it is rebuilt.
MAX_STATE = 64 * 2**20


def read_state(library: Path, name: str) -> bytes | None:
    """`<library>/.tapeproxy/<name>` (a cache kept there), or None (none, or too large)."""
    return read_bounded(library / STATE_DIR / name)


def read_bounded(path: Path) -> bytes | None:
    """A cache file's bytes; None when it is missing, unreadable or over MAX_STATE."""
    try:
        with path.open("rb") as handle:
            too_large = os.fstat(handle.fileno()).st_size > MAX_STATE
            data = b"" if too_large else handle.read(MAX_STATE + 1)
    except OSError:
        return None
    return None if too_large or len(data) > MAX_STATE else data


def write_state(library: Path, name: str, data: bytes) -> None:
    """Keep a cache's file in the state folder, renamed into place whole, not synced (it may
    be lost; a torn one is caught by what it holds); nothing when it cannot be written, or
    when there is no library folder."""
    if not library.is_dir():
        return
    with contextlib.suppress(OSError):
        path = make_folder(library) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, durable=False)
