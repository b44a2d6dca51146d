"""Two cassettes compared by key and ordinal: the exchanges only one holds, and the fields
that differ in the ones both hold, by JSON path, with the same aligned diff a miss report
uses. Timings (frame arrivals, a cut's `end_ms`) and recording order (`seq`) never count; a
stream counts as its joined text and its number of frames. Tokens and cost are added up."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tapeproxy.engine.matching import MISSING, Difference, diff, json_safe
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange
from tapeproxy.exchange.tokens import Tokens
from tapeproxy.store.protocol import CassetteStore, exchange_file
from tapeproxy.tools.listing import Row, no_tick, row_of, total_cost, unpriced
from tapeproxy.tools.prices import DIGITS, PriceTable


@dataclass(frozen=True)
class Side:
    """One side of a diff: a cassette of a store."""

    store: CassetteStore
    cassette: str

    def where(self) -> str:
        return self.store.where(self.cassette)


@dataclass(frozen=True)
class Changed:
    row: Row  # as in B
    differences: list[Difference]


@dataclass(frozen=True)
class Totals:
    tokens: Tokens
    cost_usd: float | None
    unpriced: int


@dataclass(frozen=True)
class CassetteDiff:
    a: str
    b: str
    only_a: list[Row]
    only_b: list[Row]
    changed: list[Changed]
    same: int
    totals_a: Totals
    totals_b: Totals

    @property
    def equal(self) -> bool:
        return not (self.only_a or self.only_b or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "equal": self.equal,
            "only_a": [entry(row) for row in self.only_a],
            "only_b": [entry(row) for row in self.only_b],
            "changed": [
                {**entry(c.row), "differences": [difference(d) for d in c.differences]}
                for c in self.changed
            ],
            "same": self.same,
            "tokens": {"a": totals(self.totals_a), "b": totals(self.totals_b)},
            "delta": delta(self.totals_a, self.totals_b),
        }


def entry(row: Row) -> dict[str, Any]:
    return {
        "file": row.file,
        "key": row.key,
        "ordinal": row.ordinal,
        "request": row.request,
        "model": row.model,
        "status": row.status,
    }


def difference(found: Difference) -> dict[str, Any]:
    """A difference as JSON: its path, and the value in A and in B where there is one."""
    out: dict[str, Any] = {"path": found.path}
    if found.recorded is not MISSING:
        out["a"] = json_safe(found.recorded)
    if found.requested is not MISSING:
        out["b"] = json_safe(found.requested)
    return out


def totals(side: Totals) -> dict[str, Any]:
    return {**side.tokens.to_dict(), "cost_usd": side.cost_usd, "unpriced": side.unpriced}


def delta(a: Totals, b: Totals) -> dict[str, Any]:
    """B - A. The cost delta is of the known costs (None when a side has none); it is
    `cost_partial` when either side has exchanges with no price, which it leaves out."""
    tokens = {k: v - a.tokens.to_dict()[k] for k, v in b.tokens.to_dict().items()}
    known = a.cost_usd is not None and b.cost_usd is not None
    cost = round((b.cost_usd or 0.0) - (a.cost_usd or 0.0), DIGITS) if known else None
    return {**tokens, "cost_usd": cost, "cost_partial": bool(a.unpriced or b.unpriced)}


def body_view(body: dict[str, Any] | None) -> Any:
    """A body as a person compares it: JSON as its value (also a JSON body stored as text),
    text as text, binary as `{"base64": ...}`."""
    if not body:
        return None
    if "json" in body:
        return body["json"]
    if "text" in body:
        try:
            return json.loads(body["text"])
        except (ValueError, RecursionError):
            return body["text"]
    return {"base64": body.get("base64")}


def view(exchange: Exchange) -> dict[str, Any]:
    """The fields of an exchange that a diff compares."""
    request, response = exchange.request, exchange.response
    answer: dict[str, Any] = {"status": response.status, "headers": response.headers}
    if exchange.session is not None:  # a WebSocket session: its events both ways, untimed
        session = exchange.session
        answer["session"] = {
            "frames": [
                {"direction": f.direction, "payload": f.json_ if f.text is None else f.text}
                if f.base64 is None
                else {"direction": f.direction, "base64": f.base64}
                for f in session.frames
            ],
            "end": session.end.model_dump(exclude={"ms"}),
        }
    elif response.frames is None:
        answer["body"] = body_view(response.body)
    else:
        # No provider reads text from it (a tool call, raw chunks): every byte counts.
        joined = answers.text(exchange) or answers.joined_frames(exchange)
        answer["stream"] = {
            "dialect": response.dialect,
            "frames": len(response.frames),
            "text": joined,
        }
    return {
        "request": {
            "method": request.method,
            "upstream": request.upstream,
            "path": request.path,
            "query": [list(pair) for pair in request.query],
            "headers": request.headers,
            "body": body_view(request.body),
        },
        "response": answer,
        "outcome": exchange.outcome.value,
    }


def aligned(a: Side, b: Side) -> int:
    """How many exchanges a diff of A and B reads a file of (names are listed, none read)."""
    return len(_pairs(a) | _pairs(b))


def _pairs(side: Side) -> set[tuple[str, int]]:
    return {
        (key, n) for key, ordinals in side.store.entries(side.cassette).items() for n in ordinals
    }


def compare(
    a: Side, b: Side, prices: PriceTable, tick: Callable[[], None] = no_tick
) -> CassetteDiff:
    """Every exchange of A and of B, aligned by key and ordinal. A file that cannot be read
    raises CassetteCorrupt: a diff that skipped it could call two cassettes equal."""
    in_a, in_b = _pairs(a), _pairs(b)
    rows_a: list[Row] = []
    rows_b: list[Row] = []
    only_a, only_b, changed, same = [], [], [], 0
    for key, ordinal in sorted(in_a | in_b):
        left = a.store.read(a.cassette, key, ordinal) if (key, ordinal) in in_a else None
        right = b.store.read(b.cassette, key, ordinal) if (key, ordinal) in in_b else None
        row_a = row_of(left, prices) if left is not None else None
        row_b = row_of(right, prices) if right is not None else None
        rows_a += [row_a] if row_a else []
        rows_b += [row_b] if row_b else []
        if left is None and row_b is not None:
            only_b.append(row_b)
        elif right is None and row_a is not None:
            only_a.append(row_a)
        elif left is not None and right is not None and row_b is not None:
            found = diff(view(left), view(right))
            if found:
                changed.append(Changed(row_b, found))
            else:
                same += 1
        tick()
    return CassetteDiff(
        a=a.where(),
        b=b.where(),
        only_a=sorted(only_a, key=_order),
        only_b=sorted(only_b, key=_order),
        changed=sorted(changed, key=lambda c: _order(c.row)),
        same=same,
        totals_a=_totals(rows_a),
        totals_b=_totals(rows_b),
    )


def _order(row: Row) -> tuple[int, str]:
    return row.seq, exchange_file(row.key, row.ordinal)


def _totals(rows: list[Row]) -> Totals:
    tokens = sum((row.tokens for row in rows), Tokens())
    return Totals(tokens, total_cost(rows), len(unpriced(rows)))
