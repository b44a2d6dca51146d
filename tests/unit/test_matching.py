"""Matching: which recording answers a repeated request, and how a miss names what differs."""

from __future__ import annotations

import hashlib
import json
import random
from array import array
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tapeproxy.engine.keying import RequestParts, canonical
from tapeproxy.engine.matching import (
    MISSING,
    Difference,
    Recorded,
    closest,
    diff,
    json_safe,
    next_expected,
    pick_ordinal,
    request_view,
    same,
)
from tapeproxy.engine.misses import (
    MAX_CANDIDATES,
    MAX_SKETCH,
    SHORTLIST,
    Candidate,
    Miss,
    candidate_of,
    shortlist,
    similarity,
    sketch,
)
from tapeproxy.engine.rules import MatchRules
from tapeproxy.exchange.bodies import Payload
from tapeproxy.settings import RepeatPolicy

ERROR, LAST, CYCLE = RepeatPolicy.ERROR, RepeatPolicy.REPEAT_LAST, RepeatPolicy.CYCLE


@pytest.mark.parametrize(
    ("ordinals", "ask", "policy", "expected"),
    [
        ([1, 2, 3], 1, ERROR, 1),
        ([1, 2, 3], 3, ERROR, 3),
        ([1, 2, 3], 4, ERROR, None),
        ([1, 2, 3], 4, LAST, 3),
        ([1, 2, 3], 9, LAST, 3),
        ([1, 2, 3], 4, CYCLE, 1),
        ([1, 2, 3], 5, CYCLE, 2),
        ([1, 2, 3], 6, CYCLE, 3),
        ([2, 5], 1, ERROR, 2),
        ([2, 5], 2, CYCLE, 5),
        ([2, 5], 3, CYCLE, 2),
        ([], 1, LAST, None),
        ([], 1, CYCLE, None),
    ],
)
def test_pick_ordinal(ordinals: list[int], ask: int, policy: RepeatPolicy, expected: Any) -> None:
    assert pick_ordinal(ordinals, ask, policy) == expected


def parts(
    body: Any = None,
    *,
    method: str = "POST",
    path: str = "/v1/chat/completions",
    query: tuple[tuple[str, str], ...] = (),
) -> RequestParts:
    payload = Payload("json", body) if body is not None else Payload("empty")
    return RequestParts(method, "openai", path, query, (), payload)


def chat(*contents: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": c} for c in contents]
    return {"model": "gpt-x", "messages": messages, **extra}


@pytest.mark.parametrize(
    ("recorded", "requested", "expected"),
    [
        (
            chat("a", "b", "c"),
            chat("a", "b", "C"),
            [Difference("body.messages[2].content", "c", "C")],
        ),
        (
            chat("a"),
            chat("a", temperature=0.5),
            [Difference("body.temperature", MISSING, 0.5)],
        ),
        (
            chat("a", temperature=0.5),
            chat("a"),
            [Difference("body.temperature", 0.5, MISSING)],
        ),
        (
            chat("a"),
            chat("a", "b"),
            [Difference("body.messages[1]", MISSING, {"role": "user", "content": "b"})],
        ),
        (
            chat("a", "b"),
            chat("a"),
            [Difference("body.messages[1]", {"role": "user", "content": "b"}, MISSING)],
        ),
        (
            chat("a", tools=[1]),
            chat("b", tools={"x": 1}),
            [
                Difference("body.messages[0].content", "a", "b"),
                Difference("body.tools", [1], {"x": 1}),
            ],
        ),
        (chat("a"), chat("a"), []),
    ],
)
def test_diff_names_each_difference_by_json_path(
    recorded: Any, requested: Any, expected: list[Difference]
) -> None:
    assert diff(request_view(parts(recorded)), request_view(parts(requested))) == expected


def test_diff_covers_route_and_query() -> None:
    found = diff(
        request_view(parts(chat("a"), query=(("alt", "sse"),))),
        request_view(parts(chat("a"), path="/v1/responses")),
    )
    assert found == [
        Difference("path", "/v1/chat/completions", "/v1/responses"),
        Difference("query.alt", "sse", MISSING),
    ]


def test_diff_of_two_different_scalars_is_at_the_root() -> None:
    assert diff(1, 2) == [Difference("$", 1, 2)]


@pytest.mark.parametrize(
    ("difference", "text"),
    [
        (Difference("body.model", "gpt-a", "gpt-b"), 'body.model: "gpt-a" -> "gpt-b"'),
        (Difference("body.temperature", MISSING, 0.5), "body.temperature: added 0.5"),
        (Difference("body.n", 2, MISSING), "body.n: removed (was 2)"),
        (Difference("body.x", "é", None), 'body.x: "é" -> null'),
        (Difference("body.x", "a" * 30, 1), 'body.x: "aaaaaa... -> 1'),
        (Difference("body.x", "abcdef", "abcxef"), 'body.x: "abcdef" -> "abcxef"'),
    ],
)
def test_difference_render(difference: Difference, text: str) -> None:
    assert difference.render(width=10) == text


def test_a_long_string_difference_is_shown_around_the_change() -> None:
    question = "What is the weather in {} today? Answer in one short sentence please."
    difference = Difference("body.q", question.format("NYC"), question.format("LA"))
    assert difference.render(width=30) == (
        'body.q: "...ther in NYC today? ..." -> "...ther in LA today? ..."'
    )


# upstreams of the recorded order, cursor, live upstreams -> next position strict order expects
@pytest.mark.parametrize(
    ("upstreams", "cursor", "live", "expected"),
    [
        (["openai", "anthropic"], 0, set(), 0),
        (["openai", "anthropic"], 1, set(), 1),
        (["openai", "anthropic"], 0, {"openai"}, 1),
        (["openai", "openai", "anthropic"], 0, {"openai"}, 2),
        (["openai", "anthropic"], 1, {"openai"}, 1),
        (["openai", "openai"], 0, {"openai"}, 2),
        ([], 0, {"openai"}, 0),
        (["openai"], 1, set(), 1),
    ],
)
def test_next_expected_skips_recordings_of_live_upstreams(
    upstreams: list[str], cursor: int, live: set[str], expected: int
) -> None:
    order = [Recorded("k" * 64, 1, name, f"POST {name} /v1/x") for name in upstreams]
    assert next_expected(order, cursor, frozenset(live)) == expected


def test_difference_to_dict_leaves_out_the_missing_side() -> None:
    assert Difference("a", MISSING, 1).to_dict() == {"path": "a", "requested": 1}
    assert Difference("a", 1, MISSING).to_dict() == {"path": "a", "recorded": 1}
    assert Difference("a", 1, 2).to_dict() == {"path": "a", "recorded": 1, "requested": 2}


def test_closest_prefers_the_same_route_over_fewer_differences() -> None:
    wanted = parts(chat("a", "b", "c"))
    same_body_other_path = parts(chat("a", "b", "c"), path="/v1/responses")
    same_body_other_method = parts(chat("a", "b", "c"), method="PUT")
    same_route_far = parts(chat("x", "y", "z"))
    found = closest(wanted, [same_body_other_path, same_body_other_method, same_route_far])
    assert found is not None
    assert found.parts == same_route_far
    assert [d.path for d in found.differences] == [f"body.messages[{i}].content" for i in range(3)]


def test_closest_on_the_same_route_has_the_fewest_differences() -> None:
    wanted = parts(chat("a", "b", "c"))
    two_off = parts(chat("a", "x", "y"))
    one_off = parts(chat("a", "b", "z"))
    found = closest(wanted, [two_off, one_off, parts(chat("q"))])
    assert found is not None
    assert found.parts == one_off
    assert found.differences == [Difference("body.messages[2].content", "z", "c")]


def test_closest_of_nothing_is_none() -> None:
    assert closest(parts(chat("a")), []) is None


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("recorded", "requested", "equal"),
    [
        (1, 1.0, True),
        (0, -0.0, True),
        (True, 1, False),
        (1, True, False),
        (False, 0.0, False),
        (True, True, True),
        (NAN, NAN, True),
        (NAN, INF, False),
        (None, 0, False),
        ("1", 1, False),
        ("a", "a", True),
    ],
)
def test_same_compares_as_json_not_as_python(recorded: Any, requested: Any, equal: bool) -> None:
    assert same(recorded, requested) is equal
    assert (diff({"t": recorded}, {"t": requested}) == []) is equal


def test_a_repeated_query_parameter_shows_as_the_list_of_its_values() -> None:
    one = parts(query=(("ids", "1"), ("ids", "2"), ("q", "x")))
    other = parts(query=(("ids", "3"), ("ids", "2"), ("q", "x")))
    assert request_view(one)["query"] == {"ids": ["1", "2"], "q": "x"}
    assert diff(request_view(one), request_view(other)) == [Difference("query.ids[0]", "1", "3")]


M = [{"role": "user", "content": f"message {i}"} for i in range(6)]
NEW = {"role": "user", "content": "My budget is 500 EUR."}


@pytest.mark.parametrize(
    ("recorded", "requested", "expected"),
    [
        (M, [*M[:2], NEW, *M[2:]], [Difference("[2]", MISSING, NEW)]),
        ([*M[:2], NEW, *M[2:]], M, [Difference("[2]", NEW, MISSING)]),
        (M, [NEW, *M], [Difference("[0]", MISSING, NEW)]),
        (M, [*M[:3], NEW, *M[4:]], [Difference("[3].content", "message 3", NEW["content"])]),
        (
            M[:3],
            [*M[:3], NEW, NEW],
            [Difference("[3]", MISSING, NEW), Difference("[4]", MISSING, NEW)],
        ),
        ([1, 2, 3], [1, True, 3], [Difference("[1]", 2, True)]),
    ],
)
def test_lists_are_aligned_so_an_insertion_is_one_difference(
    recorded: list[Any], requested: list[Any], expected: list[Difference]
) -> None:
    assert diff(recorded, requested) == expected


@given(items=st.lists(st.integers(0, 5), max_size=8), extra=st.integers(6, 9), at=st.integers(0, 8))
def test_an_inserted_item_is_always_exactly_one_addition(
    items: list[int], extra: int, at: int
) -> None:
    at = min(at, len(items))
    assert diff(items, [*items[:at], extra, *items[at:]]) == [Difference(f"[{at}]", MISSING, extra)]


@given(items=st.lists(st.integers(0, 5), min_size=1, max_size=8), at=st.integers(0, 7))
def test_a_removed_item_is_always_exactly_one_removal(items: list[int], at: int) -> None:
    at = min(at, len(items) - 1)
    [found] = diff(items, [*items[:at], *items[at + 1 :]])
    assert found.requested is MISSING and found.recorded == items[at]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("A" + "x" * 100_000 + "B", "C" + "x" * 100_000 + "D"),
        ("x" * 200_000, "y" * 200_000),
        ("a" * 50_000 + "!" + "b" * 50_000, "a" * 50_000 + "?" + "b" * 50_000),
    ],
)
def test_a_difference_renders_as_one_short_line_however_long_the_strings(
    old: str, new: str
) -> None:
    line = Difference("body.messages[0].content", old, new).render()
    assert len(line) <= 4 * 80 and "\n" not in line
    assert line.startswith("body.messages[0].content: ")


def test_a_long_differing_span_shows_both_of_its_ends() -> None:
    old = "Today is Monday." + "ctx " * 25_000 + "Answer in English."
    new = "Today is Friday." + "ctx " * 25_000 + "Answer in French."
    line = Difference("body.system", old, new).render()
    assert "Monday" in line and "Friday" in line and "French" in line and len(line) < 320


def test_json_safe_writes_non_finite_numbers_as_strings() -> None:
    value = {"a": [NAN, INF, -INF, 1.5, 2], "b": {"c": NAN}}
    assert json_safe(value) == {"a": ["NaN", "Infinity", "-Infinity", 1.5, 2], "b": {"c": "NaN"}}
    json.dumps(json_safe(value), allow_nan=False)


# --- the closest recording of a miss --------------------------------------------------------

RULES = MatchRules()
SYSTEM = {"role": "system", "content": "You are a travel agent for ACME."}
TRIP = [SYSTEM] + [
    {"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 5} for i in range(1, 7)
]


def candidates(
    *bodies: Any, recorded: str | None = None
) -> dict[str, tuple[Candidate, RequestParts]]:
    out = {}
    for n, body in enumerate(bodies):
        key = str(n) * 64 if n < 10 else hashlib.sha256(str(n).encode()).hexdigest()
        stored = parts(body)
        found = candidate_of(key, 1, stored, recorded or RULES.fingerprint(), RULES, MatchRules())
        out[key] = (found, canonical(stored, RULES))
    return out


def miss(wanted: Any, found: dict[str, tuple[Candidate, RequestParts]], **extra: Any) -> Miss:
    return Miss(
        cassette="trip",
        mode="replay",
        key="f" * 64,
        ask=1,
        recorded=0,
        request=canonical(parts(wanted), RULES),
        candidates=[c for c, _ in found.values()],
        load=lambda c: found[c.key][1],
        **extra,
    )


def test_a_message_inserted_in_the_middle_finds_its_conversation_and_shows_one_line() -> None:
    asked = chat_of([*TRIP[:1], NEW, *TRIP[1:]])
    found = candidates(chat_of([SYSTEM, {"role": "user", "content": "hi"}]), chat_of(TRIP))
    details = miss(asked, found).explain()
    assert details["closest"]["file"] == "1" * 64 + ".json"
    assert details["closest"]["differences"] == [{"path": "body.messages[1]", "requested": NEW}]
    assert 'body.messages[1]: added {"role": "user"' in details["message"]


def chat_of(messages: list[Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": messages}


def test_the_shortlist_finds_the_origin_among_many_by_shared_messages() -> None:
    bodies = [
        chat_of([SYSTEM] + [{"role": "user", "content": f"c{n} t{i}"} for i in range(20)])
        for n in range(300)
    ]
    found = candidates(*bodies)
    asked = json.loads(json.dumps(bodies[217]))
    asked["messages"][7]["content"] = "changed"
    target = next(c for c, p in found.values() if p.body.value == bodies[217])
    short = shortlist(canonical(parts(asked), RULES), [c for c, _ in found.values()])
    assert short[0] == target


def test_a_recording_that_matches_under_todays_rules_points_to_rekey() -> None:
    found = candidates(chat_of(TRIP), recorded="0123456789abcdef")
    message = miss(chat_of(TRIP), found).explain()["message"]
    assert "it differs in" not in message
    assert "other match rules" in message and "`tapeproxy rekey trip`" in message


def test_a_recording_made_under_other_rules_suggests_rekey_next_to_its_differences() -> None:
    found = candidates(chat_of(TRIP), recorded="0123456789abcdef")
    details = miss(chat_of(TRIP[:3]), found).explain()
    assert details["closest"]["recorded_under_other_rules"] is True
    assert "`tapeproxy rekey trip`" in details["message"]
    current = miss(chat_of(TRIP[:3]), candidates(chat_of(TRIP))).explain()
    assert "rekey" not in current["message"]


def test_a_recording_without_a_header_keyed_on_since_says_to_record_it_again() -> None:
    tenant = MatchRules(key_headers=frozenset({"x-tenant"}))
    stored = parts(chat_of(TRIP))
    found = candidate_of("a" * 64, 1, stored, RULES.fingerprint(), tenant, MatchRules())
    assert found.unstored == ("x-tenant",)
    wanted = canonical(
        RequestParts(
            "POST", "openai", "/v1/chat/completions", (), (("x-tenant", "acme"),), stored.body
        ),
        tenant,
    )
    details = Miss(
        "trip", "replay", "f" * 64, 1, 0, wanted, [found], lambda c: canonical(stored, tenant)
    ).explain()
    assert 'headers.x-tenant: added "acme"' in details["message"]
    assert "x-tenant" in details["message"] and "record it again" in details["message"]


def test_a_miss_with_non_finite_numbers_explains_itself_in_strict_json() -> None:
    found = candidates({"model": "m", "logit_bias": {"1": NAN}})
    details = miss({"model": "m", "logit_bias": {"1": INF}}, found).explain()
    text = json.dumps(details, allow_nan=False)
    assert '"recorded": "NaN"' in text and '"requested": "Infinity"' in text
    assert "NaN -> Infinity" in details["message"]


def test_a_search_cut_short_says_so() -> None:
    found = candidates(chat_of(TRIP))
    message = miss(chat_of(TRIP[:2]), found, listed=MAX_CANDIDATES + 7).explain()["message"]
    assert f"Only the first {MAX_CANDIDATES} of the {MAX_CANDIDATES + 7}" in message
    assert "Only the first" not in miss(chat_of(TRIP[:2]), found, listed=1).explain()["message"]


def test_a_recording_that_cannot_be_read_again_is_skipped() -> None:
    found = candidates(chat_of(TRIP))
    gone = Miss(
        "trip",
        "replay",
        "f" * 64,
        1,
        0,
        canonical(parts(chat_of(TRIP)), RULES),
        [c for c, _ in found.values()],
        lambda c: None,
    )
    assert "no recordings to compare with" in gone.explain()["message"]


def blocks(texts: list[str]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


FACTS = [f"fact {i}" for i in range(30)]


@pytest.mark.parametrize("place", [0, 15, 30])
def test_a_recording_differing_in_one_content_block_of_thirty_is_found_wherever_it_is_listed(
    place: int,
) -> None:
    bodies = [chat_of([SYSTEM, blocks([f"other {j}-{i}" for i in range(30)])]) for j in range(30)]
    bodies.insert(place, chat_of([SYSTEM, blocks(["fact X", *FACTS[1:]])]))
    found = candidates(*bodies)
    details = miss(chat_of([SYSTEM, blocks(FACTS)]), found).explain()
    assert details["closest"]["differences"] == [
        {"path": "body.messages[1].content[0].text", "recorded": "fact X", "requested": "fact 0"}
    ]


def test_candidates_alike_to_the_sketch_are_ranked_by_key_not_by_listing_order() -> None:
    found = [c for c, _ in candidates(*([chat_of(TRIP)] * 20)).values()]
    wanted = canonical(parts(chat_of(TRIP[:2])), RULES)
    first = shortlist(wanted, found)
    assert [c.key for c in first] == sorted(c.key for c in found)[:SHORTLIST]
    assert shortlist(wanted, random.Random(7).sample(found, len(found))) == first


def test_candidates_alike_to_the_sketch_are_ranked_nearest_in_size_first() -> None:
    wanted = canonical(parts(chat_of(TRIP)), RULES)
    mine = sketch(wanted)
    same = array("q", sorted(mine)[:MAX_SKETCH])
    route = ("POST", "openai", "/v1/chat/completions")
    found = [
        Candidate(key * 64, 1, route, same, True, size=len(mine) + gap)
        for key, gap in (("a", 40), ("b", -3), ("c", 9), ("d", 0))
    ]
    assert [c.key[0] for c in shortlist(wanted, found)] == ["d", "b", "c", "a"]


hash_sets = st.sets(st.integers(-(2**63), 2**63 - 1), max_size=2 * MAX_SKETCH)


@given(mine=hash_sets, other=hash_sets)
def test_similarity_is_the_jaccard_index_when_the_sample_is_whole(
    mine: set[int], other: set[int]
) -> None:
    sample = array("q", sorted(other)[:MAX_SKETCH])
    estimate = similarity(mine, sorted(mine), sample)
    if len(other) < MAX_SKETCH:
        union = mine | other
        assert estimate == (len(mine & other) / len(union) if union else 1.0)
    assert 0.0 <= estimate <= 1.0


@given(shared=st.sets(st.integers(-(2**63), 2**63 - 1), min_size=MAX_SKETCH, max_size=3000))
def test_similarity_of_a_request_to_its_own_cut_sketch_is_one(shared: set[int]) -> None:
    assert similarity(shared, sorted(shared), array("q", sorted(shared)[:MAX_SKETCH])) == 1.0


def test_a_difference_of_huge_values_is_an_excerpt_in_json() -> None:
    big = "x" * 4_000_000
    shown = Difference("body.messages[0].content", big, big + "y").to_dict()
    assert len(json.dumps(shown)) < 3 * 1024
    assert "4,000,001 characters in all" in shown["requested"]
    assert Difference("body.n", 1, 2).to_dict() == {"path": "body.n", "recorded": 1, "requested": 2}
