"""Explaining a cassette miss: the closest recording, the fields that differ, and what to do."""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tapeproxy.engine.keying import RequestParts, canonical
from tapeproxy.engine.matching import Closest, closest, json_safe, request_view
from tapeproxy.engine.rules import MatchRules, unstored_headers
from tapeproxy.store.protocol import exchange_file

MAX_DIFFERENCES = 12
MAX_CANDIDATES = 50_000  # recorded requests compared on a miss; a note says when cut short
SHORTLIST = 8  # candidates that get the full diff, after the cheap sketch comparison
# view -> body -> messages -> message -> content -> block -> its fields -> their values: a
# recording that differs in one content block of thirty shares more than one that differs
# in all thirty. Deeper parts still count, through the hashes of the parts holding them.
SKETCH_DEPTH = 7
MAX_SKETCH = 512  # hashes kept per recording: the smallest ones, a bottom-k sample


def ordinal_word(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class Candidate:
    """A recorded request as a miss compares it: small, so a big cassette's list stays cheap
    to keep. Its full request is read again only when it makes the shortlist."""

    key: str
    ordinal: int
    route: tuple[str, str, str]  # method, upstream, path
    sketch: array[int]  # the smallest MAX_SKETCH hashes of its parts, ascending; see `sketch`
    current: bool  # recorded under today's match rules
    unstored: tuple[str, ...] = ()  # headers today's rules key on that it does not hold
    size: int = 0  # hashes in its whole sketch, before the cut to MAX_SKETCH


def candidate_of(
    key: str,
    ordinal: int,
    stored: RequestParts,
    recorded: str,
    rules: MatchRules,
    defaults: MatchRules,
) -> Candidate:
    """`stored` is the request as its exchange holds it, `recorded` its rules fingerprint."""
    parts = canonical(stored, rules)
    hashes = sketch(parts)
    return Candidate(
        key=key,
        ordinal=ordinal,
        route=(parts.method, parts.upstream, parts.path),
        sketch=array("q", heapq.nsmallest(MAX_SKETCH, hashes)),
        current=recorded == rules.fingerprint(),
        unstored=unstored_headers(dict(stored.headers), recorded, rules, defaults),
        size=len(hashes),
    )


def sketch(parts: RequestParts) -> set[int]:
    """Hashes of every part of the request down to SKETCH_DEPTH, each with its path (list
    items without their index): two requests that share most messages share most hashes,
    even when one has a message inserted in the middle."""
    out: set[int] = set()
    _walk("", request_view(parts), 0, out)
    return out


def _walk(path: str, value: Any, depth: int, out: set[int]) -> int:
    if isinstance(value, dict):
        fields = frozenset((k, _walk(f"{path}.{k}", v, depth + 1, out)) for k, v in value.items())
        found = hash(("{", fields))
    elif isinstance(value, list):
        found = hash(("[", tuple(_walk(f"{path}[]", v, depth + 1, out) for v in value)))
    else:
        # The type counts (`true` is not `1`); repr, since every NaN hashes differently.
        found = hash((type(value).__name__, repr(value) if isinstance(value, float) else value))
    if depth <= SKETCH_DEPTH:
        out.add(hash((path, found)))
    return found


def shortlist(wanted: RequestParts, candidates: Sequence[Candidate]) -> list[Candidate]:
    """The few candidates worth a full diff: the same route first, then the most shared
    sketch hashes (Jaccard), then the nearest in size, then by key, so a tie never depends on
    the order files were listed in."""
    route = (wanted.method, wanted.upstream, wanted.path)
    mine = sketch(wanted)
    ordered = sorted(mine)

    def rank(found: Candidate) -> tuple[bool, float, int, str]:
        return (
            found.route != route,
            -similarity(mine, ordered, found.sketch),
            abs(found.size - len(mine)),
            found.key,
        )

    return heapq.nsmallest(SHORTLIST, candidates, key=rank)


def similarity(mine: set[int], ordered: Sequence[int], sample: array[int]) -> float:
    """The Jaccard similarity of `mine` (whole, and as `ordered`) and a recording's sketch,
    estimated from its bottom-k `sample`: the sample holds every hash of the recording up to
    its largest, so both sets are compared in full up to there (exact when not cut)."""
    if not sample:
        return 0.0 if mine else 1.0
    common = len(mine.intersection(sample))
    cut = len(sample) >= MAX_SKETCH
    below = bisect_right(ordered, sample[-1]) if cut else len(ordered)
    return common / (below + len(sample) - common or 1)


@dataclass(frozen=True)
class Miss:
    cassette: str
    mode: str
    key: str
    ask: int
    recorded: int  # recordings of this very key (all used up when > 0)
    request: RequestParts  # canonical under today's rules
    candidates: Sequence[Candidate]
    # A candidate's request, canonical under today's rules; None when it can no longer be read.
    load: Callable[[Candidate], RequestParts | None]
    listed: int = 0  # recorded requests in the cassette (more than candidates: cut short)

    def explain(self) -> dict[str, Any]:
        """The miss as JSON: what was asked, why nothing answers it, what came closest."""
        request = f"{self.request.method} {self.request.upstream} {self.request.path}"
        lines = [
            f"cassette miss: cassette {self.cassette!r} (mode {self.mode}) has no recording for "
            f"{request} (key {self.key[:12]}, {ordinal_word(self.ask)} time in this run)."
        ]
        details: dict[str, Any] = {"cassette": self.cassette, "request": request, "key": self.key}
        if self.recorded:
            lines.append(
                f"It was recorded {self.recorded} time(s) and every recording was already served "
                "in this run: record it again, or use --repeat repeat-last or --repeat cycle."
            )
        else:
            lines += self._closest(details)
            lines.append("To record it, run with --mode record or --mode auto.")
        details["message"] = "\n".join(lines)
        safe: dict[str, Any] = json_safe(details)  # a body may hold NaN; JSON has none
        return safe

    def _closest(self, details: dict[str, Any]) -> list[str]:
        found = self._find()
        if found is None:
            return ["The cassette holds no recordings to compare with."]
        where, best = found
        file = exchange_file(where.key, where.ordinal)
        shown = best.differences[:MAX_DIFFERENCES]
        route = f"{best.parts.method} {best.parts.upstream} {best.parts.path}"
        lines = [f"Closest recording: {file} ({route})" + ("; it differs in:" if shown else ".")]
        lines += [f"  {d.render()}" for d in shown]
        if len(best.differences) > len(shown):
            lines.append(f"  ... and {len(best.differences) - len(shown)} more")
        lines += self._advice(where, best)
        if self.listed > MAX_CANDIDATES:
            lines.append(
                f"(Only the first {MAX_CANDIDATES} of the {self.listed} recorded "
                "requests were compared: a closer one may be among the others.)"
            )
        details["closest"] = {
            "file": file,
            "differences": [d.to_dict() for d in shown],
            "recorded_under_other_rules": not where.current,
        }
        return lines

    def _find(self) -> tuple[Candidate, Closest] | None:
        loaded = [
            (c, p)
            for c in shortlist(self.request, self.candidates)
            if (p := self.load(c)) is not None
        ]
        best = closest(self.request, (parts for _, parts in loaded))
        if best is None:
            return None
        return next(c for c, p in loaded if p is best.parts), best

    def _advice(self, where: Candidate, best: Closest) -> list[str]:
        rekey = f"`tapeproxy rekey {self.cassette}`"
        if not best.differences:
            return [
                "Under today's match rules it is the same request: it was keyed under "
                + ("other match rules" if not where.current else "an older tapeproxy")
                + f" and is not at its key. {rekey} moves every recording to its key."
            ]
        if where.unstored:
            names = ", ".join(where.unstored)
            return [
                f"It was recorded before today's rules keyed on the header(s) {names}, so it "
                "does not hold them and a request that sends them never matches it: record "
                "it again."
            ]
        if not where.current:
            return [
                f"It was recorded under other match rules: if you changed them, {rekey} "
                "gives every recording its key under today's rules."
            ]
        return []
