"""The fault grammar `KIND[:NAME=VALUE,...][@WHEN]`: what it reads, and one line for what it
cannot."""

from __future__ import annotations

import json

import pytest

from tapeproxy.errors import BadFault
from tapeproxy.faults.schedule import Schedule, chance
from tapeproxy.faults.spec import When, parse_fault
from tapeproxy.faults.wrappers import broken, broken_frame


def test_a_bare_kind_fires_on_every_request_with_its_defaults() -> None:
    spec = parse_fault("rate_limit")
    assert (spec.kind, spec["retry_after"], spec.when) == ("rate_limit", 1.0, When())
    assert all(spec.when.fires(n, lambda: 0.99) for n in (1, 2, 1000))


def test_parameters_and_numbered_requests() -> None:
    spec = parse_fault("slow:ttfb=250,gap=12.5@2-4,9")
    assert (spec["ttfb"], spec["gap"]) == (250.0, 12.5)
    assert [n for n in range(1, 12) if spec.when.fires(n, lambda: 0.0)] == [2, 3, 4, 9]


def test_a_probability_asks_for_the_seeded_draw_only() -> None:
    spec = parse_fault("cut:after=3@p=0.25")
    assert spec["after"] == 3.0
    assert spec.when.fires(1, lambda: 0.1) and not spec.when.fires(1, lambda: 0.3)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("flood@1", "unknown kind 'flood'"),
        ("rate_limit@", "nothing after @"),
        ("rate_limit@0", "requests count from 1"),
        ("rate_limit@3-1", "is not N, N-M"),
        ("rate_limit@soon", "is not N, N-M"),
        ("rate_limit@" + "9" * 5000, "is not N, N-M"),  # not a ValueError of int() (a 500)
        ("rate_limit@1-" + "9" * 5000, "is not N, N-M"),
        ("rate_limit@p=1.5", "probability '1.5' is outside [0, 1]"),
        ("rate_limit@p=-0.1", "outside [0, 1]"),
        ("rate_limit@p=nan", "outside [0, 1]"),
        ("rate_limit@p=x", "outside [0, 1]"),
        ("rate_limit:", "nothing after :"),
        ("rate_limit:wait=1", "rate_limit has no parameter 'wait' (it takes retry_after)"),
        ("reset:after=1", "reset has no parameter 'after' (it takes no parameters)"),
        ("cut:after=x", "after needs a number >= 0"),
        ("cut:after=-1", "after needs a number >= 0"),
        ("cut:after=1.5", "a whole number"),
        ("server_error:status=404", "status must be a 5xx"),
        ("rate_limit:retry_after=0.5", "retry_after must be a whole number"),
    ],
)
def test_a_bad_spec_is_one_line_naming_it(text: str, says: str) -> None:
    with pytest.raises(BadFault) as raised:
        parse_fault(text)
    message = raised.value.message
    assert says in message
    assert f"fault {text!r}" in message and "\n" not in message
    assert raised.value.status == 400


def test_the_draw_depends_on_seed_spec_key_and_ordinal_only() -> None:
    assert chance(1, "cut@p=0.5", "k", 1) == chance(1, "cut@p=0.5", "k", 1)
    draws = {chance(seed, "s", key, n) for seed in (1, 2) for key in "ab" for n in (1, 2)}
    assert len(draws) == 8 and all(0 <= d < 1 for d in draws)


def test_a_schedule_numbers_requests_per_run_and_restarts() -> None:
    schedule = Schedule(["overloaded@2"], seed=3)
    assert [schedule.draw("k", None) is not None for _ in range(3)] == [False, True, False]
    schedule.restart(["reset@1"])
    assert schedule.draw("k", None) is not None and schedule.texts() == ["reset@1"]
    assert schedule.draw("k", "cut") is not None  # a header's fault, for that request alone
    with pytest.raises(BadFault):
        schedule.restart(["reset@x"])
    assert schedule.texts() == ["reset@1"]  # a bad list changes nothing


@pytest.mark.parametrize("body", [b'{"a": [1, 2]}', b"12", b"[]", b'"text"', b""])
def test_a_malformed_body_is_never_json(body: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(broken(body))


def test_a_malformed_frame_keeps_its_framing() -> None:
    frame = b'event: x\ndata: {"a": 1}\n\n'
    bad = broken_frame(frame)
    assert bad is not None and bad.startswith(b"event: x\ndata: {") and bad.endswith(b"\n\n")
    assert broken_frame(b"data: [DONE]\n\n") is None
