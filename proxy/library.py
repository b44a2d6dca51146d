"""Work on a cassette library without a server: recompute keys after the match rules change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.models import Exchange
from proxy.normalize import RequestParts, request_key
from proxy.rules import MatchRules
from proxy.store.base import exchange_file
from proxy.store.fs import FileStore

RulesFor = Callable[[str], MatchRules]


@dataclass
class RekeyReport:
    cassette: str
    moved: list[tuple[str, str]] = field(default_factory=list)  # (old file, new file)
    unchanged: int = 0
    merged: int = 0  # recordings that now share a key with another (ordinals renumbered)


def rekey(
    store: FileStore, cassette: str, rules_for: RulesFor, dry_run: bool = False
) -> RekeyReport:
    """Give every exchange the key its request has under today's rules.

    Requests that now share a key become ordinals 1, 2, ... in recorded order. New files are
    written before old ones are removed, so a crash leaves duplicates, never a loss."""
    report = RekeyReport(cassette)
    exchanges = [
        store.read(cassette, key, ordinal)
        for key, ordinals in store.entries(cassette).items()
        for ordinal in ordinals
    ]
    exchanges.sort(key=lambda e: (e.seq, e.key, e.ordinal))
    renamed: list[tuple[Exchange, Exchange]] = []
    counts: dict[str, int] = {}
    for exchange in exchanges:
        parts = RequestParts.from_dict(exchange.request.model_dump())
        rules = rules_for(parts.upstream)
        key = request_key(parts, rules)
        counts[key] = counts.get(key, 0) + 1
        updated = exchange.model_copy(
            update={"key": key, "ordinal": counts[key], "rules": rules.fingerprint()}
        )
        if updated == exchange:
            report.unchanged += 1
        else:
            renamed.append((exchange, updated))
    report.merged = sum(n - 1 for n in counts.values())
    report.moved = [
        (exchange_file(old.key, old.ordinal), exchange_file(new.key, new.ordinal))
        for old, new in renamed
    ]
    if not dry_run:
        for _, new in renamed:
            store.write(cassette, new)
        written = {(new.key, new.ordinal) for _, new in renamed}
        for old, _ in renamed:
            if (old.key, old.ordinal) not in written:
                store.delete(cassette, old.key, old.ordinal)
    return report
