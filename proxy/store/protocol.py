"""The CassetteStore protocol, and what every backend shares: the exchange file's name, its
bytes read back (a one-line CassetteCorrupt when they cannot be), the same-recording check."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from pydantic import ValidationError

from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange.model import NewerSchema, load_exchange
from tapeproxy.problems import json_path, one_line, said

if TYPE_CHECKING:
    from tapeproxy.exchange.blobs import Fetch
    from tapeproxy.exchange.model import Exchange
    from tapeproxy.store.lastrun import LastRun

# Ordinal 1 is `<key>.json`; n >= 2 is `<key>.<n>.json`, with no leading zero, so each
# recording has exactly one name.
EXCHANGE_FILE = re.compile(r"^([0-9a-f]{64})(?:\.([2-9]|[1-9]\d+))?\.json$")
LIKE_EXCHANGE_FILE = re.compile(r"^[0-9a-f]{64}(?:\.\d+)?\.json$")


STATE_FILE = re.compile(r"^[a-z][a-z0-9_-]{0,39}\.json$")


def state_name(name: str) -> str:
    """`.tapeproxy/<name>` in the library, for a state file's plain name (`drift.json`)."""
    if not STATE_FILE.match(name):
        raise ValueError(f"{name!r} is no state file name")
    return f".tapeproxy/{name}"


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


def entries_of(names: Iterable[str]) -> dict[str, list[int]]:
    """The keys and ordinals that exchange file names give, ordinals ascending; other names
    are skipped."""
    found: dict[str, list[int]] = {}
    for name in names:
        parsed = parse_exchange_file(name)
        if parsed is not None:
            found.setdefault(parsed[0], []).append(parsed[1])
    for ordinals in found.values():
        ordinals.sort()
    return found


def read_exchange(raw: bytes, where: str, cassette: str, fetch: Fetch | None = None) -> Exchange:
    """An exchange file's bytes read back, its blobs joined with `fetch`; CassetteCorrupt in
    one line naming `where` when they cannot be (the bytes' own error as its cause)."""
    try:
        return load_exchange(raw, fetch)
    except NewerSchema as exc:
        raise CassetteCorrupt(f"cannot read {where}: {exc}") from exc
    except ValueError as exc:  # bad JSON, and pydantic's ValidationError
        raise unreadable(where, cassette, exc) from exc


def unreadable(where: str, cassette: str, exc: BaseException) -> CassetteCorrupt:
    """The error for a recording that cannot be read back, in one line: what, why, what next."""
    return CassetteCorrupt(
        f"cannot read {where}: {one_line(exc)}; run `tapeproxy verify {cassette}` to check it"
    )


def why_unreadable(exc: CassetteCorrupt) -> str:
    """What is wrong with a recording that cannot be read back, in one line, without where it
    is or what to do (the caller says that): a pydantic error's first problem at its JSON path,
    with what was found there when that is short, else its cause's own one line."""
    cause = exc.__cause__ or exc
    if not isinstance(cause, ValidationError):
        return one_line(cause)
    first, more = cause.errors()[0], cause.error_count() - 1
    found = first.get("input")
    shown = repr(found) if isinstance(found, str | int | float | bool) else ""
    got = f" (found {shown})" if shown and len(shown) <= 60 else ""
    at = json_path(first["loc"]) or "the file"
    return f"{at}: {said(first)}{got}" + (f" (and {more} more problem(s))" if more else "")


def holds_same(raw: bytes | None, exchange: Exchange, fetch: Fetch, version: int) -> bool:
    """Whether stored bytes hold the same recording (`Exchange.same_recording`), so that it is
    not written again. No bytes, bytes (or blobs) that cannot be read, or a file in another
    schema_version than `version`, the one it would be written in (written again:
    upgraded), are not the same."""
    if raw is None:
        return False
    try:
        stored = load_exchange(raw, fetch)
    except ValueError:
        return False
    return stored.read_as == version and stored.same_recording(exchange)


class CassetteStore(Protocol):
    """A cassette library, in cassette terms: no path and no file object crosses it.

    The server lists, reads and writes exchanges, deletes the ones a record run supersedes,
    and keeps each cassette's last-run note (outside the cassette: a replay writes nothing
    in it). The cassette tools also list the cassettes and each cassette's names, and name
    places in messages. Before recording, `serve` asks whether a write gets through and has
    what interrupted writes left swept.

    Every backend passes tests/unit/test_store_conformance.py. A write that fails raises
    OSError (a backend translates its own errors to it); a recording that cannot be read
    back raises CassetteCorrupt (`read_exchange` and `unreadable` word it); a cassette name
    that `names.check_folder_name` refuses raises BadCassetteName."""

    def cassettes(self, skipped: dict[str, str] | None = None) -> list[str]:
        """Every cassette holding exchanges, or what an interrupted write left; sorted, nested
        names with `/`. A folder of them whose name no cassette may have, or one that cannot
        be listed, is left out: put in `skipped` (with why, and what to do) when given, else
        logged as a warning (`names.named_cassettes`)."""
        ...

    def entries(self, cassette: str) -> dict[str, list[int]]:
        """Every recorded key of a cassette with its ordinals, ascending; no recording is
        read. {} when there is no such cassette."""
        ...

    def names(self, cassette: str) -> list[str]:
        """Every name a cassette holds, sorted: its exchange files', what interrupted writes
        left (`is_leftover`), and names tapeproxy does not read. [] when there is no such
        cassette."""
        ...

    def read(self, cassette: str, key: str, ordinal: int) -> Exchange:
        """One recording; CassetteCorrupt, in one line, when it cannot be read back."""
        ...

    def write(self, cassette: str, exchange: Exchange, fresh: bool = False) -> bool:
        """Store one recording atomically (its blobs first: `blobs.packed`), replacing what is
        at its key and ordinal; False (and nothing written) when the same recording
        (`holds_same`) is already there.
        `fresh`: the caller knows no recording is there, so none is read to compare."""
        ...

    def create(self, cassette: str, exchange: Exchange) -> bool:
        """Store a new recording atomically only where nothing is yet; False, and nothing
        written, when another writer (another server on the same library) got there first.
        A conditional write (an S3 If-None-Match: *), so writers never overwrite each other."""
        ...

    def write_pieces(
        self, cassette: str, key: str, ordinal: int, pieces: Iterable[bytes], create: bool = False
    ) -> bool:
        """Store an exchange file given as its bytes in pieces (an answer too large to hold in
        memory), atomically, replacing what is there; with `create`, as `create` does: only
        where nothing is yet (False, and nothing written, when another writer got there)."""
        ...

    def delete(self, cassette: str, key: str, ordinal: int) -> None:
        """Remove one recording; none there is no error."""
        ...

    def stamps(self, cassette: str) -> dict[str, str]:
        """Each exchange file of a cassette with a stamp that changes whenever its content
        does (a file's inode, size, mtime and change time; an object's ETag), from one
        listing: nothing is read. {} when there is no such cassette."""
        ...

    def read_state(self, name: str) -> bytes | None:
        """What this machine keeps about the library under `name` (a summary cache: never
        in a cassette; a file store: in its state folder, `.tapeproxy/`); None when none or
        it cannot be read."""
        ...

    def write_state(self, name: str, data: bytes) -> None:
        """Keep `data` under `name`, replaced whole (a reader sees the old or the new); a
        failure is no error: it is a cache."""
        ...

    def blobs(self, cassette: str) -> list[str]:
        """The digests of the blobs a cassette holds (its recordings' large strings, stored
        once: `store/blobs.py`), sorted; [] when none."""
        ...

    def read_blob(self, cassette: str, digest: str) -> bytes | None:
        """A blob's bytes as stored (not checked: `blobs.checked` does); None when none."""
        ...

    def write_blob(self, cassette: str, digest: str, size: int, pieces: Iterable[bytes]) -> None:
        """Store one blob (`size` bytes, in pieces, named by their SHA-256) unless the store
        holds it whole already (then the pieces may be left unread, and it is young again:
        `blob_age`). A file written in pieces puts its blobs so, before the file is in place."""
        ...

    def delete_blob(self, cassette: str, digest: str) -> None:
        """Remove one blob; none there is no error."""
        ...

    def blob_age(self, cassette: str, digest: str) -> float | None:
        """Seconds since a blob was last put, or found there by a write that uses it (a
        recording under way may have put one its file does not yet refer to: `prune` leaves
        a young one); None when there is none."""
        ...

    def read_last_run(self, cassette: str) -> LastRun | None:
        """The note of the cassette's last finished replay run; None when there is none.
        CassetteCorrupt when one is there but cannot be read."""
        ...

    def write_last_run(self, cassette: str, record: LastRun | None) -> None:
        """Keep the note atomically, outside the cassette (a file store: in the library's
        git-ignored state folder, `.tapeproxy/`). None removes it, and makes nothing where
        there is none."""
        ...

    def read_report(self, name: str) -> bytes | None:
        """A file the tools keep in the library's state folder (`state_name`: the last drift
        report), as it was written; None when there is none."""
        ...

    def write_report(self, name: str, data: bytes) -> None:
        """Keep a file in the state folder atomically, outside every cassette."""
        ...

    def where(self, cassette: str | None = None) -> str:
        """Where the library (None) or one cassette lives, for messages: a folder, a URL."""
        ...

    def exists(self) -> bool:
        """Whether the library is there (a tool on a mistyped library fails, not passes)."""
        ...

    def unwritable(self, cassette: str) -> str | None:
        """Why recordings could not be written into `cassette`, in a message that says what
        to do; None when they can. It may make the library and try a write, as recording
        will, but writes nothing in the cassette (a run may replay from it)."""
        ...

    def sweep(self, cassette: str | None = None) -> int:
        """Remove what interrupted writes left in the library (None) or one cassette, except
        what a write under way may still be making (newer than a minute); how many."""
        ...
