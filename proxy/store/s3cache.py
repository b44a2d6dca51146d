"""The S3 store's local read-through cache: each object's bytes as last read, one entry per
object name holding its ETag (a newer version replaces it: the cache never grows past the
objects read), with the SHA-256 of its content checked on every read; and each cassette's
last listing, so that a replay that cannot reach the store still serves what this machine has
read before.

It lives in `$XDG_CACHE_HOME/tapeproxy/s3/` (else `~/.cache/...`), one folder per store
location, never in a cassette, its objects bounded by `--cache-size` (least recently used out
first) across every process that shares it (`s3budget`). A cache that cannot be written is no
error: it is a cache."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from tapeproxy.store.durable import write_atomic
from tapeproxy.store.s3budget import Budget
from tapeproxy.store.state import read_bounded

DIGEST = 64  # hex characters of the SHA-256 that heads each cached object
# The objects' folder. Before, `objects/` held one entry per name and ETag, and every version
# of an object read stayed: it is left alone (a tapeproxy of then may still use it).
OBJECTS = "objects-by-name"


def cache_root(location: str) -> Path:
    """The cache folder of one store location (endpoint, bucket and prefix). A user with no
    home (no HOME, no entry in the password database: an arbitrary uid in a container) gets
    a private folder for this process alone, removed at its exit: not one in a shared temp
    folder that another user could have filled."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # "Could not determine home directory."
            base = tempfile.mkdtemp(prefix="tapeproxy-cache-")
            atexit.register(shutil.rmtree, base, True)
    return Path(base) / "tapeproxy" / "s3" / _hash(location)[:24]


class ObjectCache:
    """Objects by name (each with its ETag), and listings by cassette, in one local folder.
    An entry is `digest\netag\ncontent`: the digest covers the ETag and the content."""

    def __init__(self, root: Path, limit: int = 2**30) -> None:
        self.root = root
        self.limit = limit  # bytes the objects may take (`--cache-size`)
        # Shared by every process using this folder: one count, under one lock.
        self._budget = Budget(root / OBJECTS, root / f"{OBJECTS}.count", limit)

    def get(self, name: str, etag: str) -> bytes | None:
        """The object's bytes as cached for that ETag, or None (none cached, or its content
        does not match its digest: a damaged entry is dropped)."""
        path = self._object(name)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        digest, body = raw[:DIGEST], raw[DIGEST + 1 :]
        if digest.decode("ascii", "replace") != hashlib.sha256(body).hexdigest():
            with contextlib.suppress(OSError):
                self._budget.remove(path)
            return None
        kept, _, data = body.partition(b"\n")
        if kept != etag.encode("utf-8"):
            return None  # another version
        with contextlib.suppress(OSError):  # used now: the least recently used go first
            os.utime(path)
        return data

    def put(self, name: str, etag: str, data: bytes) -> None:
        """Keep `data` as the object's version `etag`, in place of any other version, the
        least recently used objects out first if it would pass the limit (`Budget.admit`).
        One larger than the whole limit is not kept."""
        if len(data) > self.limit:
            return
        body = [etag.encode("utf-8"), b"\n", data]
        digest = hashlib.sha256(b"".join(body)).hexdigest().encode("ascii")
        path, pieces = self._object(name), [digest, b"\n", *body]
        with contextlib.suppress(OSError):
            self._budget.admit(
                path, DIGEST + 2 + len(body[0]) + len(data), lambda: self._keep(path, pieces)
            )

    def listing(self, cassette: str) -> dict[str, str] | None:
        """A cassette's last listing (file name -> ETag), or None when there is none."""
        try:
            found = json.loads(self._listing(cassette).read_bytes())
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def keep_listing(self, cassette: str, etags: dict[str, str]) -> None:
        data = json.dumps(etags, sort_keys=True).encode("utf-8")
        with contextlib.suppress(OSError):
            if self._listing(cassette).read_bytes() == data:
                return
        self._keep(self._listing(cassette), [data])

    def drop(self, name: str) -> None:
        """Forget an object deleted from the store here."""
        with contextlib.suppress(OSError):
            self._budget.remove(self._object(name))

    def listed(self, cassette: str, name: str, etag: str | None) -> None:
        """Keep a cassette's cached listing in step with a write made here (`etag`, the
        object's new version) or a delete (None), so that a replay that cannot reach the store
        asks for what is cached (the entry holds only the newest version)."""
        found = self.listing(cassette)
        if found is None or found.get(name) == etag:
            return
        if etag is None:
            found.pop(name, None)
        else:
            found[name] = etag
        self.keep_listing(cassette, found)

    def read_state(self, name: str) -> bytes | None:
        """A cache of the tools' (the summary cache) kept with this store's objects."""
        return read_bounded(self.root / "state" / name)

    def write_state(self, name: str, data: bytes) -> None:
        path = self.root / "state" / name
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
        self._keep(path, [data])

    def _object(self, name: str) -> Path:
        hashed = _hash(name)
        return self.root / OBJECTS / hashed[:2] / hashed

    def _listing(self, cassette: str) -> Path:
        return self.root / "listings" / f"{_hash(cassette)}.json"

    def _keep(self, path: Path, pieces: list[bytes]) -> None:
        """Written aside and renamed (a reader sees the old entry or the new one), not
        synced: a torn entry is caught by its digest."""
        with contextlib.suppress(OSError):
            write_atomic(path, pieces, durable=False)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
