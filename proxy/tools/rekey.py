"""The rekey: every recording of a cassette moves to its key under today's rules, crash-safe."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from tapeproxy.engine.keying import request_key, stored_request
from tapeproxy.engine.rules import MatchRules, unstored_headers
from tapeproxy.exchange.model import Exchange, StoredRequest, dump_exchange
from tapeproxy.providers import default_rules
from tapeproxy.store.protocol import CassetteStore, exchange_file

RulesFor = Callable[[str], MatchRules]
Place = tuple[str, int]  # (key, ordinal): one exchange file
Step = Exchange | Place  # write this exchange, or delete the file at this place
Transform = Callable[[Exchange], Exchange]


@dataclass
class RekeyReport:
    cassette: str
    moved: list[tuple[str, str]] = field(default_factory=list)  # (old file, new file)
    unchanged: int = 0
    merged: int = 0  # recordings that now repeat a request recorded under another key
    # Recordings lacking a header today's rules key on: {"file": ..., "headers": [...]}.
    unstored: list[dict[str, Any]] = field(default_factory=list)
    # Copies an interrupted rekey or redact left (see _crash_copies): removed.
    duplicates: list[str] = field(default_factory=list)


def rekey(
    store: CassetteStore,
    cassette: str,
    rules_for: RulesFor,
    dry_run: bool = False,
    transform: Transform | None = None,
) -> RekeyReport:
    """Give every exchange the key its request has under today's rules (after `transform`,
    when given: `tapeproxy redact` scrubs each exchange first; one that changed in place is
    reported as moved to its own name).

    Each key's recordings keep their order; recordings of several old keys that now share
    a key are interleaved in recorded order (by seq). Files are written in an order where none
    is overwritten before its content is safe at its new place, and old files are removed
    last, so a crash leaves duplicates, never a loss. Any change removes the cassette's
    last-run note (see `tapeproxy prune`)."""
    report = RekeyReport(cassette)
    groups = {
        # Where the file is, whatever it says inside (a file renamed by hand is moved too).
        key: [
            store.read(cassette, key, n).model_copy(update={"key": key, "ordinal": n})
            for n in ordinals
        ]
        for key, ordinals in sorted(store.entries(cassette).items())
    }
    renamed, copies = _renamed(groups, rules_for, report, transform)
    report.moved = [(_file(old), _file(new)) for old, new in renamed]
    report.duplicates = [exchange_file(*place) for place in copies]
    if not dry_run and (renamed or copies):
        # The last-run note names files by key and ordinal, which no longer hold what it
        # says; dropped first, so `tapeproxy prune` can never act on it after a crash here.
        store.write_last_run(cassette, None)
        taken = {(key, e.ordinal) for key, group in groups.items() for e in group}
        for step in write_steps(renamed, taken):
            if isinstance(step, Exchange):
                store.write(cassette, step)
            else:
                store.delete(cassette, *step)
        written = {_place(new) for _, new in renamed}
        for place in copies:  # last: what each copy holds is at its place by now
            if place not in written:
                store.delete(cassette, *place)
    return report


def _renamed(
    groups: dict[str, list[Exchange]],
    rules_for: RulesFor,
    report: RekeyReport,
    transform: Transform | None = None,
) -> tuple[list[tuple[Exchange, Exchange]], list[Place]]:
    """(old, new) for every exchange that changes, and the places of crash copies to remove;
    counts the rest into `report`."""
    sources: dict[str, dict[str, list[tuple[Exchange, Rekeyed]]]] = {}
    for old_key, group in groups.items():
        for exchange in group:
            changed = exchange if transform is None else transform(exchange)
            state = _new_state(changed, rules_for)
            if changed is not exchange:
                state = replace(state, update={"request": changed.request, **state.update})
                state.update.setdefault("response", changed.response)
                state.update.setdefault("session", changed.session)  # a WebSocket's frames
            sources.setdefault(state.key, {}).setdefault(old_key, []).append((exchange, state))
    renamed: list[tuple[Exchange, Exchange]] = []
    copies: list[Place] = []
    for new_key, by_old in sources.items():
        ordered = list(heapq.merge(*by_old.values(), key=lambda item: item[0].seq))
        ordered, dropped = _crash_copies(ordered, new_key)
        copies += dropped
        if len(by_old) > 1:
            kept = {_place(old) for old, _ in ordered}
            first = [old for old, _ in by_old[ordered[0][0].key] if _place(old) in kept]
            report.merged += len(ordered) - len(first)
        for ordinal, (old, state) in enumerate(ordered, start=1):
            new = old.model_copy(update={**state.update, "key": new_key, "ordinal": ordinal})
            if state.missing:
                report.unstored.append({"file": _file(new), "headers": list(state.missing)})
            if new == old:
                report.unchanged += 1
            else:
                renamed.append((old, new))
    return renamed, copies


def _crash_copies(
    ordered: list[tuple[Exchange, Rekeyed]], new_key: str
) -> tuple[list[tuple[Exchange, Rekeyed]], list[Place]]:
    """Keep one of the recordings that end up identical (timings too) with the same seq:
    the copies a rekey or redact killed midway leaves (a file written at its new place
    while the old one is still there), which a re-run would otherwise number as repeats.
    Two recordings of one run never share a seq; those of two runs that do would also need
    the same request, answer, headers and timings to be taken for copies. The one already
    at its place and in its final form is kept. The places of the others."""
    firsts: dict[tuple[int, bytes], int] = {}
    kept: list[tuple[Exchange, Rekeyed]] = []
    dropped: list[Place] = []
    for old, state in ordered:
        final = old.model_copy(update={**state.update, "key": new_key, "ordinal": 1})
        settled = old.model_copy(update={"ordinal": 1}) == final
        sign = (old.seq, dump_exchange(final))
        at = firsts.get(sign)
        if at is None:
            firsts[sign] = len(kept)
            kept.append((old, state))
            continue
        other = kept[at][0]
        if settled and other.model_copy(update={"ordinal": 1}) != final:
            dropped.append(_place(other))  # keep the settled one, in the other's slot
            kept[at] = (old, state)
        else:
            dropped.append(_place(old))
    return kept, dropped


@dataclass(frozen=True)
class Rekeyed:
    key: str  # under today's rules
    update: dict[str, Any]  # the other fields of the exchange that change
    missing: tuple[str, ...]  # headers today's rules key on that the recording lacks


def _new_state(exchange: Exchange, rules_for: RulesFor) -> Rekeyed:
    """The exchange's key under today's rules, and what else changes in it: its rules
    fingerprint, and its request where it still holds a credential today's filter masks.
    One that lacks a header today's rules key on keeps its old fingerprint: rekey cannot make
    it whole, and `verify` and miss reports keep pointing at it until it is recorded again."""
    parts = stored_request(exchange.request)
    rules = rules_for(parts.upstream)
    missing = unstored_headers(
        dict(parts.headers), exchange.rules, rules, default_rules(parts.upstream)
    )
    update: dict[str, Any] = {"rules": exchange.rules if missing else rules.fingerprint()}
    masked = StoredRequest.model_validate(parts.to_dict())
    if masked != exchange.request:
        update["request"] = masked
    return Rekeyed(request_key(parts, rules), update, missing)


def write_steps(renamed: Iterable[tuple[Exchange, Exchange]], taken: set[Place]) -> list[Step]:
    """The writes and deletes that move each old exchange to its new place, in an order where
    no file is overwritten before its own content has been written at its new place. `taken`
    holds every place on disk. Moves form chains (A goes where B is, B where C is, C to a free
    place: write C, then B, then A) and cycles, which are opened by first writing one member
    to a spare place (a harmless duplicate if a crash comes), removed at the end."""
    moves = {_place(old): new for old, new in renamed}
    targets = {_place(new) for new in moves.values()}
    steps: list[Step] = []
    done: set[Place] = set()
    for start in moves:
        chain: list[Place] = []
        place = start
        while place in moves and place not in done and place not in chain:
            chain.append(place)
            place = _place(moves[place])
        spare: Exchange | None = None
        if place == start and len(chain) > 1:  # a cycle: its first member goes aside first
            spare = _spare(moves[start], taken | targets)
            steps.append(spare)
        steps += [moves[p] for p in reversed(chain)]
        done.update(chain)
        if spare is not None:
            steps.append(_place(spare))
    steps += [place for place in moves if place not in targets]
    return steps


def _spare(exchange: Exchange, taken: set[Place]) -> Exchange:
    last = max((ordinal for key, ordinal in taken if key == exchange.key), default=0)
    return exchange.model_copy(update={"ordinal": last + 1})


def _place(exchange: Exchange) -> Place:
    return exchange.key, exchange.ordinal


def _file(exchange: Exchange) -> str:
    return exchange_file(exchange.key, exchange.ordinal)
