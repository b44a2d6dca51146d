"""What every backend shares about blobs (a body's large strings, stored once per cassette
as `<cassette>/blobs/<sha256>`): an exchange packed for writing, a blob read back checked
against its name, which blobs a cassette's recordings use."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tapeproxy.exchange.blobs import DIGEST, Fetch, digest_of, held, pack
from tapeproxy.exchange.blobstream import Blobber
from tapeproxy.exchange.layout import render
from tapeproxy.exchange.model import Exchange

if TYPE_CHECKING:
    from tapeproxy.store.protocol import CassetteStore

BLOBS = "blobs"  # the folder (or prefix) beside a cassette's exchange files
# A blob no recording uses is deleted (by `prune`) only this long after it was last put or
# used by a write: a server recording into the cassette puts a blob before the file that
# refers to it, so a younger one may be in use a moment later.
KEEP_UNUSED = 3600.0


def packed(exchange: Exchange) -> tuple[bytes, dict[str, bytes], int]:
    """The exchange file's bytes, its large strings put out as blobs; those blobs; and the
    schema_version it is written in (2 with a reference in it, else 1)."""
    done = pack(exchange.record())
    version = done.record["schema_version"]
    assert isinstance(version, int)
    return render(done.record), done.blobs, version


def written_version(exchange: Exchange) -> int:
    """The schema_version its file would be written in now (`verify` notes older ones)."""
    version = pack(exchange.record()).record["schema_version"]
    assert isinstance(version, int)
    return version


def is_blob(name: str) -> bool:
    return DIGEST.match(name) is not None


def checked(digest: str, data: bytes | None) -> bytes:
    """A blob's bytes, when they hash to its name; ValueError when missing or changed."""
    if data is None:
        raise ValueError(f"its blob {digest} is missing")
    if digest_of(data) != digest:
        raise ValueError(f"its blob {digest} does not hold what its name says: edited?")
    return data


def fetcher(read: Callable[[str], bytes | None]) -> Fetch:
    """A `Fetch` over a backend's read of one blob (None: not there): each checked, and each
    read once for one exchange file however often it refers to it."""
    seen: dict[str, bytes] = {}

    def fetch(digest: str) -> bytes:
        if digest not in seen:
            seen[digest] = checked(digest, read(digest))
        return seen[digest]

    return fetch


def used_by(exchange: Exchange) -> set[str]:
    """The blobs an exchange read from its file refers to: those it was read with, not
    those it would be written as now (a file an earlier build wrote may cut its strings
    otherwise, and a version-1 file refers to none)."""
    return set(exchange.refers)


def written_as(exchange: Exchange) -> set[str]:
    """The blobs an exchange's large runs are written as now."""
    return held(strings(exchange))[0]


def strings(exchange: Exchange) -> list[Any]:
    """Where an exchange's blobs may be, for `blobs.held`: its bodies, and each frame's text
    (an HTTP stream's, a WebSocket session's)."""
    found: list[Any] = [exchange.request.body, exchange.response.body]
    for one in exchange.response.frames or ():
        found += (one.text, one.base64)
    for frame in exchange.session.frames if exchange.session is not None else ():
        found += (frame.json_, frame.text, frame.base64)
    return found


def blobber_for(store: CassetteStore, cassette: str) -> Blobber:
    """A Blobber that puts a file's blobs in `cassette` as the file is written in pieces."""
    return Blobber(lambda digest, size, pieces: store.write_blob(cassette, digest, size, pieces))
