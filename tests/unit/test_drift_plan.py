"""What drift sends (tapeproxy.tools.drift): the budget decided before anything is sent, an
MCP session kept whole by --sample and --concurrency."""

from __future__ import annotations

import random
import re

from tapeproxy.exchange.model import StoredRequest
from tapeproxy.tools.drift import DriftReport, Finding
from tapeproxy.tools.driftplan import Budget, Left, Target, plan, sampled, targets, units
from tapeproxy.tools.driftreport import last
from tapeproxy.tools.driftsend import key_patterns
from tapeproxy.tools.prices import PriceTable
from tests.fakes.memory_store import MemoryStore
from tests.support.exchanges import exchange


def target(n: int, cost: float | None, cassette: str = "c", session: bool = False) -> Target:
    key = f"{n:064x}"
    return Target(cassette, key, 1, n, "POST openai /v1/chat/completions", "openai", cost, session)


def test_the_budget_skips_what_would_pass_it_and_lets_a_cheaper_one_through() -> None:
    chosen = [target(0, 0.4), target(1, 0.5), target(2, 0.2), target(3, None)]
    sent, skipped = plan(chosen, Budget(max_cost=0.7))
    assert [t.seq for t in sent] == [0, 2, 3]
    assert [s.exchange for s in skipped] == [chosen[1].exchange]
    assert "--max-cost" in skipped[0].why
    sent, skipped = plan(chosen, Budget(max_cost=10, max_requests=1))
    assert [t.seq for t in sent] == [0] and all("--max-requests" in s.why for s in skipped)
    assert plan(chosen, Budget(max_cost=0))[0] == [chosen[3]]  # nothing priced goes


def test_an_mcp_session_is_one_unit_in_recorded_order() -> None:
    chosen = [target(0, None, "s", True), target(1, 0.1), target(2, None, "s", True)]
    assert units(chosen) == [[chosen[0], chosen[2]], [chosen[1]]]
    for seed in range(20):
        drawn = sampled(chosen, 1, random.Random(seed))
        assert drawn in ([chosen[1]], [chosen[0], chosen[2]])


def test_the_exit_code() -> None:
    report = DriftReport()
    assert report.exit_code() == 0
    finding = Finding("warn", "c", "k#1", "POST", "object", ["a"], "b", "enum value never seen")
    report.findings.append(finding)
    assert report.exit_code() == 0
    report.findings.append(Finding("error", "c", "k#1", "POST", "status", 200, 400, "status"))
    assert report.exit_code() == 1 and report.counts() == {"info": 0, "warn": 1, "error": 1}
    report.failed.append(Left("c", "k#2", "POST", "unreachable"))
    assert report.exit_code() == 2


def test_each_key_sent_is_a_pattern_to_scrub_but_a_dummy_is_not() -> None:
    key = "a.b+" * 5
    environ = {"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": key, "GOOGLE_API_KEY": key}
    patterns = key_patterns(environ)
    assert patterns == [re.escape(key)] and re.fullmatch(patterns[0], key)


def test_a_cassette_named_twice_is_sent_once() -> None:
    store = MemoryStore()
    store.write("c", exchange())
    found, unreadable = targets(store, ["c", "c"], PriceTable({}, ()))
    assert len(found) == 1 and unreadable == []


def test_an_mcp_session_is_whole_though_only_its_initialize_answer_names_it() -> None:
    """A server need send `mcp-session-id` only with its InitializeResult (the MCP spec):
    the requests after it, on the same upstream, are of its session all the same."""
    store = MemoryStore()
    mcp = StoredRequest(method="POST", upstream="tools", path="/mcp")
    for seq, key in enumerate(("1" * 64, "2" * 64, "3" * 64)):
        one = exchange(key, seq=seq).model_copy(update={"request": mcp})
        if seq == 0:
            one.response.headers["mcp-session-id"] = "abc"
        store.write("agent", one)
    store.write("agent", exchange("4" * 64, seq=3))  # an LLM call between: not of it
    drawn, _ = targets(store, [], PriceTable({}, ()))
    assert [(t.upstream, t.session) for t in drawn] == [("tools", True)] * 3 + [("openai", False)]


def test_a_last_report_not_of_its_kind_is_none() -> None:
    store = MemoryStore()
    for kept in (b"[]", b'{"counts": 1}', b'{"counts": {}, "skipped": 5}', b"{"):
        store.write_report("drift.json", kept)
        assert last(store) is None
    store.write_report("drift.json", b'{"counts": {"error": 0}, "skipped": []}')
    assert last(store) == {"counts": {"error": 0}, "skipped": []}


def test_a_tool_call_is_skipped_unless_asked_for() -> None:
    call = Target("c", "1" * 64, 1, 0, "POST tools /mcp", "tools", None, True, acts=True)
    sent, skipped = plan([call], Budget())
    assert sent == [] and "--call-tools" in skipped[0].why
    assert plan([call], Budget(call_tools=True))[0] == [call]
