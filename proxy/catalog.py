"""Reading a cassette library without a server: what each cassette holds, and whether every
file is sound (schema, key, name)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmtape.errors import CassetteCorrupt
from llmtape.models import Exchange, load_exchange
from llmtape.normalize import request_key, stored_request
from llmtape.providers import default_rules
from llmtape.rules import MatchRules, unstored_headers
from llmtape.store.base import (
    LIKE_EXCHANGE_FILE,
    exchange_file,
    is_leftover,
    parse_exchange_file,
)
from llmtape.store.fs import FileStore
from pydantic import ValidationError

RulesFor = Callable[[str], MatchRules]


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


def show(store: FileStore, cassette: str) -> list[Row]:
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


def summarize(store: FileStore, cassette: str) -> Summary:
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


@dataclass
class Verdict:
    cassette: str
    checked: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)

    def flag(self, file: str, problem: str) -> None:
        self.problems.append({"file": file, "problem": problem})


def verify(store: FileStore, cassette: str, rules_for: RulesFor) -> Verdict:
    """Each file must parse under the schema, carry the key and ordinal its name says, and
    have that key under today's rules (else `llmtape rekey` is due)."""
    verdict = Verdict(cassette)
    with os.scandir(store.folder(cassette)) as listing:
        names = sorted(entry.name for entry in listing if entry.is_file())
    for name in names:
        if is_leftover(name):
            verdict.flag(name, "left over from an interrupted write; safe to delete")
            continue
        parsed = parse_exchange_file(name)
        if parsed is None:
            if LIKE_EXCHANGE_FILE.match(name):
                verdict.flag(
                    name,
                    "not a name llmtape reads (ordinal 1 is KEY.json, n is "
                    "KEY.n.json, no leading zeros): rename it, or delete a copy",
                )
            continue
        verdict.checked += 1
        problem = _check_file(store, cassette, name, parsed, rules_for)
        if problem:
            verdict.flag(name, problem)
    return verdict


def _check_file(
    store: FileStore, cassette: str, name: str, parsed: tuple[str, int], rules_for: RulesFor
) -> str | None:
    try:
        exchange = load_exchange((store.folder(cassette) / name).read_bytes())
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"unreadable: {first}"
    if (exchange.key, exchange.ordinal) != parsed:
        return f"names {exchange_file(exchange.key, exchange.ordinal)} inside; renamed by hand?"
    parts = stored_request(exchange.request)
    rules = rules_for(parts.upstream)
    missing = unstored_headers(
        dict(parts.headers), exchange.rules, rules, default_rules(parts.upstream)
    )
    if missing:
        return (
            f"today's rules key on the header(s) {', '.join(missing)}, which this recording "
            "does not hold (it was made under other match rules): a request sending them "
            "misses it; record it again"
        )
    if request_key(parts, rules) == exchange.key:
        return None
    if exchange.rules != rules.fingerprint():
        return f"recorded under other match rules: run `llmtape rekey {cassette}`"
    return (
        f"its request does not hash to its key: run `llmtape rekey {cassette}` (an older "
        "llmtape keyed some requests differently), or record it again if it was edited by hand"
    )
