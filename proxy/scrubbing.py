"""`llmtape redact`: a cassette's recordings scrubbed by the redaction rules, rewritten
atomically and re-keyed where a request changed; and a check that no pattern is left."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmtape.models import dump_exchange
from llmtape.rekey import RekeyReport, RulesFor, rekey
from llmtape.scrub import Scrubber
from llmtape.store.base import CassetteStore, exchange_file


@dataclass
class RedactReport:
    cassette: str
    dry_run: bool
    changed: list[str] = field(default_factory=list)  # rewritten where they were
    moved: list[tuple[str, str]] = field(default_factory=list)  # re-keyed: (old, new)
    unchanged: int = 0
    merged: int = 0  # requests that redaction made the same as another: now its repeats
    # Files where a pattern still matches outside the bodies (a header, the path, a key).
    left: list[str] = field(default_factory=list)


def redact(
    store: CassetteStore,
    cassette: str,
    scrubber: Scrubber,
    rules_for: RulesFor,
    dry_run: bool = False,
) -> RedactReport:
    """Scrub every recording through the same Scrubber recording uses. A scrubbed request
    gets the key it has now (rekey's crash-safe ordering: no file is overwritten before its
    content is safe at its new place); requests that became equal are numbered in recorded
    order."""
    moves: RekeyReport = rekey(store, cassette, rules_for, dry_run, transform=scrubber.exchange)
    report = RedactReport(cassette, dry_run, unchanged=moves.unchanged, merged=moves.merged)
    for old, new in moves.moved:
        if old == new:
            report.changed.append(old)
        else:
            report.moved.append((old, new))
    if not dry_run:
        report.left = matches_left(store, cassette, scrubber)
    return report


def matches_left(store: CassetteStore, cassette: str, scrubber: Scrubber) -> list[str]:
    """The files that still hold a match of a pattern anywhere (as they are on disk)."""
    left = []
    for key, ordinals in sorted(store.entries(cassette).items()):
        for ordinal in ordinals:
            text = dump_exchange(store.read(cassette, key, ordinal)).decode("utf-8", "replace")
            if scrubber.matches(text):
                left.append(exchange_file(key, ordinal))
    return left
