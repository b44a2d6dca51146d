"""The summary cache: each exchange file's row (as `ls`, `report` and the viewer's library page
add it up) kept by the file's stamp (`CassetteStore.stamps`: inode, size, mtime and ctime, or
an ETag) in the library's state, so a command that walks the whole library reads only the files
that changed since it last looked."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, astuple, fields
from typing import Any

from tapeproxy.exchange.model import Exchange
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.sealed import seal, unseal
from tapeproxy.store.protocol import CassetteStore, parse_exchange_file
from tapeproxy.tools.listing import Row, Summary, Tick, listed, no_tick, summary_of
from tapeproxy.tools.prices import NO_PRICES, PriceTable

# Bumped whenever a row's fields or their meaning change: an older cache is then rebuilt.
VERSION = 2
# A row but its cost (the price table is the caller's) and its problem (an unreadable file
# is never cached: it is read again each time).
FIELDS = tuple(f.name for f in fields(Row) if f.name not in ("cost_usd", "problem"))
_COST = [f.name for f in fields(Row)].index("cost_usd")
_SEQ = FIELDS.index("seq") + 1  # where an entry holds its seq (the order)

Entry = list[Any]  # [stamp, *FIELDS values, duration_ms]


def cache_name(cassette: str) -> str:
    """The state file of one cassette's summaries (a hash: any cassette name fits)."""
    return f"summaries/{hashlib.sha256(cassette.encode()).hexdigest()[:32]}.json"


def cached_rows(
    store: CassetteStore,
    cassette: str,
    prices: PriceTable = NO_PRICES,
    tick: Tick = no_tick,
    stamps: dict[str, str] | None = None,
) -> list[Row]:
    """Every exchange's row, in recorded order, as `listing.show` gives them: those whose
    file has the stamp the cache holds taken from it, the others read (and kept)."""
    return [row for row, _ in cached_page(store, cassette, prices, None, tick, stamps)[0]]


Timed = tuple[Row, int | None]  # a row, and how long its answer took (`duration`)


def cached_page(
    store: CassetteStore,
    cassette: str,
    prices: PriceTable = NO_PRICES,
    window: slice | None = None,
    tick: Tick = no_tick,
    stamps: dict[str, str] | None = None,
) -> tuple[list[Timed], int]:
    """The rows of `window` of a cassette's exchanges in recorded order (all with None), with
    their durations, and how many it holds: the order from the cache, rows built only for
    the window, no file read but those that changed."""
    stamps = store.stamps(cassette) if stamps is None else stamps
    cached = load(store.read_state(cache_name(cassette)), cassette)
    kept: dict[str, Entry] = {}
    order: list[tuple[int, str, Timed | Entry]] = []
    for name, stamp in stamps.items():
        if parse_exchange_file(name) is None:
            continue
        entry = cached.get(name)
        if entry is not None and entry[0] == stamp and _shaped(entry):
            kept[name] = entry
            order.append((entry[_SEQ], name, entry))
        else:
            timed = _read(store, cassette, name, stamp, prices, kept)
            order.append((timed[0].seq, name, timed))
        tick()
    order.sort(key=lambda item: (item[0], item[1]))
    rows = []
    for _, name, item in order if window is None else order[window]:
        built = item if isinstance(item, tuple) else _row(item, prices)
        rows.append(built or _read(store, cassette, name, stamps[name], prices, kept))
    if kept != cached:
        store.write_state(cache_name(cassette), dump(kept, cassette))
    return rows, len(order)


def duration(found: Exchange | None) -> int | None:
    """How long an answer took, where the recording knows (a stream's last frame, a cut's
    end); a whole answer keeps no time."""
    if found is None:
        return None
    response = found.response
    if response.end_ms is not None:
        return response.end_ms
    return response.frames[-1].ms if response.frames else None


def _read(
    store: CassetteStore,
    cassette: str,
    name: str,
    stamp: str,
    prices: PriceTable,
    kept: dict[str, Entry],
) -> Timed:
    """A file's row read from it, and kept (unless it cannot be read)."""
    key, ordinal = parse_exchange_file(name) or ("", 0)
    found = listed(store, cassette, key, ordinal, prices)
    took = duration(found.exchange)
    if found.exchange is not None:
        kept[name] = _entry(stamp, found.row, took)
    else:
        kept.pop(name, None)
    return found.row, took


def _shaped(entry: Entry) -> bool:
    return len(entry) == len(FIELDS) + 2 and type(entry[_SEQ]) is int


def summarize(
    store: CassetteStore, cassette: str, prices: PriceTable = NO_PRICES, tick: Tick = no_tick
) -> Summary:
    """A cassette's summary, as `ls` lists it, through the summary cache: kept whole too, by
    the stamps of all its files and the price table, so a cassette where nothing changed
    builds no row at all."""
    stamps = store.stamps(cassette)
    sign = _sign(stamps, prices)
    total = _total(store.read_state(total_name(cassette)), cassette, sign)
    if total is not None:
        for _ in stamps:
            tick()
        return total
    summary = summary_of(cassette, cached_rows(store, cassette, prices, tick, stamps))
    sealed = seal({"cassette": cassette, "sign": sign, "summary": asdict(summary)})
    store.write_state(total_name(cassette), sealed)
    return summary


def total_name(cassette: str) -> str:
    return cache_name(cassette).removesuffix(".json") + ".total.json"


def _sign(stamps: dict[str, str], prices: PriceTable) -> str:
    listing = "\n".join(f"{name} {stamp}" for name, stamp in sorted(stamps.items()))
    return hashlib.sha256(f"{VERSION}|{_priced(prices)}|{listing}".encode()).hexdigest()


_PRICED: dict[int, tuple[PriceTable, str]] = {}


def _priced(prices: PriceTable) -> str:
    """A digest of a price table, worked out once per table."""
    known = _PRICED.get(id(prices))
    if known is None or known[0] is not prices:
        text = repr((sorted(prices.models.items()), prices.sources, prices.date))
        known = _PRICED[id(prices)] = (prices, hashlib.sha256(text.encode()).hexdigest())
    return known[1]


def _total(raw: bytes | None, cassette: str, sign: str) -> Summary | None:
    """The summary kept for exactly these files and prices; None when there is none, it is
    for others, or it is damaged (never trusted)."""
    data = unseal(raw)
    if data is None:
        return None
    try:
        if data["cassette"] != cassette or data["sign"] != sign:
            return None
        summed = data["summary"]
        if not _typed(summed, _SUMMED) or len(summed) != len(_SUMMED):
            return None  # a value of another type (a hostile file): never trusted
        return Summary(**summed)
    except (ValueError, TypeError, KeyError, AttributeError):  # a summary of another shape
        return None


def _entry(stamp: str, row: Row, took: int | None) -> Entry:
    values = list(astuple(row))
    del values[_COST]
    values.pop()  # its problem: None for a readable file
    return [stamp, *values, took]


def _row(entry: Entry, prices: PriceTable) -> Timed | None:
    """The row an entry holds, costed with `prices` as `row_of` costs it (a model's price
    for the tokens its answer's usage block gave); None for an entry of the wrong shape
    (never trusted: the file is read again)."""
    took = entry[-1]
    if not _shaped(entry) or not (took is None or type(took) is int):
        return None
    try:
        values = dict(zip(FIELDS, entry[1:-1], strict=True))
        if not _typed(values, _TYPES):
            return None  # a value of another type (a hostile file): never trusted
        model, usage_known = values["model"], values["usage_known"]
        tokens = Tokens(*(int(values[f"{kind}_tokens"]) for kind in _KINDS))
        cost = prices.cost(model, tokens) if usage_known and model is not None else None
        return Row(**values, cost_usd=cost), took
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


_KINDS = ("input", "output", "cached", "cache_write")
# The types a row's or a summary's field may hold (exactly: a bool is no int here), by its
# annotation; one not named here is never trusted (the file is read again).
_NONE = type(None)
_ANNOTATED: dict[str, tuple[type, ...]] = {
    **{"str": (str,), "int": (int,), "bool": (bool,), "str | None": (str, _NONE)},
    **{"dict[str, Any] | None": (dict, _NONE), "float | None": (float, int, _NONE)},
    "list[str]": (list,),
}
_TYPES = {f.name: _ANNOTATED.get(str(f.type), ()) for f in fields(Row) if f.name in FIELDS}
_SUMMED = {f.name: _ANNOTATED.get(str(f.type), ()) for f in fields(Summary)}


def _typed(values: dict[str, Any], types: dict[str, tuple[type, ...]]) -> bool:
    """Whether each of `types` is in `values`, of its type (a list holding texts only)."""
    for name, kinds in types.items():
        value = values.get(name)
        if type(value) not in kinds or (type(value) is list and not _texts(value)):
            return False
    return True


def _texts(values: list[Any]) -> bool:
    return all(type(value) is str for value in values)


def load(raw: bytes | None, cassette: str) -> dict[str, Entry]:
    """A cache file's entries; {} when there is none, or it is damaged (its digest, over the
    rest, does not match), of another version or another cassette: it is rebuilt."""
    data = unseal(raw)
    if data is None or data.get("version") != VERSION:
        return {}
    entries = data.get("entries")
    if data.get("cassette") != cassette or not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(v, list) and v}


def dump(entries: dict[str, Entry], cassette: str) -> bytes:
    return seal({"version": VERSION, "cassette": cassette, "entries": entries})
