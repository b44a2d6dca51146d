"""plan() follows CONTRACT.md's mode table, `once` and partial replay included."""

from __future__ import annotations

import pytest

from tapeproxy.engine.plan import Action, Step, plan, stream_goes_live
from tapeproxy.modes import Mode

SERVE = Step(Action.SERVE)
REFUSE = Step(Action.REFUSE)
FORWARD = Step(Action.FORWARD)
RECORD_ANEW = Step(Action.RECORD, anew=True)
ADD = Step(Action.RECORD)  # auto adds after what the cassette holds
DERIVED = Step(Action.RECORD, derived=True, anew=True)

# mode, hit, live -> step, for a cassette that held recordings when its run began. `live`
# (--live NAME) only changes replay: that upstream goes live and is written to the derived
# cassette whether or not the cassette has the request.
MODE_TABLE = [
    (Mode.REPLAY, True, False, SERVE),
    (Mode.REPLAY, False, False, REFUSE),
    (Mode.REPLAY, True, True, DERIVED),
    (Mode.REPLAY, False, True, DERIVED),
    (Mode.RECORD, True, False, RECORD_ANEW),
    (Mode.RECORD, False, False, RECORD_ANEW),
    (Mode.RECORD, True, True, RECORD_ANEW),
    (Mode.RECORD, False, True, RECORD_ANEW),
    (Mode.AUTO, True, False, SERVE),
    (Mode.AUTO, False, False, ADD),
    (Mode.AUTO, True, True, SERVE),
    (Mode.AUTO, False, True, ADD),
    (Mode.ONCE, True, False, SERVE),
    (Mode.ONCE, False, False, REFUSE),
    (Mode.ONCE, True, True, DERIVED),
    (Mode.ONCE, False, True, DERIVED),
    (Mode.PASSTHROUGH, True, False, FORWARD),
    (Mode.PASSTHROUGH, False, False, FORWARD),
    (Mode.PASSTHROUGH, True, True, FORWARD),
    (Mode.PASSTHROUGH, False, True, FORWARD),
]


def test_mode_table_covers_every_combination() -> None:
    combos = {(mode, hit, live) for mode, hit, live, _ in MODE_TABLE}
    assert combos == {(m, h, lv) for m in Mode for h in (True, False) for lv in (True, False)}


@pytest.mark.parametrize(("mode", "hit", "live", "step"), MODE_TABLE)
def test_plan_follows_the_mode_table(mode: Mode, hit: bool, live: bool, step: Step) -> None:
    assert plan(mode, hit, live, recorded=True) == step


@pytest.mark.parametrize("mode", [m for m in Mode if m is not Mode.ONCE])
@pytest.mark.parametrize(("hit", "live"), [(True, False), (False, False), (False, True)])
def test_only_once_cares_whether_the_cassette_held_recordings(
    mode: Mode, hit: bool, live: bool
) -> None:
    assert plan(mode, hit, live, recorded=False) == plan(mode, hit, live, recorded=True)


@pytest.mark.parametrize("live", [True, False])
def test_once_records_a_cassette_that_held_nothing_as_record_mode_does(live: bool) -> None:
    assert plan(Mode.ONCE, False, live, recorded=False) == RECORD_ANEW
    assert plan(Mode.ONCE, True, live, recorded=False) == RECORD_ANEW


@pytest.mark.parametrize(
    ("mode", "live", "recorded", "goes_live"),
    [
        (Mode.RECORD, False, True, True),
        (Mode.PASSTHROUGH, False, True, True),
        (Mode.REPLAY, True, True, True),  # --live: its upstream runs live
        (Mode.REPLAY, False, True, False),
        (Mode.AUTO, False, True, False),  # the cassette answers: 405
        (Mode.ONCE, False, True, False),
        (Mode.ONCE, False, False, True),  # once records a cassette that held nothing
    ],
)
def test_an_mcp_standalone_stream_goes_live_only_where_its_upstream_does(
    mode: Mode, live: bool, recorded: bool, goes_live: bool
) -> None:
    assert stream_goes_live(mode, live, recorded) is goes_live
