"""Every mode decision as one pure function: serve, refuse, forward, or forward and record,
and where a recording goes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tapeproxy.modes import Mode


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


# The steps plan() gives, built once: it runs for every request.
SERVE = Step(Action.SERVE)
REFUSE = Step(Action.REFUSE)
FORWARD = Step(Action.FORWARD)
RECORD = Step(Action.RECORD)
RECORD_ANEW = Step(Action.RECORD, anew=True)
RECORD_DERIVED = Step(Action.RECORD, derived=True, anew=True)


def plan(mode: Mode, hit: bool, live: bool, recorded: bool) -> Step:
    """CONTRACT.md's mode table. `hit`: a recording answers this request; `live`: its upstream
    runs live in replay (partial replay); `recorded`: the cassette held recordings when this
    run of it began (`once` replays such a cassette and records one that held none)."""
    if mode is Mode.ONCE:
        mode = Mode.REPLAY if recorded else Mode.RECORD
    if mode is Mode.PASSTHROUGH:
        return FORWARD
    if mode is Mode.RECORD:
        return RECORD_ANEW
    if mode is Mode.REPLAY and live:
        return RECORD_DERIVED
    if hit:
        return SERVE
    if mode is Mode.AUTO:
        return RECORD
    return REFUSE


def stream_goes_live(mode: Mode, live: bool, recorded: bool) -> bool:
    """Whether an MCP client's standalone stream (a GET no cassette can replay) goes live:
    where its upstream does (record, passthrough, --live). Elsewhere it answers 405, and the
    SDKs do without it. It is never recorded: no replay would serve it."""
    step = plan(mode, False, live, recorded)
    return step.action is Action.FORWARD or step.anew
