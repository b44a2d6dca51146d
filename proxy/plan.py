"""Every mode decision as one pure function: serve, refuse, forward, or forward and record,
and where a recording goes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from llmtape.settings import Mode


class Action(Enum):
    SERVE = "serve"  # answer from the cassette
    RECORD = "record"  # go live and write the exchange
    FORWARD = "forward"  # go live, write nothing
    REFUSE = "refuse"  # cassette miss: no upstream call


@dataclass(frozen=True)
class Step:
    """What to do with one request. For RECORD: `derived` writes into `NAME.derived`, never
    into the cassette itself (partial replay); `anew` records the cassette anew (ordinals from
    1, repeats it re-recorded fewer times dropped when the run ends) rather than adding after
    what is there (auto)."""

    action: Action
    derived: bool = False
    anew: bool = False


def plan(mode: Mode, hit: bool, live: bool, recorded: bool) -> Step:
    """CONTRACT.md's mode table. `hit`: a recording answers this request; `live`: its upstream
    runs live in replay (partial replay); `recorded`: the cassette held recordings when this
    run of it began (`once` replays such a cassette and records one that held none)."""
    if mode is Mode.ONCE:
        mode = Mode.REPLAY if recorded else Mode.RECORD
    if mode is Mode.PASSTHROUGH:
        return Step(Action.FORWARD)
    if mode is Mode.RECORD:
        return Step(Action.RECORD, anew=True)
    if mode is Mode.REPLAY and live:
        return Step(Action.RECORD, derived=True, anew=True)
    if hit:
        return Step(Action.SERVE)
    if mode is Mode.AUTO:
        return Step(Action.RECORD)
    return Step(Action.REFUSE)
