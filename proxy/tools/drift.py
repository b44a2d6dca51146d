"""`tapeproxy drift`: recorded requests sent live again, each answer's shape compared with the
recording's (tapeproxy.tools.shapediff); what the budget (--max-cost, --max-requests) lets
through, sequential unless --concurrency; with --update, the exchanges with an `error`
finding written anew, as recording writes them. Through the CassetteStore protocol."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from tapeproxy.engine import jsonrpc
from tapeproxy.errors import CassetteCorrupt, TapeproxyError
from tapeproxy.exchange import answers
from tapeproxy.exchange.model import Exchange, Outcome
from tapeproxy.exchange.shape import ENUM_FIELDS, shape_of
from tapeproxy.providers.base import Provider
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.driftsend import Sender
from tapeproxy.tools.prices import PriceTable
from tapeproxy.tools.shapediff import LEVELS, Level, compare


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

    @property
    def exchange(self) -> str:
        return f"{self.key[:12]}#{self.ordinal}"


@dataclass(frozen=True)
class Finding:
    level: Level
    cassette: str
    exchange: str
    request: str
    path: str
    recorded: Any
    live: Any
    what: str


@dataclass(frozen=True)
class Left:
    """An exchange not checked: skipped by the budget, or one that could not be sent."""

    cassette: str
    exchange: str
    request: str
    why: str


@dataclass
class DriftReport:
    checked: list[Left] = field(default_factory=list)  # (why: its worst level, or `same`)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Left] = field(default_factory=list)
    failed: list[Left] = field(default_factory=list)
    updated: list[Left] = field(default_factory=list)
    not_updated: list[Left] = field(default_factory=list)  # (--update) and why not
    spent: float = 0.0
    unpriced: int = 0  # exchanges sent whose cost the price table does not know

    def counts(self) -> dict[str, int]:
        return {level: sum(f.level == level for f in self.findings) for level in LEVELS}

    def exit_code(self) -> int:
        """0: no `error` finding (nothing checked included); 1: one or more; 2: an exchange
        could not be sent (the run is not whole)."""
        if self.failed:
            return 2
        return 1 if self.counts()["error"] else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": len(self.checked),
            "counts": self.counts(),
            "spent_usd": round(self.spent, 6),
            "unpriced": self.unpriced,
            "findings": [asdict(f) for f in self.findings],
            "skipped": [asdict(s) for s in self.skipped],
            "failed": [asdict(s) for s in self.failed],
            "updated": [asdict(s) for s in self.updated],
            "not_updated": [asdict(s) for s in self.not_updated],
            "exchanges": [
                {
                    "cassette": s.cassette,
                    "exchange": s.exchange,
                    "request": s.request,
                    "worst": s.why,
                }
                for s in self.checked
            ],
        }


@dataclass(frozen=True)
class Budget:
    max_cost: float = 1.0
    max_requests: int | None = None


def estimate(exchange: Exchange, prices: PriceTable) -> float | None:
    """What sending it again may cost: its recorded usage at its model's price."""
    return prices.cost(answers.model(exchange), answers.tokens(exchange))


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
    for cassette in list(names) or store.cassettes():
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
                found.append(Target(*where, summary, request.upstream, cost, session))
    found.sort(key=lambda t: (t.cassette, t.seq, t.key, t.ordinal))
    if sample is not None and sample < len(found):
        found = _sampled(found, sample, rng or random.Random())
    return found, unreadable


def _sampled(found: list[Target], count: int, rng: random.Random) -> list[Target]:
    """`count` exchanges drawn at random, in recorded order; an MCP session is drawn whole
    (its requests need the session its `initialize` opens), so a few more may come."""
    units = _units(found)
    rng.shuffle(units)
    drawn: set[Target] = set()
    for unit in units:
        if len(drawn) >= count:
            break
        drawn.update(unit)
    return [t for t in found if t in drawn]


def plan(chosen: list[Target], budget: Budget) -> tuple[list[Target], list[Left]]:
    """What the budget lets through, before anything is sent, and what it skips and why: an
    exchange whose estimate would take the total past --max-cost, every one past
    --max-requests. A cheaper one later may still fit."""
    sent: list[Target] = []
    skipped: list[Left] = []
    total = 0.0
    for target in chosen:
        cost = target.estimate or 0.0
        why = None
        if budget.max_requests is not None and len(sent) >= budget.max_requests:
            why = f"over --max-requests ({budget.max_requests})"
        elif total + cost > budget.max_cost:
            why = f"over --max-cost: ~${cost:.4f} more would pass ${budget.max_cost:g}"
        if why is None:
            sent.append(target)
            total += cost
        else:
            skipped.append(Left(target.cassette, target.exchange, target.request, why))
    return sent, skipped


@dataclass
class Drift:
    """One drift run over a library: sends, compares, and (with `update`) re-records."""

    store: CassetteStore
    sender: Sender
    prices: PriceTable
    update: bool = False
    # As in a record run: a 429 or 5xx answer, or a stream cut short, is written only so.
    record_failures: bool = False
    report: DriftReport = field(default_factory=DriftReport)

    async def run(self, chosen: list[Target], budget: Budget, concurrency: int = 1) -> DriftReport:
        """Send what the budget lets through (`concurrency` at once), compare, update."""
        sent, self.report.skipped = plan(chosen, budget)
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(unit: list[Target]) -> None:
            async with gate:
                for target in unit:
                    await self.check(target)

        await asyncio.gather(*(one(unit) for unit in _units(sent)))
        self.report.findings.sort(key=_order)
        report = self.report
        for listed in (report.checked, report.failed, report.updated, report.not_updated):
            listed.sort(key=lambda left: (left.cassette, left.exchange))
        return self.report

    async def check(self, target: Target) -> None:
        """One exchange: read, sent live, its shape compared; re-recorded if asked and broken."""
        left = Left(target.cassette, target.exchange, target.request, "")
        try:
            recorded = await asyncio.to_thread(
                self.store.read, target.cassette, target.key, target.ordinal
            )
            live = await self.sender.send(recorded, target.cassette)
        except TapeproxyError as exc:
            self.report.failed.append(_why(left, exc.message))
            return
        except OSError as exc:  # a scratch file for the answer that could not be written
            self.report.failed.append(_why(left, f"its answer could not be kept: {exc}"))
            return
        cost = estimate(live, self.prices)
        self.report.unpriced += cost is None
        self.report.spent += cost if cost is not None else target.estimate or 0.0
        provider = self.sender.providers[target.upstream]  # (send said so, were it not there)
        found = self.findings(recorded, live, provider, left)
        self.report.findings += found
        worst = max((LEVELS.index(f.level) for f in found), default=-1)
        self.report.checked.append(_why(left, LEVELS[worst] if worst >= 0 else "same"))
        if self.update and worst == LEVELS.index("error"):
            await self.rerecord(target, live, left)

    def findings(
        self, recorded: Exchange, live: Exchange, provider: Provider, left: Left
    ) -> list[Finding]:
        """The recorded answer's shape against the live one's, read by the provider's signs
        (its keep-alive frames) and enum-like fields."""
        signs, enums = provider.frame_signs, ENUM_FIELDS | provider.enum_fields
        changes = compare(
            shape_of(recorded.response, signs, enums), shape_of(live.response, signs, enums)
        )
        return [
            Finding(
                c.level,
                left.cassette,
                left.exchange,
                left.request,
                c.path,
                c.recorded,
                c.live,
                c.what,
            )
            for c in changes
        ]

    async def rerecord(self, target: Target, live: Exchange, left: Left) -> None:
        """Write the live answer over the recording, as a record run writes it; not when the
        request keys otherwise under today's rules (it would be another recording)."""
        if live.key != target.key:
            why = "under today's match rules it keys as another request"
            self.report.not_updated.append(_why(left, why))
            return
        if live.outcome is not Outcome.COMPLETE and not self.record_failures:
            why = f"its answer ({live.outcome.value}) is recorded only with --record-failures"
            self.report.not_updated.append(_why(left, why))
            return
        try:
            await asyncio.to_thread(self.store.write, target.cassette, live)
        except OSError as exc:
            self.report.failed.append(_why(left, f"not updated: {exc}"))
            return
        self.report.updated.append(_why(left, "re-recorded"))


def _units(sent: list[Target]) -> list[list[Target]]:
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


def _why(left: Left, why: str) -> Left:
    return Left(left.cassette, left.exchange, left.request, why)


def _order(finding: Finding) -> tuple[str, str, int, str]:
    return (finding.cassette, finding.exchange, -LEVELS.index(finding.level), finding.path)
