"""Matching: which recording answers a repeated request, and how a miss names what differs."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bodies import Payload
from proxy.matching import (
    MISSING,
    Difference,
    Recorded,
    closest,
    diff,
    next_expected,
    pick_ordinal,
    request_view,
)
from proxy.normalize import RequestParts
from proxy.settings import RepeatPolicy

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
            chat("a", "b", "c"), chat("a", "b", "C"),
            [Difference("body.messages[2].content", "c", "C")],
        ),
        (
            chat("a"), chat("a", temperature=0.5),
            [Difference("body.temperature", MISSING, 0.5)],
        ),
        (
            chat("a", temperature=0.5), chat("a"),
            [Difference("body.temperature", 0.5, MISSING)],
        ),
        (
            chat("a"), chat("a", "b"),
            [Difference("body.messages[1]", MISSING, {"role": "user", "content": "b"})],
        ),
        (
            chat("a", "b"), chat("a"),
            [Difference("body.messages[1]", {"role": "user", "content": "b"}, MISSING)],
        ),
        (
            chat("a", tools=[1]), chat("b", tools={"x": 1}),
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
