"""Reading recorded requests back from a cassette for a miss report: the sketches that rank
every recording, and the canonical request of the few that come closest."""

from __future__ import annotations

from tapeproxy.engine.keying import RequestParts, canonical, stored_request
from tapeproxy.engine.misses import MAX_CANDIDATES, Candidate, candidate_of
from tapeproxy.errors import TapeproxyError
from tapeproxy.providers import Rulebook, default_rules
from tapeproxy.store.protocol import CassetteStore


def candidates(
    store: CassetteStore, rules: Rulebook, cassette: str, ordinals: dict[str, list[int]]
) -> list[Candidate]:
    """A sketch of the first recording of each key (an unreadable file is passed over)."""
    found = []
    for key, numbers in list(ordinals.items())[:MAX_CANDIDATES]:
        try:
            exchange = store.read(cassette, key, numbers[0])
        except TapeproxyError:
            continue
        parts = stored_request(exchange.request)
        found.append(
            candidate_of(
                key,
                numbers[0],
                parts,
                exchange.rules,
                rules.for_upstream(parts.upstream),
                default_rules(parts.upstream),
            )
        )
    return found


def recorded_request(
    store: CassetteStore, rules: Rulebook, cassette: str, found: Candidate
) -> RequestParts | None:
    """The recorded request of `found` in canonical form under today's rules."""
    try:
        exchange = store.read(cassette, found.key, found.ordinal)
    except TapeproxyError:
        return None
    parts = stored_request(exchange.request)
    return canonical(parts, rules.for_upstream(parts.upstream))
