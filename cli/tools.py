"""The cassette tools that read a library: `ls`, `show` and `diff` (tokens and cost too)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tapeproxy.cli.library import (
    CassettesOption,
    ConfigOption,
    JsonOption,
    PricesOption,
    existing,
    fail,
    library_store,
    missing_library,
    open_library,
    price_table,
    progress,
)
from tapeproxy.errors import BadCassetteName, CassetteCorrupt, ConfigError, TapeproxyError
from tapeproxy.store.names import check_folder_name
from tapeproxy.store.protocol import CassetteStore

if TYPE_CHECKING:
    from tapeproxy.tools.diff import Side


def list_cassettes(
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the cassettes: exchanges, streams, failures kept, tokens and cost.

    cost_usd adds up the exchanges whose model has a price; it is null when none has, and
    `unpriced` counts the exchanges it leaves out."""
    from tapeproxy.cli.reports import print_summaries
    from tapeproxy.tools.listing import count_files
    from tapeproxy.tools.summaries import summarize

    try:
        library = open_library(cassettes, None, None, config, rules=False)
        table = price_table(prices, config)
        names = library.store.cassettes()
        count = partial(count_files, library.store, names)
        with progress(count, "reading cassettes") as tick:
            found = [summarize(library.store, name, table, tick) for name in names]
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_summaries(found, table, as_json)


def show(
    name: Annotated[str, typer.Argument(help="The cassette to show.")],
    full: Annotated[
        bool, typer.Option("--full", help="Print request and response bodies; a stream's text.")
    ] = False,
    exchange: Annotated[
        str | None,
        typer.Option(help="Only the exchange whose key starts with KEY, in full.", metavar="KEY"),
    ] = None,
    frames: Annotated[
        bool, typer.Option("--frames", help="With --full: a stream's raw frames too.")
    ] = False,
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
    as_json: JsonOption = False,
) -> None:
    """List the exchanges of one cassette in recorded order: method, upstream, path, model,
    status, streamed, frames, tokens, cost and key.

    A file that cannot be read is listed as unreadable, with why, and the exit status is 1
    (`tapeproxy verify NAME` checks every file)."""
    from tapeproxy.cli.reports import print_full, print_rows
    from tapeproxy.tools.listing import count_files, listed, pick, read_all

    try:
        library = open_library(cassettes, None, None, config, rules=False)
        table = price_table(prices, config)
        store = library.store
        existing(library, name)
        if exchange is not None:
            key, ordinals = pick(store, name, exchange)
            items = [listed(store, name, key, n, table) for n in ordinals]
        else:
            with progress(count_files(store, [name]), f"reading {name}") as tick:
                items = read_all(store, name, table, tick)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    if full or exchange is not None:
        print_full(name, items, frames, as_json)
    else:
        print_rows(name, [item.row for item in items], as_json)
    if any(item.row.unreadable for item in items):
        raise typer.Exit(1)


def diff(
    a: Annotated[str, typer.Argument(help="A cassette name (under --cassettes) or a folder.")],
    b: Annotated[str, typer.Argument(help="A cassette name (under --cassettes) or a folder.")],
    cassettes: CassettesOption = None,
    config: ConfigOption = None,
    prices: PricesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare two cassettes by key and ordinal: exit 0 when equal, 1 when they differ, 2 on
    an error.

    Lists the exchanges only in A, only in B, and the changed ones with their differing
    fields by JSON path. Frame timings and recording order never count; a stream counts as
    its text and its number of frames. Shows the token and cost delta (B - A)."""
    from tapeproxy.cli.reports import print_diff
    from tapeproxy.tools.diff import aligned, compare

    try:
        store = library_store(cassettes, config)
        left, right = side(a, store), side(b, store)
        for given, found in ((a, left), (b, right)):
            if not found.store.entries(found.cassette):
                raise ConfigError(
                    f"no exchange files in {found.where()} ({given!r}): a cassette is a "
                    "folder of exchange files; to compare two libraries, diff them cassette "
                    "by cassette (`tapeproxy ls` lists them)"
                )
        table = price_table(prices, config)
        with progress(aligned(left, right), "comparing") as tick:
            result = compare(left, right, table, tick)
    except TapeproxyError as exc:
        raise fail(exc, as_json) from exc
    print_diff(result, as_json)
    if not result.equal:
        raise typer.Exit(1)


def side(given: str, library: CassetteStore) -> Side:
    """The cassette of the library by that name; else the folder at that path."""
    from tapeproxy.store import open_store
    from tapeproxy.tools.diff import Side

    try:
        if library.names(given):
            return Side(library, given)
    except (BadCassetteName, CassetteCorrupt):
        pass  # no cassette name (`../other/run`, `/tmp/x`), or a file: it may still be a folder
    folder = Path(given)
    if folder.is_dir():
        place = folder.resolve()
        try:
            return Side(open_store(place.parent), check_folder_name(place.name))
        except BadCassetteName as exc:
            raise ConfigError(
                f"folder {given}: {place.name!r} is not a cassette name; rename the folder"
            ) from exc
    if not library.exists():
        raise ConfigError(f"{given!r} is no folder, and {missing_library(library).message}")
    raise ConfigError(
        f"no cassette {given!r} under {library.where()}, and no folder {given}; "
        "`tapeproxy ls` lists the cassettes"
    )
