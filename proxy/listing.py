"""What cassettes hold, as `llmtape ls` and `show` list it: rows, summaries, unreadable files."""

from __future__ import annotations

from dataclasses import dataclass

from llmtape.errors import CassetteCorrupt
from llmtape.models import Exchange
from llmtape.store.base import CassetteStore, exchange_file


@dataclass(frozen=True)
class Row:
    """One exchange as `llmtape show` lists it."""

    file: str
    seq: int
    request: str
    status: int
    kind: str  # `json`, `text`, `base64`, `empty`, or `sse: 12 frames`
    outcome: str
    input_tokens: int
    output_tokens: int


def row_of(exchange: Exchange) -> Row:
    response = exchange.response
    if response.frames is not None:
        kind = f"{response.dialect}: {len(response.frames)} frames"
    else:
        kind = next(iter(response.body or {"empty": None}))
    usage = exchange.usage or {}
    request = exchange.request
    return Row(
        file=exchange_file(exchange.key, exchange.ordinal),
        seq=exchange.seq,
        request=f"{request.method} {request.upstream} {request.path}",
        status=response.status,
        kind=kind,
        outcome=exchange.outcome.value,
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
    )


def unreadable_row(key: str, ordinal: int) -> Row:
    return Row(
        file=exchange_file(key, ordinal),
        seq=-1,
        request="(unreadable: run `llmtape verify`)",
        status=0,
        kind="-",
        outcome="unreadable",
        input_tokens=0,
        output_tokens=0,
    )


def show(store: CassetteStore, cassette: str) -> list[Row]:
    """Every exchange of a cassette, in the order it was recorded; a file that cannot be read
    is listed first as `unreadable`, so one bad file does not hide the rest."""
    rows = []
    for key, ordinals in store.entries(cassette).items():
        for ordinal in ordinals:
            try:
                rows.append(row_of(store.read(cassette, key, ordinal)))
            except CassetteCorrupt:
                rows.append(unreadable_row(key, ordinal))
    return sorted(rows, key=lambda row: (row.seq, row.file))


@dataclass(frozen=True)
class Summary:
    cassette: str
    exchanges: int
    streams: int
    failures: int
    input_tokens: int
    output_tokens: int
    unreadable: int


def summarize(store: CassetteStore, cassette: str) -> Summary:
    rows = show(store, cassette)
    return Summary(
        cassette=cassette,
        exchanges=len(rows),
        streams=sum(1 for row in rows if "frames" in row.kind),
        failures=sum(1 for row in rows if row.outcome not in {"complete", "unreadable"}),
        input_tokens=sum(row.input_tokens for row in rows),
        output_tokens=sum(row.output_tokens for row in rows),
        unreadable=sum(1 for row in rows if row.outcome == "unreadable"),
    )
