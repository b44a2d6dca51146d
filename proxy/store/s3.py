"""The S3 backend (`--cassettes s3://BUCKET/PREFIX`, any S3-compatible store): one object per
exchange file, with the same name and bytes as on disk (`PREFIX/<cassette>/<file>`); the
last-run notes under `PREFIX/.tapeproxy/`; a new recording put only where nothing is
(If-None-Match: *), so two servers never overwrite each other's; every object read through a
local cache checked against its content, so a warm replay reads no object from the store."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

import obstore

from tapeproxy.errors import ConfigError, StoreUnreachable
from tapeproxy.exchange.model import Exchange
from tapeproxy.store.blobs import packed
from tapeproxy.store.lastrun import NOTES, dump_last_run, note_name, read_note, unreadable_note
from tapeproxy.store.names import check_folder_name, named_cassettes
from tapeproxy.store.protocol import (
    entries_of,
    exchange_file,
    holds_same,
    is_leftover,
    parse_exchange_file,
    read_exchange,
    state_name,
    unreadable,
)
from tapeproxy.store.s3blobs import BlobsAndState, S3Blobs
from tapeproxy.store.s3cache import ObjectCache, cache_root
from tapeproxy.store.s3client import (
    ENDPOINT_VARIABLES,
    FAILED,
    MISSING,
    TAKEN,
    connect,
    get_note,
    put_note,
    split_bucket,
    unreachable,
    why,
)

if TYPE_CHECKING:
    from tapeproxy.store.lastrun import LastRun

STATE = NOTES.partition("/")[0]  # `.tapeproxy`, under the prefix
MAX_LISTINGS = 256  # cassettes whose last listing (names and ETags) is kept in memory
log = logging.getLogger("tapeproxy")


class S3Store(BlobsAndState):
    """A library in a bucket, under a prefix (`BACKENDS["s3"]`). Opening it asks the store
    once, so a wrong endpoint, credentials or bucket fail at start, in one line."""

    def __init__(self, location: str, cache_size: int = 2**30) -> None:
        bucket, prefix = split_bucket(location)
        self._url = f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
        self._client = connect(bucket, prefix)
        endpoint = next((os.environ[v] for v in ENDPOINT_VARIABLES if os.environ.get(v)), "")
        self._cache = ObjectCache(cache_root(f"{endpoint}|{self._url}"), cache_size)
        self._etags: dict[str, dict[str, str]] = {}  # cassette -> name -> ETag, last listed
        self._lock = threading.Lock()
        self._offline = False  # said once: a listing came from the cache
        self._blobs = S3Blobs(self._client, self._url, self._cache)
        try:
            next(iter(obstore.list(self._client, chunk_size=1)), None)
        except FAILED as exc:
            raise ConfigError(f"cannot open the cassette library {self._url}: {why(exc)}") from exc

    def cassettes(self, skipped: dict[str, str] | None = None) -> list[str]:
        found: set[str] = set()
        for chunk in obstore.list(self._client):
            for meta in chunk:
                folder, _, name = meta["path"].rpartition("/")
                hidden = any(part.startswith(".") for part in folder.split("/"))
                if folder and not hidden and (parse_exchange_file(name) or is_leftover(name)):
                    found.add(folder)
        return named_cassettes(found, self._url, skipped)

    def entries(self, cassette: str) -> dict[str, list[int]]:
        return entries_of(self._listed(cassette))

    def names(self, cassette: str) -> list[str]:
        return sorted(self._listed(cassette))

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        path = self._path(cassette, key, ordinal)
        where = f"{self._url}/{path}"
        etag = self._etags.get(check_folder_name(cassette), {}).get(exchange_file(key, ordinal))
        raw = None if etag is None else self._cache.get(path, etag)
        if raw is None:
            raw = self._fetch(path, where, cassette)
        return read_exchange(raw, where, cassette, self._blobs.fetch(check_folder_name(cassette)))

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        path = self._path(cassette, exchange.key, exchange.ordinal)
        data, blobs, version = packed(exchange)
        fetch = self._blobs.fetch(check_folder_name(cassette))
        if not fresh and holds_same(self._current(path), exchange, fetch, version):
            return False
        self._blobs.put(check_folder_name(cassette), blobs)
        self._put(path, data)
        return True

    def create(self, cassette: str, exchange: Exchange) -> bool:
        path = self._path(cassette, exchange.key, exchange.ordinal)
        data, blobs, _ = packed(exchange)
        self._blobs.put(check_folder_name(cassette), blobs)  # first: never a reference to none
        try:
            self._put(path, data, create=True)
        except TAKEN:
            return False
        return True

    def write_pieces(
        self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes], create: bool = False
    ) -> bool:
        path = self._path(cassette, key, ordinal)
        # A conditional put is one request holding the whole answer; a multipart upload keeps
        # memory bounded but cannot be conditional. So `create` asks first: two servers that
        # record the same large answer in the same instant may both write it (whole, each).
        if create and self._exists(path):
            return False
        # Written out first (making the pieces puts their blobs, which obstore cannot do
        # inside its own put), then a multipart upload of the file: memory stays bounded.
        try:
            with tempfile.TemporaryFile() as scratch:
                scratch.writelines(pieces)
                scratch.seek(0)
                obstore.put(self._client, path, scratch)
        except FAILED as exc:
            raise OSError(f"cannot write {self._url}/{path}: {why(exc)}") from exc
        with self._lock:
            self._etags.get(check_folder_name(cassette), {}).pop(exchange_file(key, ordinal), None)
        return True

    def _exists(self, path: str) -> bool:
        try:
            obstore.head(self._client, path)
        except MISSING:
            return False
        except FAILED as exc:
            raise OSError(f"cannot write {self._url}/{path}: {why(exc)}") from exc
        return True

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        path = self._path(cassette, key, ordinal)
        try:
            obstore.delete(self._client, path)
        except MISSING:
            return
        except FAILED as exc:
            raise OSError(f"cannot delete {self._url}/{path}: {why(exc)}") from exc
        folder, _, name = path.rpartition("/")
        self._cache.listed(folder, name, None)
        self._cache.drop(path)

    def read_last_run(self, cassette: str) -> LastRun | None:
        path = note_name(cassette)
        where = f"{self._url}/{path}"
        try:
            raw = bytes(obstore.get(self._client, path).bytes())
        except MISSING:
            return None
        except FAILED as exc:
            raise unreadable_note(where, OSError(why(exc))) from exc
        return read_note(raw, where)

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        path = note_name(cassette)
        if record is None:
            try:
                obstore.delete(self._client, path)
            except MISSING:
                pass
            except FAILED as exc:
                raise OSError(f"cannot delete {self._url}/{path}: {why(exc)}") from exc
            return
        put_note(self._client, self._url, path, dump_last_run(record))

    def read_report(self, name: str) -> bytes | None:
        return get_note(self._client, self._url, state_name(name))

    def write_report(self, name: str, data: bytes) -> None:
        put_note(self._client, self._url, state_name(name), data)

    def where(self, cassette: str | None = None) -> str:
        return self._url if cassette is None else f"{self._url}/{check_folder_name(cassette)}"

    def exists(self) -> bool:
        try:
            return next(iter(obstore.list(self._client, chunk_size=1)), None) is not None
        except FAILED as exc:
            raise ConfigError(f"cannot list {self._url}: {why(exc)}") from exc

    def unwritable(self, cassette: str) -> str | None:
        """A probe object put and deleted under `.tapeproxy/`, as recordings will be put (only
        where nothing is: If-None-Match): a store that takes no writes, or no conditional ones,
        must not look healthy and lose every recording."""
        check_folder_name(cassette)
        probe = f"{STATE}/write-check-{uuid.uuid4().hex}"
        try:
            obstore.put(self._client, probe, b"", mode="create")
            obstore.delete(self._client, probe)
        except FAILED as exc:
            return (
                f"cannot record into the cassette library {self._url}: {why(exc)}. Recording "
                "puts objects there: give credentials that may write to the bucket, another "
                "--cassettes, or serve in replay mode."
            )
        return None

    def sweep(self, cassette: str | None = None) -> int:
        """Nothing to sweep: an object is put whole or not at all, never set aside."""
        if cassette is not None:
            check_folder_name(cassette)
        return 0

    def _path(self, cassette: str, key: str, ordinal: int) -> str:
        return f"{check_folder_name(cassette)}/{exchange_file(key, ordinal)}"

    def _listed(self, cassette: str) -> dict[str, str]:
        """A cassette's objects (file name -> ETag), listed once; kept for the reads that
        follow, and in the cache for a replay that cannot reach the store."""
        folder = check_folder_name(cassette)
        try:
            listed = obstore.list_with_delimiter(self._client, folder)
        except FAILED as exc:
            etags = self._offline_listing(folder, exc)
        else:
            etags = {
                meta["path"].rpartition("/")[2]: meta["e_tag"] or "" for meta in listed["objects"]
            }
            self._cache.keep_listing(folder, etags)
        with self._lock:
            self._etags.pop(folder, None)
            self._etags[folder] = etags
            while len(self._etags) > MAX_LISTINGS:
                del self._etags[next(iter(self._etags))]
        return etags

    def _offline_listing(self, folder: str, exc: Exception) -> dict[str, str]:
        cached = self._cache.listing(folder) if unreachable(exc) else None
        if not cached:  # none, or one made before anything was recorded: nothing to serve
            raise StoreUnreachable(
                f"cannot list cassette {folder!r} in {self._url}: {why(exc)}; this machine "
                "has no copy of it to replay from"
            ) from exc
        if not self._offline:
            self._offline = True
            log.warning("%s: %s; replaying from the local cache", self._url, why(exc))
        return cached

    def _fetch(self, path: str, where: str, cassette: str) -> bytes:
        try:
            got = obstore.get(self._client, path)
            raw = bytes(got.bytes())
        except MISSING as exc:
            raise unreadable(where, cassette, FileNotFoundError("no such recording")) from exc
        except FAILED as exc:
            if unreachable(exc):
                raise StoreUnreachable(
                    f"cannot read {where}: {why(exc)}; this machine has no copy of it"
                ) from exc
            raise unreadable(where, cassette, OSError(why(exc))) from exc
        etag = got.meta["e_tag"]
        if etag:
            self._cache.put(path, etag, raw)
        return raw

    def _current(self, path: str) -> bytes | None:
        try:
            return bytes(obstore.get(self._client, path).bytes())
        except FAILED:
            return None

    def _put(self, path: str, data: bytes, create: bool = False) -> None:
        try:
            put = obstore.put(self._client, path, data, mode="create" if create else None)
        except TAKEN:
            raise
        except FAILED as exc:
            raise OSError(f"cannot write {self._url}/{path}: {why(exc)}") from exc
        if put["e_tag"]:
            self._cache.put(path, put["e_tag"], data)
            folder, _, name = path.rpartition("/")
            self._cache.listed(folder, name, put["e_tag"])
            with self._lock:
                if folder in self._etags:
                    self._etags[folder][name] = put["e_tag"]
