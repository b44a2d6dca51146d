"""Match rules: which parts of a request decide whether two requests are the same.

A rule is `UPSTREAM:WHAT:NAME` where WHAT is `body` (a JSON path such as `metadata.user_id`
or `messages[*].name`), `query` or `header` (ignored), or `key-header` (a header that should
be part of the key). UPSTREAM may be `*`. Array order is never ignored."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from itertools import combinations
from typing import Any

from tapeproxy.errors import ConfigError

RULE_KINDS = ("body", "query", "header", "key-header")
_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+|\*)\]")
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token
# Body fields that change the answer: a rule that ignores one makes different questions
# replay the same recording. Only warned about, since a user may mean it.
ANSWER_FIELDS = frozenset(
    {
        "model",
        "messages",
        "input",
        "prompt",
        "tools",
        "tool_choice",
        "stream",
        "contents",
        "system",
        "system_instruction",
        "systemInstruction",
        "instructions",
        "temperature",
        "top_p",
        "top_k",
        "max_tokens",
        "max_output_tokens",
        "max_completion_tokens",
        "stop",
        "response_format",
        "generationConfig",
        "generation_config",
        "options",
        "format",
        "n",
        "content",
        "text",
        "parts",
    }
)


@dataclass(frozen=True)
class MatchRules:
    ignore_body: tuple[str, ...] = ()
    ignore_query: frozenset[str] = frozenset()
    ignore_headers: frozenset[str] = frozenset()
    key_headers: frozenset[str] = frozenset()

    def fingerprint(self) -> str:
        """A short stable id of these rules, stored in each exchange for `rekey`."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:  # once per rules, not per recording (a JSON dump, a hash)
        data = {
            "ignore_body": sorted(self.ignore_body),
            "ignore_query": sorted(self.ignore_query),
            "key_headers": sorted(self.key_headers - self.ignore_headers),
        }
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def headers(self) -> frozenset[str]:
        return self.key_headers - self.ignore_headers


@dataclass(frozen=True)
class Rule:
    upstream: str
    kind: str
    name: str = field(default="")


def parse_rule(spec: str) -> Rule:
    upstream, _, rest = spec.partition(":")
    kind, _, name = rest.partition(":")
    if not upstream or kind not in RULE_KINDS or not name:
        raise ConfigError(
            f"--ignore {spec!r}: expected UPSTREAM:WHAT:NAME with WHAT one of "
            f"{', '.join(RULE_KINDS)}, e.g. openai:body:user or *:query:ts"
        )
    try:
        if kind == "body":
            check_body_path(name)
        elif kind in {"header", "key-header"} and not _HEADER_NAME.match(name):
            raise ConfigError(
                f"{name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)"
            )
    except ConfigError as exc:
        raise ConfigError(f"--ignore {spec!r}: {exc.message}") from exc
    return Rule(upstream, kind, name if kind == "body" else name.lower())


def check_body_path(path: str) -> tuple[str | int, ...]:
    """A body path a rule may ignore: not the whole body, not an array item."""
    tokens = parse_path(path)
    if "\\" in path:
        raise ConfigError(
            f"JSON path {path!r} has a backslash, but paths have no escapes: a field whose name "
            "holds a `.` or `[` cannot be named. Ignore the object that holds it instead"
        )
    if path.startswith("*"):
        raise ConfigError(
            f"JSON path {path!r} starts with `*`, which ignores every top-level field: the "
            "whole body. Name the fields to ignore instead"
        )
    if isinstance(tokens[-1], int) or (tokens[-1] == "*" and path.endswith("]")):
        raise ConfigError(
            f"JSON path {path!r} ends in an array item, and tapeproxy never removes array "
            "items (their order and number always count), so it would ignore nothing. "
            "Ignore a field inside the items instead, e.g. messages[*].name"
        )
    return tokens


def rule_warnings(specs: Iterable[str]) -> list[str]:
    """A warning for each rule that ignores a body field which changes the answer (`model`,
    `messages`, `temperature`, ...): requests that differ in it would replay one recording."""
    warnings = []
    for spec in specs:
        rule = parse_rule(spec)
        if rule.kind != "body":
            continue
        names = [t for t in parse_path(rule.name) if isinstance(t, str) and t != "*"]
        if names and names[-1] in ANSWER_FIELDS:
            warnings.append(
                f"--ignore {spec!r} ignores `{rule.name}`, which changes the answer: requests "
                "that differ only in it replay the same recording. Drop the rule unless that "
                "is what you want."
            )
    return warnings


def unstored_headers(
    stored: Iterable[str], recorded: str, rules: MatchRules, defaults: MatchRules
) -> tuple[str, ...]:
    """The headers `rules` key on that a recording made under the rules fingerprinted
    `recorded` does not hold. A recording stores only the headers that were key headers when
    it was made, so a header keyed on only since then is missing from it, and a request that
    sends that header can never match it: such a recording has to be recorded again."""
    if recorded == rules.fingerprint():
        return ()
    absent = sorted(rules.headers() - set(stored))
    # Exact when only key headers were added since: the recording's fingerprint is today's
    # rules without some of them.
    for size in range(1, len(absent) + 1):
        for added in combinations(absent, size):
            before = replace(rules, key_headers=rules.key_headers - set(added))
            if before.fingerprint() == recorded:
                return added
    # Other rules changed too: the fingerprint cannot tell, so name the headers beyond the
    # provider's own (a request without `openai-beta` is the common case, not a loss).
    return tuple(name for name in absent if name not in defaults.headers())


def build_rules(base: MatchRules, upstream: str, specs: Iterable[str]) -> MatchRules:
    """The provider's default rules plus every rule that names this upstream or `*`."""
    body, query = list(base.ignore_body), set(base.ignore_query)
    headers, key_headers = set(base.ignore_headers), set(base.key_headers)
    for rule in map(parse_rule, specs):
        if rule.upstream not in {upstream, "*"}:
            continue
        {
            "body": body.append,
            "query": query.add,
            "header": headers.add,
            "key-header": key_headers.add,
        }[rule.kind](rule.name)
    return MatchRules(
        tuple(dict.fromkeys(body)), frozenset(query), frozenset(headers), frozenset(key_headers)
    )


@lru_cache(maxsize=1024)
def parse_path(path: str) -> tuple[str | int, ...]:
    """`messages[*].name` -> ("messages", "*", "name"); `[n]` becomes the int n."""
    tokens: list[str | int] = []
    for segment in path.split("."):
        if not segment:
            raise ConfigError(f"JSON path {path!r} has an empty segment")
        matched = "".join(m.group(0) for m in _TOKEN.finditer(segment))
        if matched != segment:
            raise ConfigError(f"JSON path {path!r} is not of the form a.b[0].c or a[*].b")
        for match in _TOKEN.finditer(segment):
            name, index = match.groups()
            tokens.append(name if name is not None else ("*" if index == "*" else int(index)))
    return tuple(tokens)


def without_path(value: Any, tokens: tuple[str | int, ...]) -> Any:
    """A copy of `value` with the path removed; untouched branches are shared, not copied."""
    if not tokens:
        return value
    head, rest = tokens[0], tokens[1:]
    if isinstance(value, dict) and isinstance(head, str):
        keys = value.keys() if head == "*" else [head] if head in value else []
        if not keys:
            return value
        copy = dict(value)
        for key in list(keys):
            if rest:
                copy[key] = without_path(value[key], rest)
            else:
                del copy[key]
        return copy
    if isinstance(value, list) and (head == "*" or isinstance(head, int)):
        in_range = isinstance(head, int) and 0 <= head < len(value)
        indexes = range(len(value)) if head == "*" else [head] if in_range else []
        if not rest:
            # Removing array items would shift the rest: never ignore array order or length.
            return value
        copy_list = list(value)
        for index in indexes:
            copy_list[int(index)] = without_path(value[int(index)], rest)
        return copy_list
    return value
