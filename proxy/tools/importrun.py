"""An import run: each file read (bounded) into exchanges, skipped ones with why, and each
cassette written once through the store: numbered in order, all or nothing, never over what
is recorded."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tapeproxy.engine.finish import Finished
from tapeproxy.errors import TapeproxyError
from tapeproxy.exchange.model import Exchange, dump_around
from tapeproxy.problems import one_line
from tapeproxy.store.blobs import blobber_for
from tapeproxy.store.names import check_cassette_name
from tapeproxy.store.protocol import CassetteStore, exchange_file
from tapeproxy.tools.importing import Importer, Skip, Whole

# A file to import is read whole (YAML and HAR parsers take a document at once): past this
# size it is skipped, so memory stays bounded whatever is given (a YAML file takes some four
# times its size once parsed).
MAX_FILE = 128 * 1024 * 1024


@dataclass
class Imported:
    """What one cassette took: the files written, those already there as they are, and the
    exchanges skipped with why."""

    cassette: str
    written: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def write_cassette(
    store: CassetteStore, cassette: str, exchanges: Iterable[Finished], merge: bool = False
) -> Imported:
    """Number the exchanges in order (a repeated request's recordings as its ordinals) and
    write them, each atomically. A cassette that holds recordings already is refused unless
    `merge`: then an imported recording identical to the one at its place leaves it as it
    is, and one that differs goes after that request's recordings; nothing is replaced. A
    write that fails removes what this call wrote, so a cassette is imported whole or not."""
    held = store.entries(cassette)
    if held and not merge:
        count = sum(len(ordinals) for ordinals in held.values())
        raise Skip(
            f"cassette {cassette!r} already holds {count} recording(s): nothing written; "
            "--merge adds to it (keeping every recording), or import under --cassette NAME"
        )
    report = Imported(cassette)
    taken = {key: set(ordinals) for key, ordinals in held.items()}
    seen: dict[str, int] = {}
    done: list[tuple[str, int]] = []
    try:
        for finished in exchanges:
            key = finished.exchange.key
            seen[key] = seen.get(key, 0) + 1
            ordinal = seen[key]
            exchange = finished.exchange.model_copy(update={"ordinal": ordinal})
            if ordinal in taken.get(key, ()):
                if store.read(cassette, key, ordinal).same_recording(exchange):
                    report.same.append(exchange_file(key, ordinal))
                    continue
                ordinal = max(taken[key]) + 1
                exchange = exchange.model_copy(update={"ordinal": ordinal})
            if _place(store, cassette, exchange, finished):
                done.append((key, ordinal))
                taken.setdefault(key, set()).add(ordinal)
                report.written.append(exchange_file(key, ordinal))
    except BaseException:
        for key, ordinal in done:
            store.delete(cassette, key, ordinal)
        raise
    return report


def _place(store: CassetteStore, cassette: str, exchange: Exchange, finished: Finished) -> bool:
    """Write one recording only where nothing is yet (another writer's is never replaced)."""
    if finished.middle is None:
        return store.create(cassette, exchange)
    pieces = dump_around(exchange, finished.middle, blobber_for(store, cassette))
    return store.write_pieces(cassette, exchange.key, exchange.ordinal, pieces, create=True)


Reader = Callable[[bytes], Iterator["Whole | str"]]


@dataclass
class FileReport:
    """One file read: the cassette it goes to, how many exchanges it gave, the ones skipped
    (`#N: why`), or why the whole file was."""

    file: str
    cassette: str
    exchanges: int = 0
    skipped: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class ImportReport:
    files: list[FileReport] = field(default_factory=list)
    cassettes: list[Imported] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # cassette -> why nothing written


def run_import(
    store: CassetteStore,
    importer: Importer,
    files: Sequence[tuple[Path, str]],
    read: Reader,
    merge: bool = False,
) -> ImportReport:
    """Read each (file, cassette) and write each cassette once, its files' exchanges in the
    order given. A file that cannot be read, or an exchange that cannot be imported, is
    skipped with why; a cassette that cannot be written is refused whole. A cassette is
    written as its files are read, one exchange at a time: what an import holds (memory, an
    answer's scratch file) is one exchange's, however many files it is given."""
    report = ImportReport()
    grouped: dict[str, list[Path]] = {}
    for path, cassette in files:
        grouped.setdefault(cassette, []).append(path)
    for cassette, paths in grouped.items():
        exchanges = _exchanges(paths, cassette, importer, read, report)
        first = next(exchanges, None)
        if first is None:
            continue
        try:
            name = check_cassette_name(cassette)
            report.cassettes.append(
                write_cassette(store, name, itertools.chain([first], exchanges), merge)
            )
        except TapeproxyError as exc:
            report.refused[cassette] = exc.message
        except OSError as exc:  # the store's write failed: what this cassette got is removed
            report.refused[cassette] = f"writing it failed: {exc}"
        for _ in exchanges:  # a refused cassette's files are still read: each says what it held
            pass
    return report


def _exchanges(
    paths: Sequence[Path], cassette: str, importer: Importer, read: Reader, report: ImportReport
) -> Iterator[Finished]:
    """The exchanges of a cassette's files in order, each file's report added as it is read."""
    count = 0
    for path in paths:
        one = FileReport(str(path), cassette)
        report.files.append(one)
        try:
            raw = _read_bounded(path)
            for number, item in enumerate(read(raw), start=1):
                if isinstance(item, str):
                    one.skipped.append(f"#{number}: {item}")
                    continue
                try:
                    finished = importer.exchange(item, count)
                except TapeproxyError as exc:
                    one.skipped.append(f"#{number}: {exc.message}")
                    continue
                except ValueError as exc:  # what no exchange file can hold (pydantic's check)
                    one.skipped.append(f"#{number}: {one_line(exc)}")
                    continue
                count += 1
                one.exchanges += 1
                yield finished
        except Skip as exc:
            one.error = exc.message


def _read_bounded(path: Path) -> bytes:
    """A file's bytes, at most MAX_FILE of them: read so, not trusted to its size (a file
    that grows as it is read, /dev/zero, a pipe such as /dev/stdin)."""
    try:
        with path.open("rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size > MAX_FILE:
                raise Skip(f"the file is {size:,} bytes, over the {MAX_FILE:,} an import reads")
            data = file.read(MAX_FILE + 1)
    except OSError as exc:
        raise Skip(f"cannot read it: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE:
        raise Skip(f"the file is over the {MAX_FILE:,} bytes an import reads")
    return data
