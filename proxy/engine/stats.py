"""What the server counts and reports: the counters since start, per-run summaries, the
snapshot behind /__tapeproxy/stats and the shutdown report, and the one log line per exchange."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tapeproxy.logs import fast_info

log = logging.getLogger("tapeproxy")


@dataclass
class Counters:
    """Counts since start. Only the engine changes them."""

    upstream_calls: int = 0
    replayed: int = 0
    recorded: int = 0
    misses: int = 0
    errors: int = 0
    aborted: int = 0  # clients that left before their answer was whole
    too_large: int = 0  # answers over --max-record, passed on but not recorded
    write_failures: int = 0  # finished exchanges the store could not write (also in errors)
    bombs: int = 0  # compressed answers cut past the inflation caps, not recorded (in errors)
    faults: int = 0  # answers a fault stood in for or spoiled (tapeproxy.faults)
    faults_by_kind: dict[str, int] = field(default_factory=dict)

    def copy(self) -> Counters:
        return replace(self, faults_by_kind=dict(self.faults_by_kind))


@dataclass(frozen=True)
class RunSummary:
    """One run of one cassette: what it asked, served and recorded, and the recordings it
    never used (listed up to a limit, counted in full)."""

    cassette: str
    requests: int
    served: int
    recorded: list[str]
    recorded_count: int
    unused: list[str]
    unused_count: int


@dataclass(frozen=True)
class Snapshot:
    """The counters, the current cassette and mode, the runs under way and those ended with
    news (recordings made or left unused), `unused_total` over every run, and the cassettes
    the server was told to serve (at start, by PUT) that no request reached."""

    counters: Counters
    cassette: str
    mode: str
    runs: list[RunSummary]
    ended_runs: list[RunSummary]
    unused_total: int
    untouched: list[str] = field(default_factory=list)  # told to serve, reached by no request
    fault_seed: int | None = None  # what decides probabilistic faults (--fault-seed)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.counters),
            "cassette": self.cassette,
            "mode": self.mode,
            "runs": [asdict(run) for run in self.runs],
            "ended_runs": [asdict(run) for run in self.ended_runs],
            "unused_total": self.unused_total,
            "untouched": self.untouched,
            "fault_seed": self.fault_seed,
        }


@dataclass
class Trace:
    """What the log line of one exchange names; its time counts from the request's arrival.
    Built for every request, so not frozen (see tapeproxy.engine.inbound)."""

    mode: str
    upstream: str
    method: str
    path: str
    key: str
    started: float = field(default_factory=time.monotonic)
    fault: str = ""  # the fault spec on this exchange's answer, if any

    def log(self, outcome: str, status: int | None = None) -> None:
        """The exchange's line: its outcome, and the status the client got (None: no answer
        was sent)."""
        if log.isEnabledFor(logging.INFO):
            ms = (time.monotonic() - self.started) * 1000
            sent = "" if status is None else f" {status}"
            fast_info(
                log,
                f"{self.mode} {self.upstream} {self.method} {self.path} key={self.key[:12]} "
                f"-> {outcome}{sent} ({ms:.0f} ms)"
                + (f" fault={self.fault}" if self.fault else ""),
            )
