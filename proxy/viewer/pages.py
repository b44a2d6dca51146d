"""What each page of the viewer shows, read from the library through the store seam: the
library's cassettes, one cassette's exchanges, one exchange as a conversation, two cassettes
compared, the misses of a running server. Values only: app.py renders them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tapeproxy.errors import ConfigError
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange, Frame, SocketFrame
from tapeproxy.store.protocol import CassetteStore, parse_exchange_file
from tapeproxy.tools.diff import CassetteDiff, Side, body_view, compare
from tapeproxy.tools.listing import Row, Summary, row_of
from tapeproxy.tools.prices import PriceTable
from tapeproxy.tools.summaries import cached_page, summarize
from tapeproxy.viewer import parts
from tapeproxy.viewer.conversation import (
    Image,
    Message,
    Reader,
    answer_messages,
    mcp_tool_call,
)
from tapeproxy.viewer.parts import Scrub, Shown
from tapeproxy.viewer.sessions import conversation_body


@dataclass(frozen=True)
class Step:
    """A frame on the timeline: its number, when it came, its text (cut: `shown.cut`)."""

    index: int
    ms: int
    shown: Shown


@dataclass(frozen=True)
class ExchangeView:
    """One exchange as its page shows it: every text cut to a bound, and one page of its
    frames (`start` of `frames`; `previous` and `following` start the pages either side)."""

    cassette: str
    row: Row
    messages: list[Message]
    more_messages: int  # messages of the request past those shown
    answer: list[Message]
    images: list[Image]
    steps: list[Step]
    frames: int
    start: int
    previous: int | None
    following: int | None
    total_ms: int
    request_body: Shown
    response_body: Shown | None


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


def exchange(
    store: CassetteStore,
    name: str,
    file: str,
    prices: PriceTable,
    start: str | None = None,
    scrub: Scrub = str,
) -> ExchangeView:
    """An exchange's page: its texts cut to a bound, the page of its frames from `start`."""
    found = read(store, name, file)
    decoded = answers.payloads(found)  # once, for the answer and the row
    reader, messages, answer = _conversation(found, decoded)
    frames = _frames(found)
    first = parts.start_of(start, len(frames))
    steps = [_step(found, n, scrub) for n in range(first, min(first + parts.FRAMES, len(frames)))]
    page = parts.FRAMES
    response = None
    if found.response.frames is None and found.session is None:
        response = parts.pretty(body_view(found.response.body), parts.CUT, scrub, "response")
    return ExchangeView(
        cassette=name,
        row=row_of(found, prices, decoded),
        messages=parts.cut_messages(messages, "message", scrub),
        more_messages=max(0, len(messages) - parts.MESSAGES),
        answer=parts.cut_messages(answer, "answer", scrub),
        images=reader.images,
        steps=steps,
        frames=len(frames),
        start=first,
        previous=max(0, first - page) if first else None,
        following=first + page if first + page < len(frames) else None,
        total_ms=max((frame.ms for frame in frames), default=0),
        request_body=parts.pretty(body_view(found.request.body), parts.CUT, scrub, "request"),
        response_body=response,
    )


def whole(store: CassetteStore, name: str, file: str, part: str | None) -> str:
    """The whole text of one part of an exchange (as its page names it), unscrubbed."""
    wanted = parts.named(part)
    found = read(store, name, file)
    text: str | None = None
    if wanted.kind == "request":
        text = parts.pretty_whole(body_view(found.request.body))
    elif wanted.kind == "response" and found.response.frames is None and found.session is None:
        text = parts.pretty_whole(body_view(found.response.body))
    elif wanted.kind == "frame":
        text = parts.frame_of(found, wanted.numbers[0])
    elif wanted.kind in ("message", "answer"):
        _, messages, answer = _conversation(found)
        text = parts.part_of(messages if wanted.kind == "message" else answer, wanted.numbers)
    if text is None:
        raise ConfigError(f"exchange {file!r} has no part {part!r}")
    return text


def _conversation(
    found: Exchange, decoded: list[Any] | None = None
) -> tuple[Reader, list[Message], list[Message]]:
    """The exchange's messages and answer (a session's: its client's turns), with the
    reader that numbered their images."""
    reader = Reader()
    if found.session is not None:
        messages = reader.messages(conversation_body(found.session))
        return reader, messages, answer_messages(found, reader, decoded)
    messages, answer = mcp_tool_call(found, decoded) or (
        reader.messages(body_view(found.request.body)),
        answer_messages(found, reader, decoded),
    )
    return reader, messages, answer


def _frames(found: Exchange) -> Sequence[Frame | SocketFrame]:
    if found.session is not None:
        return found.session.frames
    return found.response.frames or []


def _step(found: Exchange, index: int, scrub: Scrub) -> Step:
    text = parts.frame_of(found, index) or ""
    limit = parts.SOCKET_CUT if found.session is not None else parts.FRAME_CUT
    frame = _frames(found)[index]
    return Step(index, frame.ms, parts.shown(text, limit, scrub, f"frame.{index}"))


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
