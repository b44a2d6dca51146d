"""The mode table of CONTRACT.md as plan(), and which response headers reach the cassette."""

from __future__ import annotations

import pytest

from proxy.pipeline import Action, is_failure_status, plan, stored_headers
from proxy.settings import Mode

SERVE, RECORD, FORWARD, REFUSE = (
    Action.SERVE, Action.FORWARD_RECORD, Action.FORWARD, Action.REFUSE,
)

# mode, hit, live -> action. `live` (--live NAME) only changes replay: that upstream goes live
# and is written (to the derived cassette) whether or not the cassette has the request.
MODE_TABLE = [
    (Mode.REPLAY, True, False, SERVE),
    (Mode.REPLAY, False, False, REFUSE),
    (Mode.REPLAY, True, True, RECORD),
    (Mode.REPLAY, False, True, RECORD),
    (Mode.RECORD, True, False, RECORD),
    (Mode.RECORD, False, False, RECORD),
    (Mode.RECORD, True, True, RECORD),
    (Mode.RECORD, False, True, RECORD),
    (Mode.AUTO, True, False, SERVE),
    (Mode.AUTO, False, False, RECORD),
    (Mode.AUTO, True, True, SERVE),
    (Mode.AUTO, False, True, RECORD),
    (Mode.PASSTHROUGH, True, False, FORWARD),
    (Mode.PASSTHROUGH, False, False, FORWARD),
    (Mode.PASSTHROUGH, True, True, FORWARD),
    (Mode.PASSTHROUGH, False, True, FORWARD),
]


def test_mode_table_covers_every_combination() -> None:
    combos = {(mode, hit, live) for mode, hit, live, _ in MODE_TABLE}
    assert combos == {(m, h, lv) for m in Mode for h in (True, False) for lv in (True, False)}


@pytest.mark.parametrize(("mode", "hit", "live", "action"), MODE_TABLE)
def test_plan_follows_the_mode_table(mode: Mode, hit: bool, live: bool, action: Action) -> None:
    assert plan(mode, hit, live) is action


def test_stored_headers_keeps_what_describes_the_answer() -> None:
    headers = [
        ("content-type", "application/json"),
        ("openai-model", "gpt-x"),
        ("anthropic-version", "2023-06-01"),
        ("x-custom", "1"),
    ]
    assert stored_headers(headers) == dict(headers)


@pytest.mark.parametrize(
    "name",
    [
        # volatile: different on every call, so a re-record would show a diff
        "date", "server", "x-request-id", "request-id", "openai-processing-ms", "cf-ray", "etag",
        "x-ratelimit-remaining-tokens", "anthropic-ratelimit-requests-remaining", "x-llmtape-key",
        # hop-by-hop or reset by the proxy
        "connection", "transfer-encoding", "content-length", "content-encoding", "keep-alive",
        # secrets
        "set-cookie", "authorization", "x-api-key", "openai-organization", "x-session-token",
    ],
)
def test_stored_headers_drops_volatile_hop_by_hop_and_secret_headers(name: str) -> None:
    assert stored_headers([(name, "value"), ("content-type", "text/plain")]) == {
        "content-type": "text/plain"
    }


@pytest.mark.parametrize(
    ("status", "failure"),
    [(200, False), (201, False), (400, False), (404, False), (422, False), (429, True),
     (500, True), (503, True)],
)
def test_is_failure_status(status: int, failure: bool) -> None:
    assert is_failure_status(status) is failure
