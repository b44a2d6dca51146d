"""What cassettes hold, as `tapeproxy ls` and `show` list it: rows, summaries, unreadable files,
tokens and cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tapeproxy.errors import CassetteCorrupt, ConfigError
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.store.protocol import CassetteStore, exchange_file, why_unreadable
from tapeproxy.tools.prices import DIGITS, NO_PRICES, PriceTable

Tick = Callable[[], None]  # called once per file read, for a progress bar


def no_tick() -> None:
    return None


@dataclass(frozen=True)
class Row:
    """One exchange as `tapeproxy show` lists it. Tokens are 0 where the answer holds no usage
    block; `cost_usd` is None where its tokens or its model's price are unknown."""

    file: str
    key: str
    ordinal: int
    seq: int
    request: str  # `POST openai /v1/chat/completions`
    method: str
    upstream: str
    path: str
    model: str | None
    status: int
    streamed: bool
    socket: bool  # a WebSocket session
    frames: int
    kind: str  # `json`, `text`, `base64`, `empty`, or `sse: 12 frames`
    outcome: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    usage_known: bool = True  # False: the answer of a model holds no usage block (tokens 0)
    tool: dict[str, Any] | None = None  # an MCP tool call: its name, arguments and result
    problem: str | None = None  # a file that cannot be read: why, in one line

    @property
    def unreadable(self) -> bool:
        return self.problem is not None

    @property
    def what(self) -> str:
        """The model that answered, or the tool that was called."""
        if self.tool is not None:
            return f"tool {self.tool['name']}"
        return self.model or "-"

    @property
    def tokens(self) -> Tokens:
        return Tokens(
            self.input_tokens, self.output_tokens, self.cached_tokens, self.cache_write_tokens
        )


def row_of(exchange: Exchange, prices: PriceTable, decoded: list[Any] | None = None) -> Row:
    response, request = exchange.response, exchange.request
    session = exchange.session
    if session is not None:
        kind = f"websocket: {len(session.frames)} frames"
    elif response.frames is not None:
        kind = f"{response.dialect}: {len(response.frames)} frames"
    else:
        kind = next(iter(response.body or {"empty": None}))
    if decoded is None:  # once: a stream's every frame is JSON to decode
        decoded = answers.payloads(exchange)
    found = answers.tokens(exchange, decoded)
    tokens = found or Tokens()
    model = answers.model(exchange, decoded)
    return Row(
        file=exchange_file(exchange.key, exchange.ordinal),
        key=exchange.key,
        ordinal=exchange.ordinal,
        seq=exchange.seq,
        request=f"{request.method} {request.upstream} {request.path}",
        method=request.method,
        upstream=request.upstream,
        path=request.path,
        model=model,
        status=response.status,
        streamed=response.frames is not None,
        socket=session is not None,
        frames=len(response.frames or (session.frames if session is not None else ())),
        kind=kind,
        outcome=exchange.outcome.value,
        input_tokens=tokens.input_tokens,
        output_tokens=tokens.output_tokens,
        cached_tokens=tokens.cached_tokens,
        cache_write_tokens=tokens.cache_write_tokens,
        cost_usd=prices.cost(model, found) if found is not None else None,
        usage_known=found is not None or model is None,
        tool=answers.tool_call(exchange, decoded),
    )


def unreadable_row(key: str, ordinal: int, problem: str) -> Row:
    """A file that cannot be read: its name, key and `problem`; no number in it was read (its
    seq, -1, lists it first; status, tokens and cost are 0 and None)."""
    return Row(
        file=exchange_file(key, ordinal),
        key=key,
        ordinal=ordinal,
        seq=-1,
        request=f"(unreadable: {problem})",
        method="-",
        upstream="-",
        path="-",
        model=None,
        status=0,
        streamed=False,
        socket=False,
        frames=0,
        kind="-",
        outcome="unreadable",
        input_tokens=0,
        output_tokens=0,
        cached_tokens=0,
        cache_write_tokens=0,
        cost_usd=None,
        problem=problem,
    )


@dataclass(frozen=True)
class Listed:
    """A row, and the exchange it lists (None for a file that cannot be read)."""

    row: Row
    exchange: Exchange | None


def read_all(
    store: CassetteStore, cassette: str, prices: PriceTable = NO_PRICES, tick: Tick = no_tick
) -> list[Listed]:
    """Every exchange of a cassette, in the order it was recorded; a file that cannot be read
    is listed first as `unreadable`, so one bad file does not hide the rest."""
    found = []
    for key, ordinals in store.entries(cassette).items():
        for ordinal in ordinals:
            found.append(listed(store, cassette, key, ordinal, prices))
            tick()
    return sorted(found, key=lambda item: (item.row.seq, item.row.file))


def listed(
    store: CassetteStore, cassette: str, key: str, ordinal: int, prices: PriceTable
) -> Listed:
    try:
        exchange = store.read(cassette, key, ordinal)
    except CassetteCorrupt as exc:
        return Listed(unreadable_row(key, ordinal, why_unreadable(exc)), None)
    return Listed(row_of(exchange, prices), exchange)


def show(
    store: CassetteStore, cassette: str, prices: PriceTable = NO_PRICES, tick: Tick = no_tick
) -> list[Row]:
    return [item.row for item in read_all(store, cassette, prices, tick)]


def pick(store: CassetteStore, cassette: str, prefix: str) -> tuple[str, list[int]]:
    """The one key of a cassette that starts with `prefix`, with its ordinals."""
    entries = store.entries(cassette)
    keys = sorted(key for key in entries if key.startswith(prefix.lower()))
    if len(keys) == 1:
        return keys[0], entries[keys[0]]
    if not keys:
        raise ConfigError(
            f"no exchange of cassette {cassette!r} has a key starting with {prefix!r}; "
            f"`tapeproxy show {cassette}` lists the keys"
        )
    shown = ", ".join(key[:16] for key in keys[:5]) + (", ..." if len(keys) > 5 else "")
    raise ConfigError(
        f"key prefix {prefix!r} is ambiguous in cassette {cassette!r}: {len(keys)} keys start "
        f"with it ({shown}); give more of the key"
    )


def count_files(store: CassetteStore, cassettes: list[str]) -> int:
    """How many exchange files the cassettes hold (their names are listed, none is read)."""
    return sum(len(ordinals) for c in cassettes for ordinals in store.entries(c).values())


@dataclass(frozen=True)
class Summary:
    """A cassette as `tapeproxy ls` lists it. `cost_usd` adds up the exchanges whose cost is
    known; it is None when none is. `unpriced` counts the exchanges that used tokens of a
    model with no price (their models in `unpriced_models`), which the sum leaves out."""

    cassette: str
    name: str
    exchanges: int
    streams: int
    failures: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    unpriced: int
    unpriced_models: list[str] = field(default_factory=list)
    unreadable: int = 0
    no_usage: int = 0  # of `unpriced`: a model's answers without a usage block


def total_cost(rows: list[Row]) -> float | None:
    known = [row.cost_usd for row in rows if row.cost_usd is not None]
    return round(sum(known), DIGITS) if known else None


def unpriced(rows: list[Row]) -> list[Row]:
    """Rows that used tokens, or a model's answers that say not how many (a stream without
    a usage block), but have no known cost."""
    return [
        row
        for row in rows
        if row.cost_usd is None and (row.tokens != Tokens() or not row.usage_known)
    ]


def summary_of(cassette: str, rows: list[Row]) -> Summary:
    """A cassette's summary from its rows (`show`'s, or `row_of` each exchange already read)."""
    total = sum((row.tokens for row in rows), Tokens())
    missing = unpriced(rows)
    return Summary(
        cassette=cassette,
        name=cassette,
        exchanges=len(rows),
        streams=sum(1 for row in rows if row.streamed),
        failures=sum(1 for row in rows if row.outcome not in {"complete", "unreadable"}),
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cached_tokens=total.cached_tokens,
        cache_write_tokens=total.cache_write_tokens,
        cost_usd=total_cost(rows),
        unpriced=len(missing),
        unpriced_models=sorted({row.model or "(no model)" for row in missing if row.usage_known}),
        no_usage=sum(1 for row in missing if not row.usage_known),
        unreadable=sum(1 for row in rows if row.outcome == "unreadable"),
    )
