"""`tapeproxy drift`: recorded requests sent live again (what is sent: tapeproxy.tools.driftplan),
each answer's shape compared with the recording's (tapeproxy.tools.shapediff), sequential
unless --concurrency; with --update, the exchanges with an `error` finding written anew, as
recording writes them; the report. Through the CassetteStore protocol."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

from tapeproxy.engine.capture import is_failure_status
from tapeproxy.errors import TapeproxyError
from tapeproxy.exchange.model import Exchange, Outcome
from tapeproxy.exchange.shape import ENUM_FIELDS, shape_of
from tapeproxy.providers.base import Provider
from tapeproxy.store.protocol import CassetteStore
from tapeproxy.tools.driftplan import Budget, Left, Target, estimate, plan, units
from tapeproxy.tools.driftsend import Sender
from tapeproxy.tools.prices import PriceTable
from tapeproxy.tools.shapediff import LEVELS, Level, compare


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


# An MCP session's requests after one not answered would go without the session its
# `initialize` opens (or after a step missed): the server's refusals, compared, would be
# errors, and --update would write them over the recordings.
AFTER = "an earlier request of its MCP session was not answered: try again later"


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
                for n, target in enumerate(unit):
                    if not await self.check(target):
                        self.report.failed += [_why(_left(t), AFTER) for t in unit[n + 1 :]]
                        return

        await asyncio.gather(*(one(unit) for unit in units(sent)))
        self.report.findings.sort(key=_order)
        report = self.report
        for listed in (report.checked, report.failed, report.updated, report.not_updated):
            listed.sort(key=lambda left: (left.cassette, left.exchange))
        return self.report

    async def check(self, target: Target) -> bool:
        """One exchange: read, sent live, its shape compared; re-recorded if asked and broken.
        False when it could not be sent, or its answer says nothing of the shape."""
        left = _left(target)
        try:
            recorded = await asyncio.to_thread(
                self.store.read, target.cassette, target.key, target.ordinal
            )
            live, retried = await self.sender.send(recorded, target.cassette)
        except TapeproxyError as exc:
            self.report.failed.append(_why(left, exc.message))
            return False
        except OSError as exc:  # a scratch file for the answer that could not be written
            self.report.failed.append(_why(left, f"its answer could not be kept: {exc}"))
            return False
        refused = _refused(recorded, live, retried)
        if refused is not None:
            self.report.failed.append(_why(left, refused))
            return False
        # An MCP session's requests cost nothing, its DELETE (no JSON-RPC body) included.
        cost = 0.0 if target.session else estimate(live, self.prices)
        self.report.unpriced += cost is None
        self.report.spent += cost if cost is not None else target.estimate or 0.0
        provider = self.sender.providers[target.upstream]  # (send said so, were it not there)
        # Off the loop: an answer of megabytes takes a while to walk, and other requests
        # under way (--concurrency) are being read meanwhile.
        found = await asyncio.to_thread(self.findings, recorded, live, provider, left)
        self.report.findings += found
        worst = max((LEVELS.index(f.level) for f in found), default=-1)
        self.report.checked.append(_why(left, LEVELS[worst] if worst >= 0 else "same"))
        if self.update and worst == LEVELS.index("error"):
            await self.rerecord(target, live, left)
        return True

    def findings(
        self, recorded: Exchange, live: Exchange, provider: Provider, left: Left
    ) -> list[Finding]:
        """The recorded answer's shape against the live one's, read by the provider's signs
        (its keep-alive frames), enum-like fields and whether it leaves out defaults."""
        signs, enums = provider.frame_signs, ENUM_FIELDS | provider.enum_fields
        before = shape_of(recorded.response, signs, enums)
        changes = compare(before, shape_of(live.response, signs, enums), provider.omits_defaults)
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


def _refused(recorded: Exchange, live: Exchange, retried: str = "") -> str | None:
    """Why a live answer says nothing of the provider's shape, where the recording was not
    so: the key was refused (a revoked key would flag, and with --update overwrite, every
    exchange), or the request was rate limited, met a server error or failed mid-stream (a
    passing state; `retried`: how often it was sent again, and why not more). Not compared:
    the run is not whole (exit 2), and says why."""
    was, status = recorded.response.status, live.response.status
    if status in (401, 403) and status != was:
        return f"the live upstream refused the key ({status}): check its variable"
    if is_failure_status(status) and status != was:
        how = f", {retried}" if retried else ""
        return (
            f"the live upstream answered {status} (rate limited or failing){how}: try again later"
        )
    if live.outcome is Outcome.STREAM_ERROR and recorded.outcome is not Outcome.STREAM_ERROR:
        return "the live answer failed mid-stream (stream_error, an error event): try again later"
    return None


def _left(target: Target) -> Left:
    return Left(target.cassette, target.exchange, target.request, "")


def _why(left: Left, why: str) -> Left:
    return Left(left.cassette, left.exchange, left.request, why)


def _order(finding: Finding) -> tuple[str, str, int, str]:
    return (finding.cassette, finding.exchange, -LEVELS.index(finding.level), finding.path)
