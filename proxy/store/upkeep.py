"""The file store's upkeep: whether a recording gets into a library folder (asked before a
recording server starts), and the sweep of the temp files that killed writes left."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from pathlib import Path

from tapeproxy.store.protocol import is_leftover

SWEEP_AFTER = 60.0  # seconds: a newer temp file may be a write under way in another container


def unwritable(library: Path, folder: Path) -> str | None:
    """Why recordings could not be written into the cassette folder `folder` of `library`, or
    None. It makes the library if missing and probes it by making and removing a file, as the
    recordings will: a container whose user cannot write the mounted folder must not look
    healthy and lose every recording. The cassette's folder, if there is one, is only asked:
    a run may replay from it, and a replay writes nothing in a cassette folder, not even a
    probe."""
    try:
        library.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(
            prefix=".tapeproxy-write-check.", suffix=".tmp", dir=library
        )
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        return unwritable_message(library, exc)
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        code = errno.EROFS if _read_only(folder) else errno.EACCES
        return unwritable_message(folder, OSError(code, os.strerror(code), str(folder)))
    return None


def _read_only(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (a cassette folder bind-mounted
    `:ro` into a writable library)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # (no statvfs on Windows)
        return False


def unwritable_message(folder: Path, exc: OSError) -> str:
    """Who needs what: the uid tapeproxy runs as, the folder, and its owner; or, on a file
    system mounted read-only, that no owner or mode change can help."""
    where = folder.absolute()
    if exc.errno == errno.EROFS:
        return (
            f"cannot record into the cassette library: {where} is on a read-only file system "
            "(EROFS): it is mounted read-only, so no change of owner or permissions can make "
            "it writable. Mount it read-write (in Docker: drop `:ro` from the volume), give "
            "another --cassettes folder, or serve in replay mode, which never writes there."
        )
    existing = next((p for p in (where, *where.parents) if p.exists()), where)
    uid, gid = (os.getuid(), os.getgid()) if hasattr(os, "getuid") else (None, None)
    user = f"uid {uid} (gid {gid})" if uid is not None else "the user running tapeproxy"
    try:
        owned = f"{existing} belongs to uid {existing.stat().st_uid}"
    except OSError:
        owned = f"{existing} cannot be read"
    return (
        f"cannot record into the cassette library: {exc.strerror or exc} ({where}). "
        f"Recording writes there, so {user} needs write access to {where}; "
        f"{owned}. Make it writable for uid {uid} (e.g. `chown -R {uid} DIR` on the folder "
        f"mounted there), run tapeproxy as the folder's owner (in Docker: `--user UID:GID`), "
        f"give another --cassettes folder, or serve in replay mode."
    )


def sweep_leftovers(root: Path, older_than: float = SWEEP_AFTER) -> list[Path]:
    """Delete the temp files that killed writes left under `root`, and say which: those of a
    process of this machine that has ended, and any older than `older_than` seconds (a
    tapeproxy in another container, whose process this machine does not see, may be writing
    the newer ones right now). Dot folders (the state folder) are skipped."""
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
