"""The CassetteStore protocol, the file naming shared by every backend, and what makes two
recordings the same."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from tapeproxy.exchangefile import SCHEMA_VERSION, Record, record_of, render, untimed

if TYPE_CHECKING:  # the scribe writes through a FileStore: no pydantic on its way
    from tapeproxy.lastrun import LastRun
    from tapeproxy.models import Exchange

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


def same_recording(stored: Exchange | Record, new: Exchange | Record) -> bool:
    """True when `new` is what `stored` holds but for timing and recording order (`seq`), so a
    re-record of the same answers leaves the stored one (and git) untouched, even when
    parallel calls came in another order. The stored file keeps its seq: the position in the
    run that first recorded that answer (a sequential agent asks in the same order each time,
    so its seqs do not change; calls made in parallel have no one order to keep)."""
    old, record = record_of(stored), record_of(new)
    return render(untimed(old, old["seq"])) == render(untimed(record, old["seq"]))


def same_as_stored(raw: bytes, new: Record) -> bool | None:
    """`same_recording` of the file `raw` (as `FileStore` reads it: a file that cannot be read,
    or in an older schema_version, is not the same) and `new`, found without the pydantic
    model where that is sure; None where only the model can tell (a file that is not as
    tapeproxy writes them: a value the model would coerce, a missing default). `new` is a
    Record a capture made, as the model reads it (see tests/unit/test_exchangefile.py)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(data, dict) or not _is_int(data.get("schema_version")):
        return False  # not even a version: the model is not asked, nor would it read it
    if data["schema_version"] != SCHEMA_VERSION:
        return False  # newer: unreadable; older: written again, upgraded
    response = data.get("response")
    if not isinstance(response, dict) or not isinstance(response.get("body") or {}, dict):
        return None
    frames = response.get("frames")
    if not _frame_list(frames):
        return None
    seq = data.get("seq")
    if render(untimed(data, seq)) == render(untimed(new, seq)):
        # What the model reads as `new` but for the timings: the same, if they are valid.
        ends = response.get("end_ms", 0)
        timings = [seq, ends, *(frame.get("ms") for frame in frames or ())]
        return True if all(_is_int(n) and n >= 0 for n in timings) else None
    return False if _differs(response, new["response"]) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _frame_list(frames: Any) -> bool:
    return frames is None or (
        isinstance(frames, list) and all(isinstance(frame, dict) for frame in frames)
    )


def _differs(stored: dict[str, Any], new: Record) -> bool:
    """Whether the stored response surely differs from `new`'s where the model takes a
    value as it is: a body (a str-keyed dict of JSON values, kept as is), the number of
    frames, or a frame's text or base64 (a str, kept as is). Then the file is written again
    whether or not the model reads it."""
    body, other = stored.get("body"), new.get("body")
    if (body is None or isinstance(body, dict)) and _laid_out(body) != _laid_out(other):
        return True
    frames, others = stored.get("frames"), new.get("frames")
    if frames is None or others is None:
        return (frames is None) != (others is None)
    if len(frames) != len(others):
        return True
    for frame, fresh in zip(frames, others, strict=True):
        for name in ("text", "base64"):
            value = frame.get(name)
            if isinstance(value, str) and value != fresh.get(name):
                return True
    return False


def _laid_out(body: Record | None) -> bytes:
    """A body as `render` lays it out (its JSON in its own key order), to compare."""
    if body is None:
        return b""
    return render({"response": {"body": body}})


class CassetteStore(Protocol):
    """A cassette library. The server records and replays through entries, read, write,
    write_pieces, scratch and delete, and keeps its last-run note with the last two (in the
    library's state folder, outside the cassette); the cassette tools (ls, show, verify,
    rekey, redact, prune) also list, locate and check."""

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

    def write(self, cassette: str, exchange: Exchange | Record, fresh: bool = False) -> bool:
        """Store atomically (an Exchange, or the Record a capture made: exchangefile.py);
        False when an equal recording (timing aside) is already there.
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
