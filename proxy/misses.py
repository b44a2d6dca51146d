"""Explaining a cassette miss: the closest recording and the fields that differ."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.matching import closest
from proxy.normalize import RequestParts
from proxy.store.base import exchange_file

MAX_DIFFERENCES = 12


def ordinal_word(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class Miss:
    cassette: str
    mode: str
    key: str
    ask: int
    recorded: int  # recordings of this very key (all used up when > 0)
    request: RequestParts
    candidates: Sequence[tuple[str, int, RequestParts]]  # (key, ordinal, canonical parts)

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
        best = closest(self.request, (parts for _, _, parts in self.candidates))
        if best is not None and not self.recorded:
            where = next((k, o) for k, o, p in self.candidates if p is best.parts)
            shown = best.differences[:MAX_DIFFERENCES]
            lines.append(
                f"Closest recording: {exchange_file(*where)} ({best.parts.method} "
                f"{best.parts.upstream} {best.parts.path}); it differs in:"
            )
            lines += [f"  {d.render()}" for d in shown]
            if len(best.differences) > len(shown):
                lines.append(f"  ... and {len(best.differences) - len(shown)} more")
            details["closest"] = {
                "file": exchange_file(*where),
                "differences": [d.to_dict() for d in best.differences[:MAX_DIFFERENCES]],
            }
        elif not self.recorded:
            lines.append("The cassette holds no recordings to compare with.")
        if not self.recorded:
            lines.append("To record it, run with --mode record or --mode auto.")
        details["message"] = "\n".join(lines)
        return details
