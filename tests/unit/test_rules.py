"""Match rules: which rules are refused, which are warned about, and which recordings a new key
header leaves without the header it keys on."""

from __future__ import annotations

import pytest

from tapeproxy.engine.rules import (
    MatchRules,
    build_rules,
    parse_rule,
    rule_warnings,
    unstored_headers,
)
from tapeproxy.errors import ConfigError
from tapeproxy.providers import BUILTIN, Rulebook, provider_table


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("openai:body:stop[0]", "array item"),
        ("openai:body:messages[0]", "messages[*].name"),
        ("openai:body:messages[*]", "array item"),
        ("openai:body:a.b[2][*]", "array item"),
        ("openai:body:*", "whole body"),
        ("openai:body:*.name", "whole body"),
        ("openai:body:a\\.b", "no escapes"),
        ("openai:key-header:x-tenant:extra", "not a header name"),
        ("openai:key-header:x tenant", "not a header name"),
        ("openai:header:x-a,x-b", "not a header name"),
    ],
)
def test_a_rule_that_would_do_nothing_or_everything_is_refused_saying_why(
    spec: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_rule(spec)
    assert repr(spec) in caught.value.message and words in caught.value.message


@pytest.mark.parametrize(
    "spec",
    [
        "openai:body:messages[*].name",
        "openai:body:metadata.*",
        "openai:body:a[0].b",
        "openai:key-header:X-Tenant",
        "*:header:x_weird.name~1",
        "openai:body:[*].id",
    ],
)
def test_ordinary_rules_are_accepted(spec: str) -> None:
    parse_rule(spec)


@pytest.mark.parametrize(
    ("spec", "warned"),
    [
        ("openai:body:model", True),
        ("openai:body:messages", True),
        ("openai:body:messages[*].content", True),
        ("anthropic:body:system", True),
        ("gemini:body:generationConfig.temperature", True),
        ("*:body:stream", True),
        ("openai:body:messages[*].name", False),
        ("openai:body:metadata.run_id", False),
        ("openai:body:user", False),
        ("openai:query:model", False),
        ("openai:key-header:x-tenant", False),
    ],
)
def test_rules_that_ignore_what_changes_the_answer_are_warned_about(
    spec: str, warned: bool
) -> None:
    warnings = rule_warnings([spec])
    assert bool(warnings) is warned
    if warned:
        assert repr(spec) in warnings[0] and "changes the answer" in warnings[0]


TENANT = MatchRules(key_headers=frozenset({"openai-beta", "x-tenant"}))
BEFORE = MatchRules(key_headers=frozenset({"openai-beta"}))
DEFAULTS = BUILTIN["openai"].rules


@pytest.mark.parametrize(
    ("stored", "recorded", "today", "expected"),
    [
        # recorded under today's rules: nothing can be missing
        ({}, TENANT.fingerprint(), TENANT, ()),
        # x-tenant keyed on since: the recording cannot hold it
        ({}, BEFORE.fingerprint(), TENANT, ("x-tenant",)),
        # it holds it: it was keyed on then too
        ({"x-tenant": "acme"}, BEFORE.fingerprint(), TENANT, ()),
        # a header of the provider's own, un-ignored since
        (
            {},
            MatchRules(
                ignore_headers=frozenset({"openai-beta"}), key_headers=frozenset({"openai-beta"})
            ).fingerprint(),
            BEFORE,
            ("openai-beta",),
        ),
        # other rules changed as well: the user's headers are named, not the provider's
        ({}, MatchRules(ignore_body=("seed",)).fingerprint(), TENANT, ("x-tenant",)),
        # other rules changed only: a request without openai-beta is the common case
        ({}, MatchRules(ignore_body=("seed",)).fingerprint(), BEFORE, ()),
    ],
)
def test_unstored_headers_names_what_a_recording_made_under_other_rules_lacks(
    stored: dict[str, str], recorded: str, today: MatchRules, expected: tuple[str, ...]
) -> None:
    assert unstored_headers(stored, recorded, today, DEFAULTS) == expected


def test_the_rulebook_gives_star_rules_to_an_upstream_it_was_not_told_about() -> None:
    specs = ["*:query:ts", "search:body:run_id", "openai:body:seed"]
    book = Rulebook.build(provider_table({}), specs)
    told = Rulebook.build(provider_table({"search": "http://127.0.0.1:9"}), specs)
    assert book.for_upstream("search") == told.for_upstream("search")
    assert book.for_upstream("search").ignore_query == frozenset({"ts"})
    assert book.for_upstream("search").ignore_body == ("run_id",)
    assert book.for_upstream("openai") == build_rules(DEFAULTS, "openai", specs)
    assert book.for_upstream("openai").ignore_body[-1] == "seed"
