"""What `tapeproxy drift` sends: the recorded exchanges of the cassettes named, in recorded
order, perhaps a sample; an MCP session kept whole; what the budget (--max-cost, estimated
before sending from each recording's usage and the price table; --max-requests) lets through,
and what it skips and why. Blocking reads, through the CassetteStore protocol."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from tapeproxy.engine import jsonrpc
from tapeproxy.errors import CassetteCorrupt
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.prices import PriceTable


@dataclass(frozen=True)
class Target:
    """One recorded exchange drift may send: where it is, what it asks, what it may cost."""

    cassette: str
    key: str
    ordinal: int
    seq: int
    request: str  # `POST openai /v1/chat/completions`
    upstream: str
    estimate: float | None  # USD, from its recorded usage and the price table
    session: bool = False  # its answer carried an MCP session: sent in order, never at once
    acts: bool = False  # an MCP tool call: sent again, it would act again (mail, write, delete)

    @property
    def exchange(self) -> str:
        return f"{self.key[:12]}#{self.ordinal}"


@dataclass(frozen=True)
class Left:
    """An exchange not checked: skipped by the budget, or one that could not be sent."""

    cassette: str
    exchange: str
    request: str
    why: str


@dataclass(frozen=True)
class Budget:
    max_cost: float = 1.0
    max_requests: int | None = None
    call_tools: bool = False  # MCP tool calls sent too (--call-tools)


def estimate(exchange: Exchange, prices: PriceTable) -> float | None:
    """What an answer costs: its usage at its model's price; nothing for an error answer (a
    provider bills no refused request) or an MCP server's (no tokens); None, unpriced, when
    its usage or its model's price is unknown (an OpenAI stream asked without
    `stream_options.include_usage` has no usage block), never $0 as if free."""
    mcp = jsonrpc.messages((exchange.request.body or {}).get("json"))
    if exchange.response.status >= 400 or mcp:
        return 0.0
    return prices.cost(answers.model(exchange), answers.tokens(exchange))


def acts(exchange: Exchange) -> bool:
    """Whether it is an MCP tool call (or a batch holding one): what it did, it would do again."""
    body = exchange.request.body or {}
    return any(m.get("method") == "tools/call" for m in jsonrpc.messages(body.get("json")))


def targets(
    store: CassetteStore,
    names: Iterable[str],
    prices: PriceTable,
    sample: int | None = None,
    rng: random.Random | None = None,
) -> tuple[list[Target], list[Left]]:
    """The exchanges of the named cassettes (every cassette when none is named), in recorded
    order; `sample`: about that many of them, drawn at random (_sampled); and the recordings that
    cannot be read, each with why. Blocking: reads files."""
    found = []
    unreadable = []
    for cassette in list(dict.fromkeys(names)) or store.cassettes():  # (one named twice: once)
        for key, ordinals in store.entries(cassette).items():
            for ordinal in ordinals:
                try:
                    exchange = store.read(cassette, key, ordinal)
                except CassetteCorrupt as exc:
                    unreadable.append(Left(cassette, f"{key[:12]}#{ordinal}", "?", exc.message))
                    continue
                request = exchange.request
                summary = f"{request.method} {request.upstream} {request.path}"
                cost = estimate(exchange, prices)
                session = jsonrpc.SESSION_HEADER in exchange.response.headers
                where = (cassette, key, ordinal, exchange.seq)
                found.append(
                    Target(*where, summary, request.upstream, cost, session, acts(exchange))
                )
    # A server need name its session only in its answer to `initialize` (the MCP spec): the
    # requests after it to that upstream, in that cassette, are of the session all the same.
    held = {(t.cassette, t.upstream) for t in found if t.session}
    found = [replace(t, session=True) if (t.cassette, t.upstream) in held else t for t in found]
    found.sort(key=lambda t: (t.cassette, t.seq, t.key, t.ordinal))
    if sample is not None and sample < len(found):
        found = sampled(found, sample, rng or random.Random())
    return found, unreadable


def sampled(found: list[Target], count: int, rng: random.Random) -> list[Target]:
    """`count` exchanges drawn at random, in recorded order; an MCP session is drawn whole
    (its requests need the session its `initialize` opens), so a few more may come."""
    drawn_from = units(found)
    rng.shuffle(drawn_from)
    drawn: set[Target] = set()
    for unit in drawn_from:
        if len(drawn) >= count:
            break
        drawn.update(unit)
    return [t for t in found if t in drawn]


def plan(chosen: list[Target], budget: Budget) -> tuple[list[Target], list[Left]]:
    """What the budget lets through, before anything is sent, and what it skips and why: an
    MCP tool call unless --call-tools, an exchange whose estimate would take the total past
    --max-cost, every one past --max-requests. A cheaper one later may still fit."""
    sent: list[Target] = []
    skipped: list[Left] = []
    total = 0.0
    for target in chosen:
        cost = target.estimate or 0.0
        why = None
        if target.acts and not budget.call_tools:
            why = "a tool call acts again when sent (a mail, a write): only with --call-tools"
        elif budget.max_requests is not None and len(sent) >= budget.max_requests:
            why = f"over --max-requests ({budget.max_requests})"
        elif total + cost > budget.max_cost:
            why = f"over --max-cost: ~${cost:.4f} more would pass ${budget.max_cost:g}"
        if why is None:
            sent.append(target)
            total += cost
        else:
            skipped.append(Left(target.cassette, target.exchange, target.request, why))
    return sent, skipped


def units(sent: list[Target]) -> list[list[Target]]:
    """What may go at once: each exchange alone, but a cassette's MCP session whole, in
    recorded order (its requests need the session its `initialize` opens)."""
    units: list[list[Target]] = []
    sessions: dict[str, list[Target]] = {}
    for target in sent:
        if not target.session:
            units.append([target])
        elif target.cassette in sessions:
            sessions[target.cassette].append(target)
        else:
            sessions[target.cassette] = [target]
            units.append(sessions[target.cassette])
    return units
