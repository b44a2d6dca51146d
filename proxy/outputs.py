"""A file a command writes where the user names it (`-o`, `--ca-cert`, `--ready-file`): whole
or not at all, and never in place of what is no regular file (`/dev/stdout`, `/dev/null`, a
pipe), which is written to as it is."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")


def write_whole(path: Path, write: Callable[[IO[bytes]], T], mode: int = 0o644) -> T:
    """What `write` writes, in `path`: aside (under a name no one could plant a link at:
    `path` may be in /tmp), then renamed over it, so a reader sees the old file or the new.
    A device or a pipe is written to directly: renaming over it (as root, `-o /dev/stdout`)
    would replace the node itself. `write`'s result."""
    if path.exists() and not path.is_file():
        with path.open("wb") as out:
            return write(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, aside = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            result = write(out)
        os.chmod(aside, mode)  # (mkstemp's is 0600)
        os.replace(aside, path)
    except BaseException:
        Path(aside).unlink(missing_ok=True)
        raise
    return result
