"""Cassette storage: the table of backends that implement the CassetteStore protocol, one row
per URL scheme, and `open_store`, the one way in. Light to import: each backend (and the
exchange model it reads with) is imported when a library of its kind is opened, so the
pytest plugin can name its library in a run, or an xdist controller, that opens none."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tapeproxy.errors import ConfigError

if TYPE_CHECKING:
    from tapeproxy.store.protocol import CassetteStore


CACHE_SIZE = 2**30  # a remote store's local cache, at most (Settings.cache_size's default)


# A new backend is one file in store/ and one row here: `scheme://location` opens
# BACKENDS[scheme](location), and a location with no scheme is a folder. Typed as the
# protocol, so mypy checks each row implements it; tests/unit/test_store_conformance.py runs
# its suite on each row.
def open_folder(location: str, cache_size: int = CACHE_SIZE) -> CassetteStore:
    """A folder (store/files.py); it keeps no cache of what it reads."""
    from tapeproxy.store.files import FileStore

    return FileStore(location)


def open_s3(location: str, cache_size: int = CACHE_SIZE) -> CassetteStore:
    """`s3://BUCKET/PREFIX` (store/s3.py), whose client, obstore, is the `s3` extra: imported
    only for such a library, and one line when it is not installed."""
    try:
        from tapeproxy.store.s3 import S3Store
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("obstore"):
            raise
        raise ConfigError(
            f"--cassettes s3://{location} needs the obstore package: pip install 'tapeproxy[s3]'"
        ) from exc
    return S3Store(location, cache_size)


BACKENDS: dict[str, Callable[[str, int], CassetteStore]] = {"file": open_folder, "s3": open_s3}
FOLDER = "file"  # the backend of a location given with no scheme


def open_store(location: str | os.PathLike[str], cache_size: int = CACHE_SIZE) -> CassetteStore:
    """The store at `location` (`--cassettes`): a folder, or `SCHEME://...` of a backend of
    BACKENDS; `cache_size` bounds a remote store's local cache (`--cache-size`). An unknown
    scheme is a ConfigError naming the known ones."""
    scheme, rest = split_location(os.fspath(location))
    return BACKENDS[scheme](rest, cache_size)


def split_location(location: str) -> tuple[str, str]:
    """(the backend's scheme, the rest of the location); a folder is `file`."""
    scheme, sep, rest = location.partition("://")
    if not sep:
        return FOLDER, location
    if scheme not in BACKENDS:
        known = ", ".join(f"{name}://" for name in sorted(BACKENDS))
        raise ConfigError(
            f"no cassette store for {location!r}: --cassettes takes a folder or a location "
            f"starting with {known}"
        )
    return scheme, rest


def anchored(location: str, base: Path) -> str:
    """`location` with a relative folder taken under `base` and made absolute; a URL as it
    is (the pytest plugin's library, relative to pytest's rootdir)."""
    if "://" in location:
        return location
    return str((base / location).resolve())
