"""Cassette storage: the table of backends that implement the CassetteStore protocol."""

from __future__ import annotations

import os
from collections.abc import Callable

from tapeproxy.errors import ConfigError
from tapeproxy.store.files import FileStore
from tapeproxy.store.protocol import CassetteStore

# A new backend is one file in store/ and one row here: `scheme://location` opens
# BACKENDS[scheme](location). Typed as the protocol, so mypy checks each row implements it.
BACKENDS: dict[str, Callable[[str], CassetteStore]] = {"file": FileStore}


def open_store(location: str | os.PathLike[str]) -> CassetteStore:
    """The store at `location`: `SCHEME://...` for a backend of BACKENDS, else a folder."""
    if isinstance(location, os.PathLike):
        return FileStore(os.fspath(location))
    scheme, sep, rest = location.partition("://")
    if not sep:
        return FileStore(location)
    if scheme not in BACKENDS:
        known = ", ".join(f"{name}://" for name in sorted(BACKENDS))
        raise ConfigError(
            f"no cassette store backend {scheme!r} for {location!r}: give a folder, or a "
            f"location starting with {known}"
        )
    return BACKENDS[scheme](rest)
