"""The CassetteStore protocol, and the file naming shared by every backend."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from tapeproxy.exchange.model import Exchange
    from tapeproxy.store.lastrun import LastRun

# Ordinal 1 is `<key>.json`; n >= 2 is `<key>.<n>.json`, with no leading zero, so each
# recording has exactly one name.
EXCHANGE_FILE = re.compile(r"^([0-9a-f]{64})(?:\.([2-9]|[1-9]\d+))?\.json$")
LIKE_EXCHANGE_FILE = re.compile(r"^[0-9a-f]{64}(?:\.\d+)?\.json$")


def exchange_file(key: str, ordinal: int) -> str:
    """`<key>.json` for the first recording of a request, `<key>.<n>.json` for the n-th."""
    return f"{key}.json" if ordinal == 1 else f"{key}.{ordinal}.json"


def parse_exchange_file(name: str) -> tuple[str, int] | None:
    match = EXCHANGE_FILE.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2) or 1)


def is_leftover(name: str) -> bool:
    """A write set aside as `.<file>.<random>.tmp` that was never renamed into place: what an
    interrupted write leaves behind."""
    return name.startswith(".") and name.endswith(".tmp")


class CassetteStore(Protocol):
    """A cassette library. The server records and replays through entries, read, write,
    write_pieces, scratch and delete, and keeps its last-run note (in the library's state
    folder, outside the cassette); the cassette tools (ls, show, verify, rekey, redact,
    prune) also list, locate and check."""

    def entries(self, cassette: str) -> dict[str, list[int]]:
        """Every recorded key of a cassette with its ordinals, ascending; no file is read."""
        ...

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        """One recording; CassetteCorrupt, caused by the backend's own error, when it cannot
        be read back."""
        ...

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        """Store atomically; False when the same recording (`Exchange.same_recording`) is
        already there.
        `fresh`: the caller knows no recording is there, so none is read to compare."""
        ...

    def write_pieces(self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes]) -> None:
        """Store an exchange file given as its bytes in pieces (one too large to hold in
        memory), atomically, replacing what is there."""
        ...

    def scratch(self, cassette: str) -> BinaryIO:
        """A scratch file for an answer being recorded into `cassette`, gone once closed."""
        ...

    def delete(self, cassette: str, key: str, ordinal: int) -> None: ...

    def cassettes(self) -> list[str]:
        """Every cassette holding exchanges, or what an interrupted write left behind."""
        ...

    def files(self, cassette: str) -> list[str]:
        """Every file name of a cassette, sorted: exchanges, leftovers of interrupted writes,
        and names tapeproxy does not read; [] when there is no such cassette."""
        ...

    def exists(self, cassette: str | None = None) -> bool:
        """Whether the library (None) or one cassette of it is there, recordings or not."""
        ...

    def where(self, cassette: str | None = None) -> str:
        """Where the library (None) or one cassette lives, for messages: a folder, a URL."""
        ...

    def read_last_run(self, cassette: str) -> LastRun | None:
        """The note of the cassette's last finished replay run; None when there is none.
        CassetteCorrupt when one is there but cannot be read."""
        ...

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        """Store the note atomically in the library's state folder, `.tapeproxy/` (see
        state.py), never in the cassette's own: a replay writes nothing there. None removes
        it (and makes nothing where there is none)."""
        ...
