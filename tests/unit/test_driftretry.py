"""The waits a rate-limit answer asks for: Retry-After in seconds or as an HTTP date, OpenAI's
`retry-after-ms` and reset durations (of the limits used up), nothing from what is not one."""

from __future__ import annotations

from datetime import UTC, datetime

from tapeproxy.tools.driftretry import asked, duration, retry_after

NOW = datetime(2026, 11, 27, 19, 0, 0, tzinfo=UTC)


def test_reset_durations() -> None:
    assert duration("1s") == 1.0 and duration("6m0s") == 360.0 and duration("20ms") == 0.02
    assert duration("1h2m3.5s") == 3723.5
    assert duration("") is None and duration("soon") is None and duration("5") is None


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after("7", NOW) == 7.0 and retry_after("-3", NOW) == 0.0
    assert retry_after("Fri, 27 Nov 2026 19:00:30 GMT", NOW) == 30.0
    assert retry_after("Fri, 27 Nov 2026 18:00:00 GMT", NOW) == 0.0  # past: at once
    assert retry_after("tomorrow", NOW) is None


def test_what_an_answer_asks() -> None:
    assert asked([("Retry-After-Ms", "1500"), ("retry-after", "9")], NOW) == (1.5, True)
    assert asked([("retry-after", "9")], NOW) == (9.0, True)
    openai = [
        ("x-ratelimit-remaining-requests", "0"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-remaining-tokens", "5000"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]
    assert asked(openai, NOW) == (1.0, False)  # the tokens are not used up: not their reset
    assert asked([("retry-after", "whenever"), ("content-type", "x")], NOW) == (None, False)
