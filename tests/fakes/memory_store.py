"""A CassetteStore in a dict, with no folder and no file behind it: the cassette tools' tests
run on it, and it passes the same conformance suite as every backend of the table
(tests/unit/test_store_conformance.py), which shows the suite asks nothing but the protocol."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable

from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange.blobs import Fetch
from tapeproxy.exchange.model import Exchange
from tapeproxy.store.blobs import fetcher, packed
from tapeproxy.store.lastrun import LastRun, dump_last_run, note_name, read_note
from tapeproxy.store.names import check_folder_name, named_cassettes
from tapeproxy.store.protocol import (
    entries_of,
    exchange_file,
    holds_same,
    is_leftover,
    parse_exchange_file,
    read_exchange,
    state_name,
)


class MemoryStore:
    """cassette name -> file name -> the file's bytes; the last-run notes apart, as a library
    keeps them outside its cassettes."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, bytes]] = {}
        self.notes: dict[str, bytes] = {}
        self.state: dict[str, bytes] = {}
        self.blob_data: dict[str, dict[str, bytes]] = {}  # cassette -> digest -> bytes
        self.blob_times: dict[tuple[str, str], float] = {}  # when each was last put

    def cassettes(self, skipped: dict[str, str] | None = None) -> list[str]:
        found = [
            name
            for name, files in self.data.items()
            if any(parse_exchange_file(file) or is_leftover(file) for file in files)
        ]
        return named_cassettes(found, "memory:", skipped)

    def entries(self, cassette: str) -> dict[str, list[int]]:
        return entries_of(self._files(cassette))

    def names(self, cassette: str) -> list[str]:
        return sorted(self._files(cassette))

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        name = exchange_file(key, ordinal)
        where = f"{self.where(cassette)}/{name}"
        raw = self._files(cassette).get(name)
        if raw is None:
            raise CassetteCorrupt(f"cannot read {where}: no such recording")
        return read_exchange(raw, where, cassette, self._fetch(cassette))

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        name = exchange_file(exchange.key, exchange.ordinal)
        files = self.data.setdefault(check_folder_name(cassette), {})
        data, blobs, version = packed(exchange)
        if not fresh and holds_same(files.get(name), exchange, self._fetch(cassette), version):
            return False
        self._put_blobs(cassette, blobs)
        files[name] = data
        return True

    def create(self, cassette: str, exchange: Exchange) -> bool:
        name = exchange_file(exchange.key, exchange.ordinal)
        files = self.data.setdefault(check_folder_name(cassette), {})
        data, blobs, _ = packed(exchange)
        self._put_blobs(cassette, blobs)
        if name in files:
            return False
        files[name] = data
        return True

    def stamps(self, cassette: str) -> dict[str, str]:
        files = self._files(cassette)
        return {
            name: hashlib.sha256(data).hexdigest()
            for name, data in files.items()
            if parse_exchange_file(name)
        }

    def read_state(self, name: str) -> bytes | None:
        return self.state.get(name)

    def write_state(self, name: str, data: bytes) -> None:
        self.state[name] = data

    def blobs(self, cassette: str) -> list[str]:
        return sorted(self.blob_data.get(check_folder_name(cassette), {}))

    def read_blob(self, cassette: str, digest: str) -> bytes | None:
        return self.blob_data.get(check_folder_name(cassette), {}).get(digest)

    def write_blob(self, cassette: str, digest: str, size: int, pieces: Iterable[bytes]) -> None:
        self._put_blobs(cassette, {digest: b"".join(pieces)})

    def delete_blob(self, cassette: str, digest: str) -> None:
        self.blob_data.get(check_folder_name(cassette), {}).pop(digest, None)

    def blob_age(self, cassette: str, digest: str) -> float | None:
        if self.read_blob(cassette, digest) is None:
            return None
        return time.time() - self.blob_times.get((check_folder_name(cassette), digest), 0.0)

    def _put_blobs(self, cassette: str, blobs: dict[str, bytes]) -> None:
        folder = check_folder_name(cassette)
        self.blob_data.setdefault(folder, {}).update(blobs)
        self.blob_times.update(((folder, digest), time.time()) for digest in blobs)

    def _fetch(self, cassette: str) -> Fetch:
        return fetcher(lambda digest: self.read_blob(cassette, digest))

    def write_pieces(
        self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes], create: bool = False
    ) -> bool:
        files = self.data.setdefault(check_folder_name(cassette), {})
        if create and exchange_file(key, ordinal) in files:
            return False
        files[exchange_file(key, ordinal)] = b"".join(pieces)
        return True

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        self._files(cassette).pop(exchange_file(key, ordinal), None)

    def read_last_run(self, cassette: str) -> LastRun | None:
        name = note_name(cassette)
        raw = self.notes.get(name)
        return None if raw is None else read_note(raw, f"memory://{name}")

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        if record is None:
            self.notes.pop(note_name(cassette), None)
        else:
            self.notes[note_name(cassette)] = dump_last_run(record)

    def read_report(self, name: str) -> bytes | None:
        return self.notes.get(state_name(name))

    def write_report(self, name: str, data: bytes) -> None:
        self.notes[state_name(name)] = data

    def where(self, cassette: str | None = None) -> str:
        return "memory://" if cassette is None else f"memory://{check_folder_name(cassette)}"

    def exists(self) -> bool:
        return True

    def unwritable(self, cassette: str) -> str | None:
        check_folder_name(cassette)
        return None

    def sweep(self, cassette: str | None = None) -> int:
        swept = 0
        for name, files in self.data.items():
            if cassette is None or name == check_folder_name(cassette):
                for leftover in [file for file in files if is_leftover(file)]:
                    del files[leftover]
                    swept += 1
        return swept

    def _files(self, cassette: str) -> dict[str, bytes]:
        return self.data.get(check_folder_name(cassette), {})
