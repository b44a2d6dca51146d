"""What each page of the viewer shows, read from the library through the store seam: the
library's cassettes, one cassette's exchanges, one exchange as a conversation, two cassettes
compared, the misses of a running server. Values only: app.py renders them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tapeproxy.errors import ConfigError
from tapeproxy.exchange.answers import frame_text
from tapeproxy.exchange.model import Exchange
from tapeproxy.store.protocol import CassetteStore, parse_exchange_file
from tapeproxy.tools.diff import CassetteDiff, Side, body_view, compare
from tapeproxy.tools.listing import Row, Summary, row_of
from tapeproxy.tools.prices import PriceTable
from tapeproxy.tools.summaries import cached_page, summarize
from tapeproxy.viewer.conversation import (
    Image,
    Message,
    Reader,
    answer_messages,
    mcp_tool_call,
)
from tapeproxy.viewer.sessions import conversation_body, frame_line


@dataclass(frozen=True)
class Step:
    """A stream frame on the timeline: its number, when it came, its text."""

    index: int
    ms: int
    text: str


@dataclass(frozen=True)
class ExchangeView:
    cassette: str
    row: Row
    messages: list[Message]
    answer: list[Message]
    images: list[Image]
    steps: list[Step]
    total_ms: int
    request_body: str
    response_body: str | None


SHELF = 200  # cassettes the library page lists


@dataclass(frozen=True)
class Shelf:
    """One page of the library: the summaries of `names[start:start + SHELF]` (a page costs
    what its cassettes cost, not the library), every cassette's name (to compare two), and
    the folders of recordings left out, with why: no cassette may be named for them, or
    they cannot be listed (shown on the page, not logged at each view)."""

    summaries: list[Summary]
    names: list[str]
    skipped: list[tuple[str, str]]
    start: int
    previous: int | None
    following: int | None


def library(store: CassetteStore, prices: PriceTable, start: int = 0) -> Shelf:
    skipped: dict[str, str] = {}
    names = store.cassettes(skipped)
    start, previous, following = window(start, len(names), SHELF)
    summaries = [summarize(store, name, prices) for name in names[start : start + SHELF]]
    return Shelf(summaries, names, list(skipped.items()), start, previous, following)


def window(start: int, total: int, size: int) -> tuple[int, int | None, int | None]:
    """A page of `size` from `start` (the last page past the end): where it starts, and where
    the pages before and after it start (None at either end)."""
    start = max(0, min(start, (total - 1) // size * size)) if total else 0
    following = start + size if start + size < total else None
    return start, max(0, start - size) if start else None, following


@dataclass(frozen=True)
class Line:
    """An exchange as the cassette page lists it: its row and how long its answer took, where
    the recording knows (a stream's last frame, a cut's end); a whole answer keeps no time."""

    row: Row
    duration_ms: int | None


PAGE = 200  # exchanges a cassette's page lists


@dataclass(frozen=True)
class Page:
    """One page of a cassette's exchanges, in recorded order: `lines` from `start` (0-based)
    of `total`; `previous` and `following`, where the pages before and after start (None
    at either end)."""

    lines: list[Line]
    start: int
    total: int
    previous: int | None
    following: int | None


def cassette(store: CassetteStore, name: str, prices: PriceTable, start: int = 0) -> Page:
    """A page of a cassette, from the summary cache: no file read but those that changed,
    no row built but the page's."""
    stamps = store.stamps(name)
    total = sum(1 for file in stamps if parse_exchange_file(file))
    if not total:
        raise ConfigError(f"cassette {name!r} has no recordings under {store.where()}")
    start, previous, following = window(start, total, PAGE)
    rows, total = cached_page(store, name, prices, slice(start, start + PAGE), stamps=stamps)
    return Page([Line(row, took) for row, took in rows], start, total, previous, following)


def read(store: CassetteStore, name: str, file: str) -> Exchange:
    parsed = parse_exchange_file(file)
    if parsed is None:
        raise ConfigError(f"{file!r} is not the name of an exchange file")
    key, ordinal = parsed
    if ordinal not in store.entries(name).get(key, []):
        raise ConfigError(f"cassette {name!r} holds no exchange file {file!r}")
    return store.read(name, key, ordinal)


def exchange(store: CassetteStore, name: str, file: str, prices: PriceTable) -> ExchangeView:
    found = read(store, name, file)
    reader = Reader()
    request = body_view(found.request.body)
    messages, answer = mcp_tool_call(found) or (
        reader.messages(request),
        answer_messages(found, reader),
    )
    frames = found.response.frames or []
    steps = [Step(n, frame.ms, frame_text(frame)) for n, frame in enumerate(frames)]
    response = None if found.response.frames is not None else body_view(found.response.body)
    if found.session is not None:  # a WebSocket session: its turns, its frames both ways
        messages = reader.messages(conversation_body(found.session))
        frames_both = found.session.frames
        steps = [Step(n, frame.ms, frame_line(frame)) for n, frame in enumerate(frames_both)]
        response = None
    return ExchangeView(
        cassette=name,
        row=row_of(found, prices),
        messages=messages,
        answer=answer,
        images=reader.images,
        steps=steps,
        total_ms=max((s.ms for s in steps), default=0),
        request_body=_pretty(request),
        response_body=None if response is None else _pretty(response),
    )


def image(store: CassetteStore, name: str, file: str, index: int) -> Image | None:
    """The `index`-th inline image of an exchange, as its page numbered them."""
    found = read(store, name, file)
    reader = Reader()
    reader.messages(body_view(found.request.body))
    answer_messages(found, reader)
    return reader.images[index] if 0 <= index < len(reader.images) else None


def difference(store: CassetteStore, a: str, b: str, prices: PriceTable) -> CassetteDiff:
    for name in (a, b):
        if not store.entries(name):
            raise ConfigError(f"cassette {name!r} has no recordings under {store.where()}")
    return compare(Side(store, a), Side(store, b), prices)


def _pretty(value: Any) -> str:
    if value is None:
        return "(empty)"
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
