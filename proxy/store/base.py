"""The CassetteStore protocol, the file naming shared by every backend, and what makes two
recordings the same."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Protocol

from llmtape.lastrun import LastRun
from llmtape.models import Exchange, Frame, dump_exchange

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


def untimed(exchange: Exchange) -> Exchange:
    """The exchange with its timings (frame arrivals, when a cut came) left out."""
    response = exchange.response
    frames = response.frames
    frames = None if frames is None else [Frame(ms=0, text=f.text, base64=f.base64) for f in frames]
    response = response.model_copy(update={"frames": frames, "end_ms": None})
    return exchange.model_copy(update={"response": response})


def same_recording(stored: Exchange, new: Exchange) -> bool:
    """True when `new` is what `stored` holds but for timing and recording order (`seq`), so a
    re-record of the same answers leaves the stored one (and git) untouched, even when
    parallel calls came in another order. The stored file keeps its seq: the position in the
    run that first recorded that answer (a sequential agent asks in the same order each time,
    so its seqs do not change; calls made in parallel have no one order to keep)."""
    return dump_exchange(untimed(stored)) == dump_exchange(
        untimed(new).model_copy(update={"seq": stored.seq})
    )


class CassetteStore(Protocol):
    """A cassette library. The server records and replays through entries, read, write,
    write_pieces, scratch and delete, and keeps its last-run note with the last two; the
    cassette tools (ls, show, verify, rekey, redact, prune) also list, locate and check."""

    def open(self) -> list[Path]:
        """A server starts on the library: what a crashed one left half-written is put
        right (the files written back), and writes may take a faster durable way until
        `close`. The cassette tools never open: each of their writes is durable alone."""
        ...

    def close(self) -> None:
        """Every write is durable, and whatever `open` took is let go."""
        ...

    def entries(self, cassette: str) -> dict[str, list[int]]:
        """Every recorded key of a cassette with its ordinals, ascending; no file is read."""
        ...

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        """One recording; CassetteCorrupt, caused by the backend's own error, when it cannot
        be read back."""
        ...

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        """Store atomically; False when an equal recording (timing aside) is already there.
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
        and names llmtape does not read; [] when there is no such cassette."""
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
        """Store the note atomically beside the exchanges (None removes it); it is not an
        exchange, so it is in no listing of keys."""
        ...
