"""The S3 store's blobs (one object each, `PREFIX/<cassette>/blobs/<sha256>`, read through
the local cache, where a blob's name, its content's digest, is all that checks it), and the
stamps and local state the summary cache asks of it."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import obstore
from obstore.store import S3Store as Client

from tapeproxy.exchange.blobs import Fetch
from tapeproxy.store.blobs import BLOBS, KEEP_UNUSED, fetcher, is_blob
from tapeproxy.store.names import check_folder_name
from tapeproxy.store.protocol import parse_exchange_file
from tapeproxy.store.s3cache import ObjectCache
from tapeproxy.store.s3client import FAILED, MISSING, why

if TYPE_CHECKING:
    from obstore import ObjectMeta


class S3Blobs:
    """The blobs of every cassette (by its checked folder name) of one S3 library."""

    def __init__(self, client: Client, url: str, cache: ObjectCache) -> None:
        self._client, self._url, self._cache = client, url, cache

    def listed(self, folder: str) -> list[str]:
        place = f"{folder}/{BLOBS}"
        try:
            listed = obstore.list_with_delimiter(self._client, place)
        except FAILED as exc:
            raise OSError(f"cannot list {self._url}/{place}: {why(exc)}") from exc
        names = (meta["path"].rpartition("/")[2] for meta in listed["objects"])
        return sorted(name for name in names if is_blob(name))

    def read(self, folder: str, digest: str) -> bytes | None:
        """Read through the local cache, kept under the digest as its version: no listing
        and no ETag is needed to know a cached blob is the one named."""
        path = f"{folder}/{BLOBS}/{digest}"
        cached = self._cache.get(path, digest)
        if cached is not None:
            return cached
        try:
            raw = bytes(obstore.get(self._client, path).bytes())
        except MISSING:
            return None
        except FAILED as exc:
            raise OSError(f"cannot read {self._url}/{path}: {why(exc)}") from exc
        self._cache.put(path, digest, raw)
        return raw

    def delete(self, folder: str, digest: str) -> None:
        path = f"{folder}/{BLOBS}/{digest}"
        try:
            obstore.delete(self._client, path)
        except MISSING:
            pass
        except FAILED as exc:
            raise OSError(f"cannot delete {self._url}/{path}: {why(exc)}") from exc
        self._cache.drop(path)

    def age(self, folder: str, digest: str) -> float | None:
        try:
            return _age(obstore.head(self._client, f"{folder}/{BLOBS}/{digest}"))
        except MISSING:
            return None
        except FAILED as exc:
            raise OSError(f"cannot read {self._url}/{folder}/{BLOBS}/{digest}: {why(exc)}") from exc

    def fetch(self, folder: str) -> Fetch:
        def read(digest: str) -> bytes | None:
            try:
                return self.read(folder, digest)
            except OSError as exc:  # read back as a recording that cannot be: one line
                raise ValueError(str(exc)) from exc

        return fetcher(read)

    def put(self, folder: str, blobs: dict[str, bytes]) -> None:
        for digest, data in blobs.items():
            self.write(folder, digest, len(data), (data,))

    def write(self, folder: str, digest: str, size: int, pieces: Iterable[bytes]) -> None:
        """Put unless the store holds it (its name is its content's), put in the last half
        of KEEP_UNUSED (an older one is put again: young, so no prune deletes it while the
        file that uses it is written). Asked of the store, not the local cache: another
        machine's prune may have deleted a blob this one still has cached. A large blob
        goes up as a multipart upload (obstore's, past its chunk size): bounded memory."""
        path = f"{folder}/{BLOBS}/{digest}"
        try:
            meta = obstore.head(self._client, path)
            if meta["size"] == size and _age(meta) < KEEP_UNUSED / 2:
                return
        except FAILED:  # missing (or the head failed): put it, which says why if it fails
            pass
        self._cache.drop(path)
        try:
            obstore.put(self._client, path, iter(pieces))
        except FAILED as exc:
            raise OSError(f"cannot write {self._url}/{path}: {why(exc)}") from exc


def _age(meta: ObjectMeta) -> float:
    return time.time() - meta["last_modified"].timestamp()


class BlobsAndState:
    """What S3Store answers of the protocol for blobs and the summary cache."""

    _blobs: S3Blobs
    _cache: ObjectCache

    def _listed(self, cassette: str) -> dict[str, str]:
        raise NotImplementedError

    def stamps(self, cassette: str) -> dict[str, str]:
        """The ETags of the cassette's last listing."""
        listed = self._listed(cassette)
        return {name: etag for name, etag in listed.items() if parse_exchange_file(name)}

    def read_state(self, name: str) -> bytes | None:
        return self._cache.read_state(name)

    def write_state(self, name: str, data: bytes) -> None:
        self._cache.write_state(name, data)

    def blobs(self, cassette: str) -> list[str]:
        return self._blobs.listed(check_folder_name(cassette))

    def read_blob(self, cassette: str, digest: str) -> bytes | None:
        return self._blobs.read(check_folder_name(cassette), digest)

    def write_blob(self, cassette: str, digest: str, size: int, pieces: Iterable[bytes]) -> None:
        self._blobs.write(check_folder_name(cassette), digest, size, pieces)

    def delete_blob(self, cassette: str, digest: str) -> None:
        self._blobs.delete(check_folder_name(cassette), digest)

    def blob_age(self, cassette: str, digest: str) -> float | None:
        return self._blobs.age(check_folder_name(cassette), digest)
