"""Which folders of a library hold recordings, found by a walk that lists only the folders
that changed since it last looked: each folder's findings (an exchange file in it, what an
interrupted write left, the folders in it) are kept in the state folder by the folder's own
stamp, which a file added, removed or renamed in it changes (a file's content does not,
nor does it change what is found)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from stat import S_ISLNK
from typing import Any

from tapeproxy.sealed import seal, unseal
from tapeproxy.store import state
from tapeproxy.store.protocol import EXCHANGE_FILE, is_leftover

CACHE = "folders.json"
VERSION = 1
RACY = 3.0  # seconds: a folder changed this recently may change again within its mtime's tick

Found = tuple[bool, bool, list[str]]  # holds an exchange file, a leftover, the folders in it


def walk(root: Path, unlistable: Callable[[OSError], None]) -> list[tuple[str, bool, bool]]:
    """Each folder under `root` (the root too, as ""; hidden ones and links to folders left
    out, as os.walk leaves them): its path from the root with `/`, whether it holds an
    exchange file, and whether it holds what an interrupted write left. A folder that
    cannot be listed is given to `unlistable` (each time: it is never kept)."""
    kept = _load(state.read_state(root, CACHE))
    seen: dict[str, list[Any]] = {}
    found: list[tuple[str, bool, bool]] = []
    stack, now = [""], time.time_ns()
    while stack:
        name = stack.pop()
        folder = os.path.join(root, name) if name else str(root)
        try:  # a link to a folder is not walked into (os.walk's way), whatever is kept
            st = os.lstat(folder) if name else os.stat(folder)
        except OSError as exc:
            unlistable(exc)
            continue
        if S_ISLNK(st.st_mode):
            continue
        stamp = f"{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"
        entry = kept.get(name)
        if entry is not None and entry[0] == stamp:
            holds, left, inner = entry[1], entry[2], entry[3]
        else:
            looked = _looked(folder, unlistable)
            if looked is None:
                continue
            holds, left, inner = looked
        if now - st.st_mtime_ns >= RACY * 1e9:  # else never kept: see RACY
            seen[name] = [stamp, holds, left, inner]
        found.append((name, holds, left))
        stack.extend(f"{name}/{sub}" if name else sub for sub in inner)
    if seen != kept:
        state.write_state(root, CACHE, _dump(seen))
    return found


def _looked(folder: str, unlistable: Callable[[OSError], None]) -> Found | None:
    holds = left = False
    inner = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                name = entry.name
                try:
                    is_folder = entry.is_dir()
                except OSError:
                    is_folder = False
                if is_folder:
                    if not name.startswith(".") and not entry.is_symlink():
                        inner.append(name)
                elif not holds and EXCHANGE_FILE.match(name):
                    holds = True
                elif not left and is_leftover(name):
                    left = True
    except OSError as exc:
        unlistable(exc)
        return None
    return holds, left, sorted(inner)


def _load(raw: bytes | None) -> dict[str, list[Any]]:
    """The kept findings; {} when none, or damaged, of another version or of another
    shape: never trusted, looked at again."""
    data = unseal(raw)
    if data is None or data.get("version") != VERSION:
        return {}
    folders = data.get("folders")
    if not isinstance(folders, dict):
        return {}
    return {name: entry for name, entry in folders.items() if _shaped(name, entry)}


def _shaped(name: Any, entry: Any) -> bool:
    return (
        isinstance(name, str)
        and isinstance(entry, list)
        and len(entry) == 4
        and type(entry[0]) is str
        and type(entry[1]) is bool
        and type(entry[2]) is bool
        and isinstance(entry[3], list)
        and all(type(sub) is str and _plain(sub) for sub in entry[3])
    )


def _plain(name: str) -> bool:
    """A folder's own name, as a listing gives it: a hostile cache cannot lead the walk out."""
    return bool(name) and "/" not in name and name not in (".", "..") and not name.startswith(".")


def _dump(folders: dict[str, list[Any]]) -> bytes:
    return seal({"version": VERSION, "folders": folders})
